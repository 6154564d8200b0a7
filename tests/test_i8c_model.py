"""The canonical i8 body's claim (opus family i8c; docs/numerics.md, "Integer tiles"), modelled
on the CPU with exact rounding: on a tile its rule admits, the i8 accumulator's integer, read as
the relu's power-of-two-scaled float and summed over the heads in the canonical tree, then scaled
back, gives the bits of the canonical float32 steps 1-5.

What runs here is the arithmetic, not the kernel: every float32 operation is an exact rational
rounded once to nearest-even float32 (subnormals included), so an fma is a true fma. The rule's
constants come from the kernel header. The model can fail: the i8 body's own head order (two FMA
chains) differs from the canonical bits on the same keys, and so does the tree without the
rule's lower key bound on tiny values.
"""

from __future__ import annotations

import functools
import random
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

HEADER = Path(__file__).resolve().parents[1] / "mqa_logits_mxfp4/backends/opus/csrc/kernel_sm90_i8.cuh"
E2M1 = [Fraction(v) for v in ("0", "0.5", "1", "1.5", "2", "3", "4", "6")]


@functools.cache
def constant(name: str) -> int:
    return int(re.search(rf"\b{name} = (-?\d+)", HEADER.read_text()).group(1))


def rn32(x: Fraction) -> np.float32:
    """x rounded once to the nearest float32, ties to even."""
    c = np.float32(float(x))
    cands = (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf)))
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - x), int(np.float32(v).view(np.uint32)) & 1))


def fr(v) -> Fraction:
    return Fraction(float(v))


