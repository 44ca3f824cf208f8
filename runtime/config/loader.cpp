// runtime/config/loader.cpp — run, override, validate and resolve experiments (see loader.hpp).
//
// Flow: sandbox (detail/sandbox.cpp) → one JSON snapshot per experiment{} call → --name selection
// → --set overrides (selected experiments only) → the reader below, which fills every default,
// checks types, ranges and combinations, and records each problem with the file:line of its key
// (detail/source_index.cpp).
#include "runtime/config/loader.hpp"
#include "runtime/config/run_dir_default.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/config/detail/enums.hpp"
#include "runtime/config/detail/sandbox.hpp"
#include "runtime/config/detail/source_index.hpp"
#include "util/files.hpp"
#include "util/parse.hpp"
#include "util/suggest.hpp"

namespace dd::config {

using nlohmann::json;

namespace {

/// `text` as shown in an error: up to 200 bytes whole, longer cut to its first 120 bytes (not
/// inside a UTF-8 sequence), "…" and its length (a key of a megabyte once filled the terminal).
std::string shown_cut(const std::string& text) {
  if (text.size() <= 200) return text;
  std::size_t n = 120;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n) + fmt::format("… ({} bytes)", text.size());
}

}  // namespace

std::string config_error::to_string() const {
  std::string s = file;
  if (line > 0) s += ":" + std::to_string(line);
  if (!key_path.empty()) s += (s.empty() ? "" : ": ") + shown_cut(key_path);
  s += (s.empty() ? "" : ": ") + message;
  return s;
}

std::string load_result::error_text() const {
  std::string s;
  for (const auto& e : errors) s += e.to_string() + "\n";
  if (more_errors > 0)
    s += fmt::format("… and {} more error{}\n", more_errors, more_errors == 1 ? "" : "s");
  return s;
}

std::string load_result::warning_text() const {
  std::string s;
  for (const auto& w : warnings) s += "warning: " + w.to_string() + "\n";
  return s;
}

namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();

// ---- where a key was written ----

/// One applied --set: the path it set and how to name it in errors.
struct applied_override {
  std::string path;
  std::string label;  // "--set key=value"
};

/// Maps a key path of one experiment to the file:line it came from.
struct origin_finder {
  std::string file;
  int call_line = 0;
  int window_end = 0;  // first line after this experiment's own text (heuristic bound)
  const detail::source_index* source = nullptr;
  std::vector<applied_override> overrides;

  static bool covers(const std::string& set, const std::string& path) {
    if (path.compare(0, set.size(), set) != 0) return false;
    return path.size() == set.size() || path[set.size()] == '.' || path[set.size()] == '[';
  }

  config_error make(const std::string& path, std::string message) const {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
      if (covers(it->path, path)) return {it->label, 0, path, std::move(message)};
    int line = 0;
    if (source != nullptr && !path.empty()) {
      auto parts = detail::split_path(path);
      while (!parts.empty() && line == 0) {
        line = source->find(parts, call_line, window_end, false);
        if (line == 0) line = source->find(parts, 1, call_line, true);
        parts.pop_back();
        while (!parts.empty() && parts.back().key.empty()) parts.pop_back();
      }
    }
    // A key the file never names that an override created (--set learner.count=3 makes the
    // unknown key `learner`) is the override's, not the experiment's line.
    if (line == 0 && !path.empty())
      for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
        if (covers(path, it->path)) return {it->label, 0, path, std::move(message)};
    return {file, line > 0 ? line : call_line, path, std::move(message)};
  }
};

/// Collects errors for one experiment and every key path the reader asks about.
struct read_context {
  const origin_finder* origin;
  std::vector<config_error>* errors;
  std::vector<std::string>* asked = nullptr;  // for known_key_paths()
  /// Errors past max_errors_shown in `errors`: counted here, not made (null: none counted).
  std::size_t* more = nullptr;
  /// Where warnings go (an old spelling that still works); null: dropped.
  std::vector<config_error>* warnings = nullptr;

  /// True once `errors` holds max_errors_shown: a caller may skip the work of a message.
  bool full() const { return more != nullptr && errors->size() >= max_errors_shown; }
  void fail(const std::string& path, std::string message) const {
    if (full()) {
      ++*more;
      return;
    }
    errors->push_back(origin->make(path, std::move(message)));
  }
  void warn(const std::string& path, std::string message) const {
    if (warnings != nullptr) warnings->push_back(origin->make(path, std::move(message)));
  }
  /// "file:line" of the key path (as error messages place it); "--set ..." for an override.
  std::string where(const std::string& path) const {
    const config_error e = origin->make(path, "");
    return e.line > 0 ? fmt::format("{}:{}", e.file, e.line) : e.file;
  }
};

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

/// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points above
/// U+10FFFF): what JSON output (experiment.json, `dd-node resolve`) can hold.
bool valid_utf8(std::string_view s) {
  // The well-formed sequences (Unicode, Table 3-7): a lead byte in [first, last] is followed by
  // `more` bytes, the first of them in [lo, hi] and the rest in [0x80, 0xBF].
  struct lead_range {
    unsigned char first, last;
    size_t more;
    unsigned char lo, hi;
  };
  static constexpr lead_range leads[] = {{0xC2, 0xDF, 1, 0x80, 0xBF}, {0xE0, 0xE0, 2, 0xA0, 0xBF},
                                         {0xE1, 0xEC, 2, 0x80, 0xBF}, {0xED, 0xED, 2, 0x80, 0x9F},
                                         {0xEE, 0xEF, 2, 0x80, 0xBF}, {0xF0, 0xF0, 3, 0x90, 0xBF},
                                         {0xF1, 0xF3, 3, 0x80, 0xBF}, {0xF4, 0xF4, 3, 0x80, 0x8F}};
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const lead_range* r = nullptr;
    for (const auto& l : leads)
      if (c >= l.first && c <= l.last) r = &l;
    if (r == nullptr) return false;
    if (r->more > s.size() - i - 1) return false;  // truncated sequence
    for (size_t k = 1; k <= r->more; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < r->lo || b > r->hi) : (b < 0x80 || b > 0xBF)) return false;
    }
    i += r->more + 1;
  }
  return true;
}

/// How a value reads in an error message: `string "24"`, `number 2.5`, `a table`. Bytes that are
/// not UTF-8 print as U+FFFD (dump() would throw on them).
std::string describe(const json& v) {
  auto text = [](const json& x) { return x.dump(-1, ' ', false, json::error_handler_t::replace); };
  switch (v.type()) {
    case json::value_t::string: return "string " + text(v);
    case json::value_t::boolean: return "boolean " + text(v);
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "number " + text(v);
    case json::value_t::array: return "a list";
    case json::value_t::object: return "a table";
    default: return "nil";
  }
}

std::string num(double v) { return fmt::format("{}", v); }

/// A closed or open numeric interval; infinite ends are unbounded.
struct range {
  double lo = -k_inf;
  double hi = k_inf;
  bool lo_open = false;
  bool hi_open = false;

  bool contains(double v) const {
    if (lo_open ? !(v > lo) : !(v >= lo)) return false;
    if (hi_open ? !(v < hi) : !(v <= hi)) return false;
    return true;
  }
  std::string text() const {
    if (hi == k_inf) return (lo_open ? "must be greater than " : "must be at least ") + num(lo);
    if (lo == -k_inf) return (hi_open ? "must be less than " : "must be at most ") + num(hi);
    return fmt::format("must be in {}{}, {}{}", lo_open ? "(" : "[", num(lo), num(hi),
                       hi_open ? ")" : "]");
  }
};

range at_least(double lo) { return {lo, k_inf, false, false}; }
range positive() { return {0, k_inf, true, false}; }
range closed(double lo, double hi) { return {lo, hi, false, false}; }
range half_open(double lo, double hi) { return {lo, hi, false, true}; }
range open_closed(double lo, double hi) { return {lo, hi, true, false}; }
range open(double lo, double hi) { return {lo, hi, true, true}; }

/// Reads one table (section) of an experiment; unknown keys are reported by finish().
class section {
 public:
  section(const read_context& ctx, const json* obj, std::string path)
      : ctx_(ctx), obj_(obj), path_(std::move(path)) {
    if (obj_ != nullptr && obj_->is_array() && obj_->empty()) obj_ = nullptr;  // {} in Lua
  }

  const std::string& path() const { return path_; }
  std::string path(const std::string& key) const { return join(path_, key); }

