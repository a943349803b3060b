// The layout tables: where every parameter and every saved activation lives
// in the engine's flat buffers. The same functions size the allocations, drive
// the optimizer, checkpoints, Hugging Face export, all-reduce buckets and the
// planner's byte counts, so they cannot disagree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace ctrl {

// Offsets are rounded up to this many elements (64 bytes of fp32) for SIMD.
constexpr size_t kAlignElements = 16;

struct ParamTensor {
  std::string name;             // Hugging Face state-dict name
  std::vector<int64_t> shape;   // Linear weights are [out, in]
  size_t offset = 0;            // in elements from the start of the buffer
  size_t numel = 0;
  bool is_matrix = false;       // AdamW weight decay applies to matrices only
  int layer = -1;               // transformer layer, -1 for embedding and head
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;
  size_t total = 0;  // elements including alignment padding
  size_t count() const;  // parameters without padding
  const ParamTensor& get(const std::string& name) const;
  const ParamTensor* find(const std::string& name) const;
};

// Per-layer tensor order keeps Wq, Wk, Wv weights adjacent (and their biases
// adjacent), so the three projections run as one [3D, D] matrix product.
ParamLayout make_param_layout(const ModelConfig& config);

// Activations saved by the forward pass for the backward pass, and the
// backward's scratch, for micro-batch B at context T = n_ctx.
struct ActivationLayout {
  struct Layer {
    size_t x_in, ln1_mean, ln1_rstd, ln1_out, qkv, probs, att, x_mid, ln2_mean, ln2_rstd, ln2_out, ffn_h;
  };
  int64_t B = 0, T = 0;
  DType dtype = DType::F32;
  std::vector<Layer> layers;
  size_t x_out = 0, lnf_mean = 0, lnf_rstd = 0, lnf_out = 0;  // after the last layer
  // Backward scratch, reused across layers.
  size_t d_x = 0, d_x2 = 0, d_ln = 0, d_qkv = 0, d_att = 0, d_ffn = 0;
  size_t logits = 0;                  // one chunk of rows x V for the fused head and loss
  int64_t logits_rows = 0;
  size_t saved = 0;    // elements kept from forward to backward
  size_t scratch = 0;  // elements of backward scratch and the logits chunk
  size_t total = 0;
  size_t bytes() const { return total * dtype_size(dtype); }
};

ActivationLayout make_activation_layout(const ModelConfig& config, int64_t micro_batch);

// Floating-point operations of one training step per token (forward and
// backward, matrix products and attention), for throughput figures.
double train_flops_per_token(const ModelConfig& config);

}  // namespace ctrl
