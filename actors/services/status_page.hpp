// actors/services/status_page.hpp — the syncer's live status page (docs/operating.md "The status
// page"): index.html at `/`, its script, styles and Chart.js under `/static/`, compiled into the
// binary (actors/services/status_page/, cmake/embed_text.cmake) so the page needs no file on
// disk and no network. The page reads the node's `/status` JSON and refreshes itself.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dd::actors {

/// One file compiled into the binary.
struct embedded_file {
  std::string_view name;  ///< "index.html", "status.js", "chart.min.js", ...
  std::string_view text;
};

/// The page's files, index.html first (generated: status_page_files.cpp).
const std::vector<embedded_file>& status_page_files();

/// What GET `path` answers from the page's files.
struct page_reply {
  int status = 404;
  std::string_view body;
  std::string content_type = "text/plain; charset=utf-8";
};

/// `/` (and `/index.html`) → index.html; `/static/NAME` → the file NAME; anything else 404.
page_reply status_page_get(std::string_view path);

/// True when Chart.js was found at build time (Debian's libjs-chart.js) and is served.
bool status_page_has_charts();

class http_listener;

/// Serves the page on `l`: `/`, `/index.html` and every `/static/` path (status_page_get). The
/// page reads `/status`, which the node registers (node_metrics::serve).
void serve_status_page(http_listener& l);

}  // namespace dd::actors
