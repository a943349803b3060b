// Small SVG line charts (loss curves, benchmark comparisons), so results that
// a person would rather look at are drawn, not only printed.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace ctrl {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

// Writes an SVG chart with axes, ticks, a legend and one polyline per series.
// log_y draws the y axis logarithmically (all y must be positive).
void write_line_chart(const std::string& path, const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series, bool log_y = false);

// A grid of cells (rows x columns), each filled by its `color` value on a
// diverging scale — white at 0, red for positive, blue for negative, full
// colour at the largest |value| — and labelled with its `text` (empty: the
// value). Cells listed in `outlined` (row, column) get a dark border, e.g. the
// diagonal of a code-by-code matrix. `legend` is a line under the grid.
struct Heatmap {
  std::string title, x_label, y_label, legend;
  std::vector<std::string> rows, columns;
  std::vector<std::vector<double>> color;       // [rows][columns]
  std::vector<std::vector<std::string>> text;   // [rows][columns], or empty
  std::vector<std::pair<size_t, size_t>> outlined;
};
// The heatmap as SVG. Non-finite values are drawn grey.
std::string heatmap_svg(const Heatmap& map);

}  // namespace ctrl
