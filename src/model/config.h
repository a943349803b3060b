// Model and training configuration: built-in presets, TOML files and
// "--set section.key=value" overrides, all validated in one place.
// Shape letters used across the engine: B batch, T context, D width,
// H heads, F feed-forward width, V vocab, L layers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ctrl {

struct ModelConfig {
  int64_t vocab_size = 8000;  // V
  int64_t n_layer = 4;        // L
  int64_t d_model = 256;      // D
  int64_t n_head = 4;         // H
  int64_t d_ff = 1024;        // F
  int64_t n_ctx = 128;        // T, the training context and the largest position
  double embd_pdrop = 0.1;    // dropout after the embedding
  double resid_pdrop = 0.1;   // dropout on each residual branch
  double layer_norm_eps = 1e-6;
  double init_range = 0.02;
  uint64_t seed = 1;          // initialization
  // Lighter models (ALBERT): which layer parameters all layers share
  // ("none" | "all" | "attention" | "ffn"), the factorized embedding width E
  // (0: no factorization, E = D), and what the backward pass recomputes
  // instead of storing ("none" | "cheap": ReLU and LayerNorm outputs | "layers").
  std::string sharing = "none";
  int64_t embedding_dim = 0;
  std::string recompute = "none";
  int64_t head_dim() const { return d_model / n_head; }
};

struct TrainConfig {
  std::string data;              // prepared corpus directory (`ctrl prepare`); empty: synthetic tokens
  std::string optimizer = "adamw";  // adamw | adagrad
  double lr = 3e-4;
  std::string schedule = "cosine";  // constant | warmup (linear warmup, then constant) | cosine
  int64_t warmup_steps = 100;
  double min_lr_ratio = 0.1;     // cosine floor as a fraction of lr
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;     // AdamW, matrices only
  double adagrad_initial_accumulator = 0.1;
  double clip_norm = 1.0;        // global-norm clipping; 0 disables
  int64_t micro_batch = 8;       // sequences per forward/backward
  int64_t global_batch = 8;      // sequences per optimizer step (multiple of micro_batch)
  int64_t steps = 1000;
  int64_t eval_every = 100;      // steps; 0 disables
  int64_t eval_batches = 8;      // held-out windows per code: eval_batches x micro_batch x ranks
  int64_t log_every = 10;
  int64_t checkpoint_every = 500;
  int64_t keep_checkpoints = 3;
  int64_t threads = 0;           // 0: all cores
  std::string device = "cpu";    // backend: cpu | checked (ops/ops.h, make_ops)
  uint64_t seed = 1;             // data sampling and dropout
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (mixed precision, fp32 master weights)
  // bf16 on a CPU: auto | native | widened (Ops::choose_bf16_products). A run
  // records what auto chose, and its resume keeps it.
  std::string cpu_bf16 = "auto";
  double loss_scale = 65536;       // fp16: initial dynamic loss scale (2^16)
  int64_t loss_scale_window = 2000;  // fp16: clean steps before the scale doubles
  // Distillation (ctrl train --teacher): a trained checkpoint whose softened
  // outputs the student learns too; the loss is α·τ²·KL(teacher‖student at
  // temperature τ) + (1 − α)·cross-entropy. Empty: no teacher.
  std::string teacher;
  double distill_alpha = 0.5;        // α
  double distill_temperature = 2.0;  // τ
};

struct Config {
  ModelConfig model;
  TrainConfig train;
  std::string preset;  // name it started from, for messages
};

// Names of the built-in presets: tiny, small, base, medium, ctrl.
std::vector<std::string> preset_names();
// A preset by name, or the TOML file at that path ([model] and [train] tables;
// a relative train.data or train.teacher there is relative to the file).
// Throws ctrl::Error naming the file, key and expectation on any problem.
Config load_config(const std::string& preset_or_file);
// Applies "section.key=value" (e.g. "model.n_layer=6", "train.lr=1e-3").
void apply_override(Config& config, const std::string& assignment);
// Checks ranges and relations (D divisible by H, batch multiples, ...).
void validate(const Config& config);
// JSON text of the whole config (stable key order), stored in checkpoints.
std::string config_to_json(const Config& config);
Config config_from_json(const std::string& json, const std::string& where);

}  // namespace ctrl
