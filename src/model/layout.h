// The layout tables: where every parameter and every saved activation lives
// in the engine's flat buffers. The same functions size the allocations, drive
// the optimizer, checkpoints, Hugging Face export, all-reduce buckets and the
// planner's byte counts, so they cannot disagree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace ctrl {

// Offsets are rounded up to this many elements (64 bytes of fp32) for SIMD.
constexpr size_t kAlignElements = 16;
// Rows of the fused head's logits chunk (at most; fewer when the micro-batch has fewer tokens).
constexpr int64_t kHeadChunkRows = 256;
// Model::init_weights computes the initial weights on the host and uploads
// them this many floats at a time (4 MiB), whatever a tensor's size: a whole
// tensor's staging (the V x D embedding: 47 MiB at `small`, 1.2 GiB at
// CTRL's) was the CPU process's peak memory, above the training step's,
// in no count of the planner's. The planner's CPU runtime overhead
// (plan::kCpuRuntimeOverheadBytes) holds this much.
constexpr size_t kInitStagingFloats = size_t(1) << 20;
// The CPU backend's vocabulary block in the head (ops/ops.h), for the
// planner, which sees backends only through the model.
int64_t cpu_head_vocab_block();
// The rows of A and the columns of B in one tile of the CPU backend's tiled
// products (ops/cpu/gemm.h: kTileRows + kTileCols), for the planner.
int64_t cpu_tile_operand_rows();

struct ParamTensor {
  std::string name;            // Hugging Face state-dict name
  std::vector<int64_t> shape;  // Linear weights are [out, in]
  size_t offset = 0;           // in elements from the start of the buffer
  size_t numel = 0;
  bool is_matrix = false;  // AdamW weight decay applies to matrices only
  int layer = -1;          // transformer layer, -1 for embedding and head
  bool shared = false;     // used by every layer (cross-layer sharing); named as layer 0's
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;
  size_t total = 0;      // elements including alignment padding
  size_t count() const;  // parameters without padding
  const ParamTensor& get(const std::string& name) const;
  const ParamTensor* find(const std::string& name) const;
};

// Per-layer tensor order keeps Wq, Wk, Wv weights adjacent (and their biases
// adjacent), so the three projections run as one [3D, D] matrix product.
// Cross-layer sharing (config.sharing) stores a shared tensor once, under
// layer 0's name; layers 1.. hold only their unshared tensors. A factorized
// embedding (config.embedding_dim = E > 0) makes transformer.w.weight [V, E]
// and adds transformer.w_proj_in.{weight [D, E], bias [D]} and
// transformer.w_proj_out.{weight [E, D], bias [E]} (README, "Lighter models").
ParamLayout make_param_layout(const ModelConfig& config);

// Whether the layers share their attention block (Wq, Wk, Wv, dense,
// layernorm1) or their feed-forward block (ffn.0, ffn.2, layernorm2).
bool shares_attention(const ModelConfig& config);
bool shares_ffn(const ModelConfig& config);
// The state-dict name of the tensor that `layer` uses for `suffix` (e.g.
// "layernorm1.weight", "multi_head_attention.Wq.bias"): layer 0's when shared.
std::string layer_param_name(const ModelConfig& config, int layer, const std::string& suffix);
// Width of the token embedding and of the tied output: E if factorized, else D.
int64_t embedding_width(const ModelConfig& config);

// Activations saved by the forward pass for the backward pass, and the
// backward's scratch, for micro-batch B at context T = n_ctx.
// Recomputation (config.recompute) changes what is saved: with "cheap" every
// layer's ln1_out, ln2_out and ffn_h offsets point at one scratch copy that
// the backward refills (LayerNorm forward again, ffn.0 product and ReLU
// again); with "layers" only x_in is saved per layer and every other offset
// of every layer points at one layer's scratch set, which the backward fills
// by running that layer's forward again. Offsets that are not saved may alias
// each other, so only the forward and backward of model.cpp may rely on them.
//
// The residual stream (x_in, x_mid, x_out) is always summed in fp32. In fp32
// and fp16 it is saved, and each LayerNorm reads it directly (ln1_in == x_in,
// ln2_in == x_mid, lnf_in == x_out). Under bf16 each LayerNorm reads a bf16
// rounding of it (ln1_in, ln2_in, lnf_in), which is what is saved; the fp32
// stream then lives in two scratch buffers shared by all layers (and, with
// "layers" recomputation, x_in stays saved in fp32 so a layer's forward can be
// repeated exactly).
struct ActivationLayout {
  struct Layer {
    size_t x_in, ln1_mean, ln1_rstd, ln1_out, qkv, attention_saved, att, x_mid, ln2_mean, ln2_rstd, ln2_out, ffn_h;
    size_t ln1_in, ln2_in;  // the LayerNorms' inputs (see above)
  };
  int64_t B = 0, T = 0;
  DType dtype = DType::F32;  // the type of the low-precision slots (see make_activation_layout)
  DType inner = DType::F32;  // d_qkv, d_att, d_ffn: BF16 under bf16, else F32
  std::vector<Layer> layers;
  size_t x_out = 0, lnf_in = 0, lnf_mean = 0, lnf_rstd = 0, lnf_out = 0;  // after the last layer
  // Factorized embedding only (E > 0, else 0): the E-wide embedding (input of
  // w_proj_in), the E-wide head input (output of w_proj_out), and in scratch
  // the gradient of either.
  size_t emb = 0, head_in = 0, d_emb = 0;
  // Backward scratch, reused across layers.
  size_t d_x = 0, d_x2 = 0, d_ln = 0, d_qkv = 0, d_att = 0, d_ffn = 0;
  size_t logits = 0;  // one chunk of rows x head_row_stride(V) for the fused head and loss
  int64_t logits_rows = 0;
  size_t saved = 0;    // elements kept from forward to backward
  size_t scratch = 0;  // elements of backward scratch and the logits chunk
  size_t total = 0;
  size_t bytes() const { return total * sizeof(float); }
};

