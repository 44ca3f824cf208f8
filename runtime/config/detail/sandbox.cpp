// runtime/config/detail/sandbox.cpp — the sandboxed Lua interpreter behind the config DSL.
//
// Safety rules for this file: Lua reports errors with longjmp, so no function that Lua calls
// (experiment, fraction, load, print, the strict-globals metamethod, the hook) may raise a Lua
// error while a C++ object with a destructor is alive in its frame, and no C++ exception may leave
// one. C++ work happens in noexcept helpers that return a status; errors are raised after them.
#include "runtime/config/detail/sandbox.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include <lua.hpp>

#include <fmt/format.h>

#include "util/child.hpp"
#include "util/suggest.hpp"

namespace dd::config::detail {

namespace {

/// Name of the main chunk; Lua prefixes its errors with "experiment:LINE:".
constexpr const char* k_chunk_name = "=experiment";
constexpr const char* k_chunk_prefix = "experiment:";
/// The count hook fires every this many VM instructions.
constexpr int k_hook_every = 1000;
/// Deepest table nesting an experiment may use (deeper is taken for a cycle).
constexpr int k_max_depth = 16;
/// Most values one experiment table may hold.
constexpr std::size_t k_max_values = 100000;
/// Most experiments one file may define (a sweep of thousands is plenty; 300,000 take the parent
/// about 92 s and 4.6 GB to resolve).
constexpr std::size_t k_max_experiments = 10000;
/// Bytes of print output one evaluation may write; the rest is counted and dropped (a loop once
/// wrote 25 GB to stderr in 10 s, and a file that printed 100 MB put it into the syncer's log).
constexpr std::size_t k_print_cap = std::size_t{1} << 20;

/// Names the sandbox removes, with the reason given when a script reaches for them.
constexpr const char* k_forbidden[] = {"io",         "os",     "package",  "debug",
                                       "require",    "dofile", "loadfile", "collectgarbage",
                                       "loadstring", "module", "setfenv"};

/// Trusted helpers defined in Lua before the script runs.
constexpr const char* k_prelude = R"lua(
local function copy(v)
  if type(v) ~= "table" then return v end
  local t = {}
  for k, x in pairs(v) do t[k] = copy(x) end
  return t
end
-- extend(base, changes): a deep copy of base with changes merged in (named tables merge key by
-- key; lists and other values replace). Handy for sweeps.
function extend(base, changes)
  local out = copy(base or {})
  for k, v in pairs(changes or {}) do
    if type(v) == "table" and type(out[k]) == "table" and #v == 0 and next(v) ~= nil
       and v.fraction == nil then
      out[k] = extend(out[k], v)
    else
      out[k] = copy(v)
    end
  end
  return out
end
math.randomseed(0)
)lua";

/// Per-interpreter bookkeeping, reachable from Lua callbacks through the state's extra space.
struct sandbox_state {
  std::size_t used = 0;
  std::size_t memory_limit = 0;
  std::uint64_t instructions = 0;
  std::uint64_t instruction_limit = 0;
  bool over_instructions = false;
  int last_line = 0;
  volatile int* line_sink = nullptr;  // shared with the parent process (see run_script)
  /// In-process runs only (sandbox_limits::in_process): the hook stops Lua code past this
  /// wall-clock deadline; `wall_seconds` is named in the error. Unset in the child (its parent
  /// kills it at the deadline, whatever it is doing).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  double wall_seconds = 0.0;
  std::size_t captured_bytes = 0;  // C++-side size of the snapshots, capped at memory_limit
  std::vector<raw_experiment> experiments;
  std::size_t printed = 0;        // bytes of print output written (<= k_print_cap)
  std::size_t print_dropped = 0;  // bytes of print output past the cap
  std::size_t print_dropped_lines = 0;
};

sandbox_state* state_of(lua_State* L) {
  return *static_cast<sandbox_state**>(lua_getextraspace(L));
}

void* limited_alloc(void* ud, void* ptr, std::size_t osize, std::size_t nsize) {
  auto* s = static_cast<sandbox_state*>(ud);
  const std::size_t old = ptr != nullptr ? osize : 0;
  if (nsize == 0) {
    std::free(ptr);
    s->used -= old;
    return nullptr;
  }
  if (nsize > old && s->used - old + nsize > s->memory_limit) return nullptr;
  void* p = std::realloc(ptr, nsize);
  if (p != nullptr) s->used = s->used - old + nsize;
  return p;
}

void limits_hook(lua_State* L, lua_Debug* ar) {
  sandbox_state* s = state_of(L);
  if (s->deadline && std::chrono::steady_clock::now() > *s->deadline) {
    // In-process only: seen between Lua instructions and lines, never inside a library call
    // or a finalizer (Lua runs those without hooks). Stop at every instruction from now on.
    lua_sethook(L, limits_hook, LUA_MASKCOUNT | LUA_MASKLINE, 1);
    lua_pushfstring(L, "%s%d: the script %s", k_chunk_prefix, s->last_line,
                    timeout_message(s->wall_seconds).c_str());
    lua_error(L);
  }
  if (ar->event == LUA_HOOKLINE) {
    if (lua_getinfo(L, "S", ar) != 0 && std::strcmp(ar->source, k_chunk_name) == 0) {
      s->last_line = ar->currentline;
      if (s->line_sink != nullptr) *s->line_sink = ar->currentline;
    }
    return;
  }
  if (ar->event != LUA_HOOKCOUNT) return;
  s->instructions += s->over_instructions ? 1 : k_hook_every;
  if (s->instructions <= s->instruction_limit) return;
  if (!s->over_instructions) {
    // From now on stop at every instruction, so a script cannot pcall its way past the limit.
    s->over_instructions = true;
    lua_sethook(L, limits_hook, LUA_MASKCOUNT | LUA_MASKLINE, 1);
  }
  lua_pushfstring(L,
                  "%s%d: the script ran past its limit of %I Lua instructions (an endless loop?)",
                  k_chunk_prefix, s->last_line, static_cast<lua_Integer>(s->instruction_limit));
  lua_error(L);
}

// ---- Lua table -> JSON (noexcept helpers; no Lua errors raised) ----

struct converter {
  lua_State* L;
  std::vector<std::pair<std::string, std::string>>* problems;
  std::size_t* bytes;       // running total of snapshot sizes (approximate)
  std::size_t bytes_limit;  // refuse past this
  std::size_t values = 0;
  bool over = false;

