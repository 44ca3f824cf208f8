// actors/node_config.cpp — see node_config.hpp.
#include "actors/node_config.hpp"

#include <chrono>
#include <vector>

#include <caf/io/middleman.hpp>

#include "actors/atoms.hpp"
#include "messages/control.hpp"

namespace dd::actors {

std::string app_identifier() { return "decoupled-diloco/" + std::to_string(dd::protocol_version); }

node_config::node_config(const node_transport& t) {
  add_message_types<caf::id_block::dd_actors>();
  set("logger.file-verbosity", caf::atom("quiet"));
  set("logger.console-verbosity", caf::atom("quiet"));
  if (!t.middleman) return;
  load<caf::io::middleman>();
  auto ms = [](double s) {
    return caf::timespan{std::chrono::milliseconds(static_cast<int64_t>(s * 1000))};
  };
  set("middleman.heartbeat-interval", ms(t.heartbeat_s));
  set("middleman.connection-timeout", ms(t.connection_timeout_s));
  set("middleman.app-identifiers", std::vector<std::string>{app_identifier()});
}

}  // namespace dd::actors
