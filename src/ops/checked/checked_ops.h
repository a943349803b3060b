// The checked backend (checked_ops.cpp): wraps the CPU backend so that host
// code cannot read or write its memory.
#pragma once
#include <memory>

#include "ops/ops.h"

namespace ctrl {

std::unique_ptr<Ops> make_checked_ops(std::unique_ptr<Ops> cpu);

}  // namespace ctrl
