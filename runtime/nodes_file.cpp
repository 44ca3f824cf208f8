// runtime/nodes_file.cpp — see nodes_file.hpp.
#include "runtime/nodes_file.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "util/parse.hpp"

namespace dd {

using nlohmann::json;

bool node_entry::hosts(const std::string& actor) const {
  return std::find(actors.begin(), actors.end(), actor) != actors.end();
}

const node_entry* nodes_file::find(const std::string& n) const {
  for (const auto& e : nodes)
    if (e.name == n) return &e;
  return nullptr;
}

node_entry* nodes_file::find(const std::string& n) {
  for (auto& e : nodes)
    if (e.name == n) return &e;
  return nullptr;
}

namespace {

struct field_reader {
  const json& obj;
  std::string where;  // "FILE: nodes[1]"

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw nodes_file_error(fmt::format("{}.{}: {}", where, key, why));
  }
  const json* get(const std::string& key, bool required) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) fail(key, "missing");
      return nullptr;
    }
    return &*it;
  }
  std::string str(const std::string& key, bool required = true) const {
    const json* v = get(key, required);
    if (!v) return {};
    if (!v->is_string()) fail(key, "must be a string");
    return v->get<std::string>();
  }
  int64_t integer(const std::string& key, bool required = true) const {
    const json* v = get(key, required);
    if (!v) return 0;
    if (!v->is_number_integer() || v->get<int64_t>() < 0) fail(key, "must be an integer >= 0");
    return v->get<int64_t>();
  }
  std::vector<std::string> strings(const std::string& key, bool required = true) const {
    const json* v = get(key, required);
    std::vector<std::string> out;
    if (!v) return out;
    if (!v->is_array()) fail(key, "must be an array of strings");
    for (const auto& s : *v) {
      if (!s.is_string()) fail(key, "must be an array of strings");
      out.push_back(s.get<std::string>());
    }
    return out;
  }
};

std::optional<control_process> read_control(const json& root, const std::string& key,
                                            const std::string& origin) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::nullopt;
  if (!it->is_object())
    throw nodes_file_error(fmt::format("{}: {}: must be an object", origin, key));
  field_reader r{*it, fmt::format("{}: {}", origin, key)};
  control_process c;
  c.pid = static_cast<int>(r.integer("pid"));
  c.control = r.str("control");
  const auto colon = c.control.rfind(':');
  unsigned port = 0;
  if (colon == std::string::npos ||
      !util::parse_number_in(c.control.substr(colon + 1), port, 0u, 65535u))
    r.fail("control", "'" + c.control + "' is not HOST:PORT (port 0-65535)");
  return c;
}

}  // namespace

