// actors/policy/credit_window.cpp — window validation (see credit_window.hpp).
#include "actors/policy/credit_window.hpp"

#include <string>

namespace dd::policy {

std::string check_window(long long window, const std::string& where) {
  if (window < 1 || window > 1024)
    return where + ": window " + std::to_string(window) + " is outside 1..1024 chunks";
  return {};
}

}  // namespace dd::policy
