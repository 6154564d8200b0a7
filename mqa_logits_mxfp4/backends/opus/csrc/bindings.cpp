// pybind11 bindings: the only translation unit with torch headers, and only the CPU-side
// ones (torch/extension.h, c10's device guard interface), so it compiles against any torch
// build. Tensors become plain descriptions (checks.h); launch() takes the raw handle of torch's
// current stream from the caller, Launcher::run() asks c10 for it, and the kernel TU launches on
// the tensors' device.
#include <pybind11/stl.h>  // std::optional<Tensor> from None
#include <torch/extension.h>

#include <array>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "launch.h"
#include "registry.h"

namespace {

opus::TensorDesc describe(const at::Tensor& t) {
  opus::TensorDesc d;
  d.ptr = t.data_ptr();
  switch (t.scalar_type()) {
    case at::kByte: d.dtype = opus::kU8; break;
    case at::kInt: d.dtype = opus::kI32; break;
    case at::kLong: d.dtype = opus::kI64; break;
    case at::kFloat: d.dtype = opus::kF32; break;
    case at::kBFloat16: d.dtype = opus::kBF16; break;
    case at::kHalf: d.dtype = opus::kF16; break;
    default: d.dtype = opus::kOtherDType; break;
  }
  d.ndim = (int32_t)t.dim();
  for (int i = 0; i < 3 && i < t.dim(); ++i) {
    d.sizes[i] = t.size(i);
    d.strides[i] = t.stride(i);
  }
  d.device = t.is_cuda() ? (int32_t)t.get_device() : -1;
  return d;
}
// An optional tensor: absent (TensorDesc's default) for None.
opus::TensorDesc describe(const std::optional<at::Tensor>& t) { return t.has_value() ? describe(*t) : opus::TensorDesc{}; }
// q, q_scale, kv_cache, kv_scale: torch's float4_e2m1fn_x2 / float8_e8m0fnu are one-byte views of
// the same bytes, which the op's checks accept as uint8 (formats.as_uint8), so they are described
// as uint8: a caller holding those dtypes gets the hot path, not only the uint8 views it accepted.
opus::TensorDesc describe_bytes(const at::Tensor& t) {
  opus::TensorDesc d = describe(t);
  if (t.scalar_type() == at::ScalarType::Float4_e2m1fn_x2 || t.scalar_type() == at::ScalarType::Float8_e8m0fnu)
    d.dtype = opus::kU8;
  return d;
}

opus::CallDesc make_call(int64_t instance_id, int64_t mode, const at::Tensor& q, const at::Tensor& q_scale,
                         const at::Tensor& kv_cache, const at::Tensor& kv_scale, const at::Tensor& weights,
                         const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                         const at::Tensor& row_ends, const at::Tensor& out,
                         const std::optional<at::Tensor>& out_offsets, const std::optional<at::Tensor>& records,
                         int64_t heads, int64_t page_size, int64_t pages_per_block, bool gather,
                         int64_t max_seq_len, int64_t grid_x, int64_t parts,
                         const std::optional<at::Tensor>& row_starts, int64_t max_qlen) {
  opus::CallDesc c;
  c.instance_id = (int32_t)instance_id;
  c.mode = (int32_t)mode;
  c.q = describe_bytes(q);
  c.q_scale = describe_bytes(q_scale);
  c.kv = describe_bytes(kv_cache);
  c.kv_scale = describe_bytes(kv_scale);
  c.weights = describe(weights);
  c.block_tables = describe(block_tables);
  c.qsl = describe(query_start_loc);
  c.row_ends = describe(row_ends);
  c.out = describe(out);
  c.out_offsets = describe(out_offsets);
  c.records = describe(records);
  c.row_starts = describe(row_starts);
  auto narrow = [](int64_t v) { return (int32_t)(v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v); };
  c.heads = narrow(heads);
  c.page_size = narrow(page_size);
  c.pages_per_block = narrow(pages_per_block);
  c.gather = gather ? 1 : 0;
  c.max_seq_len = narrow(max_seq_len);
  c.grid_x = narrow(grid_x);
  c.parts = narrow(parts);
  c.max_qlen = narrow(max_qlen);
  return c;
}

// Whether registry id `instance_id` is a union body's (it needs union_scratch).
bool is_union(int64_t instance_id) {
  const opus::InstanceInfo* inst = opus::find_instance((int)instance_id);
  return inst != nullptr && opus::is_union_family(*inst);
}

// A union body's scratch words (args.h: union_scratch_ints), at least one; 0 where the call's
// shapes are for the checks to reject (they name the rule).
int64_t union_scratch_size(const opus::CallDesc& c, const at::Tensor& block_tables,
                           const at::Tensor& query_start_loc, const at::Tensor& row_ends) {
  if (block_tables.dim() != 2 || query_start_loc.dim() != 1 || row_ends.dim() != 1 || c.max_qlen < 1 ||
      c.page_size < 1 || c.pages_per_block < 1)
    return 0;
  const opus::InstanceInfo* inst = opus::find_instance((int)c.instance_id);
  if (inst == nullptr) return 0;
  const opus::UnionGeometry g = opus::union_geometry(
      c.max_qlen, inst->rows, block_tables.size(1), c.max_seq_len, (int64_t)c.page_size * c.pages_per_block,
      std::max<int64_t>(query_start_loc.size(0) - 1, 0), row_ends.size(0), opus::kUnionMaxEntries);
  if (!g.ok) return 0;
  return std::max<int64_t>(opus::union_scratch_ints(g, row_ends.size(0)), 1);
}

// A union body's scratch, allocated on out's device and torch's current stream (the caching
// allocator: stream-ordered reuse after the launch); undefined where the checks will reject the call.
at::Tensor union_scratch(opus::CallDesc& c, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
                         const at::Tensor& row_ends, const at::Tensor& out) {
  const int64_t n = union_scratch_size(c, block_tables, query_start_loc, row_ends);
  if (n == 0) return at::Tensor();
  at::Tensor t = at::empty({n}, out.options().dtype(at::kInt));
  c.scratch = describe(t);
  return t;
}

void launch(int64_t instance_id, int64_t mode, const at::Tensor& q, const at::Tensor& q_scale,
            const at::Tensor& kv_cache, const at::Tensor& kv_scale, const at::Tensor& weights,
            const at::Tensor& block_tables, const at::Tensor& query_start_loc, const at::Tensor& row_ends,
            const at::Tensor& out, const std::optional<at::Tensor>& out_offsets,
            const std::optional<at::Tensor>& records, int64_t heads, int64_t page_size, int64_t pages_per_block,
            bool gather, int64_t max_seq_len, int64_t grid_x, int64_t parts, int64_t stream,
            const std::optional<at::Tensor>& path_stats, const std::optional<at::Tensor>& row_starts,
            int64_t max_qlen) {
  opus::CallDesc c = make_call(instance_id, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
                               query_start_loc, row_ends, out, out_offsets, records, heads, page_size,
                               pages_per_block, gather, max_seq_len, grid_x, parts, row_starts, max_qlen);
  c.path_stats = describe(path_stats);
  if (!out.is_cuda()) throw std::invalid_argument("opus: out must be on a GPU; got " + out.device().str());
  const at::Tensor scratch =
      is_union(instance_id) ? union_scratch(c, block_tables, query_start_loc, row_ends, out) : at::Tensor();
  opus::launch(c, reinterpret_cast<void*>(static_cast<intptr_t>(stream)));
}

// An input signature: the 12 tensor arguments' descriptions in the op's order (q, q_scale,
// kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends, out, out_offsets, records,
// row_starts), data pointers cleared.
using Signature = std::array<opus::TensorDesc, 12>;
// Signatures a launcher remembers; past this many it forgets them all and accepts afresh.
constexpr size_t kMaxSignatures = 64;

Signature cleared(Signature s) {
  for (opus::TensorDesc& t : s) t.ptr = nullptr;
  return s;
}

Signature signature(const opus::CallDesc& c) {
  return cleared({c.q, c.q_scale, c.kv, c.kv_scale, c.weights, c.block_tables, c.qsl, c.row_ends, c.out,
                  c.out_offsets, c.records, c.row_starts});
}

bool same(const Signature& a, const Signature& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    const opus::TensorDesc &x = a[i], &y = b[i];
    if (x.dtype != y.dtype || x.ndim != y.ndim || x.device != y.device) return false;
    for (int d = 0; d < 3; ++d)
      if (x.sizes[d] != y.sizes[d] || x.strides[d] != y.strides[d]) return false;
  }
  return true;
}

