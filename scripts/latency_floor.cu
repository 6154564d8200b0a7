// What any kernel of this op costs at batch 1 before it scores anything: the launch and the
// dependent reads the contract forces (a key's page comes from the block table), timed as the
// bench times a call -- CUDA events around the launch, L2 cold (a 256 MiB write before each call,
// outside the timed region), the median of many calls. Chains:
//   launch   the kernel returns at once
//   store    one store (a logit written)
//   read     one read, then the store
//   table    the table entry, then the key bytes of the page it names, then the store: the op's
//            shortest chain (q, scales, weights and the row's end can be read beside the table)
//   window   the row's end, then the table entry it bounds, then the key: a chain that reads the
//            window before the table
// each at one CTA of 128 threads, and at one CTA an SM with ~200 KB of dynamic shared memory (as
// the opus i8 bodies launch: the carve-out and the grid's launch cost). docs/perf-notes.md,
// twenty-seventh session, says what the batch-1 kernel target (<= 5 us) is set against.
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a scripts/latency_floor.cu -o /tmp/latency_floor && /tmp/latency_floor
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

enum Chain { kLaunch, kStore, kRead, kTable, kWindow, kChains };
static const char* const kNames[kChains] = {"launch", "store", "read", "table", "window"};

// Pages of 64 keys x 64 bytes; the table names one page far from the table itself.
constexpr int kPageBytes = 64 * 64;

// The dynamic shared memory a launch asks for is reserved whether or not the kernel touches it.
template <int CHAIN>
__global__ void chain(const int* ends, const int* table, const unsigned char* kv, float* out) {
  if (CHAIN == kLaunch) return;
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int v = 1;
  if (CHAIN == kRead) v = __ldcg(ends);
  if (CHAIN == kTable) v = __ldcg(reinterpret_cast<const int*>(kv + (long long)__ldcg(table) * kPageBytes));
  if (CHAIN == kWindow) {
    const int end = __ldcg(ends);
    v = __ldcg(reinterpret_cast<const int*>(kv + (long long)__ldcg(table + (end >> 6)) * kPageBytes));
  }
  out[0] = float(v);
}

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 50;
  const size_t flush_bytes = size_t(256) << 20, pages = 4096;
  unsigned char *flush = nullptr, *kv = nullptr;
  int *ends = nullptr, *table = nullptr;
  float* out = nullptr;
  check(cudaMalloc(&flush, flush_bytes), "cudaMalloc flush");
  check(cudaMalloc(&kv, pages * kPageBytes), "cudaMalloc kv");
  check(cudaMalloc(&ends, 4096), "cudaMalloc ends");
  check(cudaMalloc(&table, 4096), "cudaMalloc table");
  check(cudaMalloc(&out, 64), "cudaMalloc out");
  const int end = 100, page = int(pages) - 7;  // the row's end names table entry 1, which names a late page
  std::vector<int> host_table(1024, 0);
  host_table[0] = page;
  host_table[end >> 6] = page;
  check(cudaMemcpy(ends, &end, sizeof end, cudaMemcpyHostToDevice), "ends");
  check(cudaMemcpy(table, host_table.data(), 4096, cudaMemcpyHostToDevice), "table");
  check(cudaMemset(kv, 1, pages * kPageBytes), "kv");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  constexpr int kBigSmem = 200 * 1024;
  void (*kernels[kChains])(const int*, const int*, const unsigned char*, float*) = {
      chain<kLaunch>, chain<kStore>, chain<kRead>, chain<kTable>, chain<kWindow>};
  for (auto k : kernels)
    check(cudaFuncSetAttribute(reinterpret_cast<const void*>(k), cudaFuncAttributeMaxDynamicSharedMemorySize, kBigSmem),
          "shared memory opt-in");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::printf("cold L2 (256 MiB written before each call), median of %d calls, event time in us\n", calls);
  std::printf("%-8s %14s %22s\n", "chain", "1 CTA x 128", "an SM x 512, 200 KB");
  for (int c = 0; c < kChains; ++c) {
    double med[2];
    for (int big = 0; big < 2; ++big) {
      std::vector<float> t;
      for (int i = 0; i < calls + 3; ++i) {
        check(cudaMemsetAsync(flush, i & 0xFF, flush_bytes), "flush");
        check(cudaEventRecord(start), "record");
        if (big) kernels[c]<<<sms, 512, kBigSmem>>>(ends, table, kv, out);
        else kernels[c]<<<1, 128, 0>>>(ends, table, kv, out);
        check(cudaEventRecord(stop), "record");
        check(cudaEventSynchronize(stop), kNames[c]);
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
        if (i >= 3) t.push_back(ms * 1000.0f);  // three warm-up calls (the module's first load)
      }
      std::sort(t.begin(), t.end());
      med[big] = t[t.size() / 2];
    }
    std::printf("%-8s %14.2f %22.2f\n", kNames[c], med[0], med[1]);
  }
  return 0;
}
