// util/flags.cpp — see flags.hpp.
#include "util/flags.hpp"

#include <cmath>
#include <limits>
#include <utility>

#include "util/parse.hpp"

namespace dd::util {

namespace {

std::string quoted(const std::string& v) { return "'" + v + "'"; }

template <class T>
std::string range_text(T lo, T hi) {
  if (hi == std::numeric_limits<T>::max()) return ">= " + std::to_string(lo);
  return "in " + std::to_string(lo) + ".." + std::to_string(hi);
}

std::string number_text(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

template <class T>
std::function<std::string(const std::string&)> whole(T* out, T lo, T hi) {
  return [out, lo, hi](const std::string& v) -> std::string {
    if (parse_number_in(v, *out, lo, hi)) return {};
    return "needs a whole number " + range_text(lo, hi) + ", got " + quoted(v);
  };
}

/// Wraps `text` to lines of at most `width` characters, each after `indent` spaces.
void wrap(std::string& out, const std::string& text, size_t first_col, size_t indent,
          size_t width = 100) {
  size_t col = first_col;
  size_t i = 0;
  bool first_word = true;
  while (i < text.size()) {
    if (text[i] == '\n') {
      out += '\n';
      out.append(indent, ' ');
      col = indent;
      first_word = true;
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\n') ++j;
    const std::string word = text.substr(i, j - i);
    if (!first_word && col + 1 + word.size() > width) {
      out += '\n';
      out.append(indent, ' ');
      col = indent;
      first_word = true;
    }
    if (!first_word) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    first_word = false;
    i = j;
    while (i < text.size() && text[i] == ' ') ++i;
  }
}

}  // namespace

flag_table::flag_table(std::string who, std::string usage, std::string about)
    : who_(std::move(who)), usage_(std::move(usage)), about_(std::move(about)) {}

flag_table& flag_table::add(row r) {
  rows_.push_back(std::move(r));
  return *this;
}

flag_table& flag_table::toggle(const std::string& name, bool* out, const std::string& help) {
  return action(name, help, [out] { *out = true; });
}

flag_table& flag_table::action(const std::string& name, const std::string& help,
                               std::function<void()> act) {
  return add({name, "", help, false, [act = std::move(act)](const std::string&) -> std::string {
                act();
                return {};
              }});
}

flag_table& flag_table::text(const std::string& name, std::string* out, const std::string& value,
                             const std::string& help) {
  return add({name, value, help, true, [out](const std::string& v) -> std::string {
                *out = v;
                return {};
              }});
}

flag_table& flag_table::texts(const std::string& name, std::vector<std::string>* out,
                              const std::string& value, const std::string& help) {
  return add({name, value, help, true, [out](const std::string& v) -> std::string {
                out->push_back(v);
                return {};
              }});
}

flag_table& flag_table::count(const std::string& name, long long* out, long long lo, long long hi,
                              const std::string& value, const std::string& help) {
  return add({name, value, help, true, whole(out, lo, hi)});
}

flag_table& flag_table::count(const std::string& name, int* out, int lo, int hi,
                              const std::string& value, const std::string& help) {
  return add({name, value, help, true, whole(out, lo, hi)});
}

flag_table& flag_table::count(const std::string& name, unsigned long long* out,
                              unsigned long long lo, unsigned long long hi,
                              const std::string& value, const std::string& help) {
  return add({name, value, help, true, whole(out, lo, hi)});
}

flag_table& flag_table::number(const std::string& name, double* out, double lo, double hi,
                               const std::string& value, const std::string& help) {
  return add({name, value, help, true, [out, lo, hi](const std::string& v) -> std::string {
                double x = 0;
                if (parse_number(v, x) && x >= lo && x <= hi) {
                  *out = x;
                  return {};
                }
                std::string range;
                if (std::isfinite(lo) && std::isfinite(hi))
                  range = " in " + number_text(lo) + ".." + number_text(hi);
                else if (std::isfinite(lo))
                  range = " >= " + number_text(lo);
                else if (std::isfinite(hi))
                  range = " <= " + number_text(hi);
                return "needs a finite number" + range + ", got " + quoted(v);
              }});
}

flag_table& flag_table::seconds(const std::string& name, double* out, const std::string& help) {
  return add({name, "S", help, true, [out](const std::string& v) -> std::string {
                double x = 0;
                if (parse_number(v, x) && x >= 0) {
                  *out = x;
                  return {};
                }
                return "needs a number of seconds >= 0, got " + quoted(v);
              }});
}

flag_table& flag_table::custom(const std::string& name, const std::string& value,
                               const std::string& help,
                               std::function<std::string(const std::string&)> take) {
  return add({name, value, help, true, std::move(take)});
}

flag_table& flag_table::positionals(std::vector<std::string>* out, size_t min, size_t max,
                                    const std::string& names, const std::string& help) {
  positionals_ = out;
  pos_min_ = min;
  pos_max_ = max;
  pos_names_ = names;
  pos_help_ = help;
  return *this;
}

flag_table& flag_table::epilog(const std::string& text) {
  epilog_ = text;
  return *this;
}

std::optional<int> flag_table::parse(int argc, char** argv, int first) {
  size_t npos = 0;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      print_help(stdout);
      return 0;
    }
    const row* r = nullptr;
    for (const auto& x : rows_)
      if (x.name == a) r = &x;
    if (r == nullptr && a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "%s: unknown flag '%s'\n", who_.c_str(), a.c_str());
      print_help(stderr);
      return 2;
    }
    if (r == nullptr) {
      if (positionals_ == nullptr || npos >= pos_max_) {
        std::fprintf(
            stderr, "%s: unexpected argument '%s'%s\n", who_.c_str(), a.c_str(),
            positionals_ == nullptr || pos_max_ == 0
                ? ""
                : (" (it takes at most " + std::to_string(pos_max_) + ": " + pos_names_ + ")")
                      .c_str());
        return 2;
      }
      positionals_->push_back(a);
      ++npos;
      continue;
    }
    std::string value;
    if (r->takes_value) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value (%s)\n", who_.c_str(), a.c_str(),
                     r->value.c_str());
        return 2;
      }
      value = argv[++i];
    }
    const std::string why = r->take(value);
    if (!why.empty()) {
      std::fprintf(stderr, "%s: %s %s\n", who_.c_str(), a.c_str(), why.c_str());
      return 2;
    }
  }
  if (npos < pos_min_) {
    std::fprintf(stderr, "%s: missing %s\n", who_.c_str(), pos_names_.c_str());
    print_help(stderr);
    return 2;
  }
  return std::nullopt;
}