// torch's current stream of `device` (a CUDA device type, which a ROCm torch answers for HIP too).
void* current_stream(const c10::Device& device) {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle();
}

// The op's hot path (dispatch/api.py): one config and mode's fixed arguments, and the input
// signatures (dtype, sizes, strides, device of every tensor) the op's Python checks accepted for
// them. run() launches a call whose signature was accepted -- the launcher's own checks
// (checks.h) still run -- on torch's current stream of out's device, and returns false, having
// launched nothing, for any other: the Python path then checks it in full and accepts it.
class Launcher {
 public:
  Launcher(int64_t instance_id, int64_t mode, int64_t heads, int64_t page_size, int64_t pages_per_block,
           bool gather, int64_t max_seq_len, int64_t grid_x, int64_t parts, int64_t max_qlen)
      : instance_id_(instance_id), mode_(mode), heads_(heads), page_size_(page_size),
        pages_per_block_(pages_per_block), gather_(gather), max_seq_len_(max_seq_len), grid_x_(grid_x),
        parts_(parts), max_qlen_(max_qlen), union_(is_union(instance_id)) {}

  bool run(const at::Tensor& q, const at::Tensor& q_scale, const at::Tensor& kv_cache, const at::Tensor& kv_scale,
           const at::Tensor& weights, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
           const at::Tensor& row_ends, const at::Tensor& out, const std::optional<at::Tensor>& out_offsets,
           const std::optional<at::Tensor>& records, const std::optional<at::Tensor>& row_starts) const {
    opus::CallDesc c = call(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
                            out, out_offsets, records, row_starts);
    const Signature sig = signature(c);  // once, not once an accepted entry
    bool known = false;
    for (const Signature& s : accepted_) known = known || same(s, sig);
    if (!known) return false;
    const at::Tensor scratch = union_ ? union_scratch(c, block_tables, query_start_loc, row_ends, out) : at::Tensor();
    opus::launch(c, current_stream(out.device()));
    return true;
  }

