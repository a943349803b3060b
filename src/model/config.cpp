#include "model/config.h"

#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/parse.h"

namespace ctrl {

namespace {

// One table of every settable field, so TOML, --set, JSON and validation agree.
// Numeric fields carry their accepted range, checked by validate() and named
// in its message; NaN and infinities are outside every range.
enum class Kind { kInt, kReal, kString };
struct Range {
  double lo, hi;
  bool lo_open = false, hi_open = false;
  bool contains(double x) const { return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi); }
  std::string text(Kind kind) const;
};
struct Field {
  std::string key;  // "model.n_layer"
  std::function<std::string(const Config&)> get;
  std::function<void(Config&, const std::string&, const std::string& where)> set;
  Kind kind = Kind::kString;
  Range range{0, 0};
  std::function<double(const Config&)> number;  // numeric fields: the value, for the range check
};

int64_t parse_int(const std::string& v, const std::string& where) {
  const auto x = parse_whole_int(v);
  if (!x) fail(where + ": expected an integer, got '" + v + "'");
  return *x;
}

double parse_double(const std::string& v, const std::string& where) {
  const auto x = parse_whole_double(v);
  if (!x) fail(where + ": expected a number, got '" + v + "'");
  return *x;
}

template <class T>
std::string num_str(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  } else {
    return std::to_string(v);
  }
}

std::string Range::text(Kind kind) const {
  auto bound = [&](double b) {
    if (b >= 9.2e18) return std::string("2^63-1");
    if (kind == Kind::kInt) return std::to_string(int64_t(b));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", b);
    return std::string(buf);
  };
  return std::string(kind == Kind::kInt ? "an integer in " : "a number in ") + (lo_open ? "(" : "[") + bound(lo) +
         ", " + bound(hi) + (hi_open ? ")" : "]");
}

// Checked before the value is cast to its field's type, where -1 would become 2^64-1 (seeds are unsigned).
int64_t parse_int_in(const std::string& v, const std::string& where, const Range& range) {
  const int64_t x = parse_int(v, where);
  if (!range.contains(double(x))) fail(where + ": expected " + range.text(Kind::kInt) + ", got " + std::to_string(x));
  return x;
}

constexpr double kI63 = 9223372036854775807.0;  // int64 max, as the top of "any count"
constexpr double kBig = double(int64_t(1) << 40);

#define INT_FIELD(section, name, lo, hi)                                                    \
  Field{#section "." #name, [](const Config& c) { return num_str(c.section.name); },        \
        [](Config& c, const std::string& v, const std::string& w) {                         \
          c.section.name = static_cast<decltype(c.section.name)>(parse_int_in(v, w, Range{lo, hi})); \
        },                                                                                  \
        Kind::kInt, Range{lo, hi}, [](const Config& c) { return double(int64_t(c.section.name)); }}
#define REAL_FIELD(section, name, ...)                                                      \
  Field{#section "." #name, [](const Config& c) { return num_str(c.section.name); },        \
        [](Config& c, const std::string& v, const std::string& w) { c.section.name = parse_double(v, w); }, \
        Kind::kReal, Range{__VA_ARGS__}, [](const Config& c) { return c.section.name; }}
#define STR_FIELD(section, name)                                              \
  Field{#section "." #name, [](const Config& c) { return c.section.name; },   \
        [](Config& c, const std::string& v, const std::string&) { c.section.name = v; }, \
        Kind::kString, Range{0, 0}, nullptr}

