"""The package's structure: layers point one way, each cross-file fact has one home, the backend
protocol is what the dispatcher calls, and every repo path the docs and comments name exists.

The import graph is read from the source with `ast` (module-level and function-level imports,
plus the backend registry's lazy import paths); nothing is imported to build it.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import triton

import mqa_logits_mxfp4 as mx
from mqa_logits_mxfp4.backends.base import Backend, rank_by_rows
from mqa_logits_mxfp4.backends.opus import instances as opus_instances
from mqa_logits_mxfp4.backends.triton import instances as triton_instances
from mqa_logits_mxfp4.core.modes import DECODE_MAX_QLEN, MODE_CODES, MODES, schedule_free_mode
from mqa_logits_mxfp4.core.outputs import OUT_CODES
from mqa_logits_mxfp4.core.records import RECORD_INTS
from mqa_logits_mxfp4.worksplit.rules import PIECE_COST
from mqa_logits_mxfp4.dispatch import registry
from mqa_logits_mxfp4.worksplit.rules import seq_lanes

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mqa_logits_mxfp4"
CSRC = PKG / "backends" / "opus" / "csrc"
NAME = "mqa_logits_mxfp4"

# The only function-level imports of package modules, each because its target must not load
# at import time: Triton reads TRITON_INTERPRET when it decorates a kernel (its own library's
# too), so the kernels, and in the CLI's modules anything that imports triton, load late; the
# FlyDSL kernels need flydsl, an optional toolchain.
LAZY_IMPORTS = {
    ("mqa_logits_mxfp4.backends.triton.backend", "mqa_logits_mxfp4.backends.triton.kernels"),
    ("mqa_logits_mxfp4.backends.triton.isa", "mqa_logits_mxfp4.backends.triton.kernels"),
    ("mqa_logits_mxfp4.backends.triton.isa", "mqa_logits_mxfp4.backends.triton.backend"),
    ("mqa_logits_mxfp4.cli", "mqa_logits_mxfp4.backends.triton.backend"),
    ("mqa_logits_mxfp4.worksplit.records", "mqa_logits_mxfp4.worksplit.kernel"),
    ("mqa_logits_mxfp4.backends.flydsl.toolchain", "mqa_logits_mxfp4.backends.flydsl.kernels"),
}


# ---------------------------------------------------------------------------------------------
# the import graph


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _owner(name: str) -> str | None:
    """The package module an imported dotted name loads (the longest existing prefix)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_edges() -> list[tuple[str, str, bool]]:
    """(importer, imported module, inside a function) for every import of a package module."""
    edges = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        in_function = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                in_function |= {id(n) for n in ast.walk(fn) if n is not fn}
        type_only = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                type_only |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, path.name == "__init__.py", node.level, node.module)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
            else:
                continue
            for name in names:
                target = _owner(name) if name.split(".")[0] == NAME else None
                if target and target != module:
                    edges.append((module, target, id(node) in in_function))
    for path in registry._PATHS.values():  # the registry imports each backend by its path
        edges.append(("mqa_logits_mxfp4.dispatch.registry", path, True))
    return edges


