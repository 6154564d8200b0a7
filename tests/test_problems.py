import math

import pytest
import torch

from mqa_logits_mxfp4.problems import EDGE_SOURCES, make_edge_problem, make_problem
from mqa_logits_mxfp4.reference import mqa_logits_reference


def window_pages(p) -> dict[int, set[int]]:
    """Pages each live row reads inside its window, computed with Python integers."""
    span = p.page_size * p.pages_per_block
    qsl, tables = p.query_start_loc.tolist(), p.block_tables.tolist()
    pages = {}
    for seq in range(p.num_seqs):
        for r in range(qsl[seq], qsl[seq + 1]):
            table = tables[r if p.gather else seq]
            pages[r] = {table[n // span] * p.pages_per_block + (n // p.page_size) % p.pages_per_block
                        for n in range(int(p.row_ends[r]))}
    return pages


def seq_of(p, r: int) -> int:
    qsl = p.query_start_loc.tolist()
    return next(b for b in range(p.num_seqs) if qsl[b] <= r < qsl[b + 1])


@pytest.mark.parametrize("seqs, ratio, ends", [
    ([(1000, 1)], 4, [250]),  # decode
    ([(1000, 2), (37, 4)], 4, [249, 250, 8, 8, 9, 9]),  # MTP decode rows
    ([(5, 5)], 1, [1, 2, 3, 4, 5]),  # fresh prefill
    ([(10, 3), (6, 0), (4, 4)], 2, [4, 4, 5, 0, 1, 1, 2]),  # chunked prefill, an empty sequence, CSA ratio
])
def test_windows(seqs, ratio, ends):
    p = make_problem(heads=16, page_size=8, seqs=seqs, ratio=ratio)
    assert p.row_ends.tolist() == ends and p.row_ends.dtype == torch.int32
    qsl = [0]
    for _, rows in seqs:
        qsl.append(qsl[-1] + rows)
    assert p.query_start_loc.tolist() == qsl and p.query_start_loc.dtype == torch.int32
    assert p.max_seq_len == max(ends) and p.max_qlen == max(r for _, r in seqs)
    assert p.live_rows == p.rows == len(ends) and p.num_seqs == len(seqs)


def test_shapes_dtypes_and_pad_rows():
    p = make_problem(heads=32, head_dim=256, page_size=16, seqs=[(40, 2), (70, 1)], pad_rows=3,
                     weights_dtype=torch.bfloat16, scale_exponents=(120, 140))
    assert p.rows == 6 and p.live_rows == 3 and int(p.query_start_loc[-1]) == 3
    assert p.q.shape == (6, 32, 128) and p.q_scale.shape == (6, 32, 8) and p.q.dtype == torch.uint8
    assert p.kv_cache.shape[1:] == (16, 128) and p.kv_scale.shape[1:] == (16, 8)
    assert p.weights.shape == (6, 32) and p.weights.dtype == torch.bfloat16
    assert p.row_ends.shape == (6,) and p.block_tables.dtype == torch.int32
    assert p.block_tables.shape == (2, 5)
    scales = torch.cat([p.q_scale.flatten(), p.kv_scale.flatten()])
    assert scales.min() >= 120 and scales.max() < 140 and scales.unique().numel() == 20
    assert p.q.unique().numel() == 256
    assert p.args() == (p.q, p.q_scale, p.kv_cache, p.kv_scale, p.weights, p.block_tables,
                        p.query_start_loc, p.row_ends)


@pytest.mark.parametrize("pages_per_block, gather, table_pad", [(1, False, 0), (4, False, 2), (1, True, 1), (4, True, 0)])
def test_table_coverage(pages_per_block, gather, table_pad):
    p = make_problem(heads=16, page_size=8, pages_per_block=pages_per_block, gather=gather, table_pad=table_pad,
                     seqs=[(200, 3), (90, 1), (33, 2)], pad_rows=2)
    num_pages = p.kv_cache.shape[0]
    assert p.block_tables.shape[0] == (p.rows if gather else p.num_seqs)
    assert p.block_tables.min() >= 0 and (p.block_tables.max() + 1) * pages_per_block <= num_pages
    reads = window_pages(p)
    by_seq = {}
    for r, pages in reads.items():
        by_seq.setdefault(seq_of(p, r), set()).update(pages)
    seq_pages = list(by_seq.values())
    assert sum(map(len, seq_pages)) == len(set().union(*seq_pages))  # sequences never share a page
    # Entries past a row's coverage name blocks that no window reads.
    span = p.page_size * pages_per_block
    read_blocks = {page // pages_per_block for pages in seq_pages for page in pages}
    for t in range(p.block_tables.shape[0]):
        rows = [t] if gather else range(p.query_start_loc[t], p.query_start_loc[t + 1])
        cover = max([math.ceil(int(p.row_ends[r]) / span) for r in rows if r < p.live_rows], default=0)
        assert not read_blocks & set(p.block_tables[t, cover:].tolist())
    if gather:  # rows of a sequence draw their own blocks from a shared pool
        assert reads[0] != reads[2] and reads[0] & reads[2]


def test_gather_rows_list_their_own_past():
    # A causal prefill in gather mode: whatever rows 0..r read together lies within the first
    # need_r + need_r // 4 blocks of the pool (row r's reach), and neighbours share most blocks.
    p = make_problem(heads=4, page_size=8, gather=True, seqs=[(800, 800)])

    def read(r):  # the blocks row r's window reads
        return set(p.block_tables[r, :math.ceil(int(p.row_ends[r]) / p.page_size)].tolist())

    seen = set()
    for r in range(p.live_rows):
        seen |= read(r)
        need = math.ceil(int(p.row_ends[r]) / p.page_size)
        assert len(seen) <= need + need // 4, (r, need, len(seen))
    four = [read(r) for r in range(796, 800)]
    assert len(set().union(*four)) <= 1.3 * len(four[-1])


def test_seeded_generator_is_deterministic():
    def build(seed):
        g = None if seed is None else torch.Generator().manual_seed(seed)
        return make_problem(heads=16, page_size=8, gather=True, seqs=[(50, 2), (20, 1)], pad_rows=1, generator=g)

    a, b, c, d = build(3), build(3), build(4), build(None)
    for name in ("q", "q_scale", "kv_cache", "kv_scale", "weights", "block_tables", "row_ends"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert not torch.equal(a.q, c.q) and not torch.equal(a.block_tables, c.block_tables)
    assert torch.equal(d.q, build(0).q)


def test_to_moves_every_tensor():
    p = make_problem(heads=16, page_size=8, seqs=[(20, 1)]).to("cpu")
    q = p.to(torch.device("cpu"))
    assert q.heads == 16 and torch.equal(q.kv_cache, p.kv_cache)


@pytest.mark.parametrize("pages_per_block, gather, weights_dtype", [
    (1, False, torch.float32), (4, False, torch.bfloat16), (1, True, torch.float32), (2, True, torch.bfloat16),
])
def test_edge_problem_has_each_source(pages_per_block, gather, weights_dtype):
    p = make_edge_problem(heads=16, page_size=8, pages_per_block=pages_per_block, gather=gather,
                          weights_dtype=weights_dtype)
    assert p.num_seqs == len(EDGE_SOURCES) and p.max_qlen == 2
    got = mqa_logits_reference(*p.args(), max_seq_len=p.max_seq_len, pages_per_block=pages_per_block, gather=gather)
    for b, source in enumerate(EDGE_SOURCES):
        rows = slice(2 * b, 2 * b + 2)
        cells = got.fp32[rows][got.window[rows]]
        nan, pos, neg = cells.isnan().sum(), (cells == math.inf).sum(), (cells == -math.inf).sum()
        assert nan > 0, source
        if source in ("q_scale_nan", "q_scale_nan_zero_block", "nan_weight"):
            assert torch.equal(got.fp32[2 * b].isnan(), got.window[2 * b]) and pos == neg == 0, source
        if source == "pos_inf_weight":
            assert pos > 0 and neg == 0
        if source == "neg_inf_weight":
            assert neg > 0 and pos == 0
        if source == "overflow":
            assert pos > 0 and neg > 0
            assert got.ref[rows][got.window[rows]].isfinite().all()  # float64 does not overflow
        if source not in ("pos_inf_weight", "neg_inf_weight", "overflow"):
            assert pos == neg == 0, source
