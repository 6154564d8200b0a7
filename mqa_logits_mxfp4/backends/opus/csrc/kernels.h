// The kernel translation unit's host entry (no torch, no CUDA/HIP types in the signature).
#pragma once

#include "args.h"

namespace opus {

enum LaunchStatus : int {
  kLaunched = 0,
  kNotInThisBuild = 1,   // the instance belongs to another target than this build's
  kHeadsNotServed = 2,   // the instance has no kernel for args.heads
  kLaunchFailed = 3,     // the runtime refused the launch (message in launch_error())
};

// The target this build's kernels are for: "sm_90" (CUDA), "gfx942" or "gfx950" (HIP).
const char* build_target();
// Launch instance `id` (registry.h) on GPU `device` and `stream` (a cudaStream_t /
// hipStream_t of that device); the calling thread's current device is restored afterwards.
int launch_instance(int id, const LaunchArgs& args, int device, void* stream);
const char* launch_error();
// Launch a kernel loaded elsewhere in this process (a CUfunction handle: the Triton backend's
// compiled kernel, for dispatch's hot path) on GPU `device` and `stream`: grid[3] CTAs of
// `threads` threads, `smem` bytes of dynamic shared memory, `params` as cuLaunchKernel takes
// them. CUDA builds only: a HIP build returns kLaunchFailed.
int launch_function(uint64_t function, const unsigned* grid, unsigned threads, unsigned smem, int device,
                    void* stream, void** params);

}  // namespace opus
