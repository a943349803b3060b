// lighter_plot: held-out loss against training time for several runs of
// `ctrl train` (bench/lighter_experiment.sh), as one SVG chart, plus a
// Markdown table of each run's parameters, FLOPs, activation memory, time and
// final held-out loss on stdout.
//
// usage: lighter_plot OUT.svg NAME=RUN_DIR [NAME=RUN_DIR ...]
//
// Each RUN_DIR holds config.json and metrics.jsonl as the trainer writes them:
// step lines {"step", "loss", "elapsed_s", ...} and evaluation lines
// {"step", "eval": {code: {"loss", "tokens", ...}}}. An evaluation's time is
// the elapsed_s of the last step line at or before its step (the script logs
// every step, so it is exact); its loss is the token-weighted mean over codes.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "core/plot.h"
#include "model/config.h"
#include "model/layout.h"

namespace {

struct Run {
  std::string name, dir;
  ctrl::Series held_out;
  double seconds = 0;
  int64_t steps = 0;
};

void read_run(Run& run) {
  const std::string path = run.dir + "/metrics.jsonl";
  if (!ctrl::file_exists(path)) ctrl::fail(path + ": not found (expected a `ctrl train` run directory)");
  std::ifstream in(path);
  std::string line;
  double elapsed = 0;
  int64_t line_no = 0;
  run.held_out.name = run.name;
  while (std::getline(in, line)) {
    ++line_no;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      std::fprintf(stderr, "warning: %s:%lld: skipped a line that is not JSON\n", path.c_str(),
                   static_cast<long long>(line_no));
      continue;
    }
    if (j.contains("elapsed_s")) {
      elapsed = j["elapsed_s"].get<double>();
      run.seconds = elapsed;
      run.steps = j.value("step", int64_t(0));
    }
    if (!j.contains("eval")) continue;
    double sum = 0, tokens = 0;
    for (const auto& [code, r] : j["eval"].items()) {
      const double n = r.value("tokens", 1.0);
      sum += r.at("loss").get<double>() * n;
      tokens += n;
    }
    if (tokens > 0) run.held_out.x.push_back(elapsed), run.held_out.y.push_back(sum / tokens);
  }
  if (run.held_out.x.empty()) ctrl::fail(path + ": no evaluation lines (train with train.eval_every > 0)");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: lighter_plot OUT.svg NAME=RUN_DIR [NAME=RUN_DIR ...]\n");
    return 2;
  }
  try {
    std::vector<Run> runs;
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      const auto eq = arg.find('=');
      if (eq == std::string::npos || eq == 0) ctrl::fail(std::string("lighter_plot: '") + arg + "': expected NAME=RUN_DIR");
      runs.push_back({arg.substr(0, eq), arg.substr(eq + 1), {}, 0, 0});
      read_run(runs.back());
    }
    std::vector<ctrl::Series> series;
    std::printf("| run | parameters | model MFLOP/token | hardware MFLOP/token | activations (MiB) | steps | time (s) "
                "| final held-out loss |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const auto& r : runs) {
      const ctrl::Config c = ctrl::config_from_json(
          nlohmann::json::parse(ctrl::read_file(r.dir + "/config.json")).dump(), r.dir + "/config.json");
      const auto acts = ctrl::make_activation_layout(c.model, c.train.micro_batch);
      std::printf("| %s | %.2fM | %.1f | %.1f | %.1f | %lld | %.1f | %.4f |\n", r.name.c_str(),
                  double(ctrl::make_param_layout(c.model).count()) / 1e6, ctrl::train_flops_per_token(c.model) / 1e6,
                  ctrl::train_hardware_flops_per_token(c.model) / 1e6, double(acts.bytes()) / (1 << 20),
                  static_cast<long long>(r.steps), r.seconds, r.held_out.y.back());
      series.push_back(r.held_out);
    }
    ctrl::write_line_chart(argv[1], "Held-out loss against training time", "training time (s)",
                           "held-out loss (nats/token)", series);
    std::fprintf(stderr, "wrote %s\n", argv[1]);
  } catch (const ctrl::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
