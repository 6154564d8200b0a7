// Host-side checks of the opus csrc headers that need no GPU (built with g++ by
// tests/test_opus_build.py):
//   opus_host_check registry     the C++ instance registry as JSON (one object a line; with the
//                                registry's page sizes, modes and i8 stage keys)
//   opus_host_check encodings    each E2M1 code's fp8 / f16 operand bits, and word-level dot
//                                products through the k-slot split both operands share
//   opus_host_check i8           every code's INT8 operand at every shift, one element a byte
//   opus_host_check i8key        the same for the fast path's biased key bytes (shifts 0..2)
//   opus_host_check i8bias       the bias slice of every column sum a fast group can have
//   opus_host_check fastdiv      failures of fast_div against `/` over many (n, d)
//   opus_host_check worksplit    reads cases from stdin, prints every program's pieces
//   opus_host_check checks       the launcher's message for a valid call and for mutations
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "checks.h"
#include "encode.h"
#include "fastdiv.h"
#include "i8_encode.h"
#include "registry.h"
#include "worksplit.h"

using namespace opus;

static int cmd_registry() {
  for (const InstanceInfo& i : kInstances) {
    std::printf("{\"id\": %d, \"name\": \"%s\", \"arch\": \"%s\", \"family\": \"%s\", \"rows\": %d, "
                "\"warps\": %d, \"block_n\": %d, \"stages\": %d, \"ctas_per_sm\": %d, \"heads\": [",
                i.id, i.name, i.arch, i.family, i.rows, i.warps, i.block_n, i.stages, i.ctas_per_sm);
    bool first = true;
    for (int bit = 0; bit < 4; ++bit)
      if (i.heads_mask >> bit & 1u) {
        std::printf("%s%d", first ? "" : ", ", 16 << bit);
        first = false;
      }
    std::printf("], \"ctas_by_heads\": [");
    first = true;
    for (int bit = 0; bit < 4; ++bit)
      if (i.heads_mask >> bit & 1u) {
        std::printf("%s%d", first ? "" : ", ", ctas_for_heads(i.ctas_per_sm, 16 << bit));
        first = false;
      }
    std::printf("], \"page_sizes\": [");
    for (size_t p = 0; p < sizeof(kPageSizes) / sizeof(kPageSizes[0]); ++p)
      std::printf("%s%d", p ? ", " : "", kPageSizes[p]);
    std::printf("], \"modes\": \"%s\", \"i8_stage_keys\": %d, \"i8_consumers\": %d, \"i8_table_setup\": %d}\n",
                OPUS_MODES, OPUS_I8_STAGE_KEYS, i8_consumers(i.warps), i8_table_setup(i.rows, i.warps));
  }
  return 0;
}

// E2M1 value of a 4-bit code, times 2 (an integer: 0, 1, 2, 3, 4, 6, 8, 12 with sign).
static int e2m1_x2(uint32_t c) {
  static const int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return (c & 8u) ? -mag[c & 7u] : mag[c & 7u];
}

// Decode E4M3 (fn) and FP16 bits exactly as doubles.
static double e4m3_value(uint32_t b) {
  const int s = b >> 7 & 1, e = b >> 3 & 15, m = b & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}
static double f16_value(uint32_t h) {
  const int s = h >> 15 & 1, e = h >> 10 & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}