  /// Counts `n` bytes against the caps; false (reported once) when they are exceeded.
  bool charge(std::size_t n, const std::string& path) {
    *bytes += n;
    if (*bytes <= bytes_limit && values <= k_max_values) return true;
    if (!over)
      problems->emplace_back(path, "the experiments hold too much data (at most " +
                                       std::to_string(k_max_values) + " values and " +
                                       std::to_string(bytes_limit >> 20) + " MiB)");
    over = true;
    return false;
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  nlohmann::json convert(int idx, const std::string& path, int depth) {
    using nlohmann::json;
    idx = lua_absindex(L, idx);
    ++values;
    if (!charge(16, path)) return json();
    switch (lua_type(L, idx)) {
      case LUA_TBOOLEAN: return json(lua_toboolean(L, idx) != 0);
      case LUA_TNUMBER: {
        if (lua_isinteger(L, idx) != 0)
          return json(static_cast<std::int64_t>(lua_tointeger(L, idx)));
        const double v = lua_tonumber(L, idx);
        if (!std::isfinite(v)) problems->emplace_back(path, "is not a finite number");
        return json(v);
      }
      case LUA_TSTRING: {
        std::size_t n = 0;
        const char* s = lua_tolstring(L, idx, &n);
        if (!charge(n, path)) return json();
        return json(std::string(s, n));
      }
      case LUA_TTABLE: return convert_table(idx, path, depth);
      default:
        problems->emplace_back(path, std::string("a ") + lua_typename(L, lua_type(L, idx)) +
                                         " is not a configuration value");
        return json();
    }
  }

  nlohmann::json convert_table(int idx, const std::string& path, int depth) {
    using nlohmann::json;
    if (depth >= k_max_depth || lua_checkstack(L, 4) == 0) {
      problems->emplace_back(path, "tables are nested too deeply (a table that contains itself?)");
      return json();
    }
    std::map<std::string, json> named;
    std::map<lua_Integer, json> listed;
    bool bad_key = false;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
      // key at -2, value at -1; never convert the key in place (it would confuse lua_next).
      if (lua_type(L, -2) == LUA_TSTRING) {
        std::size_t n = 0;
        const char* k = lua_tolstring(L, -2, &n);
        std::string key(k, n);
        named[key] = convert(-1, join(path, key), depth + 1);
      } else if (lua_type(L, -2) == LUA_TNUMBER && lua_isinteger(L, -2) != 0 &&
                 lua_tointeger(L, -2) >= 1) {
        const lua_Integer i = lua_tointeger(L, -2);
        listed[i] = convert(-1, path + "[" + std::to_string(i) + "]", depth + 1);
      } else {
        bad_key = true;
      }
      lua_pop(L, 1);
    }
    if (bad_key) {
      problems->emplace_back(path, "keys must be names or list positions 1, 2, 3, ...");
      return json();
    }
    if (!named.empty() && !listed.empty()) {
      problems->emplace_back(path, "mixes list items and named keys in one table");
      return json();
    }
    if (!listed.empty()) {
      if (listed.rbegin()->first != static_cast<lua_Integer>(listed.size())) {
        problems->emplace_back(path, "list has holes (a nil item?)");
        return json();
      }
      json arr = json::array();
      for (auto& [i, v] : listed) arr.push_back(std::move(v));
      return arr;
    }
    if (named.empty()) return json::array();  // {}: an empty list, or an empty section
    json obj = json::object();
    for (auto& [k, v] : named) obj[k] = std::move(v);
    return obj;
  }
};

/// Snapshots the table at stack index 1 as one experiment. False when memory ran out.
bool capture(lua_State* L, int line) noexcept {
  try {
    raw_experiment raw;
    raw.line = line;
    sandbox_state* s = state_of(L);
    converter c{L, &raw.problems, &s->captured_bytes, s->memory_limit};
    raw.value = c.convert(1, "", 0);
    state_of(L)->experiments.push_back(std::move(raw));
    return true;
  } catch (...) {
    return false;
  }
}

/// Line of the nearest caller frame that runs in the main chunk (0 if none).
int caller_line(lua_State* L) {
  lua_Debug ar;
  for (int level = 1; level < 64 && lua_getstack(L, level, &ar) != 0; ++level)
    if (lua_getinfo(L, "Sl", &ar) != 0 && std::strcmp(ar.source, k_chunk_name) == 0)
      return ar.currentline;
  return 0;
}

int l_experiment(lua_State* L) {
  if (lua_gettop(L) != 1 || lua_type(L, 1) != LUA_TTABLE)
    return luaL_error(
        L, "experiment expects one table: experiment { data = { file = \"...\" }, ... }");
  if (state_of(L)->experiments.size() >= k_max_experiments)
    return luaL_error(L, "more than %d experiments in one file (split the sweep into files)",
                      static_cast<int>(k_max_experiments));
  if (!capture(L, caller_line(L))) return luaL_error(L, "out of memory recording the experiment");
  return 0;
}

int l_fraction(lua_State* L) {
  const lua_Number x = luaL_checknumber(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushnumber(L, x);
  lua_setfield(L, -2, "fraction");
  return 1;
}

int l_load(lua_State* L) {
  std::size_t n = 0;
  const char* s = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &n) : nullptr;
  if (s == nullptr)
    return luaL_error(L, "load: experiment files may only load source text (a string)");
  if (n > 0 && s[0] == LUA_SIGNATURE[0])
    return luaL_error(L, "load: binary (precompiled) chunks are refused in experiment files");
  const bool has_env = lua_gettop(L) >= 4;
  if (luaL_loadbufferx(L, s, n, "=load", "t") != LUA_OK) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;  // nil, message (as the standard load)
  }
  if (has_env) {
    lua_pushvalue(L, 4);
    if (lua_setupvalue(L, -2, 1) == nullptr) lua_pop(L, 1);
  }
  return 1;
}

