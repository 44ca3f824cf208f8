// tools/chaos/nodes_file.hpp — dd-chaos's view of the nodes file: the one type of
// runtime/nodes_file.hpp (written by dd-node launch), its errors as chaos_error. Any thread.
#pragma once

#include <string>

#include "runtime/nodes_file.hpp"

namespace dd::chaos {

using dd::control_process;
using dd::node_entry;
using dd::nodes_file;
using dd::to_json;

/// dd::nodes_file_from_text; throws chaos_error naming the origin and the bad field.
nodes_file parse_nodes_file(const std::string& text, const std::string& origin);
/// dd::load_nodes_file; throws chaos_error ("PATH: cannot read: ...", "PATH: nodes[2].pid: ...").
nodes_file read_nodes_file(const std::string& path);
/// Writes `f` to `path` atomically; throws chaos_error naming the file.
void write_nodes_file(const std::string& path, const nodes_file& f);

}  // namespace dd::chaos