def _graph(edges) -> dict[str, set[str]]:
    """Importer -> imported. Importing a.b.c also runs the package a first, but Python starts a
    parent before its children, so only explicit imports (the facade's included) can close a circle."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for src, dst, _ in edges:
        graph[src].add(dst)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), and self-loops."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


EDGES = import_edges()


def test_the_graph_is_read():
    assert len(MODULES) > 40
    assert ("mqa_logits_mxfp4.dispatch.select", "mqa_logits_mxfp4.core.problem", False) in EDGES
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


def test_no_import_cycle():
    # the facade (the package __init__) imports dispatch/ and core/; a module of theirs importing
    # it back would close a circle, and so would any other pair
    assert cycles(_graph(EDGES)) == []


def test_backends_never_import_dispatch():
    bad = [(s, d) for s, d, _ in EDGES if s.startswith(f"{NAME}.backends") and d.startswith(f"{NAME}.dispatch")]
    assert bad == []


@pytest.mark.parametrize("layer, allowed", [
    ("core", ("core",)),
    ("worksplit", ("core", "worksplit")),
    ("backends", ("core", "worksplit", "backends")),
    ("dispatch", ("core", "worksplit", "backends", "dispatch", "formats", "problems", "reference")),
])
def test_layers_point_down(layer, allowed):
    prefix = f"{NAME}.{layer}"
    bad = [(s, d) for s, d, _ in EDGES if (s == prefix or s.startswith(prefix + "."))
           and not any(d == f"{NAME}.{a}" or d.startswith(f"{NAME}.{a}.") for a in allowed)]
    assert bad == []


def test_function_level_imports_only_where_a_module_must_load_late():
    lazy = {(s, d) for s, d, inside in EDGES if inside and s != "mqa_logits_mxfp4.dispatch.registry"}
    assert lazy == LAZY_IMPORTS


def test_the_package_and_its_commands_import_without_triton():
    """The CLI settles TRITON_INTERPRET after its modules are imported, so none of them (nor the
    package) may import triton at its top."""
    code = ("import sys, mqa_logits_mxfp4, mqa_logits_mxfp4.cli, mqa_logits_mxfp4.tuning.commands; "
            "print(sorted(m for m in sys.modules if m == 'triton' or m.startswith('triton.')))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# one home for each fact


def _cpp_constant(text: str, pattern: str) -> str:
    m = re.search(pattern, text)
    assert m, pattern
    return m.group(1)


def test_mode_codes_record_size_and_piece_cost_agree_with_the_cpp_side():
    args = (CSRC / "args.h").read_text()
    enum = _cpp_constant(args, r"enum Mode : int32_t \{([^}]*)\}")
    codes = {re.sub(r"(?<!^)(?=[A-Z])", "_", n[len("kMode"):]).lower(): int(v)
             for n, v in re.findall(r"(kMode\w+)\s*=\s*(\d+)", enum)}
    assert codes == MODE_CODES and tuple(MODE_CODES) == MODES
    assert int(_cpp_constant(args, r"constexpr int kRecordInts = (\d+);")) == RECORD_INTS
    assert int(_cpp_constant(args, r"constexpr int kPieceCost = (\d+);")) == PIECE_COST


def test_out_codes_agree_with_the_cpp_side():
    enum = _cpp_constant((CSRC / "args.h").read_text(), r"enum OutKind : int32_t \{([^}]*)\}")
    codes = {n[len("kOut"):].lower(): int(v) for n, v in re.findall(r"(kOut\w+)\s*=\s*(\d+)", enum)}
    assert codes == OUT_CODES


def test_opus_instances_come_from_registry_h():
    text = (CSRC / "registry.h").read_text()
    assert opus_instances.REGISTRY == opus_instances.parse_registry(text)
    assert [i.name for i in opus_instances.INSTANCES] == re.findall(r"^\s*X\(\d+, (\w+),", text, re.M)
    assert opus_instances.PAGE_SIZES == (8, 16, 32, 64, 128)
    assert opus_instances.ARCHES == ("sm_90", "gfx942", "gfx950")


def test_a_registry_row_is_all_an_instance_needs():
    """A new X(...) row of registry.h (the lead's recipe in docs/adding-an-instance.md) is read
    with nothing else changed; malformed rows are refused with the row in the message."""
    text = (CSRC / "registry.h").read_text()
    last = re.findall(r"^(\s*X\(\d+, .*\))\s*$", text, re.M)[0]  # the row without a continuation
    new_id = max(r[0] for r in opus_instances.REGISTRY) + 1
    added = text.replace(last, last + f" \\\n  X({new_id}, sm90_f16_r2w2, sm90, f16, 2, 2, 64, 2, 4, 0x3) /* new */")
    rows = opus_instances.parse_registry(added)
    assert rows[-1] == (new_id, "sm90_f16_r2w2", "sm_90", "f16", 2, 2, 64, 2, 4, (16, 32))
    assert rows[:-1] == opus_instances.REGISTRY
    for bad, why in ((last + f" \\\n  X({new_id + 1}, sm90_x, sm90, f16, 1, 4)", "has 6 fields"),
                     (last + " \\\n  X(15, sm90_y, sm90, f16, 1, 4, 64, 2, 4, 0xF)", "distinct ids"),
                     (last + f" \\\n  X({new_id + 2}, sm100_z, sm100, f16, 1, 4, 64, 2, 4, 0xF)", "OPUS_ARCH_NAME_sm100")):
        with pytest.raises(opus_instances.RegistryFormatError, match=why):
            opus_instances.parse_registry(text.replace(last, bad))


def test_one_decode_rule():
    for qlen in (1, DECODE_MAX_QLEN, DECODE_MAX_QLEN + 1, 4096):
        key = type("Key", (), {"max_qlen": qlen})()
        picks = rank_by_rows(list(triton_instances.INSTANCES[:2]), key)
        assert {m for _, m in picks} == {schedule_free_mode(qlen)}


def test_seq_lanes_is_the_next_power_of_two():
    assert [seq_lanes(n) for n in range(1, 2050)] == [triton.next_power_of_2(n) for n in range(1, 2050)]


def test_version_has_one_home():
    assert re.search(r'dynamic = \["version"\]', (ROOT / "pyproject.toml").read_text())
    assert 'version = {attr = "mqa_logits_mxfp4.__version__"}' in (ROOT / "pyproject.toml").read_text()
    head = (ROOT / "docs" / "contract.md").read_text().splitlines()[:5]
    assert any(f"version {mx.__version__}" in line for line in head), head


# ---------------------------------------------------------------------------------------------
# the backend protocol is what the dispatcher calls


def _protocol_members() -> set[str]:
    return {n for n in vars(Backend) if not n.startswith("_")} | set(Backend.__annotations__)


def _called_on_backends() -> set[str]:
    """Attributes dispatch/ and tuning/ read off a backend object."""
    names = set()
    for path in [*(PKG / "dispatch").glob("*.py"), *(PKG / "tuning").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            v = node.value
            is_backend = ((isinstance(v, ast.Name) and v.id in ("backend", "be"))
                          or (isinstance(v, ast.Attribute) and v.attr == "backend")
                          or (isinstance(v, ast.Call) and ast.unparse(v.func) == "registry.get"))
            if is_backend:
                names.add(node.attr)
    return names


def test_protocol_is_what_the_dispatcher_calls():
    assert _called_on_backends() == _protocol_members()


@pytest.mark.parametrize("name", registry.names())
def test_every_backend_implements_the_protocol(name):
    backend = registry.get(name)
    assert isinstance(backend, Backend)
    assert isinstance(registry._Broken(name, ImportError("x")), Backend)


# ---------------------------------------------------------------------------------------------
# the repo stands alone: paths named in docs and comments exist, no notes outside it

TEXT_FILES = sorted([ROOT / "README.md", ROOT / "pyproject.toml", *(ROOT / "docs").glob("*.md"),
                     *(ROOT / "scripts").iterdir(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "tests").glob("*.cpp"),
                     *(p for p in PKG.rglob("*") if p.suffix in (".py", ".h", ".cuh", ".cu", ".cpp"))])
_PATH = re.compile(r"(?<![\w./<>$~-])((?:[\w-]+/)+[\w.-]*\w(?:\.(?:py|md|h|cuh|cu|cpp|csv|sh|json|png|toml|txt))|"
                   r"(?:docs|tests|scripts|configs|csrc|backends|dispatch|core|worksplit|tuning)/(?:[\w-]+/)*)"
                   r"(?![\w<*{])")


def _exists(token: str, where: Path) -> bool:
    roots = [ROOT, PKG, CSRC.parent, where.parent, *where.parents]
    return any((root / token).exists() for root in roots)


def test_every_repo_path_named_exists():
    missing = []
    for f in TEXT_FILES:
        if not f.is_file() or f.name == "test_structure.py":
            continue
        for lineno, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for token in _PATH.findall(line.split("://")[0] if "://" in line else line):
                if token.startswith(("torch/", "triton/", "flydsl/", "pybind11/", "usr/", "opt/")):
                    continue  # headers and paths of other packages and of the system
                if not _exists(token.rstrip("/"), f):
                    missing.append(f"{f.relative_to(ROOT)}:{lineno}: {token}")
    assert missing == []


def test_no_reference_outside_the_repo():
    needles = ["SP" + "EC", "../" + "shared", "shared/" + "notes"]
    found = []
    for f in TEXT_FILES:
        if not f.is_file():
            continue
        for lineno, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if re.search(r"\b" + needles[0] + r"\b", line) or needles[1] in line or needles[2] in line:
                found.append(f"{f.relative_to(ROOT)}:{lineno}: {line.strip()[:100]}")
    assert found == []