  /// The raw value of `key`, or nullptr when absent.
  const json* raw(const std::string& key) {
    asked_.insert(key);
    if (ctx_.asked != nullptr) ctx_.asked->push_back(join(path_, key));
    if (obj_ == nullptr || !obj_->is_object()) return nullptr;
    const auto it = obj_->find(key);
    if (it == obj_->end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const std::string& key) { return raw(key) != nullptr; }

  std::int64_t integer(const std::string& key, std::int64_t def, range r = {}) {
    const json* v = raw(key);
    if (v == nullptr) return def;
    std::int64_t out = def;
    if (v->is_number_integer() || v->is_number_unsigned()) {
      out = v->get<std::int64_t>();
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
               std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      out = static_cast<std::int64_t>(v->get<double>());
    } else {
      ctx_.fail(path(key), "expected an integer, got " + describe(*v));
      return def;
    }
    if (!r.contains(static_cast<double>(out))) {
      ctx_.fail(path(key), fmt::format("{} is out of range: {}", out, r.text()));
      return def;
    }
    return out;
  }
  int integer32(const std::string& key, int def, range r = {}) {
    r.lo = std::max(r.lo, static_cast<double>(std::numeric_limits<int>::min()));
    r.hi = std::min(r.hi, static_cast<double>(std::numeric_limits<int>::max()));
    return static_cast<int>(integer(key, def, r));
  }

  double number(const std::string& key, double def, range r = {}) {
    const json* v = raw(key);
    if (v == nullptr) return def;
    if (!v->is_number()) {
      ctx_.fail(path(key), "expected a number, got " + describe(*v));
      return def;
    }
    const double out = v->get<double>();
    if (!std::isfinite(out)) {
      ctx_.fail(path(key), "is not a finite number");
      return def;
    }
    if (!r.contains(out)) {
      ctx_.fail(path(key), fmt::format("{} is out of range: {}", v->dump(), r.text()));
      return def;
    }
    return out;
  }

  bool boolean(const std::string& key, bool def) {
    const json* v = raw(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) {
      ctx_.fail(path(key), "expected true or false, got " + describe(*v));
      return def;
    }
    return v->get<bool>();
  }

  std::string string(const std::string& key, std::string def) {
    const json* v = raw(key);
    if (v == nullptr) return def;
    if (!v->is_string()) {
      ctx_.fail(path(key), "expected a string, got " + describe(*v));
      return def;
    }
    if (!valid_utf8(v->get_ref<const std::string&>())) {
      ctx_.fail(path(key), "is not valid UTF-8 text: " + describe(*v));
      return def;
    }
    return v->get<std::string>();
  }

  template <class E>
  E choice(const std::string& key, E def) {
    const json* v = raw(key);
    if (v == nullptr) return def;
    return parse_choice<E>(*v, path(key), def);
  }

  template <class E>
  E parse_choice(const json& v, const std::string& full_path, E def) const {
    const auto names = detail::enum_spellings<E>();
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    if (!v.is_string()) {
      ctx_.fail(full_path, "expected one of " + list + ", got " + describe(v));
      return def;
    }
    const std::string s = v.get<std::string>();
    if (auto e = detail::parse_enum<E>(s)) return *e;
    ctx_.fail(full_path, fmt::format("unknown value '{}'; expected one of {}{}", s, list,
                                     util::did_you_mean(s, names)));
    return def;
  }

  /// The sub-table `key` (absent → an empty section; not a table → a type error).
  section child(const std::string& key) {
    const json* v = raw(key);
    if (v != nullptr && !v->is_object() && !(v->is_array() && v->empty())) {
      ctx_.fail(path(key), "expected a table { ... }, got " + describe(*v));
      v = nullptr;
    }
    return section(ctx_, v, path(key));
  }

  /// Reports keys that were never asked for.
  void finish() const;

  const read_context& ctx() const { return ctx_; }

 private:
  const read_context& ctx_;
  const json* obj_;
  std::string path_;
  std::set<std::string> asked_;
};

void section::finish() const {
  if (obj_ == nullptr) return;
  if (!obj_->is_object()) {
    ctx_.fail(path_, "expected a table { ... }, got " + describe(*obj_));
    return;
  }
  const std::vector<std::string> names(asked_.begin(), asked_.end());
  for (const auto& [key, value] : obj_->items()) {
    if (asked_.count(key) != 0) continue;
    if (ctx_.full()) {  // counted, without the work of a suggestion
      ctx_.fail(path_, "");
      continue;
    }
    std::string hint = util::did_you_mean(key, names);
    if (hint.empty() && ctx_.asked == nullptr) {
      // The key may belong to another section: suggest its full path.
      for (const auto& p : known_key_paths()) {
        const std::size_t dot = p.rfind('.');
        if (p.substr(dot == std::string::npos ? 0 : dot + 1) == key &&
            p.find("[]") == std::string::npos) {
          hint = "; did you mean '" + p + "'?";
          break;
        }
      }
    }
    ctx_.fail(join(path_, key), "unknown key" + hint);
  }
}

/// A list of numbers under `key` (absent → empty).
std::vector<double> number_list(section& s, const std::string& key, range r) {
  std::vector<double> out;
  const json* v = s.raw(key);
  if (v == nullptr) return out;
  if (!v->is_array()) {
    s.ctx().fail(s.path(key), "expected a list of numbers, got " + describe(*v));
    return out;
  }
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& x = (*v)[i];
    const std::string p = fmt::format("{}[{}]", s.path(key), i + 1);
    if (!x.is_number() || !std::isfinite(x.get<double>())) {
      s.ctx().fail(p, "expected a number, got " + describe(x));
      continue;
    }
    if (!r.contains(x.get<double>())) {
      s.ctx().fail(p, fmt::format("{} is out of range: {}", x.dump(), r.text()));
      continue;
    }
    out.push_back(x.get<double>());
  }
  return out;
}

/// learners.devices: a list with one entry per learner, each an ordinal or a list of ordinals.
std::vector<std::vector<int>> device_list(section& s, const std::string& key) {
  std::vector<std::vector<int>> out;
  const json* v = s.raw(key);
  if (v == nullptr) return out;
  if (!v->is_array()) {
    s.ctx().fail(s.path(key), "expected a list (one entry per learner), got " + describe(*v));
    return out;
  }
  auto ordinal = [&](const json& x, const std::string& p, std::vector<int>& into) {
    if (!x.is_number_integer() || x.get<std::int64_t>() < 0 || x.get<std::int64_t>() > 1023) {
      s.ctx().fail(p, "expected a device ordinal (integer 0..1023), got " + describe(x));
      return;
    }
    into.push_back(x.get<int>());
  };
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& x = (*v)[i];
    const std::string p = fmt::format("{}[{}]", s.path(key), i + 1);
    std::vector<int> devs;
    if (x.is_array() && !x.empty()) {
      for (std::size_t j = 0; j < x.size(); ++j)
        ordinal(x[j], fmt::format("{}[{}]", p, j + 1), devs);
    } else {
      ordinal(x, p, devs);
    }
    out.push_back(std::move(devs));
  }
  return out;
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 100 || n[0] == '.') return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
  });
}

/// How data files are found.
struct file_policy {
  bool check = true;
  std::vector<std::filesystem::path> dirs;  // tried in order for relative paths
};

enum class path_kind { file, directory };

/// `path` where data is looked for: an absolute path as it is, a relative one under the first
/// of policy.dirs where it exists; absolute and normalized, or nullopt when no `kind` is there.
std::optional<std::string> find_data_path(const std::string& path, const file_policy& policy,
                                          path_kind kind) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto is_kind = [&](const fs::path& c) {
    return kind == path_kind::file ? fs::is_regular_file(c, ec) : fs::is_directory(c, ec);
  };
  const fs::path p(path);
  if (p.is_absolute()) {
    if (is_kind(p)) return p.lexically_normal().string();
    return std::nullopt;
  }
  for (const auto& d : policy.dirs) {
    const fs::path c = d / p;
    if (is_kind(c)) return fs::absolute(c, ec).lexically_normal().string();
  }
  return std::nullopt;
}

/// "file 'PATH' not found" and, for a relative PATH, where it was looked for: "(tried A, B)",
/// each place as an absolute path, in order (an absolute PATH is only ever itself).
std::string not_found(const char* what, const std::string& path, const file_policy& policy) {
  namespace fs = std::filesystem;
  std::string line = fmt::format("{} '{}' not found", what, path);
  if (fs::path(path).is_absolute()) return line;
  std::vector<std::string> tried;
  std::error_code ec;
  for (const auto& d : policy.dirs) {
    const std::string c = fs::absolute(d / path, ec).lexically_normal().string();
    if (std::find(tried.begin(), tried.end(), c) == tried.end()) tried.push_back(c);
  }
  if (tried.empty()) return line;
  line += " (tried ";
  for (std::size_t i = 0; i < tried.size(); ++i) line += (i ? ", " : "") + tried[i];
  return line + ")";
}

std::optional<std::string> find_data_file(const std::string& file, const file_policy& policy) {
  return find_data_path(file, policy, path_kind::file);
}

std::optional<std::string> find_data_dir(const std::string& dir, const file_policy& policy) {
  return find_data_path(dir, policy, path_kind::directory);
}

void read_chaos(section& chaos, experiment& e, const read_context& ctx);

