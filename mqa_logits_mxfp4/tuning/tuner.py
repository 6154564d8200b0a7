"""The tuner (docs/tuning.md): for each shape, every candidate (backend x instance x mode) is
checked against the reference, then timed; the fastest few are re-timed interleaved and the
best median becomes the shape's row in a model CSV (dispatch/table.py's schema and bucket).
Each shape gets a row for each setting of batch_invariant, picked from the same measurements:
the fastest candidate, and the fastest canonical one.

The device and the timer are parameters: a `Timer` is any `timer(fn, label, iters, warmup) ->
list of microseconds`; the default times `fn` on the device (tuning/timing.py). Tests inject a
fake timer (labels are `backend/instance/mode`, `.../table:schedule` and `torch`) and a broken
backend. Tables are only ever written to the output file the caller names.
"""

from __future__ import annotations

import datetime
import logging
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch

from .. import __version__
from ..core.modes import schedule_free_mode
from ..core.problem import device_facts, normalize_device
from ..dispatch import registry, table
from ..dispatch.checks import check_inputs
from ..dispatch.config import make_config
from ..dispatch.table import COLUMNS, KEY, SCHEMA_VERSION
from ..reference import compare_to_reference, mqa_logits_reference
from . import timing
from .suites import Shape, shape_for_key
from .tables import TableWriter
from .torch_path import torch_path_call

log = logging.getLogger("mqa_logits_mxfp4.tuning")

Timer = Callable[[Callable[[], object], str, int, int], list]
REF_BUDGET_MACS = 1 << 34  # float64 reference work per shape; past it, bands of rows are checked
SETTINGS = (False, True)  # batch_invariant: a table row for each


def device_timer(device) -> Timer:
    """Cold-L2 CUDA-event samples on a GPU, wall time on the CPU (timing.time_samples)."""
    def timer(fn, label, iters, warmup):
        return timing.time_samples(fn, device, iters=iters, warmup=warmup)
    return timer


@dataclass(frozen=True)
class Candidate:
    backend: object  # a Backend (backends/base.py)
    instance: object  # its Instance
    mode: str  # table | free | prefill

    @property
    def label(self) -> str:
        return f"{self.backend.name}/{self.instance.name}/{self.mode}"

    def admitted(self, batch_invariant: bool) -> bool:
        """Whether a config of this batch_invariant setting may pick it (canonical instances only)."""
        return self.instance.canonical or not batch_invariant


def candidates(key, backends=None, instances=None, modes=None) -> tuple[list[Candidate], list[str]]:
    """Every (backend, instance, mode) that may run `key` here, and why each other one may not.

    backends: Backend objects (default: every registered one); instances / modes: name filters.
    """
    found, skipped = [], []
    for backend in backends if backends is not None else [registry.get(n) for n in registry.names()]:
        reason = backend.available()
        reasons = [reason] if reason is not None else backend.supports(key)
        if reasons:
            skipped.append(f"{backend.name}: " + "; ".join(str(r) for r in reasons))
            continue
        for inst in backend.instances():
            if instances and inst.name not in instances:
                continue
            reasons = backend.instance_supports(inst, key)
            if reasons:
                skipped.append(f"{backend.name}/{inst.name}: " + "; ".join(str(r) for r in reasons))
                continue
            found += [Candidate(backend, inst, m) for m in inst.modes if not modes or m in modes]
    return found, skipped


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A float tensor's bits as integers of its width (NaN payloads compare too)."""
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def candidate_runner(cand: Candidate, key, problem, out):
    """(launch, build or None): the candidate's backend called directly on `problem`, its inputs
    checked once here; build (Table mode) writes the schedule records launch reads."""
    free_mode = cand.mode if cand.mode != "table" else schedule_free_mode(key.max_qlen)
    cfg = make_config(key, cand.backend, cand.instance, free_mode, "tuner")
    args = problem.args()
    check_inputs(cfg, *args, out, None)
    records = cfg.schedule_buffers() if cand.mode == "table" else None

    def launch():
        cand.backend.launch(cfg, cand.mode, *args, out, None, records)

    if records is None:
        return launch, None
    return launch, lambda: cand.backend.build_schedule(cfg, problem.query_start_loc, problem.row_ends, records)


