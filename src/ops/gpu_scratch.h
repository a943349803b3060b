// How the CUDA backend (ops/cuda/) sizes its own scratch, in host code so
// that the planner counts it with the same functions
// (model/layout.h's cuda_scratch_bytes).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "ops/ops.h"

namespace ctrl {

// The head's logits chunk and the attention chunk's fp32 scores each take up
// to kGpuChunkBytes; cuBLASLt gets a fixed workspace.
inline constexpr uint64_t kGpuChunkBytes = uint64_t(256) << 20;
inline constexpr uint64_t kGpuGemmWorkspaceBytes = uint64_t(32) << 20;
// Rows of the CUDA head's chunk without a teacher: as many fp32 logit rows as
// fit kGpuChunkBytes, at least the caller's chunk, at most N. Each chunk
// reads and rewrites the whole fp32 dw, so on a GPU few large chunks win.
inline int64_t gpu_head_chunk_rows(int64_t N, int64_t V, int64_t caller_rows) {
  const int64_t fit = int64_t(kGpuChunkBytes / (uint64_t(head_row_stride(V)) * sizeof(float)));
  return std::min(N, std::max(caller_rows, fit));
}
// Sequences per chunk of the CUDA attention: as many as keep the chunk's fp32
// scores (H·T·T per sequence) within kGpuChunkBytes, at least one, at most
// B and 8192 (the head-layout copies' grid).
inline int64_t gpu_attention_sequences(int64_t B, int64_t H, int64_t T) {
  const int64_t fit = int64_t(double(kGpuChunkBytes) / (double(H) * double(T) * double(T) * 4));
  return std::clamp<int64_t>(fit, 1, std::max<int64_t>(1, std::min<int64_t>(B, 8192)));
}

// Whether the environment asks for the fused attention kernels
// (attention_fused.cu): CTRL_CUDA_ATTENTION=fused; "unfused" or unset: no.
// The backend and the planner both read it here, so a plan counts the
// attention that the run will have. Any other value is a ctrl::Error.
inline bool cuda_fused_attention_requested() {
  const char* value = std::getenv("CTRL_CUDA_ATTENTION");
  if (!value || !*value || std::strcmp(value, "unfused") == 0) return false;
  if (std::strcmp(value, "fused") == 0) return true;
  fail(std::string("CTRL_CUDA_ATTENTION=") + value + ": expected fused or unfused");
}
// The shapes the fused kernels are built for: bf16 q, k, v in heads of 64 or
// 80 columns. Every GPU with bf16 arithmetic (sm_80 and newer) has the shared
// memory they take (attention_fused.cu checks this at compile time).
inline bool cuda_fused_attention_shape(DType qkv_type, int64_t D, int64_t H) {
  if (qkv_type != DType::BF16 || H <= 0 || D % 8 != 0 || D % H != 0) return false;
  return D / H == 64 || D / H == 80;
}
// What the CUDA attention keeps from forward to backward: with the fused
// kernels one fp32 log-sum-exp per row and head (B·H·T), else the softmax, as
// on the CPU (Ops::attention_saved_bytes).
inline size_t cuda_attention_saved_bytes(int64_t B, int64_t T, int64_t D, int64_t H, DType qkv_type, bool fused) {
  return fused && cuda_fused_attention_shape(qkv_type, D, H) ? size_t(B * H * T) * sizeof(float)
                                                             : attention_probs_bytes(B, T, H, qkv_type);
}

}  // namespace ctrl