/// model: the architecture (the MoE and ViT keys only with their kind) and where it starts.
void read_model(section s, experiment& e, const read_context& ctx, const file_policy& files) {
  e.model.kind = s.choice("kind", e.model.kind);
  e.model.vocab = s.integer32("vocab", e.model.vocab, closed(2, 1 << 20));
  e.model.context = s.integer32("context", e.model.context, closed(1, 1 << 16));
  e.model.layers = s.integer32("layers", e.model.layers, closed(1, 1024));
  e.model.heads = s.integer32("heads", e.model.heads, closed(1, 1024));
  e.model.width = s.integer32("width", e.model.width, closed(1, 1 << 16));
  const bool moe = e.model.kind == model_kind::moe_gpt;
  for (const char* key : {"experts", "top_k", "capacity_factor", "aux_loss"})
    if (!moe && s.has(key))
      ctx.fail(std::string("model.") + key,
               fmt::format("applies to model.kind = \"moe_gpt\" only (kind is \"{}\")",
                           to_string(e.model.kind)));
  e.model.experts = s.integer32("experts", e.model.experts, closed(2, 1024));
  e.model.top_k = s.integer32("top_k", e.model.top_k, closed(1, 2));
  e.model.capacity_factor =
      s.number("capacity_factor", e.model.capacity_factor, open_closed(0, 64));
  e.model.aux_loss = s.number("aux_loss", e.model.aux_loss, closed(0, 100));
  const bool vit = e.model.kind == model_kind::vit;
  for (const char* key : {"rows", "cols", "patch", "classes", "pooling"})
    if (!vit && s.has(key))
      ctx.fail(std::string("model.") + key,
               fmt::format("applies to model.kind = \"vit\" only (kind is \"{}\")",
                           to_string(e.model.kind)));
  e.model.rows = s.integer32("rows", e.model.rows, closed(1, 1 << 14));
  e.model.cols = s.integer32("cols", e.model.cols, closed(1, 1 << 14));
  e.model.patch = s.integer32("patch", e.model.patch, closed(1, 1 << 14));
  e.model.classes = s.integer32("classes", e.model.classes, closed(2, 256));
  e.model.pooling = s.string("pooling", e.model.pooling);
  if (s.has("init_from")) {
    if (e.model.kind != model_kind::gpt)
      ctx.fail("model.init_from",
               fmt::format("applies to model.kind = \"gpt\" only (kind is \"{}\")",
                           to_string(e.model.kind)));
    e.model.init_from = s.string("init_from", "");
    if (e.model.init_from.empty())
      ctx.fail("model.init_from", "must not be empty");
    else if (files.check) {
      if (auto dir = find_data_dir(e.model.init_from, files))
        e.model.init_from = *dir;
      else
        ctx.fail("model.init_from", not_found("directory", e.model.init_from, files));
    }
  }
  s.finish();
  if (vit && e.model.pooling != "cls" && e.model.pooling != "mean")
    ctx.fail("model.pooling",
             fmt::format("unknown value '{}'; expected one of cls, mean", e.model.pooling));
  if (vit && (e.model.rows % e.model.patch != 0 || e.model.cols % e.model.patch != 0))
    ctx.fail("model.patch", fmt::format("{} does not divide model.rows ({}) and model.cols ({})",
                                        e.model.patch, e.model.rows, e.model.cols));
  if (moe && e.model.top_k > e.model.experts)
    ctx.fail("model.top_k",
             fmt::format("{} exceeds model.experts ({})", e.model.top_k, e.model.experts));
}

/// data: the data (a text file, IDX images and labels, or token shards; files resolved against
/// the experiment file's directory, then the current directory, when `files` checks them), the
/// split and the sharding.
void read_data(section s, experiment& e, const read_context& ctx, const file_policy& files) {
  e.data.kind = s.choice("kind", e.data.kind);
  // A required data file: resolved like data.file (next to the experiment file, then the
  // current directory).
  auto data_file = [&](const char* key, std::string& out, const char* what) {
    const std::string path = fmt::format("data.{}", key);
    const json* raw = s.raw(key);
    if (raw == nullptr) {
      ctx.fail(path, fmt::format("required key is missing: name the {}", what));
      return;
    }
    out = s.string(key, "");
    if (!out.empty() && files.check) {
      if (auto found = find_data_file(out, files)) {
        out = *found;
      } else if (find_data_dir(out, files)) {
        ctx.fail(path, fmt::format("'{}' is a directory; name the {}", out, what));
      } else {
        ctx.fail(path, not_found("file", out, files));
      }
    } else if (out.empty() && raw->is_string()) {
      ctx.fail(path, "must not be empty");
    }
  };
  // A list of token files: a string or a list of strings, each a path or a glob pattern.
  auto token_files = [&](const char* key, std::vector<std::string>& out, bool required) {
    const std::string path = fmt::format("data.{}", key);
    const json* raw = s.raw(key);
    if (raw == nullptr) {
      if (required)
        ctx.fail(path,
                 "required key is missing: name the token files (a path, a glob "
                 "pattern or a list of them)");
      return;
    }
    std::vector<std::string> patterns;
    if (raw->is_string()) {
      patterns.push_back(raw->get<std::string>());
    } else if (raw->is_array()) {
      for (std::size_t i = 0; i < raw->size(); ++i) {
        if (!(*raw)[i].is_string()) {
          ctx.fail(fmt::format("{}[{}]", path, i + 1),
                   "expected a path or glob pattern, got " + describe((*raw)[i]));
          return;
        }
        patterns.push_back((*raw)[i].get<std::string>());
      }
    } else {
      ctx.fail(path, "expected a path, a glob pattern or a list of them, got " + describe(*raw));
      return;
    }
    if (patterns.empty()) {
      ctx.fail(path, "the list of token files is empty");
      return;
    }
    if (!files.check) {
      out = patterns;
      return;
    }
    std::vector<std::string> dirs;
    for (const auto& d : files.dirs) dirs.push_back(d.string());
    if (auto st = util::expand_file_patterns(patterns, dirs, out); !st) ctx.fail(path, st.message);
  };
  if (e.data.kind == data_kind::tokens) {
    token_files("files", e.data.files, true);
    token_files("validation_files", e.data.validation_files, false);
    e.data.format = s.string("format", e.data.format);
    if (e.data.format != "llmc" && e.data.format != "uint16" && e.data.format != "uint32")
      ctx.fail("data.format", fmt::format("unknown value '{}'; expected one of llmc, uint16, "
                                          "uint32",
                                          e.data.format));
    for (const char* key : {"file", "images", "labels"})
      if (s.has(key))
        ctx.fail(fmt::format("data.{}", key),
                 "is not read by data.kind = \"tokens\" (it reads data.files)");
  } else if (e.data.kind == data_kind::idx) {
    data_file("images", e.data.images, "IDX image file (n, rows, cols)");
    data_file("labels", e.data.labels, "IDX label file (n)");
    for (const char* key : {"file", "tokenizer"})
      if (s.has(key))
        ctx.fail(fmt::format("data.{}", key),
                 "is for data.kind = \"text\"; data.kind = \"idx\" reads data.images and "
                 "data.labels");
  } else {
    data_file("file", e.data.file, "training text file");
    for (const char* key : {"images", "labels"})
      if (s.has(key))
        ctx.fail(fmt::format("data.{}", key), "is for data.kind = \"idx\" (IDX image files)");
  }
  if (e.data.kind != data_kind::tokens)
    for (const char* key : {"files", "validation_files", "format"})
      if (s.has(key))
        ctx.fail(fmt::format("data.{}", key), "is for data.kind = \"tokens\" (token files)");
  e.data.train_fraction = s.number("train_fraction", e.data.train_fraction, open(0, 1));
  e.data.sharding = s.choice("sharding", e.data.sharding);
  if (e.data.kind == data_kind::text) {
    e.data.tokenizer = s.string("tokenizer", e.data.tokenizer);
    if (e.data.tokenizer != "byte")
      ctx.fail("data.tokenizer",
               fmt::format("'{}': data.kind = \"text\" reads bytes (\"byte\"); to train on "
                           "subword tokens, write shards with `dd-node tokenize` and use "
                           "data.kind = \"tokens\"",
                           e.data.tokenizer));
  } else if (e.data.kind == data_kind::tokens) {
    e.data.tokenizer = s.string("tokenizer", e.data.tokenizer);
    if (e.data.tokenizer != "byte" && files.check) {
      namespace fs = std::filesystem;
      std::optional<std::string> found = find_data_file(e.data.tokenizer, files);
      if (!found)
        if (auto dir = find_data_dir(e.data.tokenizer, files))
          found = (fs::path(*dir) / "tokenizer.model").string();
      std::error_code ec;
      if (found && fs::is_regular_file(*found, ec))
        e.data.tokenizer = *found;
      else
        ctx.fail("data.tokenizer",
                 fmt::format("'{}' is neither \"byte\" nor a SentencePiece model file (or a "
                             "directory holding tokenizer.model) written by `dd-node tokenize`",
                             e.data.tokenizer));
    }
  }
  s.finish();
}