// `low` is the element type of the activations that feed matrix products
// (LayerNorm outputs, Q/K/V, attention output, ReLU output, head input): BF16
// or F16 under mixed precision, else F32. The saved softmax (computed in
// fp32) is of that type too. Under bf16 the LayerNorms' inputs (roundings of
// the fp32 residual stream) and the gradients that feed or leave bf16
// products inside a layer (d_qkv, d_att, d_ffn) are bf16 as well; fp16 keeps
// those fp32 (its products round them to fp16 on the way in, where the loss
// scale keeps them in range). The running residual stream, its gradient,
// LayerNorm statistics and the logits chunk stay fp32. Offsets and totals count
// 4-byte units, so a 16-bit slot takes half the room. Rows are micro_batch
// sequences of `T` tokens (0: n_ctx); decoding (Model::decode) needs one row.
// Each layer's attention_saved takes attention_saved(B, T, D, H, low) bytes:
// the backend's Ops::attention_saved_bytes, or for a planned GPU run
// cuda_attention_saved_bytes (ops/gpu_scratch.h); when empty, the softmax
// (B·H·T·T of `low`), as the CPU keeps it.
using AttentionSavedBytes = std::function<size_t(int64_t B, int64_t T, int64_t D, int64_t H, DType qkv_type)>;
ActivationLayout make_activation_layout(const ModelConfig& config, int64_t micro_batch, DType low = DType::F32,
                                        int64_t T = 0, const AttentionSavedBytes& attention_saved = {});
// The activation type of a precision name ("fp32" -> F32, "bf16" -> BF16).
DType activation_dtype(const std::string& precision);

// The CUDA backend's attention for the planner, which sees backends only
// through the model (ops/gpu_scratch.h's rules): whether the environment asks
// for the fused kernels (CTRL_CUDA_ATTENTION=fused; ctrl::Error for a value
// other than fused or unfused), whether they take this model at `low`, and
// what a planned run keeps per layer (make_activation_layout's attention_saved).
bool cuda_attention_fusion_requested();
// The oldest GPU the CUDA backend runs on, as major x 10 + minor (75: sm_75),
// for the planner, which does not include ops/.
int cuda_min_compute_capability();
bool cuda_attention_fuses(const ModelConfig& config, DType low);
AttentionSavedBytes cuda_attention_saved(bool fused_attention);

// The CUDA backend's own scratch at its peak in training (ops/cuda/, sized
// by ops/gpu_scratch.h's gpu_head_chunk_rows and gpu_attention_sequences; each slot keeps
// its largest size): the head's larger logits chunk and its 16-bit copy, row
// losses; the attention chunk's head-layout copies, fp32 scores and 16-bit
// dS; the 16-bit copy of an fp32 output gradient;
// column-sum partials; the embedding's sort keys; 16-bit bias copies; the
// position table and cuBLASLt's workspace. `low` as make_activation_layout's.
// With fused_attention (CTRL_CUDA_ATTENTION=fused), attention of the shapes
// the fused kernels take keeps only the backward's row dots instead of the
// chunk's copies and scores. A teacher's forward shares the attention's slots.
uint64_t cuda_scratch_bytes(const ModelConfig& config, int64_t micro_batch, DType low,
                            const ModelConfig* teacher = nullptr, bool fused_attention = false);

// Floating-point operations of one training step per token (forward and
// backward, matrix products and attention), for throughput figures: the
// model's FLOPs (the usual MFU basis), which sharing does not change, the
// factorized embedding does (head V·E plus the two E·D projections), and
// recomputation does not count.
double train_flops_per_token(const ModelConfig& config);
// The FLOPs the hardware executes per token: train_flops_per_token plus the
// forward work recomputation repeats ("cheap": the ffn.0 product; "layers":
// each layer's whole forward).
double train_hardware_flops_per_token(const ModelConfig& config);
// One forward pass per token (a third of train_flops_per_token: the backward
// costs twice the forward), e.g. a distillation teacher's.
double forward_flops_per_token(const ModelConfig& config);

}  // namespace ctrl