static int cmd_encodings() {
  for (uint32_t c = 0; c < 16; ++c) {
    uint32_t kw[2], qw[2], kh[4], qh[4];
    e4m3_key_word(c, kw);
    e4m3_query_word(c, qw);
    f16_key_word(c, kh);
    f16_query_word(c, qh);
    std::printf("{\"code\": %u, \"fp8_key\": %u, \"fp8_query\": %u, \"f16_key\": %u, \"f16_query\": %u}\n", c,
                kw[0] & 0xFFu, qw[0] & 0xFFu, kh[0] & 0xFFFFu, qh[0] & 0xFFFFu);
  }
  // Words: the dot product through each family's k-slot split must equal the E2M1 dot product.
  std::mt19937 rng(1234);
  int bad = 0, words = 0;
  for (int it = 0; it < 20000; ++it, ++words) {
    const uint32_t k = rng(), q = rng();
    long long want_x4 = 0;  // (2k)(2q) summed
    for (int i = 0; i < 8; ++i) want_x4 += (long long)e2m1_x2(k >> (4 * i) & 15u) * e2m1_x2(q >> (4 * i) & 15u);
    const double want = want_x4 / 4.0;
    uint32_t ka[2], qa[2];
    e4m3_key_word(k, ka);
    e4m3_query_word(q, qa);
    double got8 = 0;
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < 4; ++j) got8 += e4m3_value(ka[r] >> (8 * j) & 0xFFu) * e4m3_value(qa[r] >> (8 * j) & 0xFFu);
    uint32_t kb[4], qb[4];
    f16_key_word(k, kb);
    f16_query_word(q, qb);
    double got16 = 0;
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 2; ++j) got16 += f16_value(kb[r] >> (16 * j) & 0xFFFFu) * f16_value(qb[r] >> (16 * j) & 0xFFFFu);
    if (got8 != want || got16 != want) {
      if (bad < 5) std::fprintf(stderr, "word k=%08x q=%08x: want %g fp8 %g f16 %g\n", k, q, want, got8, got16);
      ++bad;
    }
  }
  std::printf("{\"words\": %d, \"bad_words\": %d}\n", words, bad);
  return 0;
}

// The INT8 operand of every code at every shift, through i8_word (or, `key`, i8_key_word less
// kI8KeyBias) with the code at each of the word's 8 positions and random neighbours: "got" lists
// the values seen, "bad" counts mismatches against 2 * E2M1 * 2^d.
static int cmd_i8(bool key) {
  std::mt19937 rng(4321);
  long long checked = 0, bad = 0;
  for (int d = 0; d < (key ? 3 : 4); ++d) {
    const I8Table t = key ? i8_key_table(d) : i8_table(d);
    for (uint32_t c = 0; c < 16; ++c) {
      int got = 0;
      for (int pos = 0; pos < 8; ++pos)
        for (int it = 0; it < 64; ++it) {
          const uint32_t x = (rng() & ~(0xFu << (4 * pos))) | (c << (4 * pos));
          uint32_t lo, hi;
          if (key)
            i8_key_word(x, t, ~0u, lo, hi);
          else
            i8_word(x, t, lo, hi);
          for (int e = 0; e < 8; ++e) {
            const uint32_t u = (e < 4 ? lo : hi) >> (8 * (e & 3)) & 0xFFu;
            const int value = key ? int(u) - int(kI8KeyBias) : int(int8_t(u));
            const int want = e2m1_x2(x >> (4 * e) & 15u) * (1 << d);
            ++checked;
            if (value != want || (key && u > 127u)) {
              if (bad < 5) std::fprintf(stderr, "i8 d=%d x=%08x element %d: %d, want %d\n", d, x, e, value, want);
              ++bad;
            }
            if (e == pos) got = value;
          }
        }
      std::printf("{\"shift\": %d, \"code\": %u, \"value\": %d}\n", d, c, got);
    }
  }
  std::printf("{\"checked\": %lld, \"bad\": %lld}\n", checked, bad);
  return 0;
}

