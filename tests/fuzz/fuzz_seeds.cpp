// tests/fuzz/fuzz_seeds.cpp — writes the committed seed corpora and the DSL dictionary of the
// fuzz targets (tests/fuzz/corpus/<target>/, tests/fuzz/dict/config.dict). Every seed is a real
// value encoded by the production encoders, so the fuzzers start from inputs that decode.
//
// Usage: fuzz_seeds <tests/fuzz directory>   (scripts/fuzz.sh --seeds runs it)
// Writes files named seed_*; leaves every other file (regression inputs, crash-*) alone.
// Deterministic: the same build writes the same bytes.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/config/loader.hpp"
#include "tests/support/wire_msgs.hpp"

namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::vector<uint8_t> prefixed(std::vector<uint8_t> head, const std::vector<uint8_t>& body) {
  head.insert(head.end(), body.begin(), body.end());
  return head;
}

void append_frame(std::vector<uint8_t>& out, const dd::wire_bytes& m) {
  if (m.size() > 0xFFFF) throw std::runtime_error("frame too large for a seed");
  out.push_back(static_cast<uint8_t>(m.size()));
  out.push_back(static_cast<uint8_t>(m.size() >> 8));
  out.insert(out.end(), m.begin(), m.end());
}

dd::push_msg sample_push(dd::payload_encoding enc, uint64_t elements) {
  dd::push_msg p = dd::test::push_header(1, 2, 3, 4, 24, 24 * 16 * 128, 7);
  p.contains_from = 6;
  dd::test::set_payload_bytes(p, enc, elements, [](size_t i) { return i * 37 + 11; });
  return p;
}

dd::broadcast_msg sample_broadcast(uint64_t elements) {
  dd::broadcast_msg b;
  b.fragment_id = 2;
  b.version = 9;
  dd::test::set_payload_bytes(b, dd::payload_encoding::fp32, elements,
                              [](size_t i) { return i * 13 + 5; });
  b.merged = {{0, 1, 5, 8}, {1, 2, 7, 9}};
  return b;
}

