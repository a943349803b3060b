// An Ops decorator that times every call per op name, for `ctrl bench
// --profile`: shows where a training step's time goes on any backend.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace ctrl {

std::unique_ptr<Ops> make_profiled_ops(std::unique_ptr<Ops> inner);
// Forgets the calls timed so far (bench: the warm-up steps).
void profile_clear(Ops& profiled);

struct OpTime {
  std::string op;
  long calls;
  double seconds, share;  // share of all ops' seconds
};
// Every op's calls and time since the last clear, slowest first.
std::vector<OpTime> profile_times(Ops& profiled);
// As a table: op, calls, total seconds and share.
std::string profile_report(const std::vector<OpTime>& rows);

}  // namespace ctrl
