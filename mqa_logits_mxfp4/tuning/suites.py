"""Shape suites for the tuner and the benchmark (docs/tuning.md); model geometry from models.py.

A shape is a name, the `make_problem` arguments of one op call and the config's static bounds
for it. The tuner keys its row by `dispatch.table.bucket(shape.key(device))`, the function the
dispatcher looks rows up with; so bounds here are what a caller would pass: rows, sequences
and MTP rows exactly, and `max_seq_len` covering every ragged draw (1.3 x the average context,
page-aligned), so one shape stands for every batch drawn around its average.

Decode contexts are ragged: each sequence's context is drawn from [0.7, 1.3] x the average
(seeded by the shape name). Batches are capped at MAX_BATCH_TOKENS context tokens.
"""

from __future__ import annotations

import functools
import math
import random
import zlib
from dataclasses import dataclass
from typing import Callable

import torch

from ..core.modes import is_decode
from ..core.problem import ProblemKey, device_facts, normalize_device
from ..dispatch.table import KEY
from ..models import MODELS
from ..problems import DATA_KINDS, make_problem

K = 1024
MAX_BATCH_TOKENS = 32 * K * K  # batch x average context: 256 x 128K, 64 x 512K
RAGGED = (0.7, 1.3)
BATCHES = tuple(2 ** i for i in range(9))  # 1 .. 256
CONTEXTS = tuple(8 * K * 2 ** i for i in range(7))  # 8K .. 512K
QUICK_BATCHES = (1, 8, 64, 256)
PREFILL_ROWS = 16384
CANDIDATE_KEYS = MODELS["deepseek_v4_1_candidate"].max_seq_len  # 2048 blocks of 8 tokens a row