  // Remember this call's signature (after the op's checks passed). The op passes the byte tensors
  // on as uint8 views; run() describes their float4 / e8m0 forms alike (describe_bytes).
  void accept(const at::Tensor& q, const at::Tensor& q_scale, const at::Tensor& kv_cache, const at::Tensor& kv_scale,
              const at::Tensor& weights, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
              const at::Tensor& row_ends, const at::Tensor& out, const std::optional<at::Tensor>& out_offsets,
              const std::optional<at::Tensor>& records, const std::optional<at::Tensor>& row_starts) {
    const opus::CallDesc c = call(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
                                  out, out_offsets, records, row_starts);
    for (const opus::TensorDesc* t : {&c.q, &c.q_scale, &c.kv, &c.kv_scale})
      if (t->dtype != opus::kU8) return;
    const Signature s = signature(c);
    for (const opus::TensorDesc& t : s)
      if (t.ndim > 3) return;  // describe() keeps three dims: never a signature it cannot tell apart
    for (const Signature& known : accepted_)
      if (same(known, s)) return;
    if (accepted_.size() >= kMaxSignatures) accepted_.clear();
    accepted_.push_back(s);
  }

  size_t signatures() const { return accepted_.size(); }

 private:
  opus::CallDesc call(const at::Tensor& q, const at::Tensor& q_scale, const at::Tensor& kv_cache,
                      const at::Tensor& kv_scale, const at::Tensor& weights, const at::Tensor& block_tables,
                      const at::Tensor& query_start_loc, const at::Tensor& row_ends, const at::Tensor& out,
                      const std::optional<at::Tensor>& out_offsets, const std::optional<at::Tensor>& records,
                      const std::optional<at::Tensor>& row_starts) const {
    return make_call(instance_id_, mode_, q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc,
                     row_ends, out, out_offsets, records, heads_, page_size_, pages_per_block_, gather_,
                     max_seq_len_, grid_x_, parts_, row_starts, max_qlen_);
  }