/// What the model and the data must agree on, checked once both are read.
void check_model_against_data(const experiment& e, const read_context& ctx) {
  if ((e.model.kind == model_kind::vit) != (e.data.kind == data_kind::idx))
    ctx.fail("model.kind", fmt::format("\"{}\" does not read data.kind = \"{}\" (model.kind = "
                                       "\"vit\" goes with data.kind = \"idx\", the others "
                                       "with \"text\" or \"tokens\")",
                                       to_string(e.model.kind), to_string(e.data.kind)));
  if (e.data.kind != data_kind::idx && e.data.tokenizer == "byte" && e.model.vocab < 256)
    ctx.fail("model.vocab",
             fmt::format("{} is smaller than the byte tokenizer's 256 symbols", e.model.vocab));
  if (e.model.width % e.model.heads != 0)
    ctx.fail("model.heads", fmt::format("model.width ({}) is not divisible by model.heads ({})",
                                        e.model.width, e.model.heads));
}

/// learners: count, batch, backend, threads, speeds.
void read_learners(section s, experiment& e, const read_context& ctx) {
  auto& l = e.learners;
  l.count = s.integer32("count", l.count, closed(1, 4096));
  l.batch = s.integer32("batch", l.batch, closed(1, 1 << 20));
  l.backend = s.choice("backend", l.backend);
  const json* devices_raw = s.raw("devices");
  const bool has_devices =
      devices_raw != nullptr && !(devices_raw->is_array() && devices_raw->empty());
  l.devices = device_list(s, "devices");
  l.threads = s.integer32("threads", l.threads, closed(0, 1024));
  const json* speed_raw = s.raw("speed");
  l.speed = number_list(s, "speed", at_least(1.0));
  l.jitter = s.number("jitter", l.jitter, half_open(0, 1));
  s.finish();
  const auto count = static_cast<std::size_t>(l.count);
  if (speed_raw != nullptr && speed_raw->is_array() && speed_raw->size() != count)
    ctx.fail("learners.speed",
             fmt::format("has {} entries but learners.count is {}", speed_raw->size(), l.count));
  if (l.speed.size() != count) l.speed.assign(count, 1.0);
  // Read (so a malformed list still gets its own message) but refused: no learner is placed
  // on a chosen device yet, and a key that is accepted must take effect.
  if (has_devices)
    ctx.fail("learners.devices",
             "is not implemented: every learner runs on its backend's "
             "default device; remove the key (leave it {})");
  if (!has_devices) l.devices.clear();
  if (l.backend == backend_kind::cuda && e.model.kind != model_kind::gpt)
    ctx.fail("learners.backend",
             fmt::format("\"cuda\" has no kernels for model.kind = \"{}\" yet (its routing "
                         "and expert gather/scatter ops, or the vision transformer's ops, exist "
                         "on \"cpu\" and \"reference\" only); use learners.backend = \"cpu\"",
                         to_string(e.model.kind)));
}

/// budget: exactly one of tokens, steps or seconds (default 600 steps).
void read_budget(section s, experiment& e, const read_context& ctx) {
  const bool t = s.has("tokens"), st = s.has("steps"), se = s.has("seconds");
  e.budget.tokens = s.integer("tokens", 0, at_least(1));
  e.budget.steps = s.integer("steps", 600, at_least(1));
  e.budget.seconds = s.number("seconds", 0, positive());
  s.finish();
  const int given = int(t) + int(st) + int(se);
  if (given > 1) {
    std::string which;
    for (auto [on, n] : {std::pair{t, "tokens"}, {st, "steps"}, {se, "seconds"}})
      if (on) which += (which.empty() ? "" : " and ") + std::string(n);
    ctx.fail("budget", "give exactly one of tokens, steps or seconds (got " + which + ")");
  }
  if (given == 1 && t)
    e.budget.kind = budget_kind::tokens;
  else if (given == 1 && se)
    e.budget.kind = budget_kind::seconds;
  else
    e.budget.kind = budget_kind::steps;
  if (given > 1) e.budget.steps = 600;  // keep checking the rest against the default
  if (e.budget.kind != budget_kind::steps) e.budget.steps = 0;
}

/// inner: the inner optimizer and its schedule (a cosine schedule's length from the budget).
void read_inner(section s, experiment& e, const read_context& ctx) {
  auto& in = e.inner;
  in.lr = s.number("lr", in.lr, open_closed(0, 10));
  in.warmup = s.integer32("warmup", in.warmup, at_least(0));
  in.schedule = s.choice("schedule", in.schedule);
  in.min_lr_ratio = s.number("min_lr_ratio", in.min_lr_ratio, closed(0, 1));
  const bool has_decay = s.has("decay_steps");
  in.decay_steps = s.integer("decay_steps", 0, at_least(0));
  in.beta1 = s.number("beta1", in.beta1, half_open(0, 1));
  in.beta2 = s.number("beta2", in.beta2, half_open(0, 1));
  in.eps = s.number("eps", in.eps, open_closed(0, 1));
  in.weight_decay = s.number("weight_decay", in.weight_decay, at_least(0));
  in.grad_clip = s.number("grad_clip", in.grad_clip, at_least(0));
  in.rewarmup = s.integer32("rewarmup", in.rewarmup, at_least(0));
  in.clock = s.choice("schedule_clock", in.clock);
  s.finish();
  if (in.decay_steps == 0 && in.schedule == schedule_kind::cosine) {
    switch (e.budget.kind) {
      case budget_kind::steps: in.decay_steps = e.budget.steps; break;
      case budget_kind::tokens: {
        const std::int64_t per_step = e.tokens_per_step() * e.learners.count;
        in.decay_steps = std::max<std::int64_t>(1, (e.budget.tokens + per_step - 1) / per_step);
        break;
      }
      case budget_kind::seconds:
        ctx.fail("inner.decay_steps",
                 has_decay ? "must be at least 1 for the cosine schedule"
                           : "required when the budget is in seconds and inner.schedule is "
                             "'cosine' (the schedule's length in inner steps)");
        break;
    }
  }
  // A warmup as long as the schedule: the learning rate never reaches its peak (a short test
  // budget with the default warmup of 100). Allowed, but said, with the length it compares with.
  const std::int64_t length = in.schedule == schedule_kind::cosine  ? in.decay_steps
                              : e.budget.kind == budget_kind::steps ? e.budget.steps
                                                                    : 0;
  if (length > 0 && in.warmup >= length)
    ctx.warn(s.path("warmup"),
             fmt::format("{} warmup steps are at least the {} inner steps each learner takes: the "
                         "learning rate never reaches inner.lr; set inner.warmup below {}",
                         in.warmup, length, length));
}

/// outer: the outer optimizer, the merge and how a merge is applied.
void read_outer(section s, experiment& e, const read_context& ctx) {
  auto& o = e.outer;
  o.kind = s.choice("kind", o.kind);
  o.lr = s.number("lr", o.lr, open_closed(0, 10));
  o.momentum = s.number("momentum", o.momentum, half_open(0, 1));
  o.merge = s.choice("merge", o.merge);
  o.embedding_merge = s.choice("embedding_merge", o.embedding_merge);
  // Embedding tensors are always merged by the token-weighted average (runtime/merge.hpp):
  // another rule would be accepted and silently not applied, so it is refused.
  if (o.embedding_merge != merge_kind::average)
    ctx.fail(s.path("embedding_merge"),
             fmt::format("'{}' is not implemented: embedding tensors are always merged by the "
                         "token-weighted average; remove the key or set \"average\"",
                         to_string(o.embedding_merge)));
  o.anchor = s.choice("anchor", o.anchor);
  o.apply = s.choice("apply", o.apply);
  o.mixing_alpha = s.number("mixing_alpha", o.mixing_alpha, half_open(0, 1));
  if (o.apply == apply_kind::rebase && o.mixing_alpha != 0.0)
    ctx.fail(s.path("mixing_alpha"), "must be 0 with apply = 'rebase' (α mixes only on overwrite)");
  o.max_staleness = s.integer32("max_staleness", o.max_staleness, closed(0, 1000000));
  o.token_weighting = s.boolean("token_weighting", o.token_weighting);
  o.scale_partial_merges = s.boolean("scale_partial_merges", o.scale_partial_merges);
  s.finish();
}

