"""The Triton backend's C++ hot path plan (backends/triton/backend.py `launch_plan`), on kernels
AOT-compiled for sm_90 without a GPU: every kernel parameter gets a plan entry, in order -- the
12 pointers as the op's tensor arguments that fill them, the ints with their width, an int Triton
specialized into a constexpr left out, and the null scratch pointers Triton appends. The launch
itself is tested on the GPU (tests/conformance/test_errors.py, the hot path test).

This pytest process may run Triton under its interpreter, whose kernels cannot be AOT-compiled,
so the compile runs in a subprocess without TRITON_INTERPRET."""

import json
import os
import re
import subprocess
import sys

import pytest

_SCRIPT = r"""
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from mqa_logits_mxfp4.backends.triton import isa, kernels
from mqa_logits_mxfp4.backends.triton.backend import _pointer_sources, kernel_params, launch_plan

kernel = kernels.mqa_logits_kernel
consts = dict(HEADS=64, LOG2_H=6, D=128, PAGE=64, PPB=1, GATHER=False, R=1, BLOCK_N=64, MMA=0, MODE=1,
              SEQ_P2=4, FLAT_OUT=False, HAS_STARTS=True, NARROW_OUT=False, INTERP=False)
out = []
for case in ("all ints", "stride_out == 1"):
    signature = dict(isa._SIGNATURE, **{n: "constexpr" for n in consts})
    c = dict(consts)
    if case == "stride_out == 1":  # what the JIT does with an int argument equal to 1
        signature["stride_out"] = "constexpr"
        c["stride_out"] = 1
    signature["num_pages"] = "i64"  # a size of 2^31 or more
    ck = triton.compile(ASTSource(kernel, signature, constexprs=c), target=GPUTarget("cuda", 90, 32),
                        options=dict(num_warps=4, num_stages=2, enable_fp_fusion=False))
    sources = _pointer_sources(False, True, False)
    ints = (3, 5, 2**31 + 7, 4096, 0, 64, 512, 1 if case == "stride_out == 1" else 4096, 1)
    entry = re.search(r"\.entry\s+\w+\s*\((.*?)\)", ck.asm["ptx"], re.S).group(1)
    params = re.findall(r"\.param\s+\.(\w+)", entry)
    out.append(dict(case=case, plan=launch_plan(ck, sources, ints, kernel_params(ck)), ptx_params=params, sources=list(sources), ints=list(ints)))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def plans():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    return {c["case"]: c for c in json.loads(res.stdout.strip().splitlines()[-1])}


def test_every_parameter_has_its_entry(plans):
    c = plans["all ints"]
    plan, ptx = c["plan"], c["ptx_params"]
    assert plan is not None and len(plan) == len(ptx)
    # the pointers: row_starts (11) fills rs_ptr, row_ends (7) the absent out_offsets and records
    assert plan[:12] == [[0, i] for i in (0, 1, 2, 3, 4, 5, 6, 7, 11, 8, 7, 7)]
    assert all(p == "b64" or p == "u64" for p in ptx[:12])
    # nine ints: num_pages 64-bit, the rest 32-bit, with the values given
    assert plan[12:21] == [[1, 3], [1, 5], [2, 2**31 + 7], [1, 4096], [1, 0], [1, 64], [1, 512], [1, 4096], [1, 1]]
    assert [p[-2:] for p in ptx[12:21]] == ["32", "32", "64", "32", "32", "32", "32", "32", "32"]
    # then the scratch pointers Triton appends, null
    assert 1 <= len(plan) - 21 <= 2 and all(p == [3, 0] for p in plan[21:])


def test_an_int_specialized_to_a_constexpr_is_not_a_parameter(plans):
    full, spec = plans["all ints"]["plan"], plans["stride_out == 1"]["plan"]
    assert spec is not None and len(spec) == len(plans["stride_out == 1"]["ptx_params"]) == len(full) - 1
    assert spec[:19] == full[:19] and spec[19] == [1, 1]  # stride_out gone, `parts` next


def test_launch_hooks_send_calls_through_tritons_launcher():
    """A profiler's launch hook (Triton 3.5 on: added to a HookChain; before: set) turns the hot
    path off, so Triton's launcher calls it; with none set, the hot path is on."""
    from triton import knobs

    from mqa_logits_mxfp4.backends.triton.backend import _no_launch_hooks
    assert _no_launch_hooks()
    hook = knobs.runtime.launch_enter_hook
    seen = []
    if hasattr(hook, "add"):
        hook.add(seen.append)
        try:
            assert not _no_launch_hooks()
        finally:
            hook.remove(seen.append)
    else:
        knobs.runtime.launch_enter_hook = seen.append
        try:
            assert not _no_launch_hooks()
        finally:
            knobs.runtime.launch_enter_hook = hook
    assert _no_launch_hooks()
