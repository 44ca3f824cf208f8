// actors/services/status_page.hpp — the syncer's live status page (docs/monitoring.md "The status
// page"): index.html at `/`, its script, styles and Chart.js under `/static/`, compiled into the
// binary (actors/services/status_page/, cmake/embed_text.cmake) so the page needs no file on
// disk and no network. The page reads the node's `/status` JSON and refreshes itself.
#pragma once

#include <cstddef>
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

/// The faults dd-chaos taped in `tape` (a run directory's chaos.jsonl, docs/chaos.md "The
/// tape"), as `/chaos.json` answers: {"records": [the last `max_records` records, `session` and
/// `heal` ones left out], "malformed": lines that did not parse (a line a kill cut short)}. A
/// missing file is no record. Times stay Unix seconds (the page places them with /status's
/// `time` and `t`).
std::string chaos_tape_json(const std::string& tape, std::size_t max_records = 200);

/// Serves the page on `l`: `/`, `/index.html` and every `/static/` path (status_page_get), and
/// `/chaos.json` from `tape` (empty: no tape, an empty list). The page reads `/status`, which
/// the node registers (node_metrics::serve).
void serve_status_page(http_listener& l, const std::string& tape = {});

}  // namespace dd::actors
