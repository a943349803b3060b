// Full training steps on synthetic tokens, for measuring rather than
// learning: `ctrl bench` times them, and the bf16 probe compares the two
// precisions with them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "plan/plan.h"
#include "train/batches.h"
#include "train/optimizer.h"

namespace ctrl {

// The config's model at its micro-batch and precision, with its optimizer,
// on random tokens under one control code; with train.teacher, distilled
// from that checkpoint as `ctrl train --teacher` does (the teacher forward
// only, in the student's precision; only `ctrl bench` passes one).
class SyntheticSteps {
 public:
  SyntheticSteps(const Config& config, Ops& ops);
  // One step of the next micro-batch: forward, backward, clipping, optimizer,
  // then ops.synchronize() so that a GPU's step has finished, not just been
  // queued. Returns the mean loss. Callers time it.
  double step();
  Model& model() { return model_; }
  const Model* teacher() const { return teacher_.get(); }

 private:
  Config config_;
  Ops& ops_;
  Model model_;
  std::unique_ptr<Model> teacher_;
  DeviceArray<double> kl_sum_;  // the teacher's KL, which the distilling head adds up
  Optimizer optimizer_;
  Batches batches_;
  std::vector<int32_t> tokens_, targets_;
  int64_t steps_ = 0;
};

// bf16 against fp32 as whole training steps on this CPU, conversions and
// all: the products alone cannot show it where bf16 runs widened to fp32
// products, which match fp32's speed while the step pays for the
// conversions. The config's model at its micro-batch, a bf16 and an fp32
// copy side by side (each with the distillation teacher when the config has
// one, in its precision), alternating so that drift on a shared machine hits
// both; each gets one untimed step, then timed steps until `seconds` of them
// have passed (at least one each), and its fastest counts. The copies are
// cut to as many layers as fit in `room_bytes` (0: a quarter of the memory
// available), since the run's own model is beside them; the head's share of
// a step grows as layers go, so a cut model's ratio is only near the whole
// one's. Not measured at all (`skipped` says why) when not even one layer fits.
plan::Bf16StepTimes probe_bf16_steps(const Config& config, Ops& ops, double seconds, uint64_t room_bytes = 0);

}  // namespace ctrl
