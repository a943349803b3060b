// The CUDA backend's entry points for the factory (ops/backends.cpp), in plain
// C++: nothing here needs the CUDA headers. Built only with CTRL_WITH_CUDA.
#pragma once
#include <memory>
#include <string>

#include "ops/ops.h"

namespace ctrl::cuda {

// CUDA devices this process can use; 0 when there is no driver or no device
// (never throws, prints nothing).
int device_count();
// The backend on GPU `device` (0-based, as in --device cuda:N).
std::unique_ptr<Ops> make_cuda_ops(int device);
// "CUDA 13.0 (runtime 13000, driver 13000)"-style line for reports; the driver
// part only when a driver is present.
std::string describe();

}  // namespace ctrl::cuda