const std::vector<Field>& fields() {
  // Sizes are bounded so that products of them (parameter counts, byte counts) stay inside 64 bits;
  // whether a model fits in memory is the planner's check (plan::check_memory).
  static const std::vector<Field> table = {
      INT_FIELD(model, vocab_size, 2, 2147483647), INT_FIELD(model, n_layer, 1, 1 << 20),
      INT_FIELD(model, d_model, 2, 1 << 20), INT_FIELD(model, n_head, 1, 1 << 16),
      INT_FIELD(model, d_ff, 1, 1 << 22), INT_FIELD(model, n_ctx, 2, 1 << 24),
      REAL_FIELD(model, embd_pdrop, 0, 1, false, true), REAL_FIELD(model, resid_pdrop, 0, 1, false, true),
      REAL_FIELD(model, layer_norm_eps, 0, 1, true, false), REAL_FIELD(model, init_range, 0, 1, true, false),
      INT_FIELD(model, seed, 0, kI63), STR_FIELD(model, sharing),
      INT_FIELD(model, embedding_dim, 0, 1 << 20), STR_FIELD(model, recompute),
      STR_FIELD(train, data), STR_FIELD(train, optimizer), REAL_FIELD(train, lr, 0, 100, true, false),
      STR_FIELD(train, schedule), INT_FIELD(train, warmup_steps, 0, kBig), REAL_FIELD(train, min_lr_ratio, 0, 1),
      REAL_FIELD(train, beta1, 0, 1, false, true), REAL_FIELD(train, beta2, 0, 1, false, true),
      REAL_FIELD(train, eps, 0, 1, true, false), REAL_FIELD(train, weight_decay, 0, 10),
      REAL_FIELD(train, adagrad_initial_accumulator, 0, 1e6), REAL_FIELD(train, clip_norm, 0, 1e9),
      INT_FIELD(train, micro_batch, 1, 1 << 20), INT_FIELD(train, global_batch, 1, 1 << 30),
      INT_FIELD(train, steps, 0, kBig), INT_FIELD(train, eval_every, 0, kBig),
      INT_FIELD(train, eval_batches, 1, 1 << 20), INT_FIELD(train, log_every, 1, kBig),
      INT_FIELD(train, checkpoint_every, 0, kBig), INT_FIELD(train, keep_checkpoints, 1, 1 << 20),
      INT_FIELD(train, threads, 0, 1 << 16), STR_FIELD(train, device), INT_FIELD(train, seed, 0, kI63), STR_FIELD(train, precision),
      STR_FIELD(train, cpu_bf16),
      REAL_FIELD(train, loss_scale, 0, 1e30, true, false), INT_FIELD(train, loss_scale_window, 1, kBig),
      STR_FIELD(train, teacher), REAL_FIELD(train, distill_alpha, 0, 1),
      REAL_FIELD(train, distill_temperature, 0, 1000, true, false),
  };
  return table;
}

const Field* find_field(const std::string& key) {
  for (const auto& f : fields())
    if (f.key == key) return &f;
  return nullptr;
}

std::string known_keys() {
  std::string s;
  for (const auto& f : fields()) s += (s.empty() ? "" : ", ") + f.key;
  return s;
}

// "tiny, small, ..." for messages.
std::string preset_list() {
  std::string list;
  for (const auto& p : preset_names()) list += (list.empty() ? "" : ", ") + p;
  return list;
}

Config preset(const std::string& name) {
  Config c;
  c.preset = name;
  auto& m = c.model;
  auto& t = c.train;
  if (name == "tiny") {
    m.vocab_size = 8000, m.n_layer = 4, m.d_model = 256, m.n_head = 4, m.d_ff = 1024, m.n_ctx = 128;
    t.lr = 1e-3, t.warmup_steps = 50, t.steps = 600, t.micro_batch = 16, t.global_batch = 16;
    t.eval_every = 100, t.checkpoint_every = 200;
  } else if (name == "small") {
    m.vocab_size = 32000, m.n_layer = 6, m.d_model = 384, m.n_head = 6, m.d_ff = 1536, m.n_ctx = 256;
    t.lr = 6e-4, t.micro_batch = 8, t.global_batch = 32, t.steps = 20000;
  } else if (name == "base") {
    m.vocab_size = 32000, m.n_layer = 12, m.d_model = 768, m.n_head = 12, m.d_ff = 3072, m.n_ctx = 256;
    t.lr = 3e-4, t.micro_batch = 8, t.global_batch = 256, t.steps = 100000, t.warmup_steps = 2000;
  } else if (name == "medium") {
    // A 350M-class model (GPT-2 medium's shape), the GPU benchmark's second size.
    m.vocab_size = 32000, m.n_layer = 24, m.d_model = 1024, m.n_head = 16, m.d_ff = 4096, m.n_ctx = 256;
    t.lr = 3e-4, t.micro_batch = 8, t.global_batch = 256, t.steps = 100000, t.warmup_steps = 2000;
  } else if (name == "ctrl") {
    // Keskar et al. 2019: Adagrad, lr 0.05 after linear warmup, no decay, clip 0.25, batch 1024.
    m.vocab_size = 246534, m.n_layer = 48, m.d_model = 1280, m.n_head = 16, m.d_ff = 8192, m.n_ctx = 256;
    t.optimizer = "adagrad", t.lr = 0.05, t.schedule = "warmup", t.warmup_steps = 25000;
    t.clip_norm = 0.25, t.micro_batch = 4, t.global_batch = 1024, t.steps = 800000;
  } else {
    fail("unknown preset '" + name + "' (expected one of " + preset_list() + "; a file cannot be a preset)");
  }
  return c;
}

}  // namespace