/// sync: fragments, the push schedule, the quorum, the grace window and the wire format.
void read_sync(section s, experiment& e, const read_context& ctx) {
  auto& y = e.sync;
  y.fragments = s.integer32("fragments", y.fragments, closed(1, 100000));
  y.strategy = s.choice("strategy", y.strategy);
  y.interval = s.integer32("interval", y.interval, closed(1, 1000000));
  y.overlap = s.integer32("overlap", y.overlap, closed(0, 1000000));
  y.max_inflight = s.integer32("max_inflight", y.max_inflight, closed(1, 1024));
  y.final_push = s.boolean("final_push", y.final_push);
  y.window_chunks = s.integer32("window_chunks", y.window_chunks, closed(1, 1024));
  if (const json* k = s.raw("min_quorum")) {
    const std::string p = s.path("min_quorum");
    if (k->is_object() && k->size() == 1 && k->contains("fraction")) {
      const json& f = (*k)["fraction"];
      if (!f.is_number() || !std::isfinite(f.get<double>())) {
        ctx.fail(p, "fraction(x) needs a number, got " + describe(f));
      } else if (!(f.get<double>() > 0 && f.get<double>() <= 1)) {
        ctx.fail(p, fmt::format("fraction {} is outside (0, 1]", f.dump()));
      } else {
        y.min_quorum = quorum::of_fraction(f.get<double>());
      }
    } else if (k->is_number() && std::isfinite(k->get<double>()) &&
               std::floor(k->get<double>()) == k->get<double>()) {
      const double c = k->get<double>();
      if (c < 1) {
        ctx.fail(p, fmt::format("{} is out of range: must be at least 1", k->dump()));
      } else if (c > e.learners.count) {
        ctx.fail(p, fmt::format("{} exceeds learners.count ({})", k->dump(), e.learners.count));
      } else {
        y.min_quorum = quorum::of_count(static_cast<std::size_t>(c));
      }
    } else {
      ctx.fail(p, "expected an integer count or fraction(x), got " + describe(*k));
    }
  }
  // Unset: experiment::push_clock() picks by K (global when K < M, learner when K = M).
  if (s.has("push_clock")) y.push_clock = s.choice("push_clock", schedule_clock::global);
  {
    // grace = "off" is shorthand for grace = { mode = "off" }.
    const json* g = s.raw("grace");
    if (g != nullptr && g->is_string()) {
      y.grace.mode = s.parse_choice<grace_mode>(*g, s.path("grace"), y.grace.mode);
    } else {
      section gs = s.child("grace");
      y.grace.mode = gs.choice("mode", y.grace.mode);
      y.grace.gamma = gs.number("gamma", y.grace.gamma, closed(0, 1));
      y.grace.max_factor = gs.number("max_factor", y.grace.max_factor, at_least(0));
      y.grace.fixed_s = gs.number("fixed_seconds", 0, at_least(0));
      gs.finish();
      if (y.grace.mode == grace_mode::fixed && y.grace.fixed_s <= 0)
        ctx.fail("sync.grace.fixed_seconds",
                 "must be greater than 0 when sync.grace.mode is 'fixed'");
      if (y.grace.mode != grace_mode::fixed && y.grace.fixed_s > 0)
        ctx.fail("sync.grace.fixed_seconds", fmt::format("applies only when sync.grace.mode is "
                                                         "'fixed' (mode is '{}')",
                                                         to_string(y.grace.mode)));
    }
  }
  y.ema = s.number("ema", y.ema, open_closed(0, 1));
  y.wire = s.choice("wire", y.wire);
  y.broadcast_wire = s.choice("broadcast_wire", y.broadcast_wire);
  y.max_norm_ratio = s.number("max_norm_ratio", y.max_norm_ratio, at_least(0));
  if (y.max_norm_ratio > 0 && y.max_norm_ratio < 1)
    ctx.fail(s.path("max_norm_ratio"),
             fmt::format("{} would refuse pushes below the median norm: use 0 (off) or a "
                         "number >= 1",
                         y.max_norm_ratio));
  s.finish();
  if (y.fragments > y.interval)
    ctx.fail("sync.fragments", fmt::format("{} fragments exceed sync.interval ({}); P <= H is "
                                           "required",
                                           y.fragments, y.interval));
}

/// eval: how often the evaluator runs and on which validation windows.
void read_eval(section s, experiment& e, const read_context& ctx) {
  const bool by_steps = s.has("every_steps");
  e.eval.every_seconds = s.number("every_seconds", by_steps ? 0.0 : 10.0, at_least(0));
  e.eval.every_steps = s.integer32("every_steps", 0, at_least(0));
  e.eval.windows = s.integer("windows", e.eval.windows, closed(0, 1 << 30));
  e.eval.periodic_windows =
      s.integer("periodic_windows", e.eval.periodic_windows, closed(1, 1 << 30));
  if (s.has("batches")) {
    e.eval.batches = s.integer32("batches", 0, closed(1, 1 << 20));
    ctx.warn(s.path("batches"),
             "eval.batches scores batches x learners.batch windows, so experiments with "
             "different batches are scored on different windows; use eval.windows (the final "
             "evaluation, default 0 = the whole validation split) and eval.periodic_windows");
  }
  s.finish();
  // Both may be non-zero: the evaluator then evaluates on whichever fires first.
}

/// checkpoint: where the owners' checkpoints go (default inside run_dir) and how often.
void read_checkpoint(section s, experiment& e, const read_context& ctx) {
  e.checkpoint.dir = s.string("dir", e.run_dir + "/checkpoints");
  e.checkpoint.every_versions =
      s.integer32("every_versions", e.checkpoint.every_versions, at_least(0));
  e.checkpoint.allow_degraded = s.boolean("allow_degraded", e.checkpoint.allow_degraded);
  e.checkpoint.rebuild_wait_seconds =
      s.number("rebuild_wait_seconds", e.checkpoint.rebuild_wait_seconds, closed(0, 3600));
  e.checkpoint.max_failing_seconds =
      s.number("max_failing_seconds", e.checkpoint.max_failing_seconds, closed(0, 86400));
  s.finish();
}

/// restart: the learners' restart budget and backoff.
void read_restart(section s, experiment& e, const read_context& ctx) {
  auto& r = e.restart;
  r.max_restarts = static_cast<std::size_t>(
      s.integer32("max_restarts", static_cast<int>(r.max_restarts), closed(0, 1000000)));
  r.window_s = s.number("window_seconds", r.window_s, positive());
  r.backoff_base_s = s.number("backoff_seconds", r.backoff_base_s, at_least(0));
  r.backoff_cap_s = s.number("backoff_cap_seconds", r.backoff_cap_s, at_least(0));
  s.finish();
  if (r.backoff_cap_s < r.backoff_base_s)
    ctx.fail("restart.backoff_cap_seconds",
             fmt::format("{} is smaller than restart.backoff_seconds ({})", r.backoff_cap_s,
                         r.backoff_base_s));
}

/// Reads and resolves one experiment from its JSON snapshot.
experiment read_experiment(const json& root, const read_context& ctx,
                           const std::string& default_name, const file_policy& files) {
  experiment e;
  section top(ctx, &root, "");

  e.name = top.string("name", default_name);
  if (!valid_name(e.name)) {
    ctx.fail("name", fmt::format("'{}' is not a valid experiment name: use 1-100 letters, digits, "
                                 "'_', '-' or '.', not starting with '.'",
                                 e.name));
  }
  e.description = top.string("description", "");
  e.seed = static_cast<std::uint64_t>(top.integer("seed", 1234, at_least(0)));
  e.run_dir = top.string("run_dir", default_run_dir(e.name));

  read_model(top.child("model"), e, ctx, files);
  read_data(top.child("data"), e, ctx, files);
  check_model_against_data(e, ctx);
  read_learners(top.child("learners"), e, ctx);
  read_budget(top.child("budget"), e, ctx);
  read_inner(top.child("inner"), e, ctx);
  read_outer(top.child("outer"), e, ctx);
  read_sync(top.child("sync"), e, ctx);
  read_eval(top.child("eval"), e, ctx);
  read_checkpoint(top.child("checkpoint"), e, ctx);
  read_restart(top.child("restart"), e, ctx);
  {
    section s = top.child("chaos");
    read_chaos(s, e, ctx);
    s.finish();
  }
  top.finish();
  return e;
}