  int64_t instance_id_, mode_, heads_, page_size_, pages_per_block_;
  bool gather_;
  int64_t max_seq_len_, grid_x_, parts_, max_qlen_;
  bool union_;  // a union body: each run allocates its scratch (looked up once, not once a call)
  std::vector<Signature> accepted_;
};

// The op's hot path for a kernel another compiler built and loaded: the Triton backend's, whose
// own launcher parses its ~27 Python arguments on every call (docs/perf-notes.md, ninth session).
// For each input signature the op's checks accepted (with the pointers' 16-byte alignment, which
// Triton specializes on), the Triton backend hands over its compiled kernel's handle, grid, block,
// dynamic shared memory and parameter plan; run() fills in the call's pointers and launches on
// torch's current stream of out's device, or returns false, having launched nothing.
class FunctionLauncher {
 public:
  // A plan entry is (kind, value): kPointer, the data pointer of run()'s tensor `value` (0..11, in
  // its argument order); kI32 / kI64, the constant `value`; kNull, a null pointer.
  enum Kind : int64_t { kPointer = 0, kI32 = 1, kI64 = 2, kNull = 3 };

  bool run(const at::Tensor& q, const at::Tensor& q_scale, const at::Tensor& kv_cache, const at::Tensor& kv_scale,
           const at::Tensor& weights, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
           const at::Tensor& row_ends, const at::Tensor& out, const std::optional<at::Tensor>& out_offsets,
           const std::optional<at::Tensor>& records, const std::optional<at::Tensor>& row_starts) const {
    const Signature d = described(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
                                  out, out_offsets, records, row_starts);
    const Signature sig = cleared(d);
    for (const Entry& e : entries_) {
      if (!same(e.sig, sig) || aligned(e.plan, d) != e.aligned) continue;
      std::array<uint64_t, kMaxParams> slots{};
      std::array<void*, kMaxParams> params{};
      for (size_t j = 0; j < e.plan.size(); ++j) {
        const auto [kind, value] = e.plan[j];
        if (kind == kPointer) slots[j] = reinterpret_cast<uintptr_t>(d[value].ptr);
        else if (kind == kI32) { const int32_t v = static_cast<int32_t>(value); std::memcpy(&slots[j], &v, sizeof v); }
        else if (kind == kI64) { const int64_t v = value; std::memcpy(&slots[j], &v, sizeof v); }
        params[j] = &slots[j];
      }
      opus::launch_loaded(e.function, e.grid, e.threads, e.smem, out.get_device(), current_stream(out.device()),
                          params.data());
      return true;
    }
    return false;
  }

  // Remember this call's signature and pointer alignment (after the op's checks passed and the
  // backend launched it) with the kernel that serves them.
  void accept(const at::Tensor& q, const at::Tensor& q_scale, const at::Tensor& kv_cache, const at::Tensor& kv_scale,
              const at::Tensor& weights, const at::Tensor& block_tables, const at::Tensor& query_start_loc,
              const at::Tensor& row_ends, const at::Tensor& out, const std::optional<at::Tensor>& out_offsets,
              const std::optional<at::Tensor>& records, const std::optional<at::Tensor>& row_starts,
              uint64_t function, const std::array<int64_t, 3>& grid, int64_t threads, int64_t smem,
              const std::vector<std::pair<int64_t, int64_t>>& plan) {
    if (plan.size() > kMaxParams) throw std::invalid_argument("opus FunctionLauncher: more than 64 kernel parameters");
    for (const auto& [kind, value] : plan)
      if (kind < kPointer || kind > kNull || (kind == kPointer && (value < 0 || value >= 12)))
        throw std::invalid_argument("opus FunctionLauncher: a plan entry is (0, tensor 0..11), (1 | 2, value) or (3, 0)");
    const Signature d = described(q, q_scale, kv_cache, kv_scale, weights, block_tables, query_start_loc, row_ends,
                                  out, out_offsets, records, row_starts);
    for (const opus::TensorDesc& t : d)
      if (t.ndim > 3) return;  // three dims described: never a signature it cannot tell apart
    for (const auto& [kind, value] : plan)
      if (kind == kPointer && !d[value].present()) return;  // the plan names an absent tensor: not served
    Entry e{cleared(d), aligned(plan, d), function, {}, static_cast<unsigned>(threads), static_cast<unsigned>(smem), plan};
    for (int i = 0; i < 3; ++i) e.grid[i] = static_cast<unsigned>(grid[i]);
    for (const Entry& known : entries_)
      if (same(known.sig, e.sig) && known.aligned == e.aligned) return;
    if (entries_.size() >= kMaxSignatures) entries_.clear();
    entries_.push_back(std::move(e));
  }

