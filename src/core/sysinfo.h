// What the machine is and what this process uses, for logs and benchmarks.
#pragma once
#include <cstdint>
#include <string>

namespace ctrl {

uint64_t peak_rss_bytes();     // high-water mark of resident memory
uint64_t current_rss_bytes();
std::string cpu_model();       // e.g. "AMD EPYC 9R14"
int hardware_threads();

}  // namespace ctrl