# --- the reference check --------------------------------------------------------------------

def _bands(ends: list[int], per_key: int, budget: int, count: int = 4) -> list[tuple[int, int]]:
    """Row ranges to check: all rows when the reference fits `budget` MACs, else `count` bands
    (first, last and evenly between) that together fit it."""
    live = len(ends)
    total = sum(ends) * per_key
    if total <= budget or live <= count:
        return [(0, live)]
    rows = max(1, int(budget / count / (total / live)))
    starts = sorted({min(live - rows, (live - rows) * i // (count - 1)) for i in range(count)})
    bands: list[tuple[int, int]] = []
    for s in starts:
        if bands and s <= bands[-1][1]:
            bands[-1] = (bands[-1][0], max(bands[-1][1], s + rows))
        else:
            bands.append((s, s + rows))
    return bands


class ReferenceCheck:
    """The float64 reference of a problem (or of bands of its rows, see _bands), and the check
    of an output against it: the contract's tolerance (docs/numerics.md), exact NaN / +-Inf cell sets, and every cell outside
    windows (and every padding row) still -inf."""

    def __init__(self, problem, max_seq_len: int, budget_macs: int = REF_BUDGET_MACS):
        self.problem = problem
        live = problem.live_rows
        ends = problem.row_ends[:live].tolist()
        self.bands = _bands(ends, problem.heads * problem.head_dim, budget_macs)
        self.refs = []
        for r0, r1 in self.bands:
            p = problem
            qsl = (p.query_start_loc.clamp(r0, r1) - r0).to(torch.int32)
            tables = p.block_tables[r0:r1] if p.gather else p.block_tables
            ref = mqa_logits_reference(p.q[r0:r1], p.q_scale[r0:r1], p.kv_cache, p.kv_scale, p.weights[r0:r1],
                                       tables, qsl, p.row_ends[r0:r1], max_seq_len=max_seq_len,
                                       pages_per_block=p.pages_per_block, gather=p.gather)
            self.refs.append((r0, r1, ref))

    @property
    def banded(self) -> bool:
        return self.bands != [(0, self.problem.live_rows)]

    def __call__(self, out: torch.Tensor) -> list[str]:
        """Empty when `out` (float32 [rows, >= max_seq_len], -inf before the launch) passes."""
        problems = []
        for r0, r1, ref in self.refs:
            where = f"rows {r0}..{r1 - 1}: " if self.banded else ""
            problems += [where + line for line in compare_to_reference(out[r0:r1], ref)]
        return problems + self._untouched(out)

    def _untouched(self, out: torch.Tensor) -> list[str]:
        p = self.problem
        live = p.live_rows
        cols = torch.arange(out.shape[1], device=out.device)
        step = max(1, (1 << 26) // max(out.shape[1], 1))
        written, first = 0, None
        for r0 in range(0, live, step):
            r1 = min(live, r0 + step)
            bad = (cols[None] >= p.row_ends[r0:r1, None].long()) & (out[r0:r1] != float("-inf"))
            n = int(bad.sum())
            if n and first is None:
                r, c = bad.nonzero()[0].tolist()
                first = (r0 + r, c, out[r0 + r, c].item())
            written += n
        problems = []
        if written:
            problems.append(f"{written} cells outside windows were written (must stay -inf); first "
                            f"(row {first[0]}, key {first[1]}) holds {first[2]!r}")
        pad = int((out[live:] != float("-inf")).sum())
        if pad:
            problems.append(f"{pad} cells of padding rows (past query_start_loc[-1] = {live}) were written")
        return problems


# --- timing -------------------------------------------------------------------------------

@dataclass
class Timed:
    candidate: Candidate
    us: float  # launch + schedule build / layers (the shape's layers share one schedule)
    launch_us: float
    schedule_us: float  # 0 for free / prefill
    samples: int
    pruned: bool = False  # stopped after the probe: slower than `prune` x the best so far


@dataclass
class ShapeResult:
    shape: Shape
    key: object  # ProblemKey
    timed: list[Timed] = field(default_factory=list)  # every candidate that passed the check
    final: list[Timed] = field(default_factory=list)  # the fastest few, re-timed interleaved
    rejected: list[tuple[str, list[str]]] = field(default_factory=list)  # (label, reasons)
    skipped: list[str] = field(default_factory=list)  # backends / instances that cannot run it
    not_identical: list[str] = field(default_factory=list)  # outputs differing bitwise from the first
    ref_us: float | None = None  # the torch path
    banded: bool = False  # the reference covered bands of rows only

    def best_for(self, batch_invariant: bool) -> Timed | None:
        """The pick of one setting: the fastest re-timed candidate it admits (canonical ones only
        under batch_invariant), else the fastest timed one."""
        pool = ([t for t in self.final if t.candidate.admitted(batch_invariant)]
                or [t for t in self.timed if not t.pruned and t.candidate.admitted(batch_invariant)])
        return min(pool, key=lambda t: t.us) if pool else None

    @property
    def best(self) -> Timed | None:
        return self.best_for(False)


def _median(xs) -> float:
    return float(statistics.median(xs))


class Tuner:
    """Checks and times candidates on one device.

    iters: samples a candidate gets at most (fewer when a call is slow: about `budget_ms` of
    samples, at least `min_iters`); top: how many of the fastest are re-timed interleaved, over
    `rounds` rounds (0: no re-timing); prune: a candidate whose probe is this many times slower
    than the best so far is not timed further.
    """

    def __init__(self, device, *, timer: Timer | None = None, backends=None, instances=None, modes=None,
                 iters: int = 30, min_iters: int = 5, budget_ms: float = 1000.0, top: int = 3,
                 rounds: int = 5, prune: float = 4.0, torch_path: bool = True,
                 ref_budget_macs: int = REF_BUDGET_MACS, on_event: Callable[[dict], None] | None = None,
                 data: str = "realistic", out_dtype: torch.dtype = torch.float32, batch_invariant: bool = False):
        self.device = normalize_device(device)
        self.timer = timer or device_timer(self.device)
        self.backends, self.instances, self.modes = backends, instances, modes
        self.iters, self.min_iters, self.budget_us = iters, min(min_iters, iters), budget_ms * 1e3
        self.top, self.rounds, self.prune = top, rounds, prune
        self.torch_path, self.ref_budget_macs = torch_path, ref_budget_macs
        self.on_event = on_event
        self.data = data  # problems.DATA_KINDS: the scale layout of every problem
        self.out_dtype = out_dtype  # the out every candidate writes (core/outputs.py's OUT_DTYPES)
        # the setting every measured key carries: True admits only canonical instances (the bench's
        # --batch-invariant); tune keeps False and picks both settings' rows from one measurement
        self.batch_invariant = batch_invariant
        self._said_non_canonical = False  # the expected non-identity of non-canonical instances: said once

    def _event(self, shape: Shape, **record) -> None:
        if self.on_event is not None:
            self.on_event(dict(suite=shape.suite, shape=shape.name, **record))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _time(self, cand: Candidate, launch, build, layers: int, best: float) -> Timed:
        probe = self.timer(launch, cand.label, min(3, self.iters), 1)
        est = _median(probe)
        if est > self.prune * best:
            return Timed(cand, est, est, 0.0, len(probe), pruned=True)
        n = max(self.min_iters, min(self.iters, int(self.budget_us / max(est, 1e-3))))
        samples = probe + (self.timer(launch, cand.label, n - len(probe), 0) if n > len(probe) else [])
        launch_us = _median(samples)
        schedule_us = _median(self.timer(build, cand.label + ":schedule", n, 1)) if build else 0.0
        return Timed(cand, launch_us + schedule_us / layers, launch_us, schedule_us, len(samples))

    def _retime(self, top: list[Timed], runners: dict, layers: int) -> list[Timed]:
        """The fastest candidates re-timed in interleaved rounds (drift hits them alike)."""
        if self.top <= 0 or not top:
            return []
        per_round = max(1, math.ceil(self.iters / self.rounds))
        launches = {t.candidate.label: [] for t in top}
        builds = {t.candidate.label: [] for t in top}
        for _ in range(self.rounds):
            for t in top:
                label = t.candidate.label
                launch, build = runners[label]
                launches[label] += self.timer(launch, label, per_round, 0)
                if build:
                    builds[label] += self.timer(build, label + ":schedule", per_round, 0)
        final = []
        for t in top:
            label = t.candidate.label
            launch_us = _median(launches[label])
            schedule_us = _median(builds[label]) if builds[label] else 0.0
            final.append(Timed(t.candidate, launch_us + schedule_us / layers, launch_us, schedule_us,
                               len(launches[label])))
        return sorted(final, key=lambda t: t.us)

    def _note_non_canonical(self, shape: Shape, labels: list[str], first: str) -> None:
        """Non-canonical instances differ bitwise from canonical ones by design: one warning a run."""
        say = log.debug if self._said_non_canonical else log.warning
        say("%s: %d candidates of non-canonical instances (%s) pass the check but are not bitwise identical "
            "to %s, as expected: their MMA sums the scale blocks in its own order (docs/numerics.md)%s",
            shape.name, len(labels), ", ".join(labels), first,
            "" if self._said_non_canonical else "; said once a run (ShapeResult.not_identical lists them)")
        self._said_non_canonical = True

    def _torch_us(self, problem, shape: Shape) -> float | None:
        fn = torch_path_call(problem, shape.max_seq_len)
        try:
            probe = self.timer(fn, "torch", 1, 1)
            n = max(1, min(5, int(self.budget_us / max(_median(probe), 1e-3))))
            return _median(probe + (self.timer(fn, "torch", n - 1, 0) if n > 1 else []))
        except Exception as e:  # e.g. out of memory: the row keeps an empty ref_us, and says why
            log.warning("%s: torch path not timed: %s: %s", shape.name, type(e).__name__, e)
            return None
        finally:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def measure(self, shape: Shape, cands: list[Candidate] | None = None, on_problem=None) -> ShapeResult:
        """Check, time and re-time every candidate of `shape` (or the given ones)."""
        key = replace(shape.key(self.device), batch_invariant=self.batch_invariant)
        result = ShapeResult(shape, key)
        if cands is None:
            cands, result.skipped = candidates(key, self.backends, self.instances, self.modes)
        for reason in result.skipped:
            self._event(shape, status="skipped", reason=reason)
        problem = shape.make(self.device, self.data)
        if on_problem is not None:
            on_problem(problem)
        out = torch.empty((problem.rows, shape.max_seq_len), dtype=self.out_dtype, device=self.device)
        check = ReferenceCheck(problem, shape.max_seq_len, self.ref_budget_macs) if cands else None
        result.banded = bool(check and check.banded)
        runners, first_out, expected = {}, None, []
        best = dict.fromkeys(SETTINGS, math.inf)  # per setting: the fastest so far of what it admits
        for cand in cands:
            try:
                launch, build = candidate_runner(cand, key, problem, out)
                out.fill_(float("-inf"))
                if build:
                    build()
                launch()
                self._sync()
                problems = check(out)
            except Exception as e:  # a candidate that cannot run is rejected with its error, not hidden
                problems = [f"{type(e).__name__}: {e}"]
            if problems:
                result.rejected.append((cand.label, problems))
                log.warning("%s: %s rejected: %s", shape.name, cand.label, " | ".join(problems))
                self._event(shape, candidate=cand.label, status="rejected", reasons=problems)
                continue
            if first_out is None:
                first_out = (cand.label, out.clone(), cand.instance.canonical)
            elif not torch.equal(_bits(out), _bits(first_out[1])):
                result.not_identical.append(cand.label)
                if cand.instance.canonical and first_out[2]:  # canonical instances must agree bit for bit
                    log.warning("%s: %s passes the check but is not bitwise identical to %s", shape.name,
                                cand.label, first_out[0])
                else:
                    expected.append(cand.label)
            runners[cand.label] = (launch, build)
            # pruned only when slower than `prune` x the best of every setting that admits it, so
            # a canonical candidate is kept against a faster non-canonical one
            admitting = [bi for bi in SETTINGS if cand.admitted(bi)]
            timed = self._time(cand, launch, build, shape.layers, max(best[bi] for bi in admitting))
            if not timed.pruned:
                for bi in admitting:
                    best[bi] = min(best[bi], timed.us)
            result.timed.append(timed)
            self._event(shape, candidate=cand.label, status="pruned" if timed.pruned else "timed", us=timed.us,
                        launch_us=timed.launch_us, schedule_us=timed.schedule_us, samples=timed.samples)
        if expected:
            self._note_non_canonical(shape, expected, first_out[0])
        del first_out
        fastest = []  # the fastest `top` of each setting
        for bi in SETTINGS:
            pool = sorted((t for t in result.timed if not t.pruned and t.candidate.admitted(bi)), key=lambda t: t.us)
            fastest += [t for t in pool[:self.top] if t not in fastest]
        result.final = self._retime(fastest, runners, shape.layers)
        for t in result.final:
            self._event(shape, candidate=t.candidate.label, status="retimed", us=t.us, launch_us=t.launch_us,
                        schedule_us=t.schedule_us, samples=t.samples)
        del runners, out, check
        if self.torch_path and cands:
            result.ref_us = self._torch_us(problem, shape)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return result


# --- tables -------------------------------------------------------------------------------

def provenance(device) -> dict:
    """The provenance columns shared by every row of one run (ref_us and candidates are per row)."""
    import triton  # not at import: the CLI imports this module before it settles TRITON_INTERPRET
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)"
    return dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                tool_version=f"mqa_logits_mxfp4 {__version__}",
                torch_version=torch.__version__, triton_version=triton.__version__, device_name=name)


def setting_key(key, batch_invariant: bool) -> tuple:
    """The table key of a problem under one batch_invariant setting (table.bucket)."""
    return table.bucket(replace(key, batch_invariant=batch_invariant))


def table_row(result: ShapeResult, prov: dict, batch_invariant: bool = False) -> dict | None:
    """The CSV row of a tuned shape for one batch_invariant setting (None: no candidate it admits
    passed): key = table.bucket(key), exactly what lookup matches."""
    best = result.best_for(batch_invariant)
    if best is None:
        return None
    row = table.key_record(setting_key(result.key, batch_invariant))
    row.update(schema_version=SCHEMA_VERSION, backend=best.candidate.backend.name,
               instance=best.candidate.instance.name, mode=best.candidate.mode, us=f"{best.us:.3f}", **prov,
               ref_us="" if result.ref_us is None else f"{result.ref_us:.3f}",
               candidates=sum(t.candidate.admitted(batch_invariant) for t in result.timed))
    return {c: row[c] for c in COLUMNS}


@dataclass
class TuneSummary:
    tuned: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)  # skipped: the output (or a skip file) has the key
    failed: list[str] = field(default_factory=list)  # no candidate passed the check, or an error


def measure_each(tuner: Tuner, shapes: list[Shape], progress=None, on_problem=None):
    """(shape, result, None) for each shape, or (shape, None, error) when measuring it raised
    (e.g. out of memory making the problem): the run goes on. `progress` wraps the iteration and
    its optional `.report(shape, result)` hears each result; `on_problem(shape, problem)` sees
    each problem made."""
    report = getattr(progress, "report", None)
    for shape in (progress(shapes) if progress else shapes):
        hook = None if on_problem is None else (lambda p, s=shape: on_problem(s, p))
        try:
            result = tuner.measure(shape, on_problem=hook)
        except Exception as e:
            if tuner.device.type == "cuda":
                torch.cuda.empty_cache()
            yield shape, None, e
            continue
        if report:
            report(shape, result)
        yield shape, result, None


def tune(shapes: list[Shape], output, tuner: Tuner, *, skip_files=(), progress=None) -> TuneSummary:
    """Tune every shape with a key (of either batch_invariant setting) in neither `output` nor
    `skip_files`; append the missing rows to `output`, both settings from one measurement.

    progress: a callable(iterable of shapes, total) -> iterable, with `.report(shape, result)`
    optional (the CLI's bar); results are also logged.
    """
    writer = TableWriter(output)
    done = writer.done()
    for f in skip_files:
        if Path(f).exists() and Path(f).stat().st_size:
            done |= {r.key for r in table.read_table(f)}
    summary = TuneSummary()
    todo = []
    for s in shapes:
        if all(setting_key(s.key(tuner.device), bi) in done for bi in SETTINGS):
            summary.already.append(s.name)
        else:
            todo.append(s)
    prov = provenance(tuner.device)
    for shape, result, error in measure_each(tuner, todo, progress):
        if error is not None:
            summary.failed.append(shape.name)
            log.error("%s: not tuned: %s: %s", shape.name, type(error).__name__, error)
            continue
        rows = {bi: table_row(result, prov, bi) for bi in SETTINGS if setting_key(result.key, bi) not in done}
        for row in filter(None, rows.values()):
            writer.append(row)
        lacking = [bi for bi, row in rows.items() if row is None]
        if len(lacking) == len(rows):
            summary.failed.append(shape.name)
            log.error("%s: no candidate passed the check (%d rejected, %d skipped)", shape.name,
                      len(result.rejected), len(result.skipped))
            continue
        if lacking:  # only batch_invariant=1 can lack a row while the other has one
            summary.failed.append(f"{shape.name} (batch_invariant=1)")
            log.error("%s: no canonical candidate passed the check: no batch_invariant=1 row", shape.name)
        summary.tuned.append(shape.name)
    writer.sort()
    return summary


# --- verify -------------------------------------------------------------------------------

@dataclass
class VerifyRow:
    source: str
    key: tuple
    pick: str
    tuned_us: float
    now_us: float | None = None
    problem: str = ""  # why it could not be re-timed, or the check's failure

    @property
    def ratio(self) -> float | None:
        return self.now_us / self.tuned_us if self.now_us is not None and self.tuned_us > 0 else None

    def off(self, tolerance: float) -> bool:
        return bool(self.problem) or self.ratio is None or abs(self.ratio - 1) > tolerance


def _resolve(row, backends):
    """(Candidate, None) for a row's pick, or (None, why it cannot run here)."""
    by_name = {b.name: b for b in backends} if backends is not None else {}
    try:
        backend = by_name.get(row.backend) or registry.get(row.backend)
    except KeyError:
        return None, f"no backend named {row.backend!r}"
    inst = next((i for i in backend.instances() if i.name == row.instance), None)
    if inst is None:
        why = backend.available()
        return None, f"{row.backend} has no instance {row.instance!r}" + (f" ({why})" if why else "")
    return Candidate(backend, inst, row.mode), None


def verify(path, tuner: Tuner, tolerance: float = 0.10, on_row=None) -> tuple[list[VerifyRow], list[str]]:
    """Re-time every row of `path` made on this device's arch / cu_num with the tuner's procedure.

    Returns (rows, skipped): a row is off when its new median differs by more than `tolerance`
    (or it could not run, or its pick now fails the check). on_row(VerifyRow) sees each as it is done.
    """
    here = device_facts(tuner.device)
    out, skipped = [], []
    for row in table.read_table(path):
        if row.key[:2] != here:
            skipped.append(f"{row.source}: made on {row.key[0]}/{row.key[1]}, this device is {here[0]}/{here[1]}")
            continue
        v = VerifyRow(row.source, row.key, f"{row.backend}/{row.instance}/{row.mode}", row.us)
        cand, why = _resolve(row, tuner.backends)
        shape = shape_for_key(row.key)
        if cand is not None:  # the row's setting: a batch_invariant row must name a canonical instance
            key = replace(shape.key(tuner.device), batch_invariant=row.key[KEY.index("batch_invariant")])
            reasons = cand.backend.supports(key) or cand.backend.instance_supports(cand.instance, key)
            why = "; ".join(str(r) for r in reasons) if reasons else None
        if why:
            v.problem = f"cannot run here: {why}"
        else:
            result = tuner.measure(shape, [cand])
            if result.rejected:
                v.problem = "fails the check: " + " | ".join(result.rejected[0][1])
            elif result.best is not None:
                v.now_us = result.best.us
        out.append(v)
        if on_row is not None:
            on_row(v)
    return out, skipped