/// print(...): one line "experiment: a\tb" on stderr while the evaluation's print output stays
/// within k_print_cap; a line past it is counted and dropped (reported when the evaluation ends).
int l_print(lua_State* L) {
  const int n = lua_gettop(L);
  constexpr std::size_t prefix = sizeof "experiment: " - 1;
  std::size_t line = prefix + 1 + static_cast<std::size_t>(n > 1 ? n - 1 : 0);
  luaL_checkstack(L, n, "too many arguments to print");
  for (int i = 1; i <= n; ++i) {
    std::size_t len = 0;
    luaL_tolstring(L, i, &len);  // pushed at n + i
    line += len;
  }
  sandbox_state* st = state_of(L);
  if (st->printed + line > k_print_cap) {
    st->print_dropped += line;
    st->print_dropped_lines += 1;
  } else {
    st->printed += line;
    std::fputs("experiment: ", stderr);
    for (int i = 1; i <= n; ++i) {
      std::size_t len = 0;
      const char* s = lua_tolstring(L, n + i, &len);
      if (i > 1) std::fputc('\t', stderr);
      std::fwrite(s, 1, len, stderr);
    }
    std::fputc('\n', stderr);
  }
  lua_pop(L, n);
  return 0;
}

/// The count of print output past the cap, once the evaluation is over.
void report_dropped_prints(const sandbox_state& s) {
  if (s.print_dropped == 0) return;
  std::fprintf(stderr,
               "experiment: print: %zu more line%s (%zu bytes) not shown: an evaluation prints at "
               "most %zu bytes\n",
               s.print_dropped_lines, s.print_dropped_lines == 1 ? "" : "s", s.print_dropped,
               k_print_cap);
}

