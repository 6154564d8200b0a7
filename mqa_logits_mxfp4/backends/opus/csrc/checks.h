// The launcher's own checks (defense in depth below the Python op's checks): a raw call with
// mismatched shapes, dtypes, widths, alignments or grid raises before any launch, so no kernel
// reads or writes outside the tensors it is given. Plain C++ (no CUDA, HIP or torch): the CPU
// tests compile it with g++ and feed it mismatched descriptions.
#pragma once

#include <stdint.h>

#include <climits>
#include <cstring>
#include <string>
#include <string_view>

#include "args.h"
#include "fastdiv.h"
#include "registry.h"

namespace opus {

enum DType : int32_t { kU8 = 0, kI32 = 1, kI64 = 2, kF32 = 3, kBF16 = 4, kF16 = 5, kOtherDType = 9 };

inline const char* dtype_name(int32_t d) {
  switch (d) {
    case kU8: return "uint8";
    case kI32: return "int32";
    case kI64: return "int64";
    case kF32: return "float32";
    case kBF16: return "bfloat16";
    case kF16: return "float16";
    default: return "another dtype";
  }
}

struct TensorDesc {
  const void* ptr = nullptr;
  int32_t dtype = kOtherDType;
  int32_t ndim = -1;               // -1: absent
  int64_t sizes[3] = {0, 0, 0};
  int64_t strides[3] = {0, 0, 0};  // elements
  int32_t device = -1;             // GPU index, -1 for host memory

  bool present() const { return ndim >= 0; }
};

struct CallDesc {
  int32_t instance_id = -1;
  int32_t mode = -1;
  TensorDesc q, q_scale, kv, kv_scale, weights, block_tables, qsl, row_ends, out, out_offsets, records;
  TensorDesc row_starts;  // optional int32 [rows]: see LaunchArgs::row_starts
  TensorDesc path_stats;  // optional int64 [2]: see LaunchArgs::path_stats
  int32_t heads = 0, page_size = 0, pages_per_block = 0, gather = 0, max_seq_len = 0;
  int32_t grid_x = 0, parts = 0;
  int32_t max_qlen = 0;   // the config's bound on a sequence's rows (the union body's geometry)
  TensorDesc scratch;     // int32, the union body's only (union_scratch_ints): bindings.cpp allocates it
};

// The union bodies (families i8u, i8uc; registry.h's OPUS_UNION_*).
constexpr int64_t kUnionMaxEntries = OPUS_UNION_MAX_ENTRIES;
inline bool is_union_family(const InstanceInfo& inst) {  // a name of OPUS_UNION_FAMILIES' comma list
  const std::string_view list = OPUS_UNION_FAMILIES, family = inst.family;
  for (size_t at = 0;;) {
    const size_t end = list.find(',', at);  // npos for the last name: substr takes the rest
    if (list.substr(at, end - at) == family) return true;
    if (end == std::string_view::npos) return false;
    at = end + 1;
  }
}

namespace detail {

inline std::string shape_of(const TensorDesc& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim && i < 3; ++i) s += (i ? ", " : "") + std::to_string(t.sizes[i]);
  return s + (t.ndim > 3 ? ", ...]" : "]");
}

inline bool contiguous(const TensorDesc& t) {
  int64_t want = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.sizes[i] != 1 && t.strides[i] != want) return false;
    want *= t.sizes[i];
  }
  return true;
}

struct Checker {
  std::string err;

