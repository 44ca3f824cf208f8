// tools/goodput/svg_plot.cpp — SVG line charts (see svg_plot.hpp).
#include "tools/goodput/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>

namespace dd::goodput {

namespace {

constexpr double panel_w = 460, panel_h = 340, margin_l = 60, margin_r = 20, margin_t = 40,
                 margin_b = 50;

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string f(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

}  // namespace

std::string render_svg(const std::vector<plot_panel>& panels, const std::string& caption) {
  // Legend entries: unique series names in order of first appearance.
  std::vector<const plot_series*> legend;
  std::set<std::string> seen;
  for (const auto& p : panels)
    for (const auto& s : p.series)
      if (seen.insert(s.name).second) legend.push_back(&s);
  const int legend_cols = 4;
  const double legend_h = 22.0 * ((legend.size() + legend_cols - 1) / legend_cols) + 10;
  const double width = panel_w * static_cast<double>(std::max<std::size_t>(1, panels.size()));
  const double height = panel_h + legend_h + 30;

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << f(width) << "\" height=\""
    << f(height) << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (std::size_t pi = 0; pi < panels.size(); ++pi) {
    const plot_panel& p = panels[pi];
    const double ox = panel_w * static_cast<double>(pi);
    const double x0 = ox + margin_l, x1 = ox + panel_w - margin_r;
    const double y0 = margin_t, y1 = panel_h - margin_b;
    double xmin = INFINITY, xmax = -INFINITY;
    auto tx = [&](double x) { return p.log2_x ? std::log2(x) : x; };
    for (double t : p.x_ticks) {
      xmin = std::min(xmin, tx(t));
      xmax = std::max(xmax, tx(t));
    }
    for (const auto& s : p.series)
      for (double x : s.x) {
        xmin = std::min(xmin, tx(x));
        xmax = std::max(xmax, tx(x));
      }
    if (!(xmax > xmin)) {
      xmin -= 1;
      xmax += 1;
    }
    const double pad = 0.05 * (xmax - xmin);
    xmin -= pad;
    xmax += pad;
    auto px = [&](double x) { return x0 + (tx(x) - xmin) / (xmax - xmin) * (x1 - x0); };
    auto py = [&](double y) {
      return y1 - (std::clamp(y, p.y_min, p.y_max) - p.y_min) / (p.y_max - p.y_min) * (y1 - y0);
    };
    o << "<g>\n<text x=\"" << f((x0 + x1) / 2) << "\" y=\"22\" text-anchor=\"middle\" "
      << "font-size=\"14\" font-weight=\"bold\">" << esc(p.title) << "</text>\n";
    // grid and y ticks (5 intervals)
    for (int k = 0; k <= 5; ++k) {
      const double yv = p.y_min + (p.y_max - p.y_min) * k / 5.0;
      o << "<line x1=\"" << f(x0) << "\" y1=\"" << f(py(yv)) << "\" x2=\"" << f(x1) << "\" y2=\""
        << f(py(yv)) << "\" stroke=\"#ddd\"/>\n"
        << "<text x=\"" << f(x0 - 6) << "\" y=\"" << f(py(yv) + 4) << "\" text-anchor=\"end\">"
        << std::lround(yv * 100) << "%</text>\n";
    }
    for (std::size_t k = 0; k < p.x_ticks.size(); ++k) {
      const double xv = px(p.x_ticks[k]);
      o << "<line x1=\"" << f(xv) << "\" y1=\"" << f(y1) << "\" x2=\"" << f(xv) << "\" y2=\""
        << f(y1 + 5) << "\" stroke=\"#333\"/>\n";
      if (k < p.x_tick_labels.size())
        o << "<text x=\"" << f(xv) << "\" y=\"" << f(y1 + 18) << "\" text-anchor=\"middle\">"
          << esc(p.x_tick_labels[k]) << "</text>\n";
    }
    o << "<rect x=\"" << f(x0) << "\" y=\"" << f(y0) << "\" width=\"" << f(x1 - x0)
      << "\" height=\"" << f(y1 - y0) << "\" fill=\"none\" stroke=\"#333\"/>\n"
      << "<text x=\"" << f((x0 + x1) / 2) << "\" y=\"" << f(y1 + 38) << "\" text-anchor=\"middle\">"
      << esc(p.x_label) << "</text>\n"
      << "<text transform=\"translate(" << f(ox + 16) << "," << f((y0 + y1) / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">" << esc(p.y_label) << "</text>\n";
    for (const auto& s : p.series) {
      std::string path;
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!std::isfinite(s.y[i])) continue;
        const double X = px(s.x[i]), Y = py(s.y[i]);
        if (s.markers_only) {
          o << "<path d=\"M" << f(X - 5) << " " << f(Y - 5) << "L" << f(X + 5) << " " << f(Y + 5)
            << "M" << f(X - 5) << " " << f(Y + 5) << "L" << f(X + 5) << " " << f(Y - 5)
            << "\" stroke=\"" << s.color << "\" stroke-width=\"2\"/>\n";
        } else {
          path += (path.empty() ? "M" : "L") + f(X) + " " + f(Y);
          o << "<circle cx=\"" << f(X) << "\" cy=\"" << f(Y) << "\" r=\"2.5\" fill=\"" << s.color
            << "\"/>\n";
        }
        if (i < s.y_err.size() && s.y_err[i] > 0) {
          o << "<line x1=\"" << f(X) << "\" y1=\"" << f(py(s.y[i] - s.y_err[i])) << "\" x2=\""
            << f(X) << "\" y2=\"" << f(py(s.y[i] + s.y_err[i])) << "\" stroke=\"" << s.color
            << "\"/>\n";
        }
      }
      if (!path.empty()) {
        o << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << s.color
          << "\" stroke-width=\"1.8\"" << (s.dashed ? " stroke-dasharray=\"5,4\"" : "") << "/>\n";
      }
    }
    o << "</g>\n";
  }
  // legend
  for (std::size_t i = 0; i < legend.size(); ++i) {
    const double lx = 20 + (width - 40) / legend_cols * static_cast<double>(i % legend_cols);
    const double ly = panel_h + 10 + 22.0 * static_cast<double>(i / legend_cols);
    const plot_series& s = *legend[i];
    if (s.markers_only) {
      o << "<path d=\"M" << f(lx + 9) << " " << f(ly - 5) << "L" << f(lx + 19) << " " << f(ly + 5)
        << "M" << f(lx + 9) << " " << f(ly + 5) << "L" << f(lx + 19) << " " << f(ly - 5)
        << "\" stroke=\"" << s.color << "\" stroke-width=\"2\"/>\n";
    } else {
      o << "<line x1=\"" << f(lx) << "\" y1=\"" << f(ly) << "\" x2=\"" << f(lx + 28) << "\" y2=\""
        << f(ly) << "\" stroke=\"" << s.color << "\" stroke-width=\"2\""
        << (s.dashed ? " stroke-dasharray=\"5,4\"" : "") << "/>\n";
    }
    o << "<text x=\"" << f(lx + 34) << "\" y=\"" << f(ly + 4) << "\">" << esc(s.name)
      << "</text>\n";
  }
  o << "<text x=\"" << f(width / 2) << "\" y=\"" << f(height - 8)
    << "\" text-anchor=\"middle\" fill=\"#555\">" << esc(caption) << "</text>\n</svg>\n";
  return o.str();
}

}  // namespace dd::goodput
