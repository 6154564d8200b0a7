// The kernel translation unit: the arch body of this build's target, instantiated for each
// registry entry of that target and each head count it serves. No torch headers (CI compiles
// it alone with nvcc for sm_90 and with clang for gfx942 and gfx950).
//
// HIP builds name their target with -DOPUS_GFX=942 or 950 (jit.py: the visible device's arch):
// the host pass of a HIP compile does not see the device's __gfx9xx__ macros, and it has to know
// which kernels the launcher may route to.
//
// Shards: the op's CUDA build compiles this file OPUS_SHARDS times, as shard 0 and through
// jit.py's one-line files as shards 1 .. OPUS_SHARDS - 1 (-DOPUS_SHARD), so that nvcc's long
// passes run side by side; each shard instantiates every OPUS_SHARDS-th kernel (registry entry,
// heads) in registry order, and shard 0 also holds the host entry points, which ask each shard in
// turn. Without -DOPUS_SHARDS (HIP builds, the harness) this file is the whole body in one unit.
#include "kernels.h"

#include <atomic>
#include <climits>
#include "port.h"
#include "registry.h"

#ifndef OPUS_SHARDS
#define OPUS_SHARDS 1
#endif
#ifndef OPUS_SHARD
#define OPUS_SHARD 0
#endif
static_assert(OPUS_SHARDS >= 1 && OPUS_SHARD >= 0 && OPUS_SHARD < OPUS_SHARDS, "a shard of the kernel translation unit");

#if OPUS_HIP
#pragma clang fp contract(off)
#define OPUS_ON_sm90(...)
#if !defined(OPUS_GFX)
#error "a HIP build of the opus kernels needs -DOPUS_GFX=942 or -DOPUS_GFX=950 (its gfx target)"
#elif OPUS_GFX == 942
#include "kernel_gfx942.cuh"
#define OPUS_BUILD_TARGET "gfx942"
#define OPUS_HIP_KERNEL gfx942::mqa_logits_gfx942
#define OPUS_ON_gfx942(...) __VA_ARGS__
#define OPUS_ON_gfx950(...)
#elif OPUS_GFX == 950
#include "kernel_gfx950.cuh"
#define OPUS_BUILD_TARGET "gfx950"
#define OPUS_HIP_KERNEL gfx950::mqa_logits_gfx950
#define OPUS_ON_gfx942(...)
#define OPUS_ON_gfx950(...) __VA_ARGS__
#else
#error "OPUS_GFX must be 942 or 950"
#endif
#else
#include <cuda.h>  // CUfunction, CUstream: the driver's cuLaunchKernel (launch_function)

#include "kernel_sm90.cuh"
#include "kernel_sm90_i8.cuh"
#include "kernel_sm90_union.cuh"
#define OPUS_BUILD_TARGET "sm_90"
#define OPUS_ON_sm90(...) __VA_ARGS__
#define OPUS_ON_gfx942(...)
#define OPUS_ON_gfx950(...)
#endif

