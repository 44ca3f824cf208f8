// tools/chaos/nodes_file.cpp — see nodes_file.hpp.
#include "tools/chaos/nodes_file.hpp"

#include "tools/chaos/common.hpp"

namespace dd::chaos {

nodes_file parse_nodes_file(const std::string& text, const std::string& origin) {
  try {
    return dd::nodes_file_from_text(text, origin);
  } catch (const nodes_file_error& e) {
    throw chaos_error(e.what());
  }
}

nodes_file read_nodes_file(const std::string& path) {
  try {
    return dd::load_nodes_file(path);
  } catch (const nodes_file_error& e) {
    throw chaos_error(e.what());
  }
}

void write_nodes_file(const std::string& path, const nodes_file& f) {
  if (auto st = dd::save_nodes_file(path, f); !st) throw chaos_error(st.message);
}

}  // namespace dd::chaos
