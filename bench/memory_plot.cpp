// memory_plot: peak memory against micro-batch for ctrl's precisions, from
// `ctrl bench --json` results (bench/memory_vs_batch.sh), as one SVG chart,
// plus a Markdown table on stdout with each batch's peak per precision, the
// ratio of each low precision to fp32, and tokens/s.
//
// usage: memory_plot OUT.svg RESULT.json [RESULT.json ...]
//
// Each RESULT.json is one `ctrl bench --json` output: "precision",
// "micro_batch", "peak_rss_bytes" and "tokens_per_s" are read.
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/plot.h"

namespace {

struct Point {
  double peak_mib = 0, tokens_per_s = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: memory_plot OUT.svg RESULT.json [RESULT.json ...]\n");
    return 2;
  }
  try {
    std::map<std::string, std::map<int64_t, Point>> by_precision;  // precision -> micro-batch -> point
    for (int i = 2; i < argc; ++i) {
      std::ifstream in(argv[i]);
      if (!in) ctrl::fail(std::string(argv[i]) + ": cannot open");
      std::stringstream text;
      text << in.rdbuf();
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text.str());
        by_precision[j.at("precision").get<std::string>()][j.at("micro_batch").get<int64_t>()] = {
            j.at("peak_rss_bytes").get<double>() / (1 << 20), j.at("tokens_per_s").get<double>()};
      } catch (const std::exception& e) {
        ctrl::fail(std::string(argv[i]) + ": not a `ctrl bench --json` result (" + e.what() + ")");
      }
    }
    // fp32 first (the baseline of the ratios), then the others by name.
    std::vector<std::string> order;
    if (by_precision.count("fp32")) order.push_back("fp32");
    for (const auto& [precision, points] : by_precision)
      if (precision != "fp32") order.push_back(precision);
    std::vector<ctrl::Series> series;
    for (const auto& precision : order) {
      const auto& points = by_precision.at(precision);
      ctrl::Series s{precision, {}, {}};
      for (const auto& [batch, p] : points) s.x.push_back(double(batch)), s.y.push_back(p.peak_mib);
      series.push_back(s);
    }
    ctrl::write_line_chart(argv[1], "ctrl bench: peak memory against micro-batch", "micro-batch (sequences)",
                           "peak memory (MiB)", series);
    // The table: one row per micro-batch, a peak (and ratio to fp32) per precision.
    std::printf("| micro-batch |");
    for (const auto& precision : order) std::printf(" %s peak | %s tokens/s |", precision.c_str(), precision.c_str());
    std::printf("\n| ---: |");
    for (size_t k = 0; k < by_precision.size(); ++k) std::printf(" ---: | ---: |");
    std::printf("\n");
    std::map<int64_t, bool> batches;
    for (const auto& [precision, points] : by_precision)
      for (const auto& [batch, p] : points) batches[batch] = true;
    const auto fp32 = by_precision.find("fp32");
    for (const auto& [batch, unused] : batches) {
      std::printf("| %lld |", static_cast<long long>(batch));
      for (const auto& precision : order) {
        const auto& points = by_precision.at(precision);
        const auto it = points.find(batch);
        if (it == points.end()) {
          std::printf(" – | – |");
          continue;
        }
        std::printf(" %.0f MiB", it->second.peak_mib);
        if (precision != "fp32" && fp32 != by_precision.end() && fp32->second.count(batch))
          std::printf(" (%.2f×)", it->second.peak_mib / fp32->second.at(batch).peak_mib);
        std::printf(" | %.0f |", it->second.tokens_per_s);
      }
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_plot: %s\n", e.what());
    return 1;
  }
  return 0;
}