namespace opus {

// The last runtime error of the calling thread's launches (launch_error()): one for all shards.
extern thread_local opus_error_t last_error;
#if OPUS_SHARD == 0
thread_local opus_error_t last_error = opus_success;
#endif

namespace {

// A shard's answer for an instance whose kernel for the call's heads another shard compiled.
constexpr int kInAnotherShard = -1;

// The body's FAMILY template argument, in the codes of this build's body. Registry rows of other
// arches expand to nothing (OPUS_ON_<arch>), so their families need no code here.
#if OPUS_HIP && OPUS_GFX == 942
#define OPUS_FAMILY_f16 gfx942::kF16
#define OPUS_FAMILY_fp8 gfx942::kFp8
#define OPUS_FAMILY_fp8fold gfx942::kFp8Fold
#elif OPUS_HIP
#define OPUS_FAMILY_mxf4 gfx950::kMxf4
#define OPUS_FAMILY_mxsc gfx950::kMxsc
#else
#define OPUS_FAMILY_f16 sm90::kF16
#define OPUS_FAMILY_fp8 sm90::kFp8
#define OPUS_FAMILY_fold sm90::kFold
#define OPUS_FAMILY_i8 sm90::kI8
#define OPUS_FAMILY_i8u sm90::kI8U
#define OPUS_FAMILY_i8c sm90::kI8C
#define OPUS_FAMILY_i8uc sm90::kI8UC
#define OPUS_FAMILY_i8w sm90::kI8W
#endif

// Whether this shard compiles the kernel of registry entry `id` at `heads` heads: the kernels of
// this build's target are numbered in registry order (each entry's heads from 16 up), and shard k
// takes every OPUS_SHARDS-th from k, so the heavy families spread over the shards.
constexpr bool in_this_shard(int id, int heads) {
  constexpr int entries[][2] = {
#define OPUS_ENTRY(id, name, arch, family, rows, warps, keys, stages, ctas, heads) OPUS_ON_##arch({id, heads},)
      OPUS_INSTANCES(OPUS_ENTRY)
#undef OPUS_ENTRY
      {-1, 0}};
  int index = 0;
  for (const auto& e : entries)
    for (int h = 0; h < 4; ++h)
      if ((e[1] >> h) & 1) {
        if (e[0] == id && (16 << h) == heads) return index % OPUS_SHARDS == OPUS_SHARD;
        ++index;
      }
  return false;
}

#if !OPUS_HIP
// The sm_90 kernel of a family and its shared memory: the mma.sync bodies (kernel_sm90.cuh), or
// the wgmma body whose warpgroup 0 produces and the others consume (kernel_sm90_i8.cuh).
template <int FAMILY, int R, int H, int WARPS, int CTAS,
          bool I8 = FAMILY == sm90::kI8 || FAMILY == sm90::kI8U || FAMILY == sm90::kI8C || FAMILY == sm90::kI8UC ||
                    FAMILY == sm90::kI8W>
struct SmBody {
  static constexpr bool uni = false;
  static constexpr int smem = sm90::smem_bytes<FAMILY, R, H, WARPS>();
  static auto kernel(bool /*prefill*/) { return sm90::mqa_logits_sm90<FAMILY, R, H, WARPS, CTAS>; }
};
// i8 with 20 warps: the split body; its consumers as registry.h's i8_consumers counts them.
template <int FAMILY, int R, int H, int WARPS, int CTAS>
struct SmBody<FAMILY, R, H, WARPS, CTAS, true> {
  static_assert(WARPS % 4 == 0 && CTAS == 1, "i8: whole warpgroups, one CTA an SM");
  static constexpr bool split = WARPS == 20;
  static constexpr bool uni = FAMILY == sm90::kI8U || FAMILY == sm90::kI8UC;  // the union body (kernel_sm90_union.cuh's pre-pass first)
  static constexpr bool canon = FAMILY == sm90::kI8C || FAMILY == sm90::kI8UC;  // the fast path's head sum in the canonical order
  static_assert(!(split && uni), "the union body is the fused i8 body's");
  static constexpr int cons = i8_consumers(WARPS);
  static constexpr int smem = sm90::i8_smem_bytes<R, H, cons, split, uni>();
  // a Prefill launch's own kernel where the shape has one (I8Shape::PREFILL_WHOLE); family i8w runs
  // that form in every mode (its Table and Free launches too), under a kernel name of its own
  static constexpr bool prefill_form = !uni && sm90::I8Shape<R, H, cons, split>::PREFILL_WHOLE;
  static constexpr bool every_mode = FAMILY == sm90::kI8W;
  static_assert(!every_mode || prefill_form, "i8w: a shape with a Prefill form (registry.h's heads mask)");
  static auto kernel(bool prefill) {
    if constexpr (every_mode) {  // (an else, so i8w's shard instantiates no other form)
      return sm90::mqa_logits_sm90_i8<R, H, cons, split, uni, canon, true, true>;
    } else {
      if constexpr (prefill_form)
        if (prefill) return sm90::mqa_logits_sm90_i8<R, H, cons, split, uni, canon, true>;
      return sm90::mqa_logits_sm90_i8<R, H, cons, split, uni, canon>;
    }
  }
};

// Dynamic shared memory above 48 KB is opt-in, once per kernel and device: `opted_in` is that
// kernel's bit set of devices done. false: the runtime refused (last_error says why).
bool opt_in_smem(std::atomic<unsigned long long>& opted_in, const void* kernel, int bytes) {
  int device = 0;
  if ((last_error = cudaGetDevice(&device)) != opus_success) return false;
  const unsigned long long bit = 1ull << (device & 63);
  if (!(opted_in.load(std::memory_order_relaxed) & bit)) {
    if ((last_error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)) != opus_success)
      return false;
    opted_in.fetch_or(bit, std::memory_order_relaxed);
  }
  return true;
}

// The union body's pre-pass (kernel_sm90_union.cuh), then the body on the union's view of the
// launch: each segment a sequence, its union as that sequence's table, the union's keys as the
// rows' ends, no row starts.
int union_prepass(const LaunchArgs& args, opus_stream_t stream) {
  static std::atomic<unsigned long long> opted_in{0};
  // opted in for the most any call asks (OPUS_UNION_MAX_ENTRIES; its static_assert keeps that
  // below the limit less the static part); each launch asks for its own capacity's
  if (!opt_in_smem(opted_in, reinterpret_cast<const void*>(sm90::mqa_union_prepass),
                   sm90::union_smem_bytes(OPUS_UNION_MAX_ENTRIES)))
    return kLaunchFailed;
  // one CTA a segment, at least one: the one that writes uqsl's last entry when there is none
  sm90::mqa_union_prepass<<<args.usegs > 0 ? args.usegs : 1, sm90::kUnionThreads, sm90::union_smem_bytes(args.ucap),
                            stream>>>(args);
  last_error = opus_get_last_error();
  return last_error == opus_success ? kLaunched : kLaunchFailed;
}
LaunchArgs union_view(const LaunchArgs& a) {
  LaunchArgs u = a;
  u.qsl = a.uqsl;  // each segment a sequence
  u.num_seqs = a.usegs;
  u.block_tables = a.utab;
  u.stride_bt = a.ucap;
  u.bt_cols = a.ucap;
  u.gather = 0;
  u.row_ends = a.uends;
  u.row_starts = nullptr;
  const long long keys = (long long)a.ucap * a.page_size * a.pages_per_block;
  u.key_cap = (int32_t)(keys < INT_MAX ? keys : INT_MAX);
  return u;
}
#endif

template <int FAMILY, int R, int H, int WARPS, int CTAS>
int launch_one(const LaunchArgs& args, opus_stream_t stream) {
  const dim3 grid(args.grid_x, args.mode == kModePrefill ? args.parts : 1);
#if OPUS_HIP
  const dim3 block(WARPS * OPUS_WARP);
  hipLaunchKernelGGL((OPUS_HIP_KERNEL<FAMILY, R, H, WARPS, CTAS>), grid, block, 0, stream, args);  // static LDS only
#else
  const dim3 block(WARPS * 32);
  using Body = SmBody<FAMILY, R, H, WARPS, CTAS>;
  constexpr int smem = Body::smem;
  static_assert(smem <= 227 * 1024, "shared memory of one CTA exceeds sm_90's 227 KB");
  const bool prefill = args.mode == kModePrefill;
  auto kernel = Body::kernel(prefill);
  static std::atomic<unsigned long long> opted_in[2];  // each form's devices (zero: static storage)
  if (!opt_in_smem(opted_in[prefill], reinterpret_cast<const void*>(kernel), smem)) return kLaunchFailed;
  if constexpr (Body::uni) {  // the pre-pass once the body can launch: nothing runs alone
    if (union_prepass(args, stream) != kLaunched) return kLaunchFailed;
    kernel<<<grid, block, smem, stream>>>(union_view(args));
  } else {
    kernel<<<grid, block, smem, stream>>>(args);
  }
#endif
  last_error = opus_get_last_error();
  return last_error == opus_success ? kLaunched : kLaunchFailed;
}

// Registry entry ID's kernel for H heads, where this shard compiles it.
template <int ID, int FAMILY, int R, int H, int WARPS, int CTAS>
int launch_heads(const LaunchArgs& args, opus_stream_t stream) {
  if constexpr (in_this_shard(ID, H))
    return launch_one<FAMILY, R, H, WARPS, ctas_for_heads(CTAS, H)>(args, stream);
  else
    return kInAnotherShard;
}

template <int ID, int FAMILY, int R, int WARPS, int CTAS, unsigned HEADS>
int launch_rows(const LaunchArgs& args, opus_stream_t stream) {
  switch (args.heads) {
    case 16: if constexpr ((HEADS & 1u) != 0) return launch_heads<ID, FAMILY, R, 16, WARPS, CTAS>(args, stream); break;
    case 32: if constexpr ((HEADS & 2u) != 0) return launch_heads<ID, FAMILY, R, 32, WARPS, CTAS>(args, stream); break;
    case 64: if constexpr ((HEADS & 4u) != 0) return launch_heads<ID, FAMILY, R, 64, WARPS, CTAS>(args, stream); break;
    case 128: if constexpr ((HEADS & 8u) != 0) return launch_heads<ID, FAMILY, R, 128, WARPS, CTAS>(args, stream); break;
    default: break;
  }
  return kHeadsNotServed;
}

// This shard's launch of instance `id` (kInAnotherShard: another shard has the call's kernel).
int launch_in_shard(int id, const LaunchArgs& args, opus_stream_t s) {
  switch (id) {
#define OPUS_CASE(id, name, arch, family, rows, warps, keys, stages, ctas, heads) \
    OPUS_ON_##arch(case id: return launch_rows<id, OPUS_FAMILY_##family, rows, warps, ctas, heads>(args, s);)
    OPUS_INSTANCES(OPUS_CASE)
#undef OPUS_CASE
    default: break;
  }
  return kNotInThisBuild;
}

}  // namespace