  bool fail(const std::string& msg) {
    if (err.empty()) err = msg;
    return false;
  }
  bool dtype(const char* name, const TensorDesc& t, int32_t want, int32_t alt = -1, int32_t alt2 = -1) {
    if (t.dtype == want || t.dtype == alt || t.dtype == alt2) return true;
    std::string w = dtype_name(want);
    if (alt >= 0) w += std::string(alt2 >= 0 ? ", " : " or ") + dtype_name(alt);
    if (alt2 >= 0) w += std::string(" or ") + dtype_name(alt2);
    return fail(std::string(name) + " must be " + w + "; got " + dtype_name(t.dtype));
  }
  bool ndim(const char* name, const TensorDesc& t, int want) {
    if (t.ndim == want) return true;
    return fail(std::string(name) + " must be " + std::to_string(want) + "-D; got " + std::to_string(t.ndim) +
                "-D " + shape_of(t));
  }
  bool size(const char* name, const TensorDesc& t, int dim, int64_t want, bool at_least = false) {
    if (at_least ? t.sizes[dim] >= want : t.sizes[dim] == want) return true;
    return fail(std::string(name) + ".shape[" + std::to_string(dim) + "] must be " + (at_least ? ">= " : "") +
                std::to_string(want) + "; got " + shape_of(t));
  }
  bool contig(const char* name, const TensorDesc& t) {
    return contiguous(t) || fail(std::string(name) + " must be contiguous; got shape " + shape_of(t));
  }
  bool unit_last_stride(const char* name, const TensorDesc& t) {
    return t.strides[t.ndim - 1] == 1 ||
           fail(std::string(name) + " needs a unit last stride; got " + std::to_string(t.strides[t.ndim - 1]));
  }
  bool aligned(const char* name, const TensorDesc& t, int bytes) {
    return (reinterpret_cast<uintptr_t>(t.ptr) % bytes) == 0 ||
           fail(std::string(name) + " is read in " + std::to_string(bytes) + "-byte words, so its data must be " +
                std::to_string(bytes) + "-byte aligned");
  }
  bool device(const char* name, const TensorDesc& t, int32_t dev) {
    if (t.device >= 0 && t.device == dev) return true;
    return fail(std::string(name) + " is on " + (t.device < 0 ? std::string("the host") : "GPU " + std::to_string(t.device)) +
                "; every tensor must be on GPU " + std::to_string(dev));
  }
};

}  // namespace detail

