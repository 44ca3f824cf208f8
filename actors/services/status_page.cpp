// actors/services/status_page.cpp — see status_page.hpp.
#include "actors/services/status_page.hpp"

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

void serve_status_page(http_listener& l) {
  const auto get = [](const http_request& req) {
    const auto r = status_page_get(req.path);
    return http_response{r.status, std::string(r.body), r.content_type};
  };
  l.route("/", get);
  l.route("/index.html", get);
  l.route_prefix("/static/", get);
}

}  // namespace dd::actors
