// Gradient synchronization for data parallelism: the trainer's data plane
// over the Communicator. Without ZeRO every rank ends a step with the whole
// summed gradient: each transformer layer's bucket starts reducing as soon
// as the last micro-batch's backward has written it (a fence first, as
// dist/communicator.h requires, unless the communicator orders itself after
// the backend's queue), the rest (embedding, final LayerNorm, head bias)
// after. With ZeRO-1 a reduce-scatter leaves each rank the summed gradient of
// its shard, and after the update an all-gather gives every rank all the
// parameters. With one rank nothing moves.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "model/model.h"

namespace ctrl {

class GradientSync {
 public:
  // zero = 1 (ZeRO-1) pads the model's parameter and gradient buffers so equal shards tile them.
  GradientSync(Model& model, Ops& ops, Communicator& comm, int zero);
  // The elements this rank updates: [shard_begin, shard_begin + shard_size); everything without ZeRO.
  size_t shard_begin() const { return shard_begin_; }
  size_t shard_size() const { return shard_size_; }

  // Around each micro-batch's backward: on the step's last one (several
  // ranks, no ZeRO) the layer buckets start reducing from the model's layer hook.
  void begin_micro_batch(bool last);
  void end_micro_batch();
  // After the step's last backward: the gradients the optimizer reads, summed
  // over ranks (the model's, or under ZeRO-1 this rank's shard).
  const DeviceArray<float>& summed_gradients();
  // Sums the step's backend scalars [Σ loss, Σ KL, Σ g²] over ranks in place;
  // Σ g² only under ZeRO-1, where each rank squared its own shard.
  void sum_step_scalars(double* scalars);
  // ZeRO-1, after the update: every rank's updated shard to every rank.
  void share_parameters();

 private:
  void start_reduce(size_t offset, size_t n);
  bool zero() const { return zero_ == 1; }

  Model& model_;
  Ops& ops_;
  Communicator& comm_;
  int zero_;
  size_t shard_begin_ = 0, shard_size_ = 0;
  std::vector<std::pair<size_t, size_t>> layer_ranges_;  // one bucket per layer (empty when it owns no tensor)
  std::vector<int> pending_;
  bool grads_lent_ = false;        // the communicator holds the model's gradients (begin_host_access)
  DeviceArray<float> grad_shard_;  // ZeRO-1: this rank's share of the summed gradients
};

}  // namespace ctrl