// Validate `c` for instance `inst`; on success fill `a` and return "", else return the first
// broken rule with the observed value.
inline std::string check_call(const CallDesc& c, const InstanceInfo& inst, LaunchArgs* a) {
  detail::Checker k;
  const int R = inst.rows;
  bool ok = true;
  ok = ok && (heads_in_mask(inst.heads_mask, c.heads) ||
              k.fail(std::string(inst.name) + " has no kernel for heads " + std::to_string(c.heads)));
  bool page_ok = false;
  for (int p : kPageSizes) page_ok = page_ok || p == c.page_size;
  ok = ok && (page_ok || k.fail("page_size must be one of 8, 16, 32, 64, 128; got " + std::to_string(c.page_size)));
  ok = ok && (c.pages_per_block >= 1 || k.fail("pages_per_block must be >= 1; got " + std::to_string(c.pages_per_block)));
  ok = ok && (c.max_seq_len >= 1 || k.fail("max_seq_len must be >= 1; got " + std::to_string(c.max_seq_len)));
  const bool uni = is_union_family(inst);
  ok = ok && (!c.gather || R == 1 || uni ||
              k.fail("gather mode needs a one-row instance (each row has its own table); " + std::string(inst.name) +
                     " has " + std::to_string(R)));
  ok = ok && (!uni || c.gather ||
              k.fail(std::string(inst.name) + " scores the union of each sequence's row tables: gather mode only"));
  ok = ok && (!uni || c.mode == kModeFree ||
              k.fail(std::string(inst.name) + " runs in Free mode only (its windows come from its pre-pass); got mode " +
                     std::to_string(c.mode)));
  ok = ok && (!uni || c.max_qlen >= 1 || k.fail("max_qlen must be >= 1; got " + std::to_string(c.max_qlen)));
  ok = ok && ((c.mode >= kModeTable && c.mode <= kModePrefill) || k.fail("unknown mode " + std::to_string(c.mode)));
  if (!ok) return k.err;

  // dtypes and ranks
  ok = k.dtype("q", c.q, kU8) && k.dtype("q_scale", c.q_scale, kU8) && k.dtype("kv_cache", c.kv, kU8) &&
       k.dtype("kv_scale", c.kv_scale, kU8) && k.dtype("weights", c.weights, kF32, kBF16) &&
       k.dtype("block_tables", c.block_tables, kI32) && k.dtype("query_start_loc", c.qsl, kI32) &&
       k.dtype("row_ends", c.row_ends, kI32) && k.dtype("out", c.out, kF32, kBF16, kF16);
  ok = ok && k.ndim("q", c.q, 3) && k.ndim("q_scale", c.q_scale, 3) && k.ndim("kv_cache", c.kv, 3) &&
       k.ndim("kv_scale", c.kv_scale, 3) && k.ndim("weights", c.weights, 2) &&
       k.ndim("block_tables", c.block_tables, 2) && k.ndim("query_start_loc", c.qsl, 1) &&
       k.ndim("row_ends", c.row_ends, 1);
  const bool flat = c.out_offsets.present();
  ok = ok && (flat ? k.ndim("out", c.out, 1) && k.dtype("out_offsets", c.out_offsets, kI64) &&
                         k.ndim("out_offsets", c.out_offsets, 1)
                   : k.ndim("out", c.out, 2));
  if (!ok) return k.err;

  // shapes: rows come from row_ends, sequences from query_start_loc
  const int64_t rows = c.row_ends.sizes[0];
  const int64_t num_seqs = c.qsl.sizes[0] - 1;
  ok = (rows < INT_MAX || k.fail("rows must be < 2^31; got " + std::to_string(rows))) &&
       (num_seqs >= 0 || k.fail("query_start_loc needs num_seqs + 1 >= 1 entries; got 0"));
  ok = ok && k.size("q", c.q, 0, rows) && k.size("q", c.q, 1, c.heads) && k.size("q", c.q, 2, kHeadBytes) &&
       k.contig("q", c.q);
  ok = ok && k.size("q_scale", c.q_scale, 0, rows) && k.size("q_scale", c.q_scale, 1, c.heads) &&
       k.size("q_scale", c.q_scale, 2, kScaleBlocks) && k.contig("q_scale", c.q_scale);
  ok = ok && k.size("kv_cache", c.kv, 1, c.page_size) && k.size("kv_cache", c.kv, 2, kHeadBytes) &&
       k.contig("kv_cache", c.kv);
  ok = ok && k.size("kv_scale", c.kv_scale, 0, c.kv.sizes[0]) && k.size("kv_scale", c.kv_scale, 1, c.page_size) &&
       k.size("kv_scale", c.kv_scale, 2, kScaleBlocks) && k.contig("kv_scale", c.kv_scale);
  ok = ok && k.size("weights", c.weights, 0, rows, true) && k.size("weights", c.weights, 1, c.heads) &&
       k.unit_last_stride("weights", c.weights) &&
       (c.weights.sizes[0] <= 1 || c.weights.strides[0] >= c.heads ||
        k.fail("weights rows overlap: row stride " + std::to_string(c.weights.strides[0]) + " < heads"));
  const int64_t span = (int64_t)c.page_size * c.pages_per_block;
  const int64_t width = (c.max_seq_len + span - 1) / span;
  ok = ok && k.size("block_tables", c.block_tables, 0, c.gather ? rows : num_seqs, true) &&
       k.size("block_tables", c.block_tables, 1, width, true) && k.unit_last_stride("block_tables", c.block_tables) &&
       (c.block_tables.sizes[0] <= 1 || c.block_tables.strides[0] >= c.block_tables.sizes[1] ||
        k.fail("block_tables rows overlap: row stride " + std::to_string(c.block_tables.strides[0])));
  ok = ok && k.contig("query_start_loc", c.qsl) && k.contig("row_ends", c.row_ends);
  ok = ok && (!c.row_starts.present() ||
              (k.dtype("row_starts", c.row_starts, kI32) && k.ndim("row_starts", c.row_starts, 1) &&
               k.size("row_starts", c.row_starts, 0, rows) && k.contig("row_starts", c.row_starts)));
  if (flat) {
    ok = ok && k.contig("out", c.out) && k.size("out_offsets", c.out_offsets, 0, rows, true) &&
         k.contig("out_offsets", c.out_offsets);
  } else {
    ok = ok && k.size("out", c.out, 0, rows, true) && k.size("out", c.out, 1, c.max_seq_len, true) &&
         k.unit_last_stride("out", c.out) &&
         (c.out.sizes[0] <= 1 || c.out.strides[0] >= c.out.sizes[1] ||
          k.fail("out rows overlap: row stride " + std::to_string(c.out.strides[0]) + " < " +
                 std::to_string(c.out.sizes[1]) + " columns"));
  }
  if (!ok) return k.err;

  // grid and schedule
  ok = (c.grid_x >= 1 || k.fail("grid must have >= 1 programs; got " + std::to_string(c.grid_x)));
  if (c.mode == kModePrefill) {
    ok = ok && (c.parts >= 1 || k.fail("prefill parts must be >= 1; got " + std::to_string(c.parts))) &&
         ((int64_t)c.grid_x * R >= rows ||
          k.fail("prefill grid of " + std::to_string(c.grid_x) + " row groups x " + std::to_string(R) +
                 " rows cannot cover " + std::to_string(rows) + " rows"));
  }
  if (c.mode == kModeTable) {
    ok = ok && (c.records.present() || k.fail("Table mode needs the schedule records; got none")) &&
         k.dtype("records", c.records, kI32) && k.ndim("records", c.records, 2) &&
         k.size("records", c.records, 0, c.grid_x, true) && k.size("records", c.records, 1, kRecordInts) &&
         k.contig("records", c.records);
  }
  if (!ok) return k.err;

  // one device, and the alignment of the wide loads
  const int32_t dev = c.out.device;
  ok = k.device("out", c.out, dev) && k.device("q", c.q, dev) && k.device("q_scale", c.q_scale, dev) &&
       k.device("kv_cache", c.kv, dev) && k.device("kv_scale", c.kv_scale, dev) &&
       k.device("weights", c.weights, dev) && k.device("block_tables", c.block_tables, dev) &&
       k.device("query_start_loc", c.qsl, dev) && k.device("row_ends", c.row_ends, dev) &&
       (!flat || k.device("out_offsets", c.out_offsets, dev)) &&
       (!c.row_starts.present() || k.device("row_starts", c.row_starts, dev)) &&
       (c.mode != kModeTable || k.device("records", c.records, dev)) &&
       (!c.path_stats.present() || k.device("path_stats", c.path_stats, dev));
  ok = ok && (!c.path_stats.present() ||
              (k.dtype("path_stats", c.path_stats, kI64) && k.ndim("path_stats", c.path_stats, 1) &&
               k.size("path_stats", c.path_stats, 0, 2) && k.contig("path_stats", c.path_stats)));
  ok = ok && k.aligned("q", c.q, 16) && k.aligned("kv_cache", c.kv, 16) && k.aligned("kv_scale", c.kv_scale, 4);
  if (!ok) return k.err;
  const UnionGeometry ug = uni ? union_geometry(c.max_qlen, R, c.block_tables.sizes[1], c.max_seq_len, span, num_seqs,
                                                rows, kUnionMaxEntries)
                                : UnionGeometry{};
  if (uni) {
    ok = (ug.ok ||
          k.fail("the union body holds min(max_qlen, rows a group) x block_table_width <= " +
                 std::to_string(kUnionMaxEntries) + " entries; got " + std::to_string(std::min<int64_t>(c.max_qlen, R)) +
                 " x " + std::to_string(ug.width))) &&
         (c.scratch.present() || k.fail("the union body needs its scratch; got none")) &&
         k.dtype("scratch", c.scratch, kI32) && k.ndim("scratch", c.scratch, 1) &&
         k.size("scratch", c.scratch, 0, union_scratch_ints(ug, rows), true) &&
         k.contig("scratch", c.scratch) && k.device("scratch", c.scratch, dev);
    if (!ok) return k.err;
  }

  LaunchArgs& o = *a;
  o.q = static_cast<const uint8_t*>(c.q.ptr);
  o.q_scale = static_cast<const uint8_t*>(c.q_scale.ptr);
  o.kv = static_cast<const uint8_t*>(c.kv.ptr);
  o.kv_scale = static_cast<const uint8_t*>(c.kv_scale.ptr);
  o.weights = c.weights.ptr;
  o.block_tables = static_cast<const int32_t*>(c.block_tables.ptr);
  o.qsl = static_cast<const int32_t*>(c.qsl.ptr);
  o.row_ends = static_cast<const int32_t*>(c.row_ends.ptr);
  o.row_starts = c.row_starts.present() ? static_cast<const int32_t*>(c.row_starts.ptr) : nullptr;
  o.out = const_cast<void*>(c.out.ptr);
  o.out_kind = c.out.dtype == kF32 ? kOutF32 : c.out.dtype == kBF16 ? kOutBF16 : kOutF16;
  o.out_offsets = flat ? static_cast<const int64_t*>(c.out_offsets.ptr) : nullptr;
  o.records = c.mode == kModeTable ? static_cast<const int32_t*>(c.records.ptr) : nullptr;
  o.path_stats = c.path_stats.present() ? static_cast<unsigned long long*>(const_cast<void*>(c.path_stats.ptr)) : nullptr;
  o.stride_w = c.weights.strides[0];
  o.stride_bt = c.block_tables.strides[0];
  o.stride_out = flat ? 0 : c.out.strides[0];
  o.out_numel = flat ? c.out.sizes[0] : 0;
  o.num_pages = c.kv.sizes[0];
  const int64_t out_cols = flat ? INT_MAX : (c.out.sizes[1] < INT_MAX ? c.out.sizes[1] : INT_MAX);
  o.out_cols = (int32_t)out_cols;
  o.bt_cols = (int32_t)(c.block_tables.sizes[1] < INT_MAX ? c.block_tables.sizes[1] : INT_MAX);
  const int64_t table_span = (int64_t)o.bt_cols * span;
  int64_t cap = table_span < out_cols ? table_span : out_cols;
  cap = cap < c.max_seq_len ? cap : c.max_seq_len;  // row_ends are clamped to max_seq_len
  o.key_cap = (int32_t)(cap < INT_MAX ? cap : INT_MAX);
  o.num_seqs = (int32_t)num_seqs;
  o.num_rows = (int32_t)rows;
  o.heads = c.heads;
  o.page_size = c.page_size;
  o.page_shift = 0;
  while ((1 << o.page_shift) < c.page_size) ++o.page_shift;
  o.pages_per_block = c.pages_per_block;
  o.ppb_div = make_fastdiv(c.pages_per_block);
  o.gather = c.gather ? 1 : 0;
  o.weights_bf16 = c.weights.dtype == kBF16 ? 1 : 0;
  o.mode = c.mode;
  o.grid_x = c.grid_x;
  o.parts = c.mode == kModePrefill ? c.parts : 1;
  if (uni) {
    int32_t* scratch = static_cast<int32_t*>(const_cast<void*>(c.scratch.ptr));
    o.utab = scratch;
    o.uends = scratch + ug.segs * ug.ucap;
    o.upos = o.uends + rows;
    o.uqsl = o.upos + rows * ug.ucap;
    o.list_ends = o.row_ends;
    o.list_starts = o.row_starts;
    o.ucap = (int32_t)ug.ucap;
    o.usegs = (int32_t)ug.segs;
    o.useg_rows = (int32_t)ug.seg_rows;
    o.usplit = ug.split ? 1 : 0;
    o.list_cap = o.key_cap;
  }
  return "";
}

}  // namespace opus
