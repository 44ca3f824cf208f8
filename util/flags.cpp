// util/flags.cpp — see flags.hpp.
#include "util/flags.hpp"

#include <cctype>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#include "util/parse.hpp"
#include "util/suggest.hpp"

namespace dd::util {

namespace {

std::string quoted(const std::string& v) { return "'" + v + "'"; }

std::string number_text(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
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
                // Seconds, or a number with a unit as dd-chaos takes them: 250ms, 10s, 2m, 1h.
                size_t split = v.size();
                while (split > 0 && std::isalpha(static_cast<unsigned char>(v[split - 1])) != 0)
                  --split;
                const std::string number = v.substr(0, split);
                const double scale = seconds_per_unit(std::string_view(v).substr(split));
                double x = 0;
                if (scale > 0 && parse_number(number, x) && x >= 0 && std::isfinite(x * scale)) {
                  *out = x * scale;
                  return {};
                }
                return "needs a number of seconds >= 0 (or with a unit: 250ms, 10s, 2m, 1h), got " +
                       quoted(v);
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

flag_table& flag_table::heading(const std::string& title) {
  row r;
  r.name = title;
  r.takes_value = false;
  r.is_heading = true;
  return add(std::move(r));
}

flag_table& flag_table::epilog(const std::string& text) {
  epilog_ = text;
  return *this;
}

std::optional<int> flag_table::parse(int argc, char** argv, int first) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  std::string out, err;
  const auto rc = parse(args, out, err);
  std::fputs(out.c_str(), stdout);
  std::fputs(err.c_str(), stderr);
  return rc;
}

std::optional<int> flag_table::parse(const std::vector<std::string>& args, std::string& out,
                                     std::string& err) {
  size_t npos = 0;
  auto fail = [&](const std::string& line, bool with_help = false) {
    err += who_ + ": " + line + "\n";
    if (with_help) err += help();
    return 2;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      out += help();
      return 0;
    }
    const row* r = nullptr;
    std::optional<std::string> inline_value;  // --flag=value
    for (const auto& x : rows_)
      if (!x.is_heading && x.name == a) r = &x;
    if (r == nullptr && a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      const std::string name = a.substr(0, a.find('='));
      for (const auto& x : rows_)
        if (!x.is_heading && x.name == name && x.takes_value) r = &x;
      if (r != nullptr) {
        inline_value = a.substr(a.find('=') + 1);
        a = name;
      }
    }
    if (r == nullptr && a.size() > 1 && a[0] == '-') {
      std::vector<std::string> names;
      for (const auto& x : rows_)
        if (!x.is_heading) names.push_back(x.name);
      names.push_back("--help");
      const std::string name = a.substr(0, a.find('='));
      return fail("unknown flag '" + a + "'" + did_you_mean(name, names), true);
    }
    if (r == nullptr) {
      if (positionals_ == nullptr || npos >= pos_max_)
        return fail(
            "unexpected argument '" + a + "'" +
            (positionals_ == nullptr || pos_max_ == 0
                 ? std::string()
                 : " (it takes at most " + std::to_string(pos_max_) + ": " + pos_names_ + ")"));
      positionals_->push_back(a);
      ++npos;
      continue;
    }
    std::string value;
    if (r->takes_value) {
      if (inline_value) {
        value = *inline_value;
      } else {
        if (i + 1 >= args.size()) return fail(a + " needs a value (" + r->value + ")");
        value = args[++i];
      }
    }
    const std::string why = r->take(value);
    if (!why.empty()) return fail(why.rfind(a, 0) == 0 ? why : a + " " + why);
  }
  if (npos < pos_min_) return fail("missing " + pos_names_, true);
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
  for (const auto& r : rows_) {
    if (r.is_heading)
      out += r.name + "\n";
    else
      item(r.name + (r.value.empty() ? "" : " " + r.value), r.help);
  }
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
  for (const auto& r : rows_)
    if (!r.is_heading) n.push_back(r.name);
  return n;
}

}  // namespace dd::util
