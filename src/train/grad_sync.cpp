#include "train/grad_sync.h"

#include <algorithm>
#include <cstdint>

namespace ctrl {

GradientSync::GradientSync(Model& model, Ops& ops, Communicator& comm, int zero)
    : model_(model), ops_(ops), comm_(comm), zero_(zero) {
  const ParamLayout& layout = model.layout();
  const size_t ranks = size_t(comm.size());
  shard_size_ = layout.total;
  if (this->zero()) {
    shard_size_ = (layout.total + ranks - 1) / ranks;
    shard_begin_ = shard_size_ * size_t(comm.rank());
    model.pad_buffers(shard_size_ * ranks);
    grad_shard_ = DeviceArray<float>(ops, shard_size_, "trainer.grad_shard");
  }
  for (int l = 0; l < int(model.config().n_layer); ++l) {
    size_t lo = SIZE_MAX, hi = 0;
    for (const auto& p : layout.tensors)
      if (p.layer == l) lo = std::min(lo, p.offset), hi = std::max(hi, p.offset + p.numel);
    // A layer that owns no tensors (cross-layer sharing stores them under layer 0) has an empty bucket.
    layer_ranges_.emplace_back(lo < hi ? lo : 0, lo < hi ? hi : 0);
  }
}

void GradientSync::begin_micro_batch(bool last) {
  if (!last || comm_.size() == 1 || zero()) return;
  model_.set_layer_backward_hook([this](int layer) {
    const auto [lo, hi] = layer_ranges_[size_t(layer)];
    if (hi > lo) start_reduce(lo, hi - lo);
  });
}

void GradientSync::end_micro_batch() { model_.set_layer_backward_hook(nullptr); }

const DeviceArray<float>& GradientSync::summed_gradients() {
  if (zero()) {
    ops_.synchronize();  // the backward's gradients are written
    HostAccess lend_grads(ops_, model_.grads.data()), lend_shard(ops_, grad_shard_.data());
    comm_.reduce_scatter_sum(model_.grads.data(), grad_shard_.data(), grad_shard_.size());
    return grad_shard_;
  }
  if (comm_.size() == 1) return model_.grads;
  for (const auto& p : model_.layout().tensors)
    if (p.layer < 0) start_reduce(p.offset, p.numel);
  if (!pending_.empty()) comm_.wait(pending_.back());
  pending_.clear();
  if (grads_lent_) ops_.end_host_access(model_.grads.data());
  grads_lent_ = false;
  return model_.grads;
}

// Hands gradient elements [offset, offset + n) to the communicator once the
// fence says the backward that wrote them has finished (a communicator that
// orders itself after the backend's queue takes them at once, and reduces them
// while later layers' backward runs); the gradients stay lent to it until
// summed_gradients waits for them all.
void GradientSync::start_reduce(size_t offset, size_t n) {
  if (!comm_.orders_after_backend()) ops_.synchronize();
  if (!grads_lent_) ops_.begin_host_access(model_.grads.data());
  grads_lent_ = true;
  pending_.push_back(comm_.all_reduce_sum_start(model_.grads.data() + offset, n));
}

void GradientSync::sum_step_scalars(double* scalars) {
  if (comm_.size() == 1) return;
  ops_.synchronize();
  HostAccess lend(ops_, scalars);
  comm_.all_reduce_sum(scalars, zero() ? 3 : 2);  // whole gradients: every rank already has the same Σ g²
}

void GradientSync::share_parameters() {
  if (!zero()) return;
  ops_.synchronize();
  HostAccess lend(ops_, model_.params.data());
  comm_.all_gather(model_.params.data() + shard_begin_, model_.params.data(), shard_size_);
}

}  // namespace ctrl
