"""docs/contract.md, "Memory safety": no index data makes a kernel read or write out of bounds.

For each bad-index kind x backend x instance x mode, `out` is a view in the middle of a larger
poisoned buffer, and the whole buffer is compared bit for bit with what the guards promise:
- a page id outside [0, num_pages) (past the pool, or negative): the cells of the keys it names
  are NaN, every other cell holds the bits of the same call with a valid table (within the
  tolerance for the opus i8 family, whose stage with such a key takes the canonical path);
- row_ends past max_seq_len (or negative): the same bits as row_ends clamped into [0, max_seq_len];
- query_start_loc[-1] past the rows: the same bits as query_start_loc clamped to the rows;
- a flat out with offsets past its end or negative: a row is cut at the end of out, a negative
  offset writes nothing;
- Table records that are stale or garbage: nothing is written outside the current windows.
Under MQA_LOGITS_MXFP4_DEBUG=1 each kind is refused before the launch by an error naming the
first bad entry. On the CPU a guard that fails usually kills the process (the interpreter reads
host memory); on a GPU, scripts/device_check.sh runs this file under compute-sanitizer memcheck.
"""

import pytest
import torch

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.backends.opus.instances import I8_FAMILIES
from mqa_logits_mxfp4.core.errors import InputError, ScheduleError
from mqa_logits_mxfp4.reference import compare_to_reference, key_slots, mqa_logits_reference, row_sequences

from .common import MODES, POISON, build, candidates, config, instance_of, need_device

# On the CPU (the interpreter is slow) one instance per Triton family, with 2, 1 and 2 rows a
# group, taking turns (cpu_turn); on a GPU every instance of every available backend.
CPU_INSTANCES = ("fp8_r2n64w8s2", "f16_r1n64w4s2", "scaled_r2n64w8s2")
PAGE_GEOMETRIES = ["v4_decode", "v41_full", "v41_candidate"]   # plain, 4 pages an entry, gather
INT_MIN, INT_MAX = -2**31, 2**31 - 1
GUARD = 8   # rows / cells of poison around out


def device_pairs():
    params = []
    for p in candidates():
        pair = p.values[0]
        if pair[0] == "triton" and pair[1] in CPU_INSTANCES:
            params.append(pytest.param("cpu", pair, id=f"cpu-{p.id}"))
        params.append(pytest.param("cuda", pair, id=f"cuda-{p.id}", marks=pytest.mark.gpu))
    return params


DEVICE_PAIRS = device_pairs()


def cpu_turn(prob, pair, mode, device, *params):
    """On the CPU, each combination of the other parameters runs on one of the CPU instances that
    can serve it, in turn over the modes (so every family meets every mode); elsewhere on all."""
    if device != "cpu":
        return
    serving = []
    for inst in CPU_INSTANCES:
        try:
            config(prob, ("triton", inst), mode)
            serving.append(inst)
        except pytest.skip.Exception:
            pass
    turn = (MODES.index(mode) + sum(map(ord, "".join(params)))) % max(len(serving), 1)
    if serving and serving[turn] != pair[1]:
        pytest.skip(f"on the CPU {serving[turn]} runs this combination")


def small(geometry, device, seed):
    """The conformance geometries at their CPU size on every device (a few table entries a row)."""
    return build(geometry, device, seed=seed, grow=1)


def with_(prob, **tensors):
    return prob.__class__(**{**prob.__dict__, **tensors})


def guarded_2d(prob, cfg):
    """(buffer, out): out [rows, max_seq_len + 3] in the middle of a poisoned buffer, its rows
    GUARD + 3 + max_seq_len + GUARD apart."""
    width = cfg.max_seq_len + 3
    buf = torch.full((prob.rows + 2 * GUARD, width + 2 * GUARD), POISON, device=prob.q.device)
    return buf, buf[GUARD:GUARD + prob.rows, GUARD:GUARD + width]


def call(prob, cfg, mode, out, out_offsets=None, schedule=None, row_starts=None):
    if schedule is None and mode == "table":
        schedule = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends, row_starts=row_starts)
    res = mx.mqa_logits_mxfp4(*prob.args(), cfg=cfg, schedule=schedule, out=out, out_offsets=out_offsets,
                              row_starts=row_starts)
    assert res is out


