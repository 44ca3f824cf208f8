// actors/services/status_page.cpp — see status_page.hpp.
#include "actors/services/status_page.hpp"

#include <deque>
#include <fstream>

#include <nlohmann/json.hpp>

#include "actors/services/http_listener.hpp"

namespace dd::actors {

namespace {

std::string content_type_of(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  return "text/plain; charset=utf-8";
}

const embedded_file* find(std::string_view name) {
  for (const auto& f : status_page_files())
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

page_reply status_page_get(std::string_view path) {
  std::string_view name;
  if (path == "/" || path == "/index.html") {
    name = "index.html";
  } else if (constexpr std::string_view prefix = "/static/";
             path.substr(0, prefix.size()) == prefix) {
    name = path.substr(prefix.size());
    if (name == "index.html") return {};
  } else {
    return {};
  }
  const auto* f = find(name);
  if (f == nullptr) return {404, "not found\n"};
  return {200, f->text, content_type_of(f->name)};
}

bool status_page_has_charts() { return find("chart.min.js") != nullptr; }

std::string chaos_tape_json(const std::string& tape, std::size_t max_records) {
  std::deque<nlohmann::json> records;
  std::size_t malformed = 0;
  if (!tape.empty()) {
    std::ifstream in(tape);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object()) {
        ++malformed;
        continue;
      }
      const auto kind = j.value("kind", std::string());
      if (kind == "session" || kind == "heal" || kind == "revert") continue;
      records.push_back(std::move(j));
      if (records.size() > max_records) records.pop_front();
    }
  }
  nlohmann::json out = {{"records", nlohmann::json::array()}, {"malformed", malformed}};
  for (auto& r : records) out["records"].push_back(std::move(r));
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void serve_status_page(http_listener& l, const std::string& tape) {
  const auto get = [](const http_request& req) {
    const auto r = status_page_get(req.path);
    return http_response{r.status, std::string(r.body), r.content_type};
  };
  l.route("/", get);
  l.route("/index.html", get);
  l.route_prefix("/static/", get);
  l.route("/chaos.json", [tape](const http_request&) {
    return http_response{200, chaos_tape_json(tape), "application/json"};
  });
}

}  // namespace dd::actors