void read_chaos(section& chaos, experiment& e, const read_context& ctx) {
  if (const json* list = chaos.raw("events")) {
    if (!list->is_array()) {
      ctx.fail("chaos.events",
               "expected a list of events { at_step = ..., action = ..., target = ... }, got " +
                   describe(*list));
    } else {
      for (std::size_t i = 0; i < list->size(); ++i) {
        const json& item = (*list)[i];
        const std::string p = fmt::format("chaos.events[{}]", i + 1);
        if (!item.is_object()) {
          ctx.fail(p, "expected an event { at_step = ..., action = ..., target = ... }, got " +
                          describe(item));
          continue;
        }
        section s(ctx, &item, p);
        chaos_event ev;
        const bool st = s.has("at_step"), ti = s.has("at_time"), fr = s.has("at_fraction");
        const double at_step = static_cast<double>(s.integer("at_step", 0, at_least(0)));
        const double at_time = s.number("at_time", 0, at_least(0));
        const double at_fraction = s.number("at_fraction", 0, closed(0, 1));
        if (int(st) + int(ti) + int(fr) != 1)
          ctx.fail(p, "give exactly one of at_step, at_time or at_fraction");
        if (ti) {
          ev.trigger = chaos_trigger::at_time;
          ev.at = at_time;
        } else if (fr) {
          ev.trigger = chaos_trigger::at_fraction;
          ev.at = at_fraction;
        } else {
          ev.trigger = chaos_trigger::at_step;
          ev.at = at_step;
        }
        if (const json* a = s.raw("action"); a != nullptr && a->is_string()) {
          std::string warning;
          if (auto k = dsl_fault_kind(a->get<std::string>(), &warning)) {
            ev.action = *k;
            if (!warning.empty()) ctx.warn(p + ".action", warning);
          } else {
            const auto names = dsl_fault_names();
            ctx.fail(p + ".action", fmt::format("unknown value '{}'; expected one of {}{}",
                                                a->get<std::string>(), fmt::join(names, ", "),
                                                util::did_you_mean(a->get<std::string>(), names)));
          }
        } else if (a != nullptr) {
          ctx.fail(p + ".action", fmt::format("expected one of {}, got {}",
                                              fmt::join(dsl_fault_names(), ", "), describe(*a)));
        } else {
          ctx.fail(p + ".action", fmt::format("required key is missing: one of {}",
                                              fmt::join(dsl_fault_names(), ", ")));
        }
        ev.where = ctx.where(p + ".action");  // the event's own line
        const fault_layer layer = fault_layer_of(ev.action);
        const bool outside = layer != fault_layer::in_process;
        const bool bcast = is_broadcast_fault(ev.action);
        const std::string act = dsl_name(ev.action);
        const bool has_target = s.has("target");
        if (const json* t = s.raw("target"); t != nullptr && t->is_string() && outside) {
          // A dd-chaos target: learner:N, owner:N, node:NAME, learners, nodes, link names.
          ev.target_spec = t->get<std::string>();
          if (ev.target_spec.empty()) ctx.fail(p + ".target", "must not be empty");
          // Targets and node names are [A-Za-z0-9._-] joined by ':' and ','. Any other byte is
          // refused here, naming it (one that is not UTF-8 would otherwise escape as an exception
          // from the experiment's JSON).
          for (std::size_t at = 0; at < ev.target_spec.size(); ++at) {
            const auto c = static_cast<unsigned char>(ev.target_spec[at]);
            if (std::isalnum(c) == 0 && c != ':' && c != ',' && c != '.' && c != '_' && c != '-') {
              ctx.fail(p + ".target",
                       fmt::format("byte {} (0x{:02X}) at {} is not allowed in a dd-chaos target "
                                   "(letters, digits, '.', '_', '-', ':' and ',')",
                                   c >= 0x20 && c < 0x7F ? fmt::format("'{}'", static_cast<char>(c))
                                                         : std::string("?"),
                                   c, at));
              ev.target_spec.clear();
              break;
            }
          }
          std::size_t from = 0;
          while (from <= ev.target_spec.size()) {
            const std::size_t comma =
                std::min(ev.target_spec.find(',', from), ev.target_spec.size());
            const std::string part = ev.target_spec.substr(from, comma - from);
            from = comma + 1;
            for (const auto& [prefix, limit, what] :
                 {std::tuple<std::string, int, std::string>{"learner:", e.learners.count,
                                                            "learners.count"},
                  {"owner:", e.sync.fragments, "sync.fragments"}}) {
              if (part.rfind(prefix, 0) != 0) continue;
              const std::string n = part.substr(prefix.size());
              const bool digits =
                  !n.empty() && n.size() < 7 &&
                  std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
              if (!digits || std::stoi(n) >= limit)
                ctx.fail(p + ".target",
                         fmt::format("'{}' does not exist ({} is {}; ids start at 0)", part, what,
                                     limit));
            }
            if (comma >= ev.target_spec.size()) break;
          }
        } else {
          ev.target = s.integer32("target", 0, at_least(0));
        }
        if (!has_target)
          ctx.fail(p + ".target",
                   outside ? "required key is missing: a learner id, or a dd-chaos "
                             "target such as \"learner:1\", \"node:syncer\", \"learners\""
                           : "required key is missing: a learner id (or a "
                             "fragment id for kill_owner), from 0");
        const bool has_factor = s.has("factor");
        // slow_learner: a step-time multiplier (>= 1); scale_push: what every pushed value is
        // multiplied by (any finite value but 0).
        const bool scales = ev.action == fault_kind::scale_push;
        ev.factor = scales ? s.number("factor", 1000.0, range{})
                           : s.number("factor", ev.action == fault_kind::slow_learner ? 2.0 : 1.0,
                                      at_least(1));
        if (scales && !(std::isfinite(ev.factor) && ev.factor != 0))
          ctx.fail(p + ".factor", "scale_push needs a finite factor other than 0");
        const bool has_delay = s.has("delay");
        const bool delays =
            ev.action == fault_kind::delay_push || ev.action == fault_kind::delay_broadcast;
        ev.delay = s.number("delay", delays ? 1.0 : 0.0, at_least(0));
        ev.duration = s.number("duration", 0, at_least(0));
        const bool has_damage = s.has("damage_checkpoint");
        ev.damage_checkpoint = s.boolean("damage_checkpoint", false);
        // Knobs, each for the kinds that take it.
        struct knob {
          const char* key;
          bool integer;
          range r;
          std::vector<fault_kind> only;
        };
        std::vector<fault_kind> message;
        for (int k = 0; k <= static_cast<int>(fault_kind::disk_full); ++k)
          if (starts_live_window(static_cast<fault_kind>(k)))
            message.push_back(static_cast<fault_kind>(k));
        const std::vector<fault_kind> network = {fault_kind::latency,   fault_kind::bandwidth,
                                                 fault_kind::reset,     fault_kind::blackhole,
                                                 fault_kind::partition, fault_kind::corrupt,
                                                 fault_kind::slice,     fault_kind::close_after};
        std::vector<fault_kind> counted = message;
        counted.push_back(fault_kind::disk_corrupt);
        const knob knobs[] = {
            {"count", true, at_least(1), counted},
            {"seed", true, at_least(0), {fault_kind::disk_corrupt, fault_kind::random_push}},
            {"ms", false, at_least(0), {fault_kind::latency}},
            {"jitter", false, at_least(0), {fault_kind::latency}},
            {"rate", false, positive(), {fault_kind::bandwidth}},
            {"p", false, range{0, 1, true, false}, {fault_kind::corrupt}},
            {"size", true, at_least(1), {fault_kind::slice}},
            {"delay_us", true, at_least(0), {fault_kind::slice}},
            {"bytes", true, at_least(0), {fault_kind::close_after}},
            {"duty", false, range{0, 1, true, true}, {fault_kind::slow}},
            {"period", false, positive(), {fault_kind::slow}},
        };
        for (const auto& k : knobs) {
          if (!s.has(k.key)) continue;
          const double v =
              k.integer ? static_cast<double>(s.integer(k.key, 0, k.r)) : s.number(k.key, 0, k.r);
          if (std::find(k.only.begin(), k.only.end(), ev.action) == k.only.end()) {
            std::string names;
            for (auto a : k.only)
              names += (names.empty() ? "'" : ", '") + std::string(dsl_name(a)) + "'";
            ctx.fail(p + "." + k.key,
                     fmt::format("applies only to action {} (action is '{}')", names, act));
            continue;
          }
          ev.params[k.key] = k.integer ? json(static_cast<std::int64_t>(v)) : json(v);
        }
        if (s.has("dir")) {
          const std::string d = s.string("dir", "both");
          if (std::find(network.begin(), network.end(), ev.action) == network.end())
            ctx.fail(p + ".dir",
                     fmt::format("applies only to network actions (action is '{}')", act));
          else if (d != "up" && d != "down" && d != "both")
            ctx.fail(p + ".dir",
                     fmt::format("unknown value '{}'; expected one of up, down, both", d));
          else
            ev.params["dir"] = d;
        }
        s.finish();
        if (ev.action == fault_kind::latency && !ev.params.contains("ms"))
          ctx.fail(p + ".action",
                   "action 'latency' needs ms = the milliseconds added to each chunk");
        if (ev.action == fault_kind::bandwidth && !ev.params.contains("rate"))
          ctx.fail(p + ".action", "action 'bandwidth' needs rate = bytes per second");
        if (ev.action == fault_kind::corrupt && !ev.params.contains("p"))
          ctx.fail(p + ".action",
                   "action 'corrupt' needs p = the probability each byte is altered");
        if (ev.action == fault_kind::close_after && !ev.params.contains("bytes"))
          ctx.fail(p + ".action", "action 'close_after' needs bytes = the bytes before the close");
        if (layer == fault_layer::disk) {
          // dd-chaos disk: a checkpoint is an owner's (owner:N); a full disk is a node's run
          // directory (node:NAME).
          const bool full = ev.action == fault_kind::disk_full;
          const std::string want = full ? "node:" : "owner:";
          if (has_target &&
              (ev.target_spec.rfind(want, 0) != 0 || ev.target_spec.find(',') != std::string::npos))
            ctx.fail(p + ".target",
                     fmt::format("action '{}' needs one target \"{}\" (got {})", act,
                                 full ? "node:NAME" : "owner:N",
                                 ev.target_spec.empty() ? describe(*s.raw("target"))
                                                        : "'" + ev.target_spec + "'"));
          if (!full && ev.duration > 0)
            ctx.fail(p + ".duration",
                     fmt::format("does not apply to action '{}' (a damaged checkpoint is not "
                                 "restored; the owner's next checkpoint replaces it)",
                                 act));
        }
        if (has_damage && ev.action != fault_kind::kill_owner && ev.damage_checkpoint)
          ctx.fail(p + ".damage_checkpoint",
                   fmt::format("applies only to action 'kill_owner' (action is '{}')", act));
        if (has_factor && ev.action != fault_kind::slow_learner && !scales && ev.factor != 1.0)
          ctx.fail(p + ".factor",
                   fmt::format("applies only to actions 'slow_learner', 'scale_push' (action is "
                               "'{}')",
                               act));
        if (has_delay && !delays && ev.delay != 0.0)
          ctx.fail(p + ".delay",
                   fmt::format("applies only to actions 'delay_push', 'delay_broadcast' "
                               "(action is '{}')",
                               act));
        if (delays && !(ev.delay > 0))
          ctx.fail(p + ".delay", fmt::format("must be greater than 0 for action '{}'", act));
        if (outside && st)
          ctx.fail(p + ".at_step",
                   fmt::format("action '{}' is fired by dd-chaos from outside the nodes, "
                               "which does not see learner steps: give at_time (or "
                               "at_fraction of a seconds budget)",
                               act));
        if ((outside || bcast) && fr && e.budget.kind != budget_kind::seconds)
          ctx.fail(p + ".at_fraction",
                   fmt::format("action '{}' is keyed on time: at_fraction needs a "
                               "seconds budget (this budget counts {}); give at_time",
                               act, to_string(e.budget.kind)));
        if (bcast && st)
          ctx.fail(p + ".at_step",
                   fmt::format("action '{}' acts in the syncer node, which does not "
                               "see learner steps: give at_time",
                               act));
        if (has_target && ev.target_spec.empty() && ev.action == fault_kind::kill_owner &&
            ev.target >= e.sync.fragments)
          ctx.fail(p + ".target", fmt::format("fragment {} does not exist (sync.fragments is {}; "
                                              "ids start at 0)",
                                              ev.target, e.sync.fragments));
        if (has_target && ev.target_spec.empty() && ev.action != fault_kind::kill_owner &&
            ev.target >= e.learners.count)
          ctx.fail(p + ".target",
                   fmt::format("learner {} does not exist (learners.count is {}; ids "
                               "start at 0)",
                               ev.target, e.learners.count));
        if (st && e.budget.kind == budget_kind::steps &&
            at_step > static_cast<double>(e.budget.steps))
          ctx.fail(p + ".at_step", fmt::format("step {} is after the end of the budget ({} steps)",
                                               static_cast<std::int64_t>(at_step), e.budget.steps));
        if (ti && e.budget.kind == budget_kind::seconds && at_time > e.budget.seconds)
          ctx.fail(p + ".at_time", fmt::format("{} s is after the end of the budget ({} s)",
                                               num(at_time), num(e.budget.seconds)));
        e.chaos.events.push_back(ev);
      }
    }
  }
  section r = chaos.child("random");
  auto& rf = e.chaos.random;
  rf.mtbf_seconds = r.number("mtbf_seconds", 0, at_least(0));
  rf.target = r.choice("target", rf.target);
  {
    section rec = r.child("recovery");
    rf.recovery.dist = rec.choice("dist", rf.recovery.dist);
    rf.recovery.mean = rec.number("mean", rf.recovery.mean, positive());
    rf.recovery.sigma = rec.number("sigma", rf.recovery.sigma, positive());
    rf.recovery.shape = rec.number("shape", rf.recovery.shape, positive());
    rec.finish();
  }
  rf.seed =
      static_cast<std::uint64_t>(r.integer("seed", static_cast<std::int64_t>(e.seed), at_least(0)));
  rf.where = ctx.where("chaos.random");
  rf.cluster_mtbf_seconds = r.number("cluster_mtbf_seconds", 0, at_least(0));
  const bool cluster = rf.cluster_mtbf_seconds > 0;
  for (const char* key : {"min_gap_seconds", "max_concurrent", "kinds", "horizon_seconds"})
    if (r.has(key) && !cluster)
      ctx.fail(r.path(key), "applies only with chaos.random.cluster_mtbf_seconds > 0");
  rf.min_gap_seconds = r.number("min_gap_seconds", 0, at_least(0));
  rf.max_concurrent = r.integer32("max_concurrent", 1, at_least(1));
  rf.horizon_seconds = r.number("horizon_seconds", 0, at_least(0));
  if (const json* v = r.raw("kinds")) {
    if (!v->is_array()) {
      ctx.fail(
          r.path("kinds"),
          "expected a list of actions such as {\"kill_process\", \"pause\"}, got " + describe(*v));
    } else {
      for (std::size_t i = 0; i < v->size(); ++i) {
        const std::string kp = fmt::format("{}[{}]", r.path("kinds"), i + 1);
        const json& x = (*v)[i];
        std::string warning;
        const auto a =
            x.is_string() ? dsl_fault_kind(x.get<std::string>(), &warning) : std::nullopt;
        if (!a || fault_layer_of(*a) == fault_layer::in_process ||
            fault_layer_of(*a) == fault_layer::disk || *a == fault_kind::restart) {
          ctx.fail(kp, fmt::format("{} is not a process or network action with a recovery time "
                                   "(kill_process, term, pause, slow_process, latency, bandwidth, "
                                   "reset, blackhole, partition, corrupt, slice, close_after)",
                                   x.is_string() ? "'" + x.get<std::string>() + "'" : describe(x)));
          continue;
        }
        rf.kinds.push_back(*a);
      }
    }
  }
  if (cluster && rf.kinds.empty()) rf.kinds = {fault_kind::kill};
  r.finish();
}