def bits(t):
    return t.view(torch.int32)


def scored(prob, cfg, mode, row_starts=None):
    """The guarded buffer after one call."""
    buf, out = guarded_2d(prob, cfg)
    call(prob, cfg, mode, out, row_starts=row_starts)
    return buf


def table_rows(prob, ends):
    """The table row each live row reads, and the farthest key each table row is read to."""
    live = prob.live_rows
    rows = torch.arange(live) if prob.gather else row_sequences(prob.query_start_loc.cpu(), live)
    reach = torch.zeros(prob.block_tables.shape[0], dtype=torch.long)
    reach.scatter_reduce_(0, rows, ends[:live].long(), "amax")
    return rows, reach


def plant_bad_pages(prob, values):
    """A copy of the table with `values` written at reached entries spread over the table rows
    (first, middle, last reached entry), and the list of (table row, entry, value)."""
    span = prob.page_size * prob.pages_per_block
    _, reach = table_rows(prob, prob.row_ends.cpu())
    reached = [(t, j) for t in range(reach.shape[0]) for j in range(-(-int(reach[t]) // span))]
    picks = [reached[0], reached[len(reached) // 2], reached[-1]][:len(values)]
    table = prob.block_tables.clone()
    for (t, j), v in zip(picks, values):
        table[t, j] = v
    return table, [(t, j, v) for (t, j), v in zip(picks, values)]


def bad_page_cells(prob, table, width):
    """bool [live rows, width]: window cells whose key's page lies outside the cache (computed
    from the table, as docs/contract.md states the key -> page rule)."""
    live = prob.live_rows
    ends = prob.row_ends.cpu()[:live].long()
    rows, _ = table_rows(prob, ends)
    keys = torch.arange(width).expand(live, width)
    window = keys < ends[:, None]
    page, _ = key_slots(table.cpu(), rows, torch.where(window, keys, 0), prob.page_size, prob.pages_per_block)
    num_pages = prob.kv_cache.shape[0]
    return window & ((page < 0) | (page >= num_pages))


@pytest.mark.parametrize("device, pair", DEVICE_PAIRS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("geometry", PAGE_GEOMETRIES)
@pytest.mark.parametrize("kind", ["past_the_pool", "negative"])
def test_bad_page_ids_score_nan_and_read_nothing(kind, geometry, mode, device, pair):
    need_device(device)
    prob = small(geometry, device, seed=61)
    cfg = config(prob, pair, mode)
    cpu_turn(prob, pair, mode, device, kind, geometry)
    blocks = prob.kv_cache.shape[0] // prob.pages_per_block
    values = (blocks, blocks + 1000, INT_MAX) if kind == "past_the_pool" else (-1, -1000, INT_MIN)
    table, planted = plant_bad_pages(prob, values)
    bad = with_(prob, block_tables=table)
    want = scored(prob, cfg, mode)
    got = scored(bad, cfg, mode)
    nan = torch.zeros(got.shape, dtype=torch.bool)
    width = cfg.max_seq_len + 3
    nan[GUARD:GUARD + prob.live_rows, GUARD:GUARD + width] = bad_page_cells(prob, table, width)
    nan = nan.to(got.device)
    assert int(nan.sum()) >= len(planted), planted
    assert bool(torch.isnan(got[nan]).all()), f"{int((~torch.isnan(got[nan])).sum())} cells of bad pages not NaN"
    if instance_of(pair)[1].family in I8_FAMILIES:  # a stage with a bad key runs the canonical path
        assert torch.allclose(got[~nan], want[~nan], rtol=1e-5, atol=1e-30, equal_nan=True)
    else:
        assert torch.equal(bits(got[~nan]), bits(want[~nan])), "cells other than the bad pages' changed"


@pytest.mark.parametrize("device, pair", DEVICE_PAIRS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("geometry", ["v4_decode", "v41_candidate"])
def test_row_ends_are_clamped_to_max_seq_len(geometry, mode, device, pair):
    """Past max_seq_len on a sequence's last row (up to the int32 limit), negative on a first
    row: the same bits as the clamped row_ends, which are valid and match the reference."""
    need_device(device)
    prob = small(geometry, device, seed=67)
    cfg = config(prob, pair, mode)
    cpu_turn(prob, pair, mode, device, geometry)
    qsl = prob.query_start_loc.tolist()
    live = [(qsl[b], qsl[b + 1]) for b in range(prob.num_seqs) if qsl[b + 1] > qsl[b]]
    ends = prob.row_ends.clone()
    ends[live[0][1] - 1] = cfg.max_seq_len + 1000
    ends[live[-1][1] - 1] = INT_MAX
    ends[live[-1][0]] = -5 if live[-1][1] - live[-1][0] > 1 else ends[live[-1][0]]
    ends[live[1][0]] = INT_MIN if live[1][1] - live[1][0] > 1 else ends[live[1][0]]
    clamped = with_(prob, row_ends=ends.clamp(0, cfg.max_seq_len))
    got = scored(with_(prob, row_ends=ends), cfg, mode)
    want = scored(clamped, cfg, mode)
    assert torch.equal(bits(got), bits(want))
    ref = mqa_logits_reference(*clamped.args(), max_seq_len=cfg.max_seq_len,
                               pages_per_block=prob.pages_per_block, gather=prob.gather)
    assert compare_to_reference(want[GUARD:GUARD + prob.rows, GUARD:GUARD + cfg.max_seq_len + 3], ref) == []


@pytest.mark.parametrize("device, pair", DEVICE_PAIRS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("geometry", ["v4_decode", "h16_prefill"])
def test_row_starts_are_clamped_into_the_window(geometry, mode, device, pair):
    """row_starts that break the contract (negative down to the int32 limit, past the row's end
    up to it, decreasing along a sequence): the bits of the starts clamped into [0, row_end], and
    nothing written outside those windows (which may still decrease along a sequence, so some of
    their cells may stay unwritten: wrong values, never an access outside; test_windows.py checks
    valid starts against the reference)."""
    need_device(device)
    prob = small(geometry, device, seed=73)
    cfg = config(prob, pair, mode)
    cpu_turn(prob, pair, mode, device, geometry, "starts")
    ends = prob.row_ends.clamp(0, cfg.max_seq_len)
    picks = torch.tensor([INT_MIN, -5, 0, 3, 70, 129, INT_MAX], dtype=torch.int64)
    g = torch.Generator().manual_seed(3)
    starts = picks[torch.randint(0, len(picks), (prob.rows,), generator=g)].to(torch.int32).to(prob.q.device)
    clamped = torch.minimum(starts.clamp(min=0), ends)
    got = scored(prob, cfg, mode, row_starts=starts)
    want = scored(prob, cfg, mode, row_starts=clamped)
    assert torch.equal(bits(got), bits(want))
    ref = mqa_logits_reference(*prob.args(), max_seq_len=cfg.max_seq_len, pages_per_block=prob.pages_per_block,
                               gather=prob.gather, row_starts=clamped)
    inside = torch.zeros(want.shape, dtype=torch.bool, device=want.device)
    inside[GUARD:GUARD + prob.live_rows, GUARD:GUARD + ref.window.shape[1]] = ref.window.to(want.device)
    assert bool((want[~inside] == POISON).all()), "cells outside the clamped windows were written"
    assert bool((want[inside] != POISON).any()), "nothing was scored"


@pytest.mark.parametrize("device, pair", DEVICE_PAIRS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("last", ["rows+7", "int32_max"])
def test_query_start_loc_past_the_rows_touches_no_row_past_them(last, mode, device, pair):
    """The pad rows join the last sequence; no row past the tensors is read or written."""
    need_device(device)
    prob = small("v4_decode", device, seed=71)
    cfg = config(prob, pair, mode)
    cpu_turn(prob, pair, mode, device, last)
    qsl = prob.query_start_loc.clone()
    qsl[-1] = prob.rows + 7 if last == "rows+7" else INT_MAX
    got = scored(with_(prob, query_start_loc=qsl), cfg, mode)
    want = scored(with_(prob, query_start_loc=qsl.clamp(max=prob.rows)), cfg, mode)
    assert torch.equal(bits(got), bits(want))
    assert bool((got[GUARD + prob.rows:] == POISON).all()), "a row past the rows was written"


@pytest.mark.parametrize("device, pair", DEVICE_PAIRS)
@pytest.mark.parametrize("mode", MODES)
def test_flat_out_is_never_written_past_its_end(mode, device, pair):
    """Offsets of live rows: one whose row runs past the end of out (cut there), one entirely
    past it, one at the int64 limit, and a negative one (nothing written)."""
    need_device(device)
    prob = small("v4_decode", device, seed=73)
    cfg = config(prob, pair, mode)
    live, width = prob.live_rows, cfg.max_seq_len + 1
    n = prob.rows * width
    offs = torch.arange(prob.rows, dtype=torch.int64) * width
    ends = prob.row_ends.cpu().tolist()
    longest = max(range(live), key=lambda r: ends[r])
    others = [r for r in range(live) if r != longest]
    offs[longest] = n - ends[longest] // 2          # its second half would run past the end
    offs[others[0]], offs[others[1]], offs[others[2]] = n + 100, 2**63 - 1, -7
    buf = torch.full((n + 2 * GUARD,), POISON, device=device)
    call(prob, cfg, mode, buf[GUARD:GUARD + n], out_offsets=offs.to(device))
    grid = scored(prob, cfg, mode)[GUARD:GUARD + prob.rows, GUARD:]   # the same rows, in a 2-D out
    want = torch.full_like(buf, POISON)
    for r in range(live):
        o = int(offs[r])
        k = min(ends[r], n - o) if o >= 0 else 0
        if k > 0:
            want[GUARD + o:GUARD + o + k] = grid[r, :k]
    assert ends[longest] // 2 > 0 and torch.equal(bits(buf), bits(want))


@pytest.mark.parametrize("device, pair", DEVICE_PAIRS)
@pytest.mark.parametrize("records", ["stale", "garbage"])
def test_bad_table_records_write_only_inside_windows(records, device, pair):
    """Records built from other row_ends than the call's (a caller who changed them in place),
    or overwritten with garbage (sequences from -2 to past the last, unit counters around the
    real ones): the cells written all lie in the call's windows."""
    need_device(device)
    prob = small("v4_decode", device, seed=79)
    cfg = config(prob, pair, "table")
    schedule = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends)
    if records == "stale":
        prob.row_ends.copy_(prob.row_ends // 3)
    else:
        gen = torch.Generator().manual_seed(83)
        rec = torch.randint(-100, 100, schedule.records.shape, generator=gen, dtype=torch.int32)
        rec[:, 2] = torch.randint(-2, prob.num_seqs + 2, (rec.shape[0],), generator=gen, dtype=torch.int32)
        schedule.records.copy_(rec)
    buf, out = guarded_2d(prob, cfg)
    call(prob, cfg, "table", out, schedule=schedule)
    inside = torch.zeros(buf.shape, dtype=torch.bool)
    keys = torch.arange(cfg.max_seq_len + 3)
    inside[GUARD:GUARD + prob.live_rows, GUARD:GUARD + keys.shape[0]] = (
        keys[None, :] < prob.row_ends.cpu()[:prob.live_rows, None])
    assert bool((buf[~inside.to(buf.device)] == POISON).all()), "a cell outside the windows was written"


# ---------------------------------------------------------------------------------------------
# MQA_LOGITS_MXFP4_DEBUG=1: every kind refused before the launch, naming the first bad entry


@pytest.fixture
def debug(isolated_dispatch):
    isolated_dispatch.setenv("MQA_LOGITS_MXFP4_DEBUG", "1")
    mx.reload()
    yield


def debug_cases(prob, cfg):
    """(name, problem, out_offsets, flat, message fragment): one per bad-index kind."""
    blocks = prob.kv_cache.shape[0] // prob.pages_per_block
    span = prob.page_size * prob.pages_per_block
    who = "row" if prob.gather else "sequence"
    cases = []
    for name, value in (("page past the pool", blocks + 1000), ("negative page", -1)):
        table, [(t, j, v)] = plant_bad_pages(prob, [value])
        cases.append((name, with_(prob, block_tables=table), None,
                      f"every page id the windows reach must lie in [0, num_pages = {prob.kv_cache.shape[0]}); "
                      f"block_tables[{t}, {j}] = {v} ({who} {t}, keys {j * span}.."))
    qsl = prob.query_start_loc.tolist()
    last = qsl[1] - 1
    ends = prob.row_ends.clone()
    ends[last] = cfg.max_seq_len + 1
    cases.append(("row_end past max_seq_len", with_(prob, row_ends=ends), None,
                  f"row_ends must lie in [0, cfg.max_seq_len = {cfg.max_seq_len}] for live rows; "
                  f"row_ends[{last}] = {cfg.max_seq_len + 1}"))
    ends = prob.row_ends.clone()
    ends[0] = -3
    cases.append(("negative row_end", with_(prob, row_ends=ends), None, "row_ends[0] = -3"))
    bad_qsl = prob.query_start_loc.clone()
    bad_qsl[-1] = prob.rows + 1
    cases.append(("query_start_loc past the rows", with_(prob, query_start_loc=bad_qsl), None,
                  f"query_start_loc[-1] must be <= rows = {prob.rows}; got {prob.rows + 1}"))
    width = cfg.max_seq_len + 1
    offs = torch.arange(prob.rows, dtype=torch.int64) * width
    offs[1] = prob.rows * width - 1
    cases.append(("out_offsets past the end", prob, offs,
                  f"out_offsets + row_ends must stay within out ({prob.rows * width} elements); row 1: "
                  f"out_offsets[1] + row_ends[1] = {prob.rows * width - 1} + {int(prob.row_ends[1])}"))
    offs = torch.arange(prob.rows, dtype=torch.int64) * width
    offs[2] = -7
    cases.append(("negative out_offsets", prob, offs, "out_offsets must be >= 0 for live rows; out_offsets[2] = -7"))
    return cases


@pytest.mark.parametrize("device", [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("mode", ["free", "table"])
@pytest.mark.parametrize("geometry", ["v4_decode", "v41_full", "v41_candidate"])
def test_debug_names_the_first_bad_entry(geometry, mode, device, debug):
    need_device(device)
    prob = small(geometry, device, seed=89)
    cfg = mx.mqa_logits_mxfp4_config(device, heads=prob.heads, page_size=prob.page_size,
                                     pages_per_block=prob.pages_per_block, gather=prob.gather,
                                     max_rows=prob.rows, max_seqs=prob.num_seqs, max_qlen=3,
                                     max_seq_len=prob.max_seq_len)
    for name, bad, offs, fragment in debug_cases(prob, cfg):
        if offs is None:
            out = torch.full((prob.rows, cfg.max_seq_len), POISON, device=device)
        else:
            out, offs = torch.full((prob.rows * (cfg.max_seq_len + 1),), POISON, device=device), offs.to(device)
        schedule = (mx.mqa_logits_mxfp4_schedule(cfg, bad.query_start_loc, bad.row_ends)
                    if mode == "table" else None)
        with pytest.raises(InputError) as e:
            mx.mqa_logits_mxfp4(*bad.args(), cfg=cfg, schedule=schedule, out=out, out_offsets=offs)
        assert fragment in str(e.value), f"{name}: {e.value}"
        assert bool((out == POISON).all()), f"{name}: out was written"


@pytest.mark.parametrize("device", [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)])
def test_debug_refuses_stale_records_and_passes_valid_calls(device, debug):
    need_device(device)
    prob = small("v4_decode", device, seed=97)
    cfg = mx.mqa_logits_mxfp4_config(device, heads=prob.heads, page_size=prob.page_size, max_rows=prob.rows,
                                     max_seqs=prob.num_seqs, max_qlen=3, max_seq_len=prob.max_seq_len)
    out = torch.full((prob.rows, cfg.max_seq_len), POISON, device=device)
    schedule = mx.mqa_logits_mxfp4_schedule(cfg, prob.query_start_loc, prob.row_ends)
    mx.mqa_logits_mxfp4(*prob.args(), cfg=cfg, schedule=schedule, out=out)   # valid: passes every check
    assert not bool((out == POISON).all())
    out.fill_(POISON)
    prob.row_ends.copy_(prob.row_ends // 2)    # changed in place after the schedule was built
    with pytest.raises(ScheduleError, match=r"the schedule's records are stale: program \d+ holds"):
        mx.mqa_logits_mxfp4(*prob.args(), cfg=cfg, schedule=schedule, out=out)
    assert bool((out == POISON).all())
