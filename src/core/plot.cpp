#include "core/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace ctrl {

static std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '&') r += "&amp;";
    else r += c;
  }
  return r;
}

static std::string num(double v) {
  char buf[32];
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-2)) std::snprintf(buf, sizeof buf, "%.2g", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// Tick values at a round spacing (1, 2 or 5 times a power of ten) giving
// about `count` intervals over [lo, hi]: steps 0..60 tick at 0, 10, ..., 60,
// not at 12.6.
static std::vector<double> round_ticks(double lo, double hi, int count) {
  const double power = std::pow(10.0, std::floor(std::log10((hi - lo) / count)));
  double spacing = power * 10;
  for (double m : {1.0, 2.0, 5.0})  // the finest that leaves at most count + 1 intervals
    if ((hi - lo) / (m * power) <= count + 1) {
      spacing = m * power;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / spacing - 1e-9) * spacing; t <= hi + spacing * 1e-9; t += spacing)
    ticks.push_back(std::abs(t) < spacing * 1e-9 ? 0.0 : t);
  return ticks;
}

void write_line_chart(const std::string& path, const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series, bool log_y) {
  const double W = 800, H = 480, left = 80, right = 180, top = 40, bottom = 60;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  auto ty = [&](double y) { return log_y ? std::log10(std::max(y, 1e-300)) : y; };
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, ty(s.y[i])), y1 = std::max(y1, ty(s.y[i]));
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return top + (1 - (ty(y) - y0) / (y1 - y0)) * (H - top - bottom); };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  o << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>" << escape(title) << "</text>\n";
  o << "<rect x='" << left << "' y='" << top << "' width='" << W - left - right << "' height='" << H - top - bottom
    << "' fill='none' stroke='#444'/>\n";
  for (double fx : round_ticks(x0, x1, 5))
    o << "<line x1='" << px(fx) << "' y1='" << top << "' x2='" << px(fx) << "' y2='" << H - bottom
      << "' stroke='#eee'/>\n<text x='" << px(fx) << "' y='" << H - bottom + 16 << "' text-anchor='middle'>"
      << num(fx) << "</text>\n";
  // A log axis ticks at evenly spaced exponents; a linear one at round values.
  std::vector<double> y_ticks;
  if (log_y)
    for (int i = 0; i <= 5; ++i) y_ticks.push_back(std::pow(10.0, y0 + (y1 - y0) * i / 5));
  else
    y_ticks = round_ticks(y0, y1, 5);
  for (double yv : y_ticks)
    o << "<line x1='" << left << "' y1='" << py(yv) << "' x2='" << W - right << "' y2='" << py(yv)
      << "' stroke='#eee'/>\n<text x='" << left - 6 << "' y='" << py(yv) + 4 << "' text-anchor='end'>" << num(yv)
      << "</text>\n";
  o << "<text x='" << (left + W - right) / 2 << "' y='" << H - 18 << "' text-anchor='middle'>" << escape(x_label)
    << "</text>\n<text transform='translate(18," << (top + H - bottom) / 2
    << ") rotate(-90)' text-anchor='middle'>" << escape(y_label) << "</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    const char* color = colors[k % 7];
    o << "<polyline fill='none' stroke='" << color << "' stroke-width='1.8' points='";
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i])) o << px(s.x[i]) << "," << py(s.y[i]) << " ";
    o << "'/>\n";
    if (s.x.size() == 1) o << "<circle cx='" << px(s.x[0]) << "' cy='" << py(s.y[0]) << "' r='3' fill='" << color << "'/>\n";
    const double ly = top + 10 + 18 * double(k);
    o << "<line x1='" << W - right + 12 << "' y1='" << ly << "' x2='" << W - right + 32 << "' y2='" << ly
      << "' stroke='" << color << "' stroke-width='3'/><text x='" << W - right + 38 << "' y='" << ly + 4 << "'>"
      << escape(s.name) << "</text>\n";
  }
  o << "</svg>\n";
  write_file_atomically(path, o.str());
}

std::string heatmap_svg(const Heatmap& map) {
  const size_t R = map.rows.size(), C = map.columns.size();
  CTRL_ASSERT(map.color.size() == R);
  // Room for the longest row label on the left and the legend below (about 7 px per character).
  size_t longest = 0;
  for (const auto& r : map.rows) longest = std::max(longest, r.size());
  const double cell_w = 96, cell_h = 40, left = std::max(150.0, 24 + 7.0 * double(longest)), top = 70;
  double scale = 0;
  for (const auto& row : map.color) {
    CTRL_ASSERT(row.size() == C);
    for (double v : row)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  }
  const double W = std::max(left + cell_w * double(C) + 30, left + 7.0 * double(map.legend.size()) + 20),
               H = top + cell_h * double(R) + 70;
  auto fill = [&](double v) {
    if (!std::isfinite(v)) return std::string("#bbbbbb");
    const double t = scale > 0 ? std::min(1.0, std::abs(v) / scale) : 0.0;
    // White to red (positive) or white to blue (negative).
    const int strong = int(std::lround(255 * (1 - 0.75 * t))), weak = int(std::lround(255 * (1 - 0.2 * t)));
    char buf[16];
    if (v >= 0) std::snprintf(buf, sizeof buf, "#%02x%02x%02x", weak, strong, strong);
    else std::snprintf(buf, sizeof buf, "#%02x%02x%02x", strong, strong, weak);
    return std::string(buf);
  };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  o << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>" << escape(map.title) << "</text>\n";
  o << "<text x='" << left + cell_w * double(C) / 2 << "' y='" << top - 28 << "' text-anchor='middle'>"
    << escape(map.x_label) << "</text>\n";
  o << "<text transform='translate(16," << top + cell_h * double(R) / 2 << ") rotate(-90)' text-anchor='middle'>"
    << escape(map.y_label) << "</text>\n";
  for (size_t c = 0; c < C; ++c)
    o << "<text x='" << left + cell_w * (double(c) + 0.5) << "' y='" << top - 8 << "' text-anchor='middle'>"
      << escape(map.columns[c]) << "</text>\n";
  for (size_t r = 0; r < R; ++r) {
    const double y = top + cell_h * double(r);
    o << "<text x='" << left - 8 << "' y='" << y + cell_h / 2 + 4 << "' text-anchor='end'>" << escape(map.rows[r])
      << "</text>\n";
    for (size_t c = 0; c < C; ++c) {
      const double x = left + cell_w * double(c), v = map.color[r][c];
      o << "<rect x='" << x << "' y='" << y << "' width='" << cell_w << "' height='" << cell_h << "' fill='" << fill(v)
        << "' stroke='white'/>\n";
      const std::string label = r < map.text.size() && c < map.text[r].size() ? map.text[r][c] : num(v);
      o << "<text x='" << x + cell_w / 2 << "' y='" << y + cell_h / 2 + 4 << "' text-anchor='middle'>"
        << escape(label) << "</text>\n";
    }
  }
  for (const auto& [r, c] : map.outlined)
    if (r < R && c < C)
      o << "<rect x='" << left + cell_w * double(c) + 1.5 << "' y='" << top + cell_h * double(r) + 1.5
        << "' width='" << cell_w - 3 << "' height='" << cell_h - 3 << "' fill='none' stroke='#222' stroke-width='2'/>\n";
  o << "<text x='" << left << "' y='" << top + cell_h * double(R) + 24 << "'>" << escape(map.legend) << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace ctrl
