"""The Table records kernel as the GPU runs it writes worksplit/rules.py's records.

The CPU suite checks the records kernel under TRITON_INTERPRET=1 (tests/test_flydsl.py); a
compiled kernel can still differ (integer widths, masked lanes, the branch that skips the
allotment's search). A wrong split is never a wrong logit -- every split covers every unit once --
so only this comparison, not the conformance suite, would see one: it shows as time. Every quick
shape of the model suites (the rows the bench and the tuner time) and random ragged batches, at
each Table split the opus instances use, on the device's own program count.
"""

from __future__ import annotations

import random

import pytest
import torch

from mqa_logits_mxfp4.backends.opus.instances import INSTANCES
from mqa_logits_mxfp4.core.records import RECORD_INTS
from mqa_logits_mxfp4.tuning import suites
from mqa_logits_mxfp4.worksplit import rules
from mqa_logits_mxfp4.worksplit.records import build_records

pytestmark = pytest.mark.gpu

SPLITS = sorted({(inst.rows, inst.block_n, inst.table_split or rules.UNIT_SPLIT) for inst in INSTANCES})


def model_batches():
    """(name, query_start_loc, row_ends, max_seqs, max_seq_len) of every quick model-suite shape."""
    for suite in (suites.deepseek_v4, suites.deepseek_v4_1):
        for shape in suite():
            if not shape.quick:
                continue
            qsl = [0]
            for _, r in shape.seqs:
                qsl.append(qsl[-1] + r)
            yield shape.name, qsl, shape.row_ends(), shape.max_seqs, shape.max_seq_len


def ragged_batches(count=40, seed=11):
    """Random ragged batches: 1-300 sequences of 1-8 rows and 0-140K keys (a few empty)."""
    rng = random.Random(seed)
    for i in range(count):
        qsl, ends = [0], []
        for _ in range(rng.choice([1, 2, 7, 8, 9, 16, 33, 64, 130, 131, 132, 133, 300])):
            rows = rng.choice([0, 1, 1, 2, 4, 8])
            ctx = rng.choice([0, 1, 300, 4096, 8192, 30000, 65536, 140000])
            ends += [max(0, ctx - rows + 1 + j) for j in range(rows)]
            qsl.append(qsl[-1] + rows)
        yield f"ragged {i}", qsl, ends, len(qsl) - 1, max([1, *ends])


@pytest.mark.parametrize("rows, block_n, split", SPLITS, ids=[f"r{r}n{n}-{s}" for r, n, s in SPLITS])
def test_gpu_records_are_the_rules_records(rows, block_n, split):
    nprog = torch.cuda.get_device_properties(0).multi_processor_count
    checked = 0
    for name, qsl, ends, max_seqs, max_seq_len in [*model_batches(), *ragged_batches()]:
        dev = dict(dtype=torch.int32, device="cuda")
        records = torch.full((nprog, RECORD_INTS), -7, **dev)  # poison: every field is written
        build_records(torch.tensor(qsl, **dev), torch.tensor(ends or [0], **dev), records, programs=nprog,
                      rows=rows, block_n=block_n, max_seqs=max_seqs, max_seq_len=max_seq_len, split=split)
        want = rules.schedule_records(qsl, ends, nprog, rows, block_n, rules.seq_lanes(max_seqs), max_seq_len,
                                      split=split)
        got = records.tolist()
        assert got == want, (name, split, next(p for p in range(nprog) if got[p] != want[p]))
        checked += 1
    assert checked > 100, checked
