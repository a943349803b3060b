// An Ops decorator that times every call per op name, for `ctrl bench
// --profile`: shows where a training step's time goes on any backend.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "ops/ops.h"

namespace ctrl {

std::unique_ptr<Ops> make_profiled_ops(std::unique_ptr<Ops> inner);
// Table of op, calls, total seconds and share, slowest first.
std::string profile_report(Ops& profiled);

}  // namespace ctrl
