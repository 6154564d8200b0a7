"""Instances (a backend's compiled kernel shapes) and Reasons (failed rules, as data)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .modes import MODES


@dataclass(frozen=True)
class Reason:
    """One failed rule: `check` names it, `message` says what was observed. `subject` is the
    instance the rule is about ('' for a backend-level rule); `message` then reads after it, so
    that many instances failing one rule can be reported once (summarize)."""

    check: str
    message: str
    subject: str = ""

    def __str__(self) -> str:
        if self.subject:
            return f"{self.check}: {self.subject} {self.message}"
        return f"{self.check}: {self.message}"


def ok_if(rules: list[tuple[bool, str, str]], subject: str = "") -> list[Reason]:
    """Reasons for the rules whose condition is False: [(holds, check, message), ...]."""
    return [Reason(check, msg, subject) for holds, check, msg in rules if not holds]


def summarize(reasons: list[Reason], shown: int = 3) -> str:
    """The reasons joined by '; ', each distinct (check, message) once: a rule that many
    instances break reads 'heads: 15 instances (a, b, ..., z): needs heads in ...; got 12'."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in reasons:
        subjects = groups.setdefault((r.check, r.message), [])
        if r.subject not in subjects:
            subjects.append(r.subject)
    parts = []
    for (check, message), subjects in groups.items():
        if len(subjects) == 1:
            parts.append(str(Reason(check, message, subjects[0])))
            continue
        names = subjects if len(subjects) <= shown else subjects[:shown - 1] + ["...", subjects[-1]]
        parts.append(f"{check}: {len(subjects)} instances ({', '.join(names)}): {message}")
    return "; ".join(parts)


@dataclass(frozen=True)
class Instance:
    """One compiled kernel shape a backend offers; the dispatcher picks by these attributes.

    rows: rows of one sequence per tile (they share every loaded KV tile); block_n: keys per
    tile; warps/stages: launch shape; family: how the MMA is done (e.g. fp8, bf16, scaled).
    `validated_on`: arches where this project has executed the instance against the reference;
    elsewhere it self-checks on first use. `canonical`: the instance evaluates in the canonical
    float32 order (docs/numerics.md), so it is bitwise identical to every other canonical one.
    """

    name: str
    backend: str
    family: str
    rows: int
    block_n: int
    warps: int
    stages: int
    heads: tuple[int, ...]
    page_sizes: tuple[int, ...]
    arches: tuple[str, ...]
    validated_on: tuple[str, ...]
    modes: tuple[str, ...] = MODES
    head_dims: tuple[int, ...] = (128,)
    ctas_per_sm: int = 2
    canonical: bool = True
    extra: tuple[tuple[str, object], ...] = field(default=())
    # Table mode's split (worksplit/rules.py's table_unit: tiles a stage, stages a round, a later
    # set-up's tiles); None: the units' own split
    table_split: tuple[int, int, int] | None = None

    def validated(self, arch: str) -> bool:
        return arch in self.validated_on