/// Fills `out` with "; did you mean 'x'?" for an unknown global `key` of table 1. noexcept.
void global_suggestion(lua_State* L, const char* key, char* out, std::size_t size) noexcept {
  out[0] = '\0';
  try {
    std::vector<std::string> names;
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {
      if (lua_type(L, -2) == LUA_TSTRING) names.emplace_back(lua_tostring(L, -2));
      lua_pop(L, 1);
    }
    const std::string hint = util::did_you_mean(key, names);
    std::snprintf(out, size, "%s", hint.c_str());
  } catch (...) {
    out[0] = '\0';
  }
}

int l_strict_index(lua_State* L) {
  if (lua_type(L, 2) != LUA_TSTRING) {
    lua_pushnil(L);
    return 1;
  }
  const char* key = lua_tostring(L, 2);
  for (const char* f : k_forbidden)
    if (std::strcmp(key, f) == 0)
      return luaL_error(L,
                        "'%s' is not available in experiment files: the sandbox allows no file, "
                        "process or network access (name data files with data.file)",
                        key);
  char hint[128];
  if (lua_checkstack(L, 3) != 0)
    global_suggestion(L, key, hint, sizeof hint);
  else
    hint[0] = '\0';
  return luaL_error(L, "undefined variable '%s'%s", key, hint);
}