// Every shard's launch_in_shard, each set by its shard as the library loads (before any call).
using ShardLaunch = int (*)(int, const LaunchArgs&, opus_stream_t);
extern ShardLaunch shard_launch[OPUS_SHARDS];
#if OPUS_SHARD == 0
ShardLaunch shard_launch[OPUS_SHARDS];
#endif
namespace {
[[maybe_unused]] const bool shard_registered = (shard_launch[OPUS_SHARD] = launch_in_shard, true);
}  // namespace

#if OPUS_SHARD == 0
const char* build_target() { return OPUS_BUILD_TARGET; }

const char* launch_error() { return opus_error_string(last_error); }

namespace {

int launch_by_id(int id, const LaunchArgs& args, opus_stream_t s) {
  for (ShardLaunch launch : shard_launch) {
    const int status = launch != nullptr ? launch(id, args, s) : kInAnotherShard;
    if (status != kInAnotherShard) return status;
  }
  return kNotInThisBuild;  // a shard missing from the link: not its kernels
}

}  // namespace

namespace {

// launch() on GPU `device`, the calling thread's current device restored afterwards.
template <class Launch>
int on_device(int device, Launch&& launch) {
  int current = -1;
  last_error = opus_get_device(&current);
  if (last_error != opus_success) return kLaunchFailed;
  if (current != device && (last_error = opus_set_device(device)) != opus_success) return kLaunchFailed;
  const int status = launch();
  if (current != device) {
    const opus_error_t restore = opus_set_device(current);
    if (status == kLaunched && restore != opus_success) {
      last_error = restore;
      return kLaunchFailed;
    }
  }
  return status;
}

#if OPUS_CUDA
// The driver's cuLaunchKernel, through the runtime (no link against libcuda): null if absent.
using CuLaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**);
CuLaunchKernel driver_launch() {
  static const CuLaunchKernel fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const bool ok = cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 12000, cudaEnableDefault, &found) == cudaSuccess &&
                    found == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<CuLaunchKernel>(p) : nullptr;
  }();
  return fn;
}
#endif

}  // namespace