void codec_seeds(const fs::path& dir) {
  using dd::message_kind;
  // Every seed is stamped as the sender would stamp it: the run, and the sender's incarnation
  // (a learner's own, which its body names too; the syncer's for a syncer role).
  const std::string run = "0123abcd0123abcd";
  const dd::envelope_stamp syncer{run, 3};
  auto learner = [&](uint64_t inc) { return dd::envelope_stamp{run, inc}; };
  auto seed = [&](message_kind k, const std::string& name, const dd::wire_bytes& m) {
    write(dir / ("seed_" + std::to_string(static_cast<int>(k)) + "_" + name),
          prefixed({static_cast<uint8_t>(k)}, m));
  };
  seed(message_kind::join_request, "join_request",
       dd::encode(dd::join_request{3, "host-a", {0, 1}, true, 10, 20, 1, 4.5}, learner(1)));
  seed(message_kind::join_reply, "join_reply",
       dd::encode(dd::join_reply{1, 2, R"({"name":"x"})", 0, 2, 10, {9, 9}}, syncer));
  seed(message_kind::heartbeat, "heartbeat",
       dd::encode(dd::heartbeat_msg{1, 2, 3, 4, 0.5, {7, 8}, 2.5, 1.25}, learner(2)));
  seed(message_kind::push, "push_int4",
       dd::encode(sample_push(dd::payload_encoding::int4, 130), learner(2)));
  seed(message_kind::push, "push_bf16",
       dd::encode(sample_push(dd::payload_encoding::bf16, 20), learner(2)));
  seed(message_kind::broadcast, "broadcast", dd::encode(sample_broadcast(8), syncer));
  seed(message_kind::reject, "reject",
       dd::encode(dd::reject_msg{1, 2, dd::reject_reason::stale, "base version 3 is too old", 5, 7},
                  syncer));
  seed(message_kind::ack, "ack", dd::encode(dd::push_ack{1, 2, 3, 4, 5}, syncer));
  seed(message_kind::pull, "pull", dd::encode(dd::pull_request{-1, 0, 3}, syncer));
  seed(message_kind::progress, "progress",
       dd::encode(dd::progress_msg{123456789, 4, 17, 16.5}, syncer));
  seed(message_kind::node_join, "node_join",
       dd::encode(
           dd::node_join{run, dd::protocol_version, "node-a", "host", {0, 2}, 2, 1115394, "beef"},
           learner(0)));
  seed(message_kind::node_join, "node_join_first",  // a first start names no run
       dd::encode(
           dd::node_join{"", dd::protocol_version, "node-a", "host", {}, 0, 1115394, "beef"}));
  seed(message_kind::node_join_reply, "node_join_reply",
       dd::encode(
           dd::node_join_reply{
               true, dd::node_refusal::none, "", run, R"({"name":"x"})", "e0", {1}, 10, "d", 600},
           syncer));
  seed(message_kind::node_join_reply, "node_join_refused",
       dd::encode(
           dd::node_join_reply{
               false, dd::node_refusal::other_run, "other run", run, "", "", {}, 0, "", 0},
           syncer));
  seed(message_kind::leave, "leave", dd::encode(dd::leave_msg{3, 1}, learner(1)));
  seed(message_kind::fragment_query, "fragment_query",
       dd::encode(dd::fragment_query{2, 17, true}, syncer));
  seed(message_kind::fragment_held, "fragment_held",
       dd::encode(dd::fragment_held{1, 4, 2, 17, true, 12}, learner(4)));
  seed(message_kind::live_view, "live_view",
       dd::encode(dd::live_view_msg{5, {{0, 1, 0.5}, {2, 3, 0.25}}}, syncer));
  seed(message_kind::owner_directory, "owner_directory",
       dd::encode(dd::owner_directory{{0, 2, 1}}, syncer));
  seed(message_kind::subscribe, "subscribe", dd::encode(dd::subscribe_msg{1}, syncer));
  seed(message_kind::stop, "stop", dd::encode(dd::stop_msg{"the run is stopping"}, syncer));
  seed(message_kind::status_request, "status_request",  // an operator may name no run
       dd::encode(dd::status_request{}));
  seed(message_kind::status_reply, "status_reply",
       dd::encode(dd::status_reply{R"({"run_id":"0123abcd0123abcd","learners":[]})"}, syncer));
  seed(message_kind::drain, "drain", dd::encode(dd::drain_msg{2}, learner(0)));
  seed(message_kind::drain_reply, "drain_reply",
       dd::encode(dd::drain_reply{true, "learner 2 stops at its next step"}, syncer));
  seed(message_kind::node_events, "node_events",
       dd::encode(dd::node_events{"node-a", "{\"event\":\"join\"}\n", "", 0}, learner(0)));
  // peek_kind mode (23).
  write(dir / "seed_23_peek_push",
        prefixed({23}, dd::encode(sample_push(dd::payload_encoding::fp32, 4), learner(2))));
  write(dir / "seed_23_peek_live_view",
        prefixed({23}, dd::encode(dd::live_view_msg{1, {{4, 1, 0.1}}}, syncer)));
  // Chunk reassembly mode (24): pushes (flag 0) and broadcasts (flag 1), in order and shuffled.
  auto push_chunks = *dd::split_push(sample_push(dd::payload_encoding::int8, 200), 64);
  std::vector<uint8_t> in_order{24, 0}, reversed{24, 0};
  for (const auto& c : push_chunks) append_frame(in_order, dd::encode(c, learner(2)));
  for (auto it = push_chunks.rbegin(); it != push_chunks.rend(); ++it)
    append_frame(reversed, dd::encode(*it, learner(2)));
  write(dir / "seed_24_push_chunks", in_order);
  write(dir / "seed_24_push_chunks_reversed", reversed);
  auto bc_chunks = *dd::split_broadcast(sample_broadcast(40), 48);
  std::vector<uint8_t> bc{24, 1};
  for (const auto& c : bc_chunks) append_frame(bc, dd::encode(c, syncer));
  append_frame(bc, dd::encode(bc_chunks.front(), syncer));  // a duplicate chunk
  write(dir / "seed_24_broadcast_chunks", bc);
}

void owner_checkpoint_seeds(const fs::path& dir) {
  dd::owner_checkpoint c;
  c.fragment_id = 1;
  c.version = 12;
  c.value = {1, 2, 3, 4, 5};
  c.momentum = {0.5f, 0, -1, 0, 2};
  c.xi_step_s = 0.1;
  c.xi_quorum_s = 0.2;
  c.xi_sync_s = 0.05;
  c.anchors.push_back({10, {1, 1, 1, 1, 1}});
  c.anchors.push_back({11, {2, 2, 2, 2, 2}});
  c.merged = {{0, 1, 7, 11}, {2, 1, 3, 12}};
  const auto file = dd::encode_checkpoint(c);
  write(dir / "seed_file", prefixed({0}, file));
  write(dir / "seed_body", prefixed({1}, std::vector<uint8_t>(file.begin() + 24, file.end())));
  dd::owner_checkpoint empty;
  const auto file2 = dd::encode_checkpoint(empty);
  write(dir / "seed_file_empty", prefixed({0}, file2));
  write(dir / "seed_body_empty",
        prefixed({1}, std::vector<uint8_t>(file2.begin() + 24, file2.end())));
}