std::string flag_table::help() const {
  std::string out = "usage: " + who_ + (usage_.empty() ? "" : " " + usage_) + "\n";
  if (!about_.empty()) {
    out += about_;
    if (about_.back() != '\n') out += '\n';
  }
  constexpr size_t col = 26;
  auto item = [&](const std::string& left, const std::string& help) {
    std::string l = "  " + left;
    out += l;
    if (l.size() + 2 > col) {
      out += '\n';
      out.append(col, ' ');
    } else {
      out.append(col - l.size(), ' ');
    }
    wrap(out, help, col, col);
    out += '\n';
  };
  if (positionals_ != nullptr && !pos_help_.empty()) item(pos_names_, pos_help_);
  for (const auto& r : rows_) item(r.name + (r.value.empty() ? "" : " " + r.value), r.help);
  item("-h, --help", "this text");
  if (!epilog_.empty()) {
    out += epilog_;
    if (epilog_.back() != '\n') out += '\n';
  }
  return out;
}

void flag_table::print_help(FILE* f) const { std::fputs(help().c_str(), f); }

std::vector<std::string> flag_table::names() const {
  std::vector<std::string> n;
  n.reserve(rows_.size());
  for (const auto& r : rows_) n.push_back(r.name);
  return n;
}

}  // namespace dd::util