int launch_instance(int id, const LaunchArgs& args, int device, void* stream) {
  return on_device(device, [&] { return launch_by_id(id, args, static_cast<opus_stream_t>(stream)); });
}

int launch_function(uint64_t function, const unsigned* grid, unsigned threads, unsigned smem, int device,
                    void* stream, void** params) {
#if OPUS_HIP
  (void)function, (void)grid, (void)threads, (void)smem, (void)device, (void)stream, (void)params;
  last_error = hipErrorNotSupported;
  return kLaunchFailed;
#else
  const CuLaunchKernel launch = driver_launch();
  if (launch == nullptr) {
    last_error = cudaErrorNotSupported;
    return kLaunchFailed;
  }
  return on_device(device, [&] {
    auto attempt = [&] {
      return launch(reinterpret_cast<CUfunction>(function), grid[0], grid[1], grid[2], threads, 1, 1, smem,
                    static_cast<CUstream>(stream), params, nullptr);
    };
    CUresult r = attempt();
    // a thread that has not used the device yet has no current context: the runtime binds the
    // device's primary one (where torch and Triton load everything), then once more
    if (r == CUDA_ERROR_INVALID_CONTEXT && cudaSetDevice(device) == cudaSuccess) r = attempt();
    // the runtime's error codes take the driver's values for the errors a launch can return
    last_error = static_cast<cudaError_t>(r);
    return r == CUDA_SUCCESS ? kLaunched : kLaunchFailed;
  });
#endif
}

#endif  // OPUS_SHARD == 0

}  // namespace opus