// ---- overrides ----

struct parsed_override {
  std::string path;
  json value;
  std::string label;
};

/// When a load that starts now must be done (load_options::script_timeout).
std::chrono::steady_clock::time_point deadline_for(const load_options& options) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(options.script_timeout));
}

std::optional<parsed_override> parse_override(const std::string& text, const load_options& options,
                                              std::chrono::steady_clock::time_point deadline,
                                              std::vector<config_error>& errors) {
  const std::string label = "--set " + text;
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    errors.push_back({label, 0, "", "expected key.path=value, e.g. --set sync.min_quorum=2"});
    return std::nullopt;
  }
  parsed_override o;
  o.path = text.substr(0, eq);
  o.label = label;
  for (const auto& part : detail::split_path(o.path)) {
    const bool ok = !part.key.empty() && std::all_of(part.key.begin(), part.key.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
    });
    if (!ok) {
      errors.push_back(
          {label, 0, o.path, "a key path is names joined by '.', e.g. sync.grace.mode"});
      return std::nullopt;
    }
  }
  const std::string value = text.substr(eq + 1);
  const detail::sandbox_limits limits{options.memory_limit, options.instruction_limit,
                                      options.script_timeout, deadline,
                                      options.evaluate_in_process};
  std::string problem;
  // A number that does not fit a double (1e309), or nan/inf, is named as what it is rather
  // than passed on as a string the reader then calls "expected a number, got string".
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(value.c_str(), &end);
  const bool numeric = !value.empty() && end == value.c_str() + value.size();
  if (numeric && (!std::isfinite(d) || errno == ERANGE) && std::fpclassify(d) != FP_ZERO &&
      std::fpclassify(d) != FP_SUBNORMAL)
    problem = "is not a finite number";
  if (problem.empty()) {
    if (auto v = detail::eval_expression(value, limits, &problem)) {
      o.value = std::move(*v);
      return o;
    }
  }
  if (!problem.empty()) {
    errors.push_back({label, 0, o.path, "'" + value + "' " + problem});
    return std::nullopt;
  }
  o.value = value;  // not a Lua expression: a plain string
  return o;
}

/// Sets o.path in `root`; false (with an error) when a parent is not a table.
bool apply_override(json& root, const parsed_override& o, std::vector<config_error>& errors) {
  const auto parts = detail::split_path(o.path);
  json* cur = &root;
  std::string at;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (cur->is_null() || (cur->is_array() && cur->empty())) *cur = json::object();
    if (!cur->is_object()) {
      errors.push_back({o.label, 0, o.path,
                        fmt::format("cannot set it: '{}' is {}, not a table", at, describe(*cur))});
      return false;
    }
    at = join(at, parts[i].key);
    cur = &(*cur)[parts[i].key];
  }
  *cur = o.value;
  return true;
}

/// The shared tail of every load: selection by name, overrides, validation.
struct snapshot {
  json value;
  int line = 0;
  std::vector<std::pair<std::string, std::string>> problems;
};

/// The name an experiment is selected by (--name): a `name=...` override, else the name
/// written in the file, else its default (stem, or stem-N when the file defines several).
std::string selection_name(const snapshot& snap, const std::vector<parsed_override>& overrides,
                           const std::string& default_name) {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
    if (it->path == "name") return it->value.is_string() ? it->value.get<std::string>() : "";
  if (snap.value.is_object()) {
    const auto n = snap.value.find("name");
    if (n != snap.value.end()) return n->is_string() ? n->get<std::string>() : "";
  }
  return default_name;
}