std::vector<std::string> preset_names() { return {"tiny", "small", "base", "medium", "ctrl"}; }

Config load_config(const std::string& source) {
  for (const auto& p : preset_names())
    if (source == p) return preset(p);
  if (!file_exists(source))
    fail(source + ": no such config file or preset (presets: " + preset_list() + ")");
  if (!std::filesystem::is_regular_file(source))
    fail(source + ": not a regular file; expected a TOML config file or a preset (" + preset_list() + ")");
  toml::table tbl;
  try {
    tbl = toml::parse_file(source);
  } catch (const toml::parse_error& e) {
    const auto& r = e.source().begin;
    fail(source + ":" + std::to_string(r.line) + ":" + std::to_string(r.column) + ": invalid TOML: " +
         std::string(e.description()));
  }
  // A file may start from a preset ("preset = 'small'") and change fields;
  // without one it starts from tiny's.
  Config c = preset("tiny");
  if (const toml::node* node = tbl.get("preset"); node && !node->is_string())
    fail(source + ":" + std::to_string(node->source().begin.line) + ": preset: expected a string naming a preset (" +
         preset_list() + ")");
  if (auto p = tbl["preset"].value_exact<std::string>()) {
    try {
      c = preset(*p);
    } catch (const Error& e) {
      const auto line = tbl["preset"].node()->source().begin.line;
      fail(source + ":" + std::to_string(line) + ": preset: " + e.what());
    }
  }
  for (const auto& [section_key, section] : tbl) {
    const std::string section_name(section_key.str());
    if (section_name == "preset") continue;
    if (!section.is_table())
      fail(source + ": '" + section_name + "': expected a [model] or [train] table (keys: " + known_keys() + ")");
    for (const auto& [key, value] : *section.as_table()) {
      const std::string full = section_name + "." + std::string(key.str());
      const Field* f = find_field(full);
      const std::string where = source + ":" + std::to_string(value.source().begin.line) + ": " + full;
      if (!f) fail(where + ": unknown key (known: " + known_keys() + ")");
      // The TOML type must be the field's: a number for numbers (an integer for counts), a string for names.
      std::string text;
      const auto s = value.value_exact<std::string>();
      const auto i = value.value_exact<int64_t>();
      const auto d = value.value_exact<double>();
      if (f->kind == Kind::kString && s) text = *s;
      else if (f->kind == Kind::kInt && i) text = std::to_string(*i);
      else if (f->kind == Kind::kReal && (i || d)) text = i ? std::to_string(*i) : num_str(*d);
      else
        fail(where + ": expected " + (f->kind == Kind::kString ? std::string("a string")
                                      : f->kind == Kind::kInt ? "an integer"
                                                              : "a number") +
             ", got a TOML " + std::string(toml::impl::node_type_friendly_names[size_t(value.type())]));
      // Paths in the file are relative to the file, wherever ctrl runs from.
      if ((full == "train.data" || full == "train.teacher") && !text.empty() &&
          std::filesystem::path(text).is_relative())
        text = (std::filesystem::path(source).parent_path() / text).lexically_normal().string();
      f->set(c, text, where);
    }
  }
  c.preset = source;
  return c;
}

void apply_override(Config& c, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos) fail("--set " + assignment + ": expected section.key=value");
  const std::string key = assignment.substr(0, eq);
  const Field* f = find_field(key);
  if (!f) fail("--set " + key + ": unknown key (known: " + known_keys() + ")");
  f->set(c, assignment.substr(eq + 1), "--set " + key);
}