def tree(x: list, w: list) -> np.float32:
    """docs/numerics.md step 5: level 1 fma(x_j, w_j, x_(j+H/2) * w_(j+H/2)), then halving adds."""
    h = len(x)
    v = [rn32(fr(x[j]) * fr(w[j]) + fr(rn32(fr(x[j + h // 2]) * fr(w[j + h // 2])))) for j in range(h // 2)]
    while len(v) > 1:
        m = len(v) // 2
        v = [rn32(fr(v[j]) + fr(v[j + m])) for j in range(m)]
    return v[0]


def chains(x: list, w: list) -> np.float32:
    """The i8 body's order: two FMA chains (even and odd heads), then one add."""
    a = b = np.float32(0)
    for j in range(0, len(x), 2):
        a = rn32(fr(x[j]) * fr(w[j]) + fr(a))
        b = rn32(fr(x[j + 1]) * fr(w[j + 1]) + fr(b))
    return rn32(fr(a) + fr(b))


def bits(v) -> int:
    return int(np.float32(v).view(np.uint32))


def one_key(rng: random.Random, heads: int, edge: bool):
    """A key and a group of heads inside the fast rule's spreads: (canonical out, the i8 body's
    integers and scalings) or None where the weights' exponents break the 104-binade spread."""
    kspread, qspread = constant("kI8KeySpread"), constant("kI8QuerySpread")
    qlo, klo0 = constant("kI8CanonQLo"), constant("kI8CanonKLo")
    centre = rng.randint(qlo, qlo + 8) if edge else rng.randint(60, 170)
    kmin = rng.randint(klo0, klo0 + 17) if edge else rng.randint(klo0, 175)
    ek = [kmin + rng.randint(0, kspread) for _ in range(4)]
    ek[rng.randrange(4)] = kmin
    key = [(rng.choice((-1, 1)), rng.randrange(8)) for _ in range(128)]
    x, w, ints, qmins = [], [], [], []
    for _ in range(heads):
        qmin = max(qlo, min(175, centre + rng.randint(-4, 4)))
        eq = [qmin + rng.randint(0, qspread) for _ in range(4)]
        eq[rng.randrange(4)] = qmin
        q = [(rng.choice((-1, 1)), rng.randrange(8)) for _ in range(128)]
        p = [sum(a[0] * b[0] * E2M1[a[1]] * E2M1[b[1]] for a, b in zip(q[32 * k:32 * k + 32], key[32 * k:32 * k + 32]))
             for k in range(4)]
        t = [rn32(p[k] * Fraction(2) ** (eq[k] + ek[k] - 254)) for k in range(4)]  # steps 1-2
        s = rn32(fr(rn32(fr(rn32(fr(t[0]) + fr(t[1]))) + fr(t[2]))) + fr(t[3]))   # step 3
        x.append(max(s, np.float32(0)))                                            # step 4
        i = sum(p[k] * 4 * Fraction(2) ** (eq[k] - qmin + ek[k] - kmin) for k in range(4))
        assert i.denominator == 1  # the exact integer one INT8 wgmma chain gives
        ints.append(int(i))
        qmins.append(qmin)
        w.append(np.float32(rng.choice((-1, 1)) * 2.0 ** rng.randint(-60 if edge else -12, 5) * (1 + rng.random())))
    wp = [rn32(fr(w[j]) * Fraction(2) ** (qmins[j] - 127)) for j in range(heads)]  # w' = w * 2^(qmin - 127)
    exps = [int(np.floor(np.log2(abs(float(v))))) for v in wp if v != 0]
    g, wlo = max(exps), min(exps)
    if g - wlo > constant("kI8WeightSpread"):
        return None
    return tree(x, w), dict(ints=ints, wp=wp, g=g, wlo=wlo, kmin=kmin)


def i8_out(m: dict, form: str, order) -> np.float32:
    """The body's value: relu on the accumulator's bits (max form: I * 2^-149 against weights
    times 2^(127 - G); multiply form: I * 2^-22 against weights times 2^22), the heads summed in
    `order`, then the store's scalings."""
    two = Fraction(2)
    if form == "max":
        x = [np.array(max(i, 0), dtype=np.uint32).view(np.float32) for i in m["ints"]]
        v = order(x, [rn32(fr(a) * two ** (127 - m["g"])) for a in m["wp"]])
        return rn32(fr(rn32(fr(v) * two ** (m["g"] + 22))) * two ** (m["kmin"] - 129))
    x = [rn32(Fraction(max(i, 0)) * two ** -22) for i in m["ints"]]
    v = order(x, [rn32(fr(a) * two ** 22) for a in m["wp"]])
    return rn32(fr(v) * two ** (m["kmin"] - 129))


def admitted(m: dict) -> bool:
    """The canonical body's key bound: kmin >= max(kI8CanonKLo, 3 - wlo)."""
    return m["kmin"] >= max(constant("kI8CanonKLo"), 3 - m["wlo"])


@pytest.mark.parametrize("form", ["max", "mul"])
def test_tree_on_the_integer_gives_the_canonical_bits(form):
    rng = random.Random(f"i8c {form}")
    seen = differ_chains = 0
    for n in range(48):
        got = one_key(rng, 64 if n % 3 else 16, edge=n % 4 == 0)
        if got is None or not admitted(got[1]):
            continue
        canon, m = got
        seen += 1
        assert bits(i8_out(m, form, tree)) == bits(canon), (form, n)
        differ_chains += bits(i8_out(m, form, chains)) != bits(canon)
    assert seen >= 24, seen
    assert differ_chains > 0  # the i8 body's own order is not canonical: the model tells them apart


def test_the_key_bound_is_needed():
    """Tiny values (small query and key bytes, small weights) outside kmin >= 3 - wlo: the same
    tree then misses the canonical bits on some keys (the canonical terms underflow)."""
    rng = random.Random("i8c bound")
    outside = differ = 0
    for n in range(80):
        got = one_key(rng, 16, edge=True)
        if got is None or admitted(got[1]):
            continue
        canon, m = got
        outside += 1
        differ += bits(i8_out(m, "max", tree)) != bits(canon)
    assert outside >= 10 and differ > 0, (outside, differ)