// i8_bias_slice for every operand sum |qsum| <= 128 * 96: the slice's dot with the constant key
// operand must be -kI8KeyBias * qsum, each byte within [-127, 127]. The same for the slice as the
// multi-chunk kernels write it: lane k's i8_bias_pair at byte (k / 8) * 128 + 2 (k % 8) of the
// column's two 16-byte core rows (slot p at byte p, or 128 + p - 16 from slot 16 on).
static int cmd_i8bias() {
  long long checked = 0, bad = 0;
  for (int qsum = -128 * 96; qsum <= 128 * 96; ++qsum) {
    uint32_t w[8];
    i8_bias_slice(qsum, w);
    uint8_t core[256] = {};
    for (int k = 0; k < 16; ++k) {
      const uint32_t pair = i8_bias_pair(i8_bias_quot(qsum), k);
      core[(k / 8) * 128 + 2 * (k % 8)] = uint8_t(pair & 0xFFu);
      core[(k / 8) * 128 + 2 * (k % 8) + 1] = uint8_t(pair >> 8);
    }
    long long dot = 0, dot_pairs = 0;
    bool in_range = true;
    for (int p = 0; p < 32; ++p) {
      const int b = int(int8_t(w[p / 4] >> (8 * (p % 4)) & 0xFFu));
      in_range = in_range && b >= -127 && b <= 127;
      dot += (long long)i8_bias_key(p) * b;
      dot_pairs += (long long)i8_bias_key(p) * int(int8_t(core[p < 16 ? p : 128 + p - 16]));
    }
    ++checked;
    if (dot != -(long long)kI8KeyBias * qsum || dot_pairs != dot || !in_range) {
      if (bad < 5) std::fprintf(stderr, "i8bias qsum=%d: dot %lld\n", qsum, dot);
      ++bad;
    }
  }
  std::printf("{\"checked\": %lld, \"bad\": %lld}\n", checked, bad);
  return 0;
}

static int cmd_fastdiv() {
  std::mt19937 rng(99);
  long long checked = 0, bad = 0;
  std::vector<int> divisors;
  for (int d = 1; d <= 300; ++d) divisors.push_back(d);
  for (int d : {511, 512, 513, 1000, 2048, 4095, 65535, 65536, 1 << 20, 1000003, (1 << 30) + 7}) divisors.push_back(d);
  for (int d : divisors) {
    const FastDiv f = make_fastdiv(d);
    std::vector<int> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 0x7FFFFFFF, 0x7FFFFFFE, 0x40000000};
    for (int i = 0; i < 2000; ++i) ns.push_back((int)(rng() & 0x7FFFFFFFu));
    for (int i = 0; i < 200; ++i) ns.push_back((int)(rng() % 100000));
    for (int n : ns) {
      if (n < 0) continue;
      ++checked;
      if (fast_div(n, f) != n / d) {
        if (bad < 5) std::fprintf(stderr, "fast_div(%d, %d) = %d, want %d\n", n, d, fast_div(n, f), n / d);
        ++bad;
      }
    }
  }
  std::printf("{\"checked\": %lld, \"bad\": %lld}\n", checked, bad);
  return 0;
}

// stdin: one case a line: "R nprog parts num_seqs num_rows qsl[0..num_seqs] row_ends[0..num_rows-1] [key_cap]"
// stdout: one JSON object a case: Free/Table ranges and pieces per program, the Table records and
// walks of two round splits, Prefill pieces per (group, part).
static void print_piece(const Piece& p, bool& first) {
  std::printf("%s[%d, %d, %d, %d, %d]", first ? "" : ", ", p.b, p.r0, p.r1, p.t0, p.t1);
  first = false;
}