  size_t signatures() const { return entries_.size(); }

 private:
  static constexpr size_t kMaxParams = 64;
  struct Entry {
    Signature sig;
    uint64_t aligned;  // bit j: plan entry j is a pointer on a 16-byte boundary
    uint64_t function;
    unsigned grid[3];
    unsigned threads, smem;
    std::vector<std::pair<int64_t, int64_t>> plan;
  };

  static Signature described(const at::Tensor& q, const at::Tensor& q_scale, const at::Tensor& kv_cache,
                             const at::Tensor& kv_scale, const at::Tensor& weights, const at::Tensor& block_tables,
                             const at::Tensor& query_start_loc, const at::Tensor& row_ends, const at::Tensor& out,
                             const std::optional<at::Tensor>& out_offsets, const std::optional<at::Tensor>& records,
                             const std::optional<at::Tensor>& row_starts) {
    return {describe_bytes(q), describe_bytes(q_scale), describe_bytes(kv_cache), describe_bytes(kv_scale),
            describe(weights), describe(block_tables), describe(query_start_loc), describe(row_ends), describe(out),
            describe(out_offsets), describe(records), describe(row_starts)};
  }
  static uint64_t aligned(const std::vector<std::pair<int64_t, int64_t>>& plan, const Signature& d) {
    uint64_t bits = 0;
    for (size_t j = 0; j < plan.size(); ++j)
      if (plan[j].first == kPointer && reinterpret_cast<uintptr_t>(d[plan[j].second].ptr) % 16 == 0) bits |= 1ull << j;
    return bits;
  }

  std::vector<Entry> entries_;
};

std::string validate(int64_t instance_id, int64_t mode, const at::Tensor& q, const at::Tensor& q_scale,
                     const at::Tensor& kv_cache, const at::Tensor& kv_scale, const at::Tensor& weights,
                     const at::Tensor& block_tables, const at::Tensor& query_start_loc, const at::Tensor& row_ends,
                     const at::Tensor& out, const std::optional<at::Tensor>& out_offsets,
                     const std::optional<at::Tensor>& records, int64_t heads, int64_t page_size,
                     int64_t pages_per_block, bool gather, int64_t max_seq_len, int64_t grid_x, int64_t parts,
                     const std::optional<at::Tensor>& row_starts, int64_t max_qlen) {
  opus::CallDesc c = make_call(instance_id, mode, q, q_scale, kv_cache, kv_scale, weights, block_tables,
                               query_start_loc, row_ends, out, out_offsets, records, heads, page_size,
                               pages_per_block, gather, max_seq_len, grid_x, parts, row_starts, max_qlen);
  if (out.is_cuda() && is_union(instance_id)) {  // the scratch launch would allocate, described, not allocated
    const int64_t n = union_scratch_size(c, block_tables, query_start_loc, row_ends);
    if (n > 0) {
      c.scratch.dtype = opus::kI32;
      c.scratch.ndim = 1;
      c.scratch.sizes[0] = n;
      c.scratch.strides[0] = 1;
      c.scratch.device = (int32_t)out.get_device();
    }
  }
  return opus::validate(c);
}