/// Opens the allowed libraries and installs the DSL. Runs under lua_pcall.
int l_setup(lua_State* L) {
  const bool full = lua_toboolean(L, 1) != 0;
  luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
  lua_pop(L, 1);
  luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 1);
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");  // string.dump makes bytecode
  lua_pop(L, 1);
  luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 1);
  lua_pop(L, 1);
  luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 1);
  lua_pop(L, 1);
  luaL_requiref(L, LUA_UTF8LIBNAME, luaopen_utf8, 1);
  lua_pop(L, 1);
  for (const char* f : k_forbidden) {
    lua_pushnil(L);
    lua_setglobal(L, f);
  }
  lua_register(L, "load", l_load);
  lua_register(L, "print", l_print);
  lua_register(L, "experiment", l_experiment);
  lua_register(L, "fraction", l_fraction);
  if (!full) return 0;
  if (luaL_loadbufferx(L, k_prelude, std::strlen(k_prelude), "=prelude", "t") != LUA_OK)
    return lua_error(L);
  lua_call(L, 0, 0);
  // Strict globals: reading an undefined global is an error (catches typos in helper names).
  lua_pushglobaltable(L);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, l_strict_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
  return 0;
}

struct lua_closer {
  void operator()(lua_State* L) const { lua_close(L); }
};
using lua_ptr = std::unique_ptr<lua_State, lua_closer>;

/// A fresh state with the allowed libraries (and, if `full`, the DSL prelude and strict globals).
lua_ptr open_sandbox(sandbox_state& s, bool full, std::string& error) {
  lua_ptr L(lua_newstate(limited_alloc, &s));
  if (!L) {
    error = "cannot create the Lua interpreter (out of memory)";
    return nullptr;
  }
  *static_cast<sandbox_state**>(lua_getextraspace(L.get())) = &s;
  lua_pushcfunction(L.get(), l_setup);
  lua_pushboolean(L.get(), full ? 1 : 0);
  if (lua_pcall(L.get(), 1, 0, 0) != LUA_OK) {
    const char* m = lua_tostring(L.get(), -1);
    error = std::string("cannot set up the sandbox: ") + (m != nullptr ? m : "unknown error");
    return nullptr;
  }
  lua_sethook(L.get(), limits_hook, LUA_MASKCOUNT | LUA_MASKLINE, k_hook_every);
  return L;
}

/// Splits "experiment:LINE: text" into LINE and text; other messages keep `fallback_line`.
std::pair<int, std::string> split_location(const std::string& msg, int fallback_line) {
  const std::size_t plen = std::strlen(k_chunk_prefix);
  if (msg.compare(0, plen, k_chunk_prefix) == 0) {
    std::size_t i = plen;
    int line = 0;
    while (i < msg.size() && msg[i] >= '0' && msg[i] <= '9') line = line * 10 + (msg[i++] - '0');
    if (i > plen && msg.compare(i, 2, ": ") == 0) return {line, msg.substr(i + 2)};
  }
  return {fallback_line, msg};
}

std::string error_message(lua_State* L, int status, const sandbox_state& s) {
  if (status == LUA_ERRMEM)
    return std::string(k_chunk_prefix) + std::to_string(s.last_line) +
           ": the script ran past its memory limit of " + std::to_string(s.memory_limit >> 20) +
           " MiB";
  const char* m = lua_tostring(L, -1);
  if (m != nullptr) return m;
  return std::string("(error object is a ") + luaL_typename(L, -1) + " value)";
}

/// The wall-clock deadline of an in-process run (sandbox_limits::deadline, or now + wall_seconds).
void set_deadline(sandbox_state& s, const sandbox_limits& limits) {
  s.wall_seconds = limits.wall_seconds;
  s.deadline = limits.deadline != std::chrono::steady_clock::time_point{}
                   ? limits.deadline
                   : std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(limits.wall_seconds));
}

