// tools/goodput/svg_plot.hpp — a small SVG line-chart writer (no plotting dependency).
//
// Used by dd-goodput to draw goodput and uptime against cluster size. Pure string building; any
// thread may call it.
#pragma once

#include <string>
#include <vector>

namespace dd::goodput {

/// One line (or, with `markers_only`, a set of points) on a panel.
struct plot_series {
  std::string name;
  std::string color = "#1f77b4";  ///< any SVG colour.
  bool dashed = false;
  bool markers_only = false;  ///< reference points (e.g. the paper's numbers).
  std::vector<double> x, y;   ///< same length; y may be NaN to skip a point.
  std::vector<double> y_err;  ///< optional ± bars (same length as y), e.g. one std-dev.
};

/// One chart area.
struct plot_panel {
  std::string title, x_label, y_label;
  bool log2_x = false;  ///< x axis in log2 (cluster sizes that double).
  double y_min = 0, y_max = 1;
  std::vector<double> x_ticks;  ///< tick positions (data units); labels from `x_tick_labels`.
  std::vector<std::string> x_tick_labels;
  std::vector<plot_series> series;
};

/// Renders panels side by side with one shared legend under them. Returns the SVG document.
std::string render_svg(const std::vector<plot_panel>& panels, const std::string& caption);

}  // namespace dd::goodput