static int cmd_worksplit() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    int R, nprog, parts, num_seqs, num_rows;
    in >> R >> nprog >> parts >> num_seqs >> num_rows;
    std::vector<int32_t> qsl(num_seqs + 1), ends(num_rows > 0 ? num_rows : 1, 0);
    for (auto& v : qsl) in >> v;
    for (int i = 0; i < num_rows; ++i) in >> ends[i];
    int cap;
    if (!(in >> cap)) cap = 0x7FFFFFFF;  // optional: unclamped when the line ends here
    int has_starts = 0;                  // optional: then num_rows row_starts
    std::vector<int32_t> starts(num_rows > 0 ? num_rows : 1, 0);
    if (in >> has_starts && has_starts)
      for (int i = 0; i < num_rows; ++i) in >> starts[i];
    const SeqView sv{qsl.data(), ends.data(), num_seqs, num_rows, cap, has_starts ? starts.data() : nullptr};
    std::printf("{\"ranges\": [");
    for (int p = 0; p < nprog; ++p) {
      const CtaRange cr = cta_range_serial(sv, R, p, nprog);
      std::printf("%s[%d, %d, %d, %d]", p ? ", " : "", cr.u_begin, cr.u_end, cr.b, cr.base);
    }
    // program p's pieces: Free's walk from its range, or (rec) Table's from the record
    const auto walk = [&](int p, const int32_t* rec) {
      const CtaRange cr = rec ? CtaRange{rec[0], rec[1], rec[2], rec[3]} : cta_range_serial(sv, R, p, nprog);
      FreeIter it{cr.u_begin, cr.u_end, cr.b, cr.base};
      Piece piece;
      bool first = true;
      std::printf("%s[", p ? ", " : "");
      while (it.next(sv, R, piece, rec)) print_piece(piece, first);
      std::printf("]");
    };
    std::printf("], \"free\": [");
    for (int p = 0; p < nprog; ++p) walk(p, nullptr);
    // Table mode: the same programs started from their records' first-sequence bounds (fields
    // 4-7, as worksplit/rules.py's schedule_records writes them: sequence b's seq_units)
    std::printf("], \"bounds\": [");
    std::vector<std::array<int32_t, kRecordInts>> recs(nprog);
    for (int p = 0; p < nprog; ++p) {
      table_record(sv, R, p, nprog, recs[p].data());
      std::printf("%s[%d, %d, %d, %d]", p ? ", " : "", recs[p][4], recs[p][5], recs[p][6], recs[p][7]);
    }
    std::printf("], \"table\": [");
    for (int p = 0; p < nprog; ++p) walk(p, recs[p].data());
    // ... and from records whose fields 4-7 are broken (rows past the rows, qb below qa, spans
    // negative or past the cap): the walk ends, and names no row past the rows
    std::printf("], \"broken\": [");
    const int32_t bad[4][4] = {{num_rows + 5, num_rows + 9, 0, 1 << 30}, {num_rows / 2, 0, -3, -7},
                               {0, num_rows + 100, 1 << 20, 1 << 30}, {3, 2, 0, 5}};
    for (int p = 0; p < nprog; ++p) {
      for (int i = 0; i < 4; ++i) recs[p][4 + i] = bad[p % 4][i];
      walk(p, recs[p].data());
    }
    // Table records by two round splits (the two- and three-consumer i8 bodies'), each program's
    // whole record and its walk from it
    std::printf("], \"rounds\": [");
    const TableSplit splits[2] = {{4, 2, 8}, {4, 3, 12}};
    for (int k = 0; k < 2; ++k) {
      std::printf("%s{\"records\": [", k ? ", " : "");
      for (int p = 0; p < nprog; ++p) {
        table_record(sv, R, p, nprog, recs[p].data(), splits[k]);
        std::printf("%s[", p ? ", " : "");
        for (int i = 0; i < kRecordInts; ++i) std::printf("%s%d", i ? ", " : "", recs[p][i]);
        std::printf("]");
      }
      std::printf("], \"walks\": [");
      for (int p = 0; p < nprog; ++p) walk(p, recs[p].data());
      std::printf("]}");
    }
    const int groups = num_rows > 0 ? (num_rows + R - 1) / R : 1;
    std::printf("], \"prefill\": [");
    for (int g = 0; g < groups; ++g) {
      for (int part = 0; part < parts; ++part) {
        PrefillIter it{part, parts};
        it.init(sv, R, g);
        Piece piece;
        bool first = true;
        std::printf("%s[", g || part ? ", " : "");
        while (it.next(sv, piece)) print_piece(piece, first);
        std::printf("]");
      }
    }
    std::printf("]}\n");
  }
  return 0;
}

// A valid call (instance 0, sm90_f16_r1w4: heads 64, page 64, 3 rows, 2 sequences), then one
// mutation a line: "name<TAB>message".
static TensorDesc desc(const void* ptr, int32_t dtype, std::vector<int64_t> sizes, int32_t device = 0) {
  TensorDesc t;
  t.ptr = ptr;
  t.dtype = dtype;
  t.ndim = (int32_t)sizes.size();
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = stride;
    stride *= sizes[i];
  }
  t.device = device;
  return t;
}

