// tests/actors/status_page_test.cpp — the status page's files compiled into the binary
// (actors/services/status_page.hpp): what `/` and `/static/NAME` answer, that every file
// index.html loads is served, that Chart.js and its copyright notice ship together, and that a
// node's HTTP listener serves them (serve_status_page).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/services/http_listener.hpp"
#include "actors/services/status_page.hpp"
#include "tests/support/http_get.hpp"

namespace {

using dd::actors::status_page_get;

TEST(status_page, the_root_is_index_html) {
  const auto r = status_page_get("/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_NE(r.body.find("<table id=\"learners\">"), std::string_view::npos);
  EXPECT_EQ(status_page_get("/index.html").body, r.body);
}

TEST(status_page, every_file_index_html_loads_is_served_with_its_type) {
  const std::string html(status_page_get("/").body);
  const std::regex ref(R"re((?:src|href)="(/static/[^"]+)")re");
  int n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), ref); it != std::sregex_iterator();
       ++it) {
    const std::string path = (*it)[1];
    const auto r = status_page_get(path);
#ifndef DD_EXPECT_CHARTS
    if (path == "/static/chart.min.js") {
      EXPECT_EQ(r.status, 404);
      continue;
    }
#endif
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_FALSE(r.body.empty()) << path;
    const std::string want = path.size() > 3 && path.substr(path.size() - 3) == ".js"
                                 ? "text/javascript; charset=utf-8"
                                 : "text/css; charset=utf-8";
    EXPECT_EQ(r.content_type, want) << path;
    ++n;
  }
  EXPECT_GE(n, 2) << "index.html names status.js and status.css";
  // The script reads the node's JSON and refreshes itself.
  const auto js = status_page_get("/static/status.js").body;
  EXPECT_NE(js.find("fetch(\"/status\""), std::string_view::npos);
  EXPECT_NE(js.find("setTimeout(refresh"), std::string_view::npos);
}

TEST(status_page, chart_js_ships_with_its_copyright_notice) {
#ifdef DD_EXPECT_CHARTS
  EXPECT_TRUE(dd::actors::status_page_has_charts());
  const auto js = status_page_get("/static/chart.min.js");
  EXPECT_EQ(js.status, 200);
  EXPECT_NE(js.body.find("Chart.js v"), std::string_view::npos);
  EXPECT_NE(js.body.find("Released under the MIT License"), std::string_view::npos);
  const auto c = status_page_get("/static/chart.js-copyright.txt");
  EXPECT_EQ(c.status, 200);
  EXPECT_NE(c.body.find("Permission is hereby granted, free of charge"), std::string_view::npos);
#else
  EXPECT_FALSE(dd::actors::status_page_has_charts());
  EXPECT_EQ(status_page_get("/static/chart.min.js").status, 404);
#endif
}

TEST(status_page, other_paths_are_not_found) {
  EXPECT_EQ(status_page_get("/static/nothing.js").status, 404);
  EXPECT_EQ(status_page_get("/static/").status, 404);
  EXPECT_EQ(status_page_get("/static/index.html").status, 404);
  EXPECT_EQ(status_page_get("/status.js").status, 404);
  EXPECT_EQ(status_page_get("/static/../index.html").status, 404);
  EXPECT_EQ(status_page_get("").status, 404);
}

using dd::test::http_get;

TEST(status_page, a_listener_serves_the_page_and_its_files_byte_for_byte) {
  dd::actors::http_listener l("127.0.0.1", 0);
  dd::actors::serve_status_page(l);
  for (const auto& f : dd::actors::status_page_files()) {
    const std::string path = f.name == "index.html" ? "/" : "/static/" + std::string(f.name);
    const std::string got = http_get(l.port(), path);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << path << ": " << got.substr(0, 80);
    const auto body = got.find("\r\n\r\n");
    ASSERT_NE(body, std::string::npos) << path;
    EXPECT_EQ(got.substr(body + 4), f.text) << path;
  }
  EXPECT_NE(http_get(l.port(), "/").find("Content-Type: text/html"), std::string::npos);
  EXPECT_EQ(http_get(l.port(), "/static/nothing.js").rfind("HTTP/1.1 404", 0), 0u);
}

TEST(status_page, the_chaos_tape_gives_its_faults_without_sessions_heals_or_torn_lines) {
  namespace fs = std::filesystem;
  const fs::path tape = fs::path(::testing::TempDir()) / "status_page_chaos.jsonl";
  std::ofstream(tape)
      << R"({"kind":"session","seed":1,"t":1.0})"
         "\n"
      << R"({"kind":"kill","target":"learner:1","t":2.5,"duration":5,"result":"ok"})"
         "\n"
      << R"({"kind":"heal","actions":[],"t":3.0})"
         "\n"
      << R"({"kind":"pause","target":"learner:0","t":4.0,"result":"ok"})"
         "\n"
      << R"({"kind":"kill","tar)";  // cut short by a kill
  const auto j = nlohmann::json::parse(dd::actors::chaos_tape_json(tape.string()));
  ASSERT_EQ(j["records"].size(), 2u) << j.dump();
  EXPECT_EQ(j["records"][0]["kind"], "kill");
  EXPECT_EQ(j["records"][0]["target"], "learner:1");
  EXPECT_EQ(j["records"][0]["t"], 2.5);
  EXPECT_EQ(j["records"][1]["kind"], "pause");
  EXPECT_EQ(j["malformed"], 1);
  // The newest records when there are more than asked for.
  const auto last = nlohmann::json::parse(dd::actors::chaos_tape_json(tape.string(), 1));
  ASSERT_EQ(last["records"].size(), 1u);
  EXPECT_EQ(last["records"][0]["kind"], "pause");
  // No tape yet (no fault fired) and no tape at all: no record.
  for (const std::string& none : {(tape.string() + ".absent"), std::string()}) {
    const auto e = nlohmann::json::parse(dd::actors::chaos_tape_json(none));
    EXPECT_TRUE(e["records"].empty());
    EXPECT_EQ(e["malformed"], 0);
  }
  dd::actors::http_listener l("127.0.0.1", 0);
  dd::actors::serve_status_page(l, tape.string());
  const std::string got = http_get(l.port(), "/chaos.json");
  EXPECT_NE(got.find("\"target\":\"learner:1\""), std::string::npos) << got;
  fs::remove(tape);
}

}  // namespace
