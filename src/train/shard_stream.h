// Streams a ZeRO-1-sharded buffer to a checkpoint writer a piece at a time
// (train/trainer.cpp, Trainer::save). The shard is backend memory: each piece
// is downloaded into host staging before it is broadcast.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "ops/ops.h"
#include "train/checkpoint.h"

namespace ctrl {

// One ZeRO-1-sharded optimizer buffer (the whole buffer is the ranks' shards
// in rank order), streamed to the checkpoint writer a piece at a time: every
// rank takes part in the same sequence of broadcasts (rank r's shard in pieces
// of at most `piece` floats, rooted at r), and only the writer keeps what it
// receives, so no rank ever holds more than its shard and one piece (allocated
// at the first piece, freed after the last, so streams used one after another
// hold one piece between them).
class ShardStream {
 public:
  ShardStream(Communicator& comm, const DeviceArray<float>& shard, size_t piece)
      : comm_(comm), shard_(shard), shard_size_(shard.size()), piece_(std::min(piece, shard.size())) {}

  // Emits elements [begin, begin + count) of the whole buffer; ranges must increase.
  void read(size_t begin, size_t count, const OptimizerState::Emit& emit) {
    while (count > 0) {
      if (begin >= window_begin_ + window_size_) {
        CTRL_ASSERT(next());
        continue;
      }
      CTRL_ASSERT(begin >= window_begin_);
      const size_t offset = begin - window_begin_, n = std::min(count, window_size_ - offset);
      emit(staging_.data() + offset, n);
      begin += n, count -= n;
    }
  }
  // The remaining broadcasts (all of them, on a rank that does not write).
  void finish() {
    while (next()) {
    }
  }

 private:
  // Broadcasts the next piece from its owner into staging; false after the last.
  bool next() {
    if (owner_ == comm_.size()) {
      staging_ = {};
      return false;
    }
    if (staging_.empty()) staging_.resize(piece_);
    const size_t n = std::min(piece_, shard_size_ - at_);
    if (comm_.rank() == owner_) shard_.download(staging_.data(), n, at_);
    comm_.broadcast(staging_.data(), n * sizeof(float), owner_);
    window_begin_ = size_t(owner_) * shard_size_ + at_, window_size_ = n;
    at_ += n;
    if (at_ == shard_size_) ++owner_, at_ = 0;
    return true;
  }

  Communicator& comm_;
  const DeviceArray<float>& shard_;
  size_t shard_size_, piece_;
  std::vector<float> staging_;
  int owner_ = 0;                              // rank whose shard the next piece comes from
  size_t at_ = 0;                              // where in that shard
  size_t window_begin_ = 0, window_size_ = 0;  // the whole-buffer range now in staging
};

}  // namespace ctrl
