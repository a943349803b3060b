// How the CUDA backend (ops/cuda/) sizes its own scratch, in host code so
// that the planner counts it with the same functions
// (model/layout.h's cuda_scratch_bytes).
#pragma once
#include <algorithm>
#include <cstdint>

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

}  // namespace ctrl
