// Small SVG line charts (loss curves, benchmark comparisons), so results that
// a person would rather look at are drawn, not only printed.
#pragma once
#include <string>
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

}  // namespace ctrl