pybind11::list registry() {
  pybind11::list rows;
  for (const opus::InstanceInfo& i : opus::kInstances) {
    pybind11::list heads;
    for (int bit = 0; bit < 4; ++bit)
      if (i.heads_mask >> bit & 1u) heads.append(16 << bit);
    pybind11::list pages;
    for (int p : opus::kPageSizes) pages.append(p);
    pybind11::dict d;
    d["id"] = i.id;
    d["name"] = i.name;
    d["arch"] = i.arch;
    d["family"] = i.family;
    d["rows"] = i.rows;
    d["warps"] = i.warps;
    d["block_n"] = i.block_n;
    d["stages"] = i.stages;
    d["ctas_per_sm"] = i.ctas_per_sm;
    d["heads"] = heads;
    d["page_sizes"] = pages;
    d["modes"] = opus::is_union_family(i) ? OPUS_UNION_MODES : OPUS_MODES;
    rows.append(d);
  }
  return rows;
}

}  // namespace

// The keyword names of the arguments launch and validate share, in make_call's order.
#define OPUS_CALL_ARGS                                                                                         \
  pybind11::arg("instance_id"), pybind11::arg("mode"), pybind11::arg("q"), pybind11::arg("q_scale"),           \
      pybind11::arg("kv_cache"), pybind11::arg("kv_scale"), pybind11::arg("weights"),                          \
      pybind11::arg("block_tables"), pybind11::arg("query_start_loc"), pybind11::arg("row_ends"),              \
      pybind11::arg("out"), pybind11::arg("out_offsets"), pybind11::arg("records"), pybind11::arg("heads"),    \
      pybind11::arg("page_size"), pybind11::arg("pages_per_block"), pybind11::arg("gather"),                   \
      pybind11::arg("max_seq_len"), pybind11::arg("grid_x"), pybind11::arg("parts")

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "opus: native MXFP4 paged MQA-logits kernels (mqa_logits_mxfp4.backends.opus)";
  m.def("launch", &launch, "check, then launch one instance on `stream` (torch's current stream handle)",
        OPUS_CALL_ARGS, pybind11::arg("stream"), pybind11::arg("path_stats") = pybind11::none(),
        pybind11::arg("row_starts") = pybind11::none(), pybind11::arg("max_qlen") = 0);
  m.def("validate", &validate, "the launcher's checks without a launch: '' or the broken rule", OPUS_CALL_ARGS,
        pybind11::arg("row_starts") = pybind11::none(), pybind11::arg("max_qlen") = 0);
  pybind11::class_<Launcher>(m, "Launcher", "the op's hot path for one config and mode (dispatch/api.py)")
      .def(pybind11::init<int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t, int64_t, int64_t, int64_t>(),
           pybind11::arg("instance_id"), pybind11::arg("mode"), pybind11::arg("heads"), pybind11::arg("page_size"),
           pybind11::arg("pages_per_block"), pybind11::arg("gather"), pybind11::arg("max_seq_len"),
           pybind11::arg("grid_x"), pybind11::arg("parts"), pybind11::arg("max_qlen"))
      .def("run", &Launcher::run, "launch a call of an accepted signature on torch's current stream; false "
           "(nothing launched) for any other")
      .def("accept", &Launcher::accept, "remember this call's signature (its checks passed)")
      .def("signatures", &Launcher::signatures);
  pybind11::class_<FunctionLauncher>(m, "FunctionLauncher",
                                     "the op's hot path for a kernel another compiler loaded (the Triton backend's)")
      .def(pybind11::init<>())
      .def("run", &FunctionLauncher::run, "launch a call of an accepted signature and alignment on torch's current "
           "stream; false (nothing launched) for any other")
      .def("accept", &FunctionLauncher::accept, "remember this call's signature and alignment with the kernel, grid, "
           "block, shared memory and parameter plan that serve it")
      .def("signatures", &FunctionLauncher::signatures);
  m.def("registry", &registry, "every registry entry (registry.h) as a dict");
  m.def("target", &opus::target, "the target this build's kernels are for");
}