/// run_script's work, in the current process.
script_outcome run_script_here(std::string_view script, const sandbox_limits& limits,
                               volatile int* line_sink) {
  script_outcome out;
  sandbox_state s;
  struct report_at_end {
    const sandbox_state& s;
    ~report_at_end() { report_dropped_prints(s); }
  } report{s};
  s.line_sink = line_sink;
  s.memory_limit = std::max<std::size_t>(limits.memory, std::size_t{1} << 20);
  s.instruction_limit = limits.instructions;
  if (limits.in_process) set_deadline(s, limits);
  std::string setup_error;
  lua_ptr L = open_sandbox(s, true, setup_error);
  if (!L) {
    out.failed = true;
    out.message = setup_error;
    return out;
  }
  if (!script.empty() && script[0] == LUA_SIGNATURE[0]) {
    out.failed = true;
    out.line = 1;
    out.message = "binary (precompiled) chunks are refused; experiment files are Lua source text";
    return out;
  }
  int status = luaL_loadbufferx(L.get(), script.data(), script.size(), k_chunk_name, "t");
  if (status == LUA_OK) status = lua_pcall(L.get(), 0, 0, 0);
  if (status != LUA_OK) {
    auto [line, text] = split_location(error_message(L.get(), status, s), s.last_line);
    out.failed = true;
    out.line = line;
    out.message = std::move(text);
    return out;
  }
  out.experiments = std::move(s.experiments);
  return out;
}

/// eval_expression's work, in the current process.
std::optional<nlohmann::json> eval_here(std::string_view expr, const sandbox_limits& limits,
                                        std::string* problem) {
  sandbox_state s;
  s.memory_limit = std::max<std::size_t>(limits.memory, std::size_t{1} << 20);
  s.instruction_limit = limits.instructions;
  if (limits.in_process) set_deadline(s, limits);
  std::string setup_error;
  lua_ptr L = open_sandbox(s, false, setup_error);
  if (!L) return std::nullopt;
  const std::string code = "return " + std::string(expr);
  if (luaL_loadbufferx(L.get(), code.data(), code.size(), "=--set", "t") != LUA_OK)
    return std::nullopt;
  // Environment: only fraction(); anything else reads as nil.
  lua_createtable(L.get(), 0, 1);
  lua_pushcfunction(L.get(), l_fraction);
  lua_setfield(L.get(), -2, "fraction");
  if (lua_setupvalue(L.get(), -2, 1) == nullptr) lua_pop(L.get(), 1);
  if (lua_pcall(L.get(), 0, 1, 0) != LUA_OK) return std::nullopt;
  const int t = lua_type(L.get(), -1);
  if (t != LUA_TBOOLEAN && t != LUA_TNUMBER && t != LUA_TSTRING && t != LUA_TTABLE)
    return std::nullopt;
  std::vector<std::pair<std::string, std::string>> problems;
  std::size_t bytes = 0;
  converter c{L.get(), &problems, &bytes, s.memory_limit};
  // The value is at the top; convert() wants it at index 1 relative paths only, so use -1.
  nlohmann::json v = c.convert(-1, "", 0);
  if (!problems.empty()) {
    if (problem != nullptr) *problem = problems.front().second;
    return std::nullopt;
  }
  return v;
}

// ---- the child-process boundary ----
// The child hands its result back as CBOR (not JSON text: CBOR keeps NaN and infinities, which a
// problem entry reports, and strings that are not UTF-8, exactly as the in-process run had them).

/// Address space the child may add to what it inherited: the interpreter's cap, the snapshots
/// (capped at the same size) and their CBOR copy, plus room for the C library.
std::size_t child_address_space(const sandbox_limits& limits) {
  return limits.memory * 4 + (std::size_t{256} << 20);
}

util::child_limits child_limits_for(const sandbox_limits& limits) {
  util::child_limits c;
  c.deadline = limits.deadline == std::chrono::steady_clock::time_point{}
                   ? std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(limits.wall_seconds))
                   : limits.deadline;
  c.extra_address_space = child_address_space(limits);
  c.cpu_seconds = static_cast<unsigned>(std::ceil(limits.wall_seconds)) + 1;
  return c;
}

/// Why a child that handed back nothing ended, in the user's terms.
std::string died_message(const util::child_outcome& r, const sandbox_limits& limits) {
  if (r.detail.find("bad_alloc") != std::string::npos ||
      r.detail.find("memory") != std::string::npos)
    return "the script ran past its memory limit of " + std::to_string(limits.memory >> 20) +
           " MiB";
  return "the script's evaluation process ended without a result (" + r.detail + ")";
}

}  // namespace