@dataclass(frozen=True)
class Shape:
    """One op call of a suite: make_problem arguments plus the config bounds that cover it."""

    name: str
    suite: str
    kind: str  # decode | prefill
    heads: int
    head_dim: int
    page_size: int
    pages_per_block: int
    gather: bool
    seqs: tuple[tuple[int, int], ...]  # (context tokens, rows) per sequence
    ratio: int  # a row at position p sees (p + 1) // ratio keys
    max_rows: int
    max_seqs: int
    max_qlen: int
    max_seq_len: int
    layers: int  # layers sharing one Table schedule: its build time is divided by this
    quick: bool  # part of the --quick subset
    table_pad: int = 0  # extra block-table columns so the table is cfg.block_table_width wide

    @property
    def seed(self) -> int:
        return zlib.crc32(f"{self.suite}/{self.name}".encode())

    def problem_kwargs(self) -> dict:
        """Keyword arguments of problems.make_problem (without device and generator)."""
        return dict(heads=self.heads, head_dim=self.head_dim, page_size=self.page_size,
                    pages_per_block=self.pages_per_block, gather=self.gather, seqs=list(self.seqs),
                    ratio=self.ratio, table_pad=self.table_pad)

    def bounds(self) -> dict:
        """Keyword arguments of mqa_logits_mxfp4_config (without device)."""
        return dict(heads=self.heads, head_dim=self.head_dim, page_size=self.page_size,
                    pages_per_block=self.pages_per_block, gather=self.gather, max_rows=self.max_rows,
                    max_seqs=self.max_seqs, max_qlen=self.max_qlen, max_seq_len=self.max_seq_len)

    def key(self, device, arch: str | None = None, cu_num: int | None = None):
        """The ProblemKey of these bounds on `device` (arch and cu_num from it unless given)."""
        device = normalize_device(device)
        if arch is None or cu_num is None:
            arch, cu_num = device_facts(device)
        return ProblemKey(device=device, arch=arch, cu_num=cu_num, **self.bounds())

    def row_ends(self) -> list[int]:
        """Every live row's window, as make_problem builds it (no tensors)."""
        return [(p + 1) // self.ratio for ctx, rows in self.seqs for p in range(ctx - rows, ctx)]

    def make(self, device, data: str = "realistic"):
        """The random problem (seeded by the shape's name), on `device`; `data` is a key of
        problems.DATA_KINDS (the scale layout)."""
        return make_problem(**self.problem_kwargs(), **DATA_KINDS[data],
                            generator=torch.Generator().manual_seed(self.seed), device=device)


@dataclass(frozen=True)
class Suite:
    name: str
    model: str | None  # fills configs/models/<model>.csv; None for suites that ship nothing
    description: str
    build: Callable[[], list[Shape]]

    def shapes(self, quick: bool = False) -> list[Shape]:
        return [s for s in _built(self.build) if s.quick or not quick]


@functools.cache
def _built(build) -> tuple[Shape, ...]:
    return tuple(build())


def _ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def _shape(name, suite, kind, geometry, seqs, ratio, layers, quick, seq_len_bound=None, cap=None,
           max_rows=None) -> Shape:
    """Bounds from the sequences: exact rows (unless `max_rows`), sequences and MTP rows;
    seq_len page-aligned, at least `seq_len_bound` (the ragged draws' cover), at most `cap`."""
    span = geometry["page_size"] * geometry["pages_per_block"]
    ends = [(p + 1) // ratio for ctx, rows in seqs for p in range(ctx - rows, ctx)]
    most = max(ends + [1])
    bound = _ceil_to(max(most, seq_len_bound or 0), span)
    if cap is not None:
        bound = min(bound, cap)
    rows = sum(r for _, r in seqs)
    return Shape(name=name, suite=suite, kind=kind, **geometry, seqs=tuple(seqs), ratio=ratio,
                 max_rows=max_rows or rows, max_seqs=len(seqs), max_qlen=max(r for _, r in seqs), max_seq_len=bound,
                 layers=layers, quick=quick,
                 table_pad=math.ceil(bound / span) - math.ceil(most / span))


def _ragged(name: str, batch: int, avg: int, rows: int, cap: int | None = None) -> list[tuple[int, int]]:
    rng = random.Random(zlib.crc32(name.encode()))
    lo, hi = RAGGED
    out = []
    for _ in range(batch):
        ctx = int(avg * rng.uniform(lo, hi))
        out.append((max(rows, min(ctx, cap) if cap else ctx), rows))
    return out


def _k(tokens: int) -> str:
    return f"{tokens // K}K" if tokens % K == 0 else str(tokens)


def _decode(suite, geometry, ratio, layers, mtps, contexts, quick_mtps, quick_contexts, tag="",
            cap=None) -> list[Shape]:
    shapes = []
    for mtp in mtps:
        for bs in BATCHES:
            for ctx in contexts:
                if bs * ctx > MAX_BATCH_TOKENS:
                    continue
                name = f"{tag}decode mtp{mtp} bs{bs} ctx{_k(ctx)}"
                quick = mtp in quick_mtps and bs in QUICK_BATCHES and ctx in quick_contexts
                cover = int(ctx * RAGGED[1]) // ratio
                shapes.append(_shape(name, suite, "decode", geometry, _ragged(f"{suite}/{name}", bs, ctx, mtp, cap),
                                     ratio, layers, quick, seq_len_bound=cover, cap=cap))
    return shapes


def _prefill(suite, geometry, ratio, layers, fresh, chunks, quick_names, tag="") -> list[Shape]:
    """fresh: (sequences, rows each) at context = rows; chunks: PREFILL_ROWS rows ending at a context."""
    shapes = []
    for nseq, rows in fresh:
        name = f"{tag}prefill fresh {nseq}x{rows}"
        shapes.append(_shape(name, suite, "prefill", geometry, [(rows, rows)] * nseq, ratio, layers,
                             name in quick_names))
    for ctx in chunks:
        name = f"{tag}prefill chunk {PREFILL_ROWS} @ ctx{_k(ctx)}"
        shapes.append(_shape(name, suite, "prefill", geometry, [(ctx, PREFILL_ROWS)], ratio, layers,
                             name in quick_names))
    return shapes


# (geometry, CSA ratio, layers sharing a schedule) of each model's indexer layers
V4, V4_RATIO, V4_LAYERS = (MODELS["deepseek_v4"].geometry(), MODELS["deepseek_v4"].ratio,
                           MODELS["deepseek_v4"].layers)
V41_FULL, V41_FULL_RATIO, V41_FULL_LAYERS = (MODELS["deepseek_v4_1"].geometry(), MODELS["deepseek_v4_1"].ratio,
                                             MODELS["deepseek_v4_1"].layers)
V41_CANDIDATE, V41_CANDIDATE_RATIO, V41_CANDIDATE_LAYERS = (
    MODELS["deepseek_v4_1_candidate"].geometry(), MODELS["deepseek_v4_1_candidate"].ratio,
    MODELS["deepseek_v4_1_candidate"].layers)


def deepseek_v4() -> list[Shape]:
    s = "deepseek_v4"
    return (_decode(s, V4, V4_RATIO, V4_LAYERS, (1, 2, 4), CONTEXTS, (1, 2, 4), (8 * K, 32 * K, 128 * K))
            + _prefill(s, V4, V4_RATIO, V4_LAYERS, fresh=((1, PREFILL_ROWS), (4, PREFILL_ROWS // 4)),
                       chunks=(32 * K, 64 * K, 128 * K, 256 * K),
                       quick_names=(f"prefill fresh 1x{PREFILL_ROWS}", f"prefill chunk {PREFILL_ROWS} @ ctx64K")))


def deepseek_v4_1() -> list[Shape]:
    """Full layers (8-token pages, 32 a table entry) at CSA ratio 2 and 1, and candidate layers
    (gather: each row its own table of up to 2048 blocks of 8 tokens).

    Ratio 1 and ratio 2 windows of the same length share a bucket, so the two ratios take
    alternate key lengths: ratio 2 at contexts 8K x 4^i, ratio 1 at 8K x 4^i (keys 4K .. 256K
    in powers of two between them).
    """
    s = "deepseek_v4_1"
    mtps = (1, 2, 4, 8)
    quick_mtps = (1, 4, 8)
    full = (_decode(s, V41_FULL, V41_FULL_RATIO, V41_FULL_LAYERS, mtps, CONTEXTS[::2], quick_mtps,
                    (32 * K, 128 * K), tag="full r2 ")
            + _decode(s, V41_FULL, 1, V41_FULL_LAYERS, mtps, CONTEXTS[:5:2], quick_mtps, (32 * K,),
                      tag="full r1 ")
            + _prefill(s, V41_FULL, V41_FULL_RATIO, V41_FULL_LAYERS, fresh=((1, PREFILL_ROWS),),
                       chunks=(64 * K, 256 * K), quick_names=(f"full r2 prefill fresh 1x{PREFILL_ROWS}",), tag="full r2 "))
    candidate = []
    for mtp in mtps:
        for bs in BATCHES:
            for avg in (2 * K, 8 * K, CANDIDATE_KEYS):
                name = f"candidate decode mtp{mtp} bs{bs} keys{_k(avg)}"
                if avg == CANDIDATE_KEYS:  # long contexts: every row keeps the full candidate list
                    seqs = [(CANDIDATE_KEYS, mtp)] * bs
                else:
                    seqs = _ragged(f"{s}/{name}", bs, avg, mtp, cap=CANDIDATE_KEYS)
                quick = mtp in quick_mtps and bs in QUICK_BATCHES and avg == CANDIDATE_KEYS
                candidate.append(_shape(name, s, "decode", V41_CANDIDATE, seqs, V41_CANDIDATE_RATIO,
                                        V41_CANDIDATE_LAYERS, quick,
                                        seq_len_bound=int(avg * RAGGED[1]), cap=CANDIDATE_KEYS))
    candidate.append(_shape(f"candidate prefill fresh 1x{PREFILL_ROWS}", s, "prefill", V41_CANDIDATE,
                            [(PREFILL_ROWS, PREFILL_ROWS)], V41_CANDIDATE_RATIO, V41_CANDIDATE_LAYERS,
                            True))
    return full + candidate


def smoke() -> list[Shape]:
    """Tiny shapes that run through the Triton interpreter in seconds (tests, a first try)."""
    s = "smoke"
    geo = dict(V41_FULL, pages_per_block=1)
    return [
        _shape("decode mtp2 bs2", s, "decode", geo, [(96, 2), (70, 2)], 2, 3, True, seq_len_bound=64),
        _shape("candidate decode mtp1 bs2", s, "decode", V41_CANDIDATE, [(40, 1), (56, 1)], 1, 4, True),
    ]


def core() -> list[Shape]:
    """The core issue's comparison table (docs/bench/issue2-h200-quick.csv): DeepSeek-V4 geometry,
    uniform contexts, `ctx` counting keys (context tokens / ratio 4) rather than tokens."""
    s = "core"
    shapes = [_shape(f"decode mtp{mtp} bs{bs} ctx{_k(keys)}", s, "decode", V4, [(keys * V4_RATIO, mtp)] * bs,
                     V4_RATIO, V4_LAYERS, True)
              for mtp in (1, 4) for bs in (1, 16, 64) for keys in (8 * K, 32 * K)]
    return shapes + [_shape(f"prefill 4096 rows x 16K keys (ratio {V4_RATIO})", s, "prefill", V4, [(64 * K, 4096)],
                            V4_RATIO, V4_LAYERS, True)]


SUITES = {
    "deepseek_v4": Suite("deepseek_v4", "deepseek_v4",
                         "H64, page 64, CSA ratio 4: decode MTP 1/2/4 x batch 1-256 x context 8K-512K, "
                         "prefill 16384 rows fresh and chunked (16K-256K)", deepseek_v4),
    "deepseek_v4_1": Suite("deepseek_v4_1", "deepseek_v4_1",
                           "H32: full layers (8-token pages x 32, ratio 2 and 1, MTP 1-8) and candidate "
                           "layers (gather, 2048 blocks of 8 a row, up to 16384 keys)", deepseek_v4_1),
    "core": Suite("core", None, "the core issue's comparison shapes: V4 decode MTP 1/4 x batch 1/16/64 x "
                  "8K/32K keys, prefill 4096 rows x 16K keys (ships no table)", core),
    "smoke": Suite("smoke", None, "two tiny shapes for the CPU interpreter (ships no table)", smoke),
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; valid: {', '.join(SUITES)}")
    return SUITES[name]


def select(shapes: list[Shape], only=None) -> list[Shape]:
    """Shapes whose name contains any of the `only` substrings (all when `only` is empty)."""
    if not only:
        return list(shapes)
    return [s for s in shapes if any(o in s.name for o in only)]


def shard(shapes: list, index: int, count: int) -> list:
    """Shard `index` of `count` (0-based): every count-th shape from `index`, in suite order.

    Deterministic, and the shards partition the list; round-robin spreads heavy shapes."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"a shard must be I/N with 0 <= I < N; got {index}/{count}")
    return list(shapes[index::count])


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' -> (I, N)."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard must be I/N (e.g. 0/4); got {text!r}") from None
    shard([], i, n)  # validates
    return i, n


def shape_for_key(key: tuple, layers: int | None = None) -> Shape:
    """A shape with these table-key bounds (dispatch/table.py's KEY; batch_invariant is no bound
    of a shape): the suite shape with the same bucket where one exists, else one made up from the
    bounds (rows // qlen sequences, windows up to seq_len, ratio 1)."""
    cols = dict(zip(KEY, key))
    qlen, rows, seq_len = cols["qlen"], cols["rows"], cols["seq_len"]
    geo = {c: cols[c] for c in ("heads", "head_dim", "page_size", "pages_per_block")} | {"gather": bool(cols["gather"])}
    same_geometry = []
    for suite in SUITES.values():
        for s in suite.shapes():
            if dict((k, getattr(s, k)) for k in geo) == geo:
                same_geometry.append(s)
                if (s.max_qlen, s.max_rows, s.max_seq_len) == (qlen, rows, seq_len):
                    return s
    if layers is None:
        layers = same_geometry[0].layers if same_geometry else 1
    nseq = max(1, rows // qlen)
    ctx = max(seq_len, qlen)
    ratio = -(-ctx // seq_len)  # windows stay within seq_len even when qlen > seq_len
    return _shape(f"bounds qlen{qlen} rows{rows} seq_len{seq_len}", "bounds", "decode" if is_decode(qlen) else "prefill",
                  geo, [(ctx, qlen)] * nseq, ratio, layers, False, seq_len_bound=seq_len, cap=seq_len,
                  max_rows=rows)