nodes_file nodes_file_from_text(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw nodes_file_error(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  if (!root.is_object()) throw nodes_file_error(fmt::format("{}: must be a JSON object", origin));
  nodes_file f;
  f.path = origin;
  field_reader top{root, origin};
  f.run_id = top.str("run_id", false);
  f.launcher = read_control(root, "launcher", origin);
  if (f.launcher) {
    field_reader lr{root["launcher"], origin + ": launcher"};
    f.launcher_http = lr.str("http", false);
  }
  f.proxy = read_control(root, "proxy", origin);
  const std::string messages = top.str("message_faults", false);
  if (!messages.empty() && messages != "endpoint" && messages != "nodes")
    throw nodes_file_error(fmt::format("{}: message_faults: '{}' must be \"endpoint\" or \"nodes\"",
                                       origin, messages));
  f.message_faults_via_endpoint = messages == "endpoint";
  const auto it = root.find("nodes");
  if (it == root.end() || !it->is_array())
    throw nodes_file_error(fmt::format("{}: nodes: missing or not an array", origin));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& n = (*it)[i];
    const std::string where = fmt::format("{}: nodes[{}]", origin, i);
    if (!n.is_object()) throw nodes_file_error(fmt::format("{}: must be an object", where));
    field_reader r{n, where};
    node_entry e;
    e.name = r.str("name");
    if (e.name.empty()) r.fail("name", "must not be empty");
    e.role = r.str("role");
    if (e.role != "syncer" && e.role != "learner")
      r.fail("role", "must be \"syncer\" or \"learner\"");
    e.actors = r.strings("actors", false);
    e.pid = static_cast<int>(r.integer("pid"));
    e.start_time = static_cast<uint64_t>(r.integer("start_time", e.pid != 0));
    e.argv = r.strings("argv", false);
    e.listen = r.str("listen", false);
    e.advertise = r.str("advertise", false);
    if (const json* ep = r.get("endpoints", false)) {
      if (!ep->is_object()) r.fail("endpoints", "must be an object");
      field_reader er{*ep, where + ".endpoints"};
      e.chaos_port = static_cast<int>(er.integer("chaos", false));
      e.http_port = static_cast<int>(er.integer("http", false));
    }
    e.incarnation = static_cast<int>(r.integer("incarnation", false));
    e.log = r.str("log", false);
    e.state = r.str("state", false);
    e.last_exit = static_cast<int>(r.integer("last_exit", false));
    if (e.state.empty()) e.state = e.pid != 0 ? "running" : "down";
    if (e.state != "running" && e.state != "down" && e.state != "held" && e.state != "exited")
      r.fail("state", "must be running, down, held or exited");
    if (f.find(e.name)) r.fail("name", fmt::format("'{}' appears twice", e.name));
    f.nodes.push_back(std::move(e));
  }
  const auto parent = std::filesystem::path(origin).parent_path();
  f.run_dir = parent.empty() ? "." : parent.string();
  return f;
}

nodes_file load_nodes_file(const std::string& path) {
  std::string text;
  if (auto st = util::read_file(path, text, size_t{64} << 20); !st)
    throw nodes_file_error(st.message);
  return nodes_file_from_text(text, path);
}

json to_json(const nodes_file& f) {
  json root;
  root["run_id"] = f.run_id;
  if (f.launcher)
    root["launcher"] = {
        {"pid", f.launcher->pid}, {"control", f.launcher->control}, {"http", f.launcher_http}};
  if (f.proxy) root["proxy"] = {{"pid", f.proxy->pid}, {"control", f.proxy->control}};
  if (f.message_faults_via_endpoint) root["message_faults"] = "endpoint";
  json nodes = json::array();
  for (const auto& e : f.nodes) {
    nodes.push_back({{"name", e.name},
                     {"role", e.role},
                     {"actors", e.actors},
                     {"pid", e.pid},
                     {"start_time", e.start_time},
                     {"argv", e.argv},
                     {"listen", e.listen},
                     {"advertise", e.advertise},
                     {"endpoints", {{"chaos", e.chaos_port}, {"http", e.http_port}}},
                     {"incarnation", e.incarnation},
                     {"log", e.log},
                     {"state", e.state},
                     {"last_exit", e.last_exit}});
  }
  root["nodes"] = nodes;
  return root;
}

util::io_status save_nodes_file(const std::string& path, const nodes_file& f) {
  return util::write_file_atomic(path, to_json(f).dump(2) + "\n");
}

std::string observed_state(const node_entry& n) {
  if (n.state != "running" || n.pid <= 0) return n.state;
  std::ifstream in("/proc/" + std::to_string(n.pid) + "/stat");
  if (!in) return "gone";  // no such pid here: it exited without the file saying so
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "PID (COMM) STATE f4 ... f22 ..." — COMM may hold spaces and parentheses: cut at the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return n.state;
  std::vector<std::string> fields;  // fields[0] is field 3 (state), fields[19] field 22
  for (size_t i = close + 2; i < text.size() && fields.size() < 20;) {
    const auto sp = text.find(' ', i);
    fields.push_back(text.substr(i, sp == std::string::npos ? std::string::npos : sp - i));
    if (sp == std::string::npos) break;
    i = sp + 1;
  }
  if (fields.size() < 20 || fields[0].empty()) return n.state;
  if (std::strtoull(fields[19].c_str(), nullptr, 10) != n.start_time) return n.state;
  return fields[0][0] == 'T' || fields[0][0] == 't' ? "stopped" : n.state;
}

}  // namespace dd
