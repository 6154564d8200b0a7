// Host entry used by the bindings: check a call, then launch it by registry id.
#pragma once

#include "checks.h"

namespace opus {

// Raises std::invalid_argument (a Python ValueError through pybind11) naming the broken rule,
// or std::runtime_error when the runtime refuses the launch. `stream`: cudaStream_t / hipStream_t.
void launch(const CallDesc& call, void* stream);
// The same checks without a launch: "" when the call is valid, else the broken rule.
std::string validate(const CallDesc& call);
const char* target();
// A kernel loaded elsewhere in the process (kernels.h launch_function), on GPU `device`; raises
// std::runtime_error when the driver refuses the launch.
void launch_loaded(uint64_t function, const unsigned (&grid)[3], unsigned threads, unsigned smem, int device,
                   void* stream, void** params);

}  // namespace opus