std::string timeout_message(double seconds) {
  return fmt::format("did not finish within {:g} s (--script-timeout)", seconds);
}

script_outcome run_script(std::string_view script, const sandbox_limits& limits) {
  using nlohmann::json;
  if (limits.in_process) return run_script_here(script, limits, nullptr);
  const util::child_outcome r = util::run_in_child(
      [&](volatile int* line) {
        script_outcome o = run_script_here(script, limits, line);
        json j = json::object();
        j["failed"] = o.failed;
        j["line"] = o.line;
        j["message"] = o.message;
        json list = json::array();
        for (auto& e : o.experiments) {
          json problems = json::array();
          for (auto& [path, why] : e.problems) problems.push_back(json::array({path, why}));
          list.push_back(json{
              {"value", std::move(e.value)}, {"line", e.line}, {"problems", std::move(problems)}});
        }
        j["experiments"] = std::move(list);
        const std::vector<std::uint8_t> bytes = json::to_cbor(j);
        return std::string(bytes.begin(), bytes.end());
      },
      child_limits_for(limits));
  script_outcome out;
  switch (r.state) {
    case util::child_outcome::status::ok: break;
    case util::child_outcome::status::timed_out:
      out.failed = true;
      out.line = r.progress;
      out.message = "the script " + timeout_message(limits.wall_seconds);
      return out;
    case util::child_outcome::status::died:
      out.failed = true;
      out.line = r.progress;
      out.message = died_message(r, limits);
      return out;
    case util::child_outcome::status::failed:
      out.failed = true;
      out.message = "cannot start the script's evaluation process: " + r.detail;
      return out;
  }
  try {
    const json j = json::from_cbor(r.payload);
    out.failed = j.at("failed").get<bool>();
    out.line = j.at("line").get<int>();
    out.message = j.at("message").get<std::string>();
    for (const auto& e : j.at("experiments")) {
      raw_experiment raw;
      raw.value = e.at("value");
      raw.line = e.at("line").get<int>();
      for (const auto& p : e.at("problems"))
        raw.problems.emplace_back(p.at(0).get<std::string>(), p.at(1).get<std::string>());
      out.experiments.push_back(std::move(raw));
    }
  } catch (const std::exception& e) {
    out = script_outcome{};
    out.failed = true;
    out.message =
        std::string("the script's evaluation process handed back a damaged result: ") + e.what();
  }
  return out;
}

std::optional<nlohmann::json> eval_expression(std::string_view expr, const sandbox_limits& limits,
                                              std::string* problem) {
  using nlohmann::json;
  if (limits.in_process) return eval_here(expr, limits, problem);
  const util::child_outcome r = util::run_in_child(
      [&](volatile int*) {
        std::string why;
        const auto v = eval_here(expr, limits, &why);
        json j = json::object();
        j["ok"] = v.has_value();
        if (v) j["value"] = *v;
        j["problem"] = why;
        const std::vector<std::uint8_t> bytes = json::to_cbor(j);
        return std::string(bytes.begin(), bytes.end());
      },
      child_limits_for(limits));
  auto fail = [&](std::string why) -> std::optional<json> {
    if (problem != nullptr) *problem = std::move(why);
    return std::nullopt;
  };
  switch (r.state) {
    case util::child_outcome::status::ok: break;
    case util::child_outcome::status::timed_out: return fail(timeout_message(limits.wall_seconds));
    case util::child_outcome::status::died: return fail(died_message(r, limits));
    case util::child_outcome::status::failed:
      return fail("cannot start the evaluation process: " + r.detail);
  }
  try {
    const json j = json::from_cbor(r.payload);
    if (problem != nullptr) *problem = j.at("problem").get<std::string>();
    if (!j.at("ok").get<bool>()) return std::nullopt;
    return j.at("value");
  } catch (const std::exception& e) {
    return fail(std::string("the evaluation process handed back a damaged result: ") + e.what());
  }
}

}  // namespace dd::config::detail
