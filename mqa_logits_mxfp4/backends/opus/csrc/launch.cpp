// The launcher: checks (checks.h), then the kernel translation unit's stub for the registry id.
// Plain C++ (no torch, no CUDA/HIP headers).
#include "launch.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels.h"
#include "registry.h"

namespace opus {

namespace {

const InstanceInfo& instance_for(const CallDesc& call) {
  const InstanceInfo* inst = find_instance(call.instance_id);
  if (inst == nullptr) throw std::invalid_argument("opus: no instance with registry id " + std::to_string(call.instance_id));
  if (std::strcmp(inst->arch, build_target()) != 0)
    throw std::invalid_argument(std::string("opus: ") + inst->name + " runs on " + inst->arch +
                                "; this build's kernels are for " + build_target());
  return *inst;
}

}  // namespace

const char* target() { return build_target(); }

std::string validate(const CallDesc& call) {
  const InstanceInfo& inst = instance_for(call);
  LaunchArgs args{};
  return check_call(call, inst, &args);
}

void launch(const CallDesc& call, void* stream) {
  const InstanceInfo& inst = instance_for(call);
  LaunchArgs args{};
  const std::string err = check_call(call, inst, &args);
  if (!err.empty()) throw std::invalid_argument(std::string("opus ") + inst.name + ": " + err);
  switch (launch_instance(inst.id, args, call.out.device, stream)) {
    case kLaunched:
      return;
    case kNotInThisBuild:
      throw std::invalid_argument(std::string("opus: ") + inst.name + " is not in this build");
    case kHeadsNotServed:
      throw std::invalid_argument(std::string("opus ") + inst.name + ": no kernel for heads " + std::to_string(call.heads));
    default:
      throw std::runtime_error(std::string("opus ") + inst.name + ": launch failed: " + launch_error());
  }
}

void launch_loaded(uint64_t function, const unsigned (&grid)[3], unsigned threads, unsigned smem, int device,
                   void* stream, void** params) {
  if (launch_function(function, grid, threads, smem, device, stream, params) != kLaunched)
    throw std::runtime_error(std::string("opus: launch of a loaded kernel failed: ") + launch_error());
}

}  // namespace opus