load_result resolve_all(std::chrono::steady_clock::time_point deadline, std::vector<snapshot> snaps,
                        const std::string& file, const std::string& stem,
                        const detail::source_index* source, const file_policy& files,
                        const load_options& options) {
  load_result result;
  std::vector<parsed_override> overrides;
  for (const auto& text : options.overrides)
    if (auto o = parse_override(text, options, deadline, result.errors))
      overrides.push_back(std::move(*o));
  if (!options.run_dir.empty())
    overrides.push_back({"run_dir", json(options.run_dir), "--run-dir " + options.run_dir});
  if (!result.errors.empty()) return result;

  auto default_name = [&](std::size_t i) {
    return snaps.size() == 1 ? stem : fmt::format("{}-{}", stem, i + 1);
  };
  // --name selects first: only the selected experiments get the overrides and are validated, so
  // an override that does not fit an unselected experiment cannot refuse the run.
  std::vector<bool> selected(snaps.size(), options.names.empty());
  std::vector<std::size_t> order;  // output order: file order, or the order of --name
  if (options.names.empty()) {
    for (std::size_t i = 0; i < snaps.size(); ++i) order.push_back(i);
  } else {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < snaps.size(); ++i)
      names.push_back(selection_name(snaps[i], overrides, default_name(i)));
    for (const auto& want : options.names) {
      bool found = false;
      for (std::size_t i = 0; i < snaps.size(); ++i) {
        if (names[i] != want) continue;
        found = true;
        if (!selected[i]) order.push_back(i);
        selected[i] = true;
      }
      if (!found) {
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        result.errors.push_back({file, 0, "",
                                 fmt::format("no experiment named '{}'{}; the file "
                                             "defines: {}",
                                             want, util::did_you_mean(want, names), list)});
      }
    }
    if (!result.errors.empty()) return result;
  }

  std::vector<int> call_lines;
  call_lines.reserve(snaps.size());
  for (const auto& s : snaps) call_lines.push_back(s.line);
  std::sort(call_lines.begin(), call_lines.end());

  std::map<std::size_t, experiment> read;   // snapshot index -> experiment
  std::map<std::string, std::string> seen;  // name -> where
  // Each problem once (a non-finite number is seen both when the table is snapshotted and when
  // its key is read), at most max_errors_shown in all, the rest counted: linear in the errors.
  std::set<std::tuple<std::string, int, std::string, std::string>> reported;
  auto report = [&](config_error&& err) {
    if (!reported.emplace(err.file, err.line, err.key_path, err.message).second) return;
    if (result.errors.size() >= max_errors_shown)
      ++result.more_errors;
    else
      result.errors.push_back(std::move(err));
  };
  for (std::size_t i = 0; i < snaps.size(); ++i) {
    if (!selected[i]) continue;
    // Resolving is inside the script's wall-clock limit too.
    if (std::chrono::steady_clock::now() > deadline) {
      result.errors.push_back(
          {file, 0, "",
           fmt::format("resolving its {} experiments {} ({} resolved)", snaps.size(),
                       detail::timeout_message(options.script_timeout), i)});
      return result;
    }
    auto& snap = snaps[i];
    origin_finder origin;
    origin.file = file;
    origin.call_line = snap.line;
    origin.source = source;
    const auto next = std::upper_bound(call_lines.begin(), call_lines.end(), snap.line);
    origin.window_end = next == call_lines.end() ? std::numeric_limits<int>::max() : *next;
    std::vector<config_error> errors;
    std::size_t more = 0;
    read_context ctx{&origin, &errors, nullptr, &more};
    ctx.warnings = &result.warnings;
    for (const auto& [path, why] : snap.problems) ctx.fail(path, why);
    if (!snap.value.is_object()) {
      errors.push_back({file, snap.line, "",
                        "an experiment is a table of named keys: experiment { "
                        "data = { file = \"...\" }, ... }"});
      for (auto& err : errors) report(std::move(err));
      result.more_errors += more;
      continue;
    }
    for (const auto& o : overrides)
      if (apply_override(snap.value, o, errors)) origin.overrides.push_back({o.path, o.label});
    experiment e = read_experiment(snap.value, ctx, default_name(i), files);
    e.source = snap.line > 0 ? fmt::format("{}:{}", file, snap.line) : file;
    if (errors.empty()) {
      const auto [it, fresh] = seen.emplace(e.name, e.source);
      if (!fresh)
        errors.push_back(origin.make("name", fmt::format("duplicate experiment name '{}' (first "
                                                         "defined at {})",
                                                         e.name, it->second)));
    }
    for (auto& err : errors) report(std::move(err));
    result.more_errors += more;
    read.emplace(i, std::move(e));
  }
  if (!result.errors.empty()) return result;
  for (const std::size_t i : order) result.experiments.push_back(std::move(read.at(i)));
  return result;
}

file_policy policy_for(const std::string& display_name, const load_options& options) {
  namespace fs = std::filesystem;
  file_policy p;
  p.check = options.check_files;
  std::error_code ec;
  const fs::path parent = fs::path(display_name).parent_path();
  if (!display_name.empty() && fs::is_directory(parent.empty() ? fs::path(".") : parent, ec))
    p.dirs.push_back(parent.empty() ? fs::path(".") : parent);
  p.dirs.push_back(fs::current_path(ec));
  for (const auto& d : options.search_dirs) p.dirs.emplace_back(d);
  return p;
}

}  // namespace

load_result load_string(std::string_view script, const std::string& display_name,
                        const load_options& options) {
  load_result result;
  if (!(options.script_timeout > 0.0) || !std::isfinite(options.script_timeout)) {
    result.errors.push_back(
        {"--script-timeout", 0, "",
         fmt::format("{:g} is not a positive number of seconds", options.script_timeout)});
    return result;
  }
  const auto deadline = deadline_for(options);
  const detail::sandbox_limits limits{options.memory_limit, options.instruction_limit,
                                      options.script_timeout, deadline,
                                      options.evaluate_in_process};
  detail::script_outcome out = detail::run_script(script, limits);
  if (out.failed) {
    result.errors.push_back({display_name, out.line, "", out.message});
    return result;
  }
  if (out.experiments.empty()) {
    result.errors.push_back({display_name, 0, "",
                             "the file defines no experiment: call experiment { data = { file = "
                             "\"...\" }, ... }"});
    return result;
  }
  std::vector<snapshot> snaps;
  for (auto& raw : out.experiments)
    snaps.push_back({std::move(raw.value), raw.line, std::move(raw.problems)});
  const detail::source_index source(script);
  std::string stem = std::filesystem::path(display_name).stem().string();
  if (!valid_name(stem)) stem = "experiment";
  return resolve_all(deadline, std::move(snaps), display_name, stem, &source,
                     policy_for(display_name, options), options);
}

load_result load_file(const std::string& path, const load_options& options) {
  {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      load_result r;
      r.errors.push_back({path, 0, "", "is a directory, not an experiment file"});
      return r;
    }
  }
  // A FIFO or a device is refused without opening it for a blocking read; otherwise errno's
  // own words (a read-only or missing file system is not "No such file or directory").
  if (const std::string kind = util::special_file_kind(path); !kind.empty()) {
    load_result r;
    r.errors.push_back({path, 0, "", "is " + kind + ", not an experiment file (a regular file)"});
    return r;
  }
  std::string text;
  if (auto st = util::read_file(path, text, size_t{64} << 20); !st) {
    load_result r;
    r.errors.push_back({path, 0, "",
                        st.error == EFBIG
                            ? "is larger than 64 MiB, too large for an experiment file"
                            : "cannot open the experiment file: " + util::errno_text(st.error)});
    return r;
  }
  return load_string(text, path, options);
}

load_result load_json(const json& value, const load_options& options) {
  std::vector<snapshot> snaps;
  if (value.is_array()) {
    for (const auto& v : value) snaps.push_back({v, 0, {}});
  } else {
    snaps.push_back({value, 0, {}});
  }
  file_policy files;
  files.check = options.check_files;
  std::error_code ec;
  files.dirs.push_back(std::filesystem::current_path(ec));
  for (const auto& d : options.search_dirs) files.dirs.emplace_back(d);
  return resolve_all(deadline_for(options), std::move(snaps), "<json>", "experiment", nullptr,
                     files, options);
}

const std::vector<std::string>& known_key_paths() {
  static const std::vector<std::string> paths = [] {
    // Run the reader once over a minimal experiment and record every key it asks about.
    const json sample = {
        {"data", {{"file", "x"}}},
        {"chaos",
         {{"events", json::array({{{"at_step", 1}, {"action", "kill"}, {"target", 0}}})}}}};
    origin_finder origin;
    std::vector<config_error> errors;
    std::vector<std::string> asked;
    read_context ctx{&origin, &errors, &asked};
    file_policy files;
    files.check = false;
    read_experiment(sample, ctx, "sample", files);
    std::vector<std::string> out;
    for (auto p : asked) {
      const std::size_t b = p.find('[');
      if (b != std::string::npos) p = p.substr(0, b) + "[]" + p.substr(p.find(']') + 1);
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
    return out;
  }();
  return paths;
}

}  // namespace dd::config

namespace dd::config {

bool parse_script_timeout(const std::string& text, double& seconds, std::string& error) {
  double v = 0.0;
  if (!util::parse_number(text, v) || !(v > 0.0) || v > 86400.0) {
    error =
        "--script-timeout: expected seconds, a number > 0 and at most 86400, got '" + text + "'";
    return false;
  }
  seconds = v;
  return true;
}

}  // namespace dd::config