void safetensors_seeds(const fs::path& dir, const fs::path& tmp) {
  auto one = [&](const std::string& name, const dd::st_file& f) {
    const fs::path path = tmp / (name + ".safetensors");
    dd::write_safetensors(path.string(), f);
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    write(dir / ("seed_" + name + "_file"), prefixed({0}, bytes));
    uint64_t hlen = 0;
    for (int i = 0; i < 8; ++i) hlen |= uint64_t{bytes[i]} << (8 * i);
    std::vector<uint8_t> framed{1, static_cast<uint8_t>(hlen), static_cast<uint8_t>(hlen >> 8)};
    framed.insert(framed.end(), bytes.begin() + 8, bytes.end());
    write(dir / ("seed_" + name + "_framed"), framed);
  };
  dd::st_file f;
  f.tensors.push_back({"wte", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}});
  f.tensors.push_back({"ln.bias", {3}, {0, 0.5f, -1}});
  f.tensors.push_back({"empty", {0, 4}, {}});
  f.metadata["format"] = "dd-gpt-1";
  f.metadata["adamw_steps"] = "12";
  one("model", f);
  dd::st_file scalar;
  scalar.tensors.push_back({"s", {}, {3.5f}});
  one("scalar", scalar);
}

void config_seeds(const fs::path& dir) {
  // examples/ and tests/config/bad/ are config_fuzz's other corpus directories, read in place
  // (tests/fuzz/CMakeLists.txt, scripts/fuzz.sh): nothing of them is copied here.
  fs::create_directories(dir);
  const std::string overrides =
      "--@set sync.min_quorum=2\n"
      "--@set outer.lr=fraction(1/2)\n"
      "--@set data.file=x.txt\n"
      "experiment { name = \"o\", data = { file = \"d.txt\" }, learners = { count = 4 },\n"
      "  chaos = { events = { { at_step = 5, action = \"kill\", target = 1 } } } }\n";
  write(dir / "seed_overrides.lua", std::vector<uint8_t>(overrides.begin(), overrides.end()));
  const std::string sweep =
      "for _, h in ipairs({ 12, 24 }) do\n"
      "  experiment { name = \"h\" .. h, data = { file = \"d.txt\" }, sync = { interval = h },\n"
      "    budget = { steps = 10 * h } }\n"
      "end\n";
  write(dir / "seed_sweep.lua", std::vector<uint8_t>(sweep.begin(), sweep.end()));
}

// A libFuzzer dictionary for the DSL: Lua keywords and library names, and every key the loader
// knows (the last component of each dotted path), as `key` and `key =`.
void config_dict(const fs::path& path) {
  std::set<std::string> words = {"experiment",
                                 "fraction",
                                 "local",
                                 "function",
                                 "end",
                                 "for",
                                 "in",
                                 "do",
                                 "if",
                                 "then",
                                 "else",
                                 "return",
                                 "nil",
                                 "true",
                                 "false",
                                 "ipairs",
                                 "pairs",
                                 "string.rep",
                                 "string.format",
                                 "table.insert",
                                 "math.huge",
                                 "0/0",
                                 "1e309",
                                 "{",
                                 "}",
                                 "..",
                                 "[[",
                                 "]]",
                                 "--",
                                 "=",
                                 "\"",
                                 "kill",
                                 "fp32",
                                 "int4",
                                 "off"};
  for (const auto& key : dd::config::known_key_paths()) {
    std::string leaf =
        key.substr(key.find_last_of('.') == std::string::npos ? 0 : key.find_last_of('.') + 1);
    if (auto b = leaf.find('['); b != std::string::npos) leaf = leaf.substr(0, b);
    if (!leaf.empty()) {
      words.insert(leaf);
      words.insert(leaf + " = ");
    }
  }
  std::string text =
      "# tests/fuzz/dict/config.dict — written by fuzz_seeds from known_key_paths().\n";
  for (const auto& w : words) {
    std::string esc;
    for (char ch : w) {
      if (ch == '"' || ch == '\\') esc.push_back('\\');
      esc.push_back(ch);
    }
    text += "\"" + esc + "\"\n";
  }
  write(path, std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds <tests/fuzz directory>\n");
    return 2;
  }
  try {
    const fs::path root(argv[1]);
    const fs::path tmp = fs::temp_directory_path() / "dd_fuzz_seeds";
    fs::create_directories(tmp);
    codec_seeds(root / "corpus" / "codec_fuzz");
    owner_checkpoint_seeds(root / "corpus" / "owner_checkpoint_fuzz");
    safetensors_seeds(root / "corpus" / "safetensors_fuzz", tmp);
    config_seeds(root / "corpus" / "config_fuzz");
    config_dict(root / "dict" / "config.dict");
    fs::remove_all(tmp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