static CallDesc valid_call() {
  static const char* base = reinterpret_cast<const char*>(0x10000);  // 16-byte aligned, never read
  CallDesc c;
  c.instance_id = 0;
  c.mode = kModeFree;
  c.heads = 64;
  c.page_size = 64;
  c.pages_per_block = 1;
  c.gather = 0;
  c.max_seq_len = 1000;
  c.grid_x = 8;
  c.parts = 1;
  c.q = desc(base, kU8, {3, 64, 64});
  c.q_scale = desc(base, kU8, {3, 64, 4});
  c.kv = desc(base, kU8, {20, 64, 64});
  c.kv_scale = desc(base, kU8, {20, 64, 4});
  c.weights = desc(base, kBF16, {4, 64});
  c.block_tables = desc(base, kI32, {2, 16});
  c.qsl = desc(base, kI32, {3});
  c.row_ends = desc(base, kI32, {3});
  c.out = desc(base, kF32, {3, 1000});
  return c;
}

static int cmd_checks() {
  const InstanceInfo& inst = *find_instance(0);
  std::vector<std::pair<std::string, CallDesc>> cases;
  auto add = [&](const char* name, auto&& mutate) {
    CallDesc c = valid_call();
    mutate(c);
    cases.emplace_back(name, c);
  };
  add("valid", [](CallDesc&) {});
  add("valid_wide", [](CallDesc& c) {  // out and table wider than max_seq_len: keys still stop there
    c.out = desc(c.out.ptr, kF32, {3, 2000});
    c.block_tables = desc(c.block_tables.ptr, kI32, {2, 40});
  });
  add("heads", [](CallDesc& c) { c.heads = 24; });
  add("page_size", [](CallDesc& c) { c.page_size = 12; });
  add("q_dtype", [](CallDesc& c) { c.q.dtype = kI32; });
  add("row_ends_int64", [](CallDesc& c) { c.row_ends.dtype = kI64; });
  add("kv_4d", [](CallDesc& c) { c.kv.ndim = 4; });
  add("q_rows", [](CallDesc& c) { c.q.sizes[0] = 2; });
  add("q_heads", [](CallDesc& c) { c.q.sizes[1] = 32; });
  add("q_scale_blocks", [](CallDesc& c) { c.q_scale.sizes[2] = 8; c.q_scale.strides[1] = 8; c.q_scale.strides[0] = 512; });
  add("kv_page", [](CallDesc& c) { c.kv.sizes[1] = 32; c.kv.strides[0] = 32 * 64; });
  add("kv_scale_pages", [](CallDesc& c) { c.kv_scale.sizes[0] = 19; });
  add("q_noncontig", [](CallDesc& c) { c.q.strides[1] = 128; c.q.strides[0] = 128 * 64; });
  add("weights_short", [](CallDesc& c) { c.weights.sizes[0] = 2; });
  add("weights_stride", [](CallDesc& c) { c.weights.strides[1] = 2; });
  add("table_narrow", [](CallDesc& c) { c.block_tables.sizes[1] = 15; c.block_tables.strides[0] = 15; });
  add("table_rows", [](CallDesc& c) { c.block_tables.sizes[0] = 1; });
  add("gather_table_rows", [](CallDesc& c) { c.gather = 1; });
  add("out_short", [](CallDesc& c) { c.out.sizes[0] = 2; });
  add("out_narrow", [](CallDesc& c) { c.out.sizes[1] = 999; c.out.strides[0] = 999; });
  add("out_overlap", [](CallDesc& c) { c.out.strides[0] = 500; });
  add("out_dtype", [](CallDesc& c) { c.out.dtype = kI32; });
  add("valid_bf16", [](CallDesc& c) { c.out.dtype = kBF16; });
  add("valid_f16_starts", [](CallDesc& c) {
    c.out.dtype = kF16;
    c.row_starts = desc(c.row_ends.ptr, kI32, {3});
  });
  add("row_starts_dtype", [](CallDesc& c) { c.row_starts = desc(c.row_ends.ptr, kI64, {3}); });
  add("row_starts_rows", [](CallDesc& c) { c.row_starts = desc(c.row_ends.ptr, kI32, {2}); });
  add("row_starts_device", [](CallDesc& c) { c.row_starts = desc(c.row_ends.ptr, kI32, {3}, 1); });
  add("flat_offsets_short", [](CallDesc& c) {
    c.out = desc(c.out.ptr, kF32, {5000});
    c.out_offsets = desc(c.out.ptr, kI64, {2});
  });
  add("flat_out_2d", [](CallDesc& c) { c.out_offsets = desc(c.out.ptr, kI64, {3}); });
  add("grid_zero", [](CallDesc& c) { c.grid_x = 0; });
  add("prefill_cover", [](CallDesc& c) { c.mode = kModePrefill; c.grid_x = 2; c.parts = 1; });
  add("prefill_parts", [](CallDesc& c) { c.mode = kModePrefill; c.grid_x = 3; c.parts = 0; });
  add("table_no_records", [](CallDesc& c) { c.mode = kModeTable; });
  add("table_short_records", [](CallDesc& c) { c.mode = kModeTable; c.records = desc(c.q.ptr, kI32, {7, 8}); });
  add("table_records_ok", [](CallDesc& c) { c.mode = kModeTable; c.records = desc(c.q.ptr, kI32, {8, 8}); });
  add("device", [](CallDesc& c) { c.kv.device = 1; });
  add("host_tensor", [](CallDesc& c) { c.row_ends.device = -1; });
  add("misaligned_kv", [](CallDesc& c) { c.kv.ptr = reinterpret_cast<const char*>(c.kv.ptr) + 8; });
  add("misaligned_q", [](CallDesc& c) { c.q.ptr = reinterpret_cast<const char*>(c.q.ptr) + 4; });
  add("mode", [](CallDesc& c) { c.mode = 7; });
  add("ppb", [](CallDesc& c) { c.pages_per_block = 0; });
  for (auto& [name, c] : cases) {
    LaunchArgs a{};
    const std::string err = check_call(c, inst, &a);
    std::printf("%s\t%s\n", name.c_str(), err.c_str());
    if (name.rfind("valid", 0) == 0) {  // what a valid call hands the kernel
      std::printf("%s_args\tkey_cap=%d out_cols=%d bt_cols=%d num_rows=%d num_seqs=%d page_shift=%d "
                  "stride_out=%lld weights_bf16=%d out_kind=%d row_starts=%d\n",
                  name.c_str(), a.key_cap, a.out_cols, a.bt_cols, a.num_rows, a.num_seqs, a.page_shift,
                  (long long)a.stride_out, a.weights_bf16, a.out_kind, a.row_starts != nullptr ? 1 : 0);
    }
  }
  return 0;
}

