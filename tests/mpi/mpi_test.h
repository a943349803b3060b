// Shared by the MPI tests: the one communicator of this test process (MPI can
// be initialised once per process), made by test_main.cpp. Under mpiexec it is
// the MPI communicator; run directly it is the single-process one.
#pragma once
#include "dist/communicator.h"

namespace ctrl::test {
Communicator& comm();
}
