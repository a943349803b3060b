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
// GPU `device`'s compute capability as major·10 + minor (90: sm_90); 0 when
// there is no such device.
int compute_capability(int device);
// Why device_count() is 0 (ops.h, cuda_unavailable_reason); "" when a
// device is present.
std::string no_device_reason();
// The backend on GPU `device` (0-based, as in --device cuda:N).
std::unique_ptr<Ops> make_cuda_ops(int device);

}  // namespace ctrl::cuda