void validate(const Config& c) {
  const auto& m = c.model;
  const auto& t = c.train;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) fail("config " + c.preset + ": " + msg);
  };
  for (const auto& f : fields())
    if (f.number && !f.range.contains(f.number(c))) {
      const std::string shown = f.kind == Kind::kReal ? num_str(f.number(c)) : f.get(c);
      fail("config " + c.preset + ": " + f.key + " = " + shown + ": expected " + f.range.text(f.kind));
    }
  need(m.vocab_size >= 2, "model.vocab_size must be at least 2");
  need(m.n_layer >= 1 && m.d_model >= 2 && m.n_head >= 1 && m.d_ff >= 1 && m.n_ctx >= 2,
       "model.n_layer, d_model, n_head, d_ff must be positive and n_ctx at least 2");
  // Far beyond any memory, but keeps every byte count of the layout and the planner inside 64 bits.
  const double params = double(m.n_layer) * (4.0 * double(m.d_model) * double(m.d_model) +
                                             2.0 * double(m.d_model) * double(m.d_ff)) +
                        double(m.vocab_size) * double(m.d_model);
  need(params <= 1e15, "the model has about " + num_str(params) + " parameters; expected at most 1e15");
  need(m.d_model % m.n_head == 0, "model.d_model (" + std::to_string(m.d_model) + ") must be divisible by model.n_head (" +
                                      std::to_string(m.n_head) + ")");
  need(m.d_model % 2 == 0, "model.d_model must be even (sinusoidal positions use sin and cos halves)");
  need(m.embd_pdrop >= 0 && m.embd_pdrop < 1 && m.resid_pdrop >= 0 && m.resid_pdrop < 1, "dropouts must be in [0, 1)");
  need(m.layer_norm_eps > 0, "model.layer_norm_eps must be positive");
  need(t.optimizer == "adamw" || t.optimizer == "adagrad", "train.optimizer must be adamw or adagrad, got '" + t.optimizer + "'");
  need(t.schedule == "constant" || t.schedule == "warmup" || t.schedule == "cosine",
       "train.schedule must be constant, warmup or cosine, got '" + t.schedule + "'");
  need(t.lr > 0, "train.lr must be positive");
  need(t.micro_batch >= 1, "train.micro_batch must be at least 1");
  need(t.global_batch >= t.micro_batch && t.global_batch % t.micro_batch == 0,
       "train.global_batch (" + std::to_string(t.global_batch) + ") must be a multiple of train.micro_batch (" +
           std::to_string(t.micro_batch) + ")");
  need(t.steps >= 0 && t.warmup_steps >= 0 && t.log_every >= 1 && t.eval_every >= 0 && t.checkpoint_every >= 0,
       "train step counts must not be negative (log_every at least 1)");
  need(t.keep_checkpoints >= 1, "train.keep_checkpoints must be at least 1");
  need(t.clip_norm >= 0, "train.clip_norm must not be negative");
  need(t.threads >= 0, "train.threads must not be negative");
  const bool cuda_n = t.device.rfind("cuda:", 0) == 0 && t.device.size() > 5 && t.device.size() <= 8 &&
                      t.device.find_first_not_of("0123456789", 5) == std::string::npos;
  need(t.device == "cpu" || t.device == "checked" || t.device == "cuda" || cuda_n,
       "train.device must be cpu, checked, cuda or cuda:N, got '" + t.device + "'");
  need(m.sharing == "none" || m.sharing == "all" || m.sharing == "attention" || m.sharing == "ffn",
       "model.sharing must be none, all, attention or ffn, got '" + m.sharing + "'");
  need(m.embedding_dim >= 0 && m.embedding_dim <= m.d_model, "model.embedding_dim must be 0 (off) or at most d_model");
  need(m.embedding_dim % 2 == 0, "model.embedding_dim must be even (the E-wide sinusoidal positions use sin and cos halves)");
  need(m.recompute == "none" || m.recompute == "cheap" || m.recompute == "layers",
       "model.recompute must be none, cheap or layers, got '" + m.recompute + "'");
  need(t.precision == "fp32" || t.precision == "bf16" || t.precision == "fp16",
       "train.precision must be fp32, bf16 or fp16, got '" + t.precision + "'");
  need(t.cpu_bf16 == "auto" || t.cpu_bf16 == "native" || t.cpu_bf16 == "widened",
       "train.cpu_bf16 must be auto, native or widened, got '" + t.cpu_bf16 + "'");
  need(t.loss_scale > 0 && t.loss_scale_window >= 1, "train.loss_scale must be positive and loss_scale_window at least 1");
}

std::string config_to_json(const Config& c) {
  nlohmann::ordered_json j;
  for (const auto& f : fields()) j[f.key] = f.get(c);
  return j.dump();
}

Config config_from_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(where + ": config is not valid JSON: " + e.what());
  }
  Config c = preset("tiny");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const Field* f = find_field(it.key());
    if (!f) fail(where + ": unknown config key '" + it.key() + "'");
    if (!it.value().is_string()) fail(where + ": config key '" + it.key() + "': expected a string value");
    f->set(c, it.value().get<std::string>(), where + ": " + it.key());
  }
  c.preset = where;
  return c;
}

}  // namespace ctrl