// stdin: one case a line: "max_qlen R bt_cols max_seq_len span num_seqs num_rows most"; stdout: the
// union geometry of each as a JSON line (args.h's union_geometry and union_scratch_ints).
static int cmd_union() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    long long max_qlen, R, bt_cols, max_seq_len, span, num_seqs, num_rows, most;
    if (!(in >> max_qlen >> R >> bt_cols >> max_seq_len >> span >> num_seqs >> num_rows >> most)) continue;
    const UnionGeometry g = union_geometry(max_qlen, R, bt_cols, max_seq_len, span, num_seqs, num_rows, most);
    std::printf("{\"width\": %lld, \"seg_rows\": %lld, \"segs\": %lld, \"ucap\": %lld, \"split\": %d, \"ok\": %d, "
                "\"scratch\": %lld}\n",
                (long long)g.width, (long long)g.seg_rows, (long long)g.segs, (long long)g.ucap, g.split ? 1 : 0,
                g.ok ? 1 : 0, g.ok ? (long long)union_scratch_ints(g, num_rows) : -1LL);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: opus_host_check registry|encodings|fastdiv|worksplit|checks|union\n");
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "registry") return cmd_registry();
  if (cmd == "encodings") return cmd_encodings();
  if (cmd == "fastdiv") return cmd_fastdiv();
  if (cmd == "i8") return cmd_i8(false);
  if (cmd == "i8key") return cmd_i8(true);
  if (cmd == "i8bias") return cmd_i8bias();
  if (cmd == "worksplit") return cmd_worksplit();
  if (cmd == "checks") return cmd_checks();
  if (cmd == "union") return cmd_union();
  std::fprintf(stderr, "unknown command %s\n", cmd.c_str());
  return 2;
}
