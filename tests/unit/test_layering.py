"""The package's layering, read from its import graph (``ast`` over every module under autotune/).

Each module belongs to one stage of the pipeline (``STAGES``, the one place that says which); a module imports
only from its own stage or earlier ones, and no chain of imports leads back to where it started. Imports inside
functions count: a lazy import is still a dependency, only a later one.

The order differs from the data-flow picture in one place, on purpose: ``results`` (the tuned/ files) comes before
``tune``, because a tuning session stores its winners with ``store``; T4 records are read from studies, so ``t4``
sits with ``tune``. Measuring and serving share the launch path, so ``serve`` may import ``measure``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Stages in pipeline order. A module is named by its dotted path under autotune ("" is the package itself); a
# name ending in ".*" takes every module under that package.
STAGES: dict[str, tuple[str, ...]] = {
    # leaves: records, expressions and limits that everything may use
    "core": _names("errors version limits device expr safe_yaml space records study_key hooks progress tensormap"),
    "kernels": _names("kernels kernels.*"),
    "build": _names("templates compiler compile_pool"),
    "measure": _names("bench energy verify streams vendor evaluate worker"),
    "results": _names("store export"),
    "tune": _names(
        "spec spec_params workload samplers samplers_ga study_storage storage_checks study_database shared_study "
        "trial_record search search_state finalists session tune_workload gpu_workers ladder replay t4"
    ),
    "serve": _names("launcher runtime dispatch calls torch_calls choices online serving recording torch_backend torch"),
    "report": _names("report report.*"),
    # the entry points: the command line, and the package's public names ("")
    "cli": (*_names("cli cli_parser compile_only __main__"), ""),
}

# Imports that break the layering or close a cycle today, in files this change could not touch: (importer,
# imported) -> why, and whose file it is. Remove an entry when its import is fixed; the test fails on an entry
# that no longer matches an import, so the list only shrinks.
ALLOWED: dict[tuple[str, str], str] = {
    # choices.py and t4.py (other helpers' files): `from . import __version__` reaches the package's public names
    # (the serving stage and the rest); the fix is `from .version import __version__`.
    ("choices", ""): "choices.py: import __version__ from .version",
    ("t4", ""): "t4.py: import __version__ from .version",
    # shared_study.py (another helper's file) reaches back into search.py for names search re-exports; the fix is
    # importing them where they live: result_from_trial and result_attrs from .trial_record, failed_orphans from
    # .study_storage. It closes the cycle search -> study_storage -> study_database -> shared_study -> search.
    ("shared_study", "search"): "shared_study.py: import from .trial_record and .study_storage",
    # runtime.py and dispatch.py (another helper's files): set_online (dispatch) calls runtime.forget_launchers,
    # while runtime imports dispatch; the memo could move to dispatch or a registry both read.
    ("dispatch", "runtime"): "dispatch.py: set_online clears runtime's memo",
    # runtime.__getattr__ keeps autotune.runtime.gemm/conv2d working after they moved to calls.py, which imports
    # runtime; dropping the alias (callers use autotune.gemm) removes the cycle.
    ("runtime", "calls"): "runtime.py: the old runtime.gemm/conv2d alias",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file: the submodule when it imports a
    submodule, else the module (or package ``__init__``) it imports a name from. "" is the package itself."""
    path = MODULES[name]
    package = ["autotune", *(name.split(".") if name else [])]
    if path.name != "__init__.py":
        package.pop()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            targets = [f"{module}.{a.name}" if _inside(f"{module}.{a.name}") in MODULES else module for a in node.names]
        else:
            continue
        found.update(m for m in map(_inside, targets) if m is not None and m in MODULES)
    found.discard(name)
    return found


def _inside(dotted: str) -> str | None:
    """``autotune.x.y`` -> ``x.y``, ``autotune`` -> "", anything outside the package -> None."""
    if dotted == "autotune":
        return ""
    return dotted.removeprefix("autotune.") if dotted.startswith("autotune.") else None


GRAPH = {name: _imports(name) for name in MODULES}


def stage_of(module: str) -> str | None:
    for stage, members in STAGES.items():
        for m in members:
            if module == m or (m.endswith(".*") and module.startswith(m[:-1])):
                return stage
    return None


ORDER = {stage: i for i, stage in enumerate(STAGES)}


def _shown(module: str) -> str:
    return "autotune" + ("." + module if module else "")


def test_every_module_has_a_stage():
    unplaced = [_shown(m) for m in MODULES if stage_of(m) is None]
    assert not unplaced, f"add these to STAGES in {Path(__file__).name}: {', '.join(unplaced)}"


def test_the_stage_table_names_only_modules_that_exist():
    named = [m for members in STAGES.values() for m in members if not m.endswith(".*")]
    assert [m for m in named if m not in MODULES] == []
    assert len(named) == len(set(named))


def _upward_imports() -> list[tuple[str, str]]:
    return [
        (m, dep)
        for m, deps in sorted(GRAPH.items())
        for dep in sorted(deps)
        if stage_of(m) and stage_of(dep) and ORDER[stage_of(dep)] > ORDER[stage_of(m)]
    ]


def test_a_module_imports_only_from_its_own_stage_or_earlier_ones():
    wrong = [
        f"{_shown(m)} ({stage_of(m)}) imports {_shown(dep)} ({stage_of(dep)})"
        for m, dep in _upward_imports()
        if (m, dep) not in ALLOWED
    ]
    assert not wrong, "imports against the pipeline's order:\n" + "\n".join(wrong)


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if (v, w) in ALLOWED:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    cycles = _cycles()
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(map(_shown, c)) for c in cycles)


def test_every_allowed_exception_still_matches_an_import():
    stale = [f"{_shown(a)} -> {_shown(b)}" for a, b in ALLOWED if b not in GRAPH.get(a, set())]
    assert not stale, "remove these fixed entries from ALLOWED: " + ", ".join(stale)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from .errors import AutotuneError\n", {"errors"}),
        ("from . import hooks, __version__\n", {"hooks", ""}),
        ("def f():\n    from .kernels import FAMILIES\n", {"kernels"}),
        ("import autotune.store as s\n", {"store"}),
        ("from typing import Any\nimport yaml\n", set()),
    ],
)
def test_the_graph_reads_relative_absolute_and_lazy_imports(source, expected, tmp_path, monkeypatch):
    """The reader the checks above rely on: ``spec`` standing in for a top-level module."""
    fake = tmp_path / "spec.py"
    fake.write_text(source)
    monkeypatch.setitem(MODULES, "spec", fake)
    assert _imports("spec") == expected


# --- generic modules name no kernel family or template --------------------------------------------------------

# Modules outside autotune/kernels/ that still branch on a family's or template's name, in files other helpers own:
# module -> what the branch does and where its knowledge belongs. Remove an entry once its branch moves.
NAMES_ALLOWED: dict[str, str] = {
    "runtime": "runtime.py: load('gemm', M=, N=, K=) parses a GEMM shape, and the old runtime.gemm/conv2d alias",
    "calls": "calls.py: conv2d() checks the conv2d family is registered",
    "torch": "torch.py: nn.Conv2d vs nn.Linear routing (a module kind named like the family)",
    "tune_workload": "tune_workload.py: NT GEMMs tune with the decode space (a family method could say so)",
    "vendor": "vendor.py: cuBLAS vs cuDNN per family; the family's vendor() could serve on the caller's stream",
}


def _kernel_names() -> set[str]:
    from autotune.kernels import FAMILIES

    names = set(FAMILIES) | {f.template_dir for f in FAMILIES.values()}
    return names | {t for f in FAMILIES.values() for t in f.templates if t != "auto"}


def named_kernels(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each comparison with, or subscript by, a string constant that is one of ``names``
    (``kernel == "gemm"``, ``t in ("auto", "naive")``, ``FAMILIES["conv2d"]``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Subscript):
            operands = [node.slice]
        else:
            continue
        for operand in operands:
            items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            found += [(node.lineno, x.value) for x in items if isinstance(x, ast.Constant) and x.value in names]
    return found


def test_no_generic_module_branches_on_a_kernel_family_or_template_name():
    names = _kernel_names()
    generic = {m: p for m, p in MODULES.items() if stage_of(m) != "kernels"}
    hits = {m: named_kernels(p.read_text(), names) for m, p in generic.items()}
    wrong = [
        f"{_shown(m)}:{line} names {name!r}" for m, h in hits.items() if m not in NAMES_ALLOWED for line, name in h
    ]
    assert not wrong, "move what these branches know into the family or template (autotune/kernels):\n" + "\n".join(
        wrong
    )
    stale = [m for m in NAMES_ALLOWED if not hits.get(m)]
    assert not stale, f"remove from NAMES_ALLOWED, they name no kernel any more: {stale}"


def test_the_name_check_sees_comparisons_memberships_and_subscripts():
    source = 'if kernel == "gemm": pass\nok = t not in ("auto", "naive")\nf = FAMILIES["conv2d"]\nx = {"gemm": 1}\n'
    assert named_kernels(source, {"gemm", "naive", "conv2d"}) == [(1, "gemm"), (2, "naive"), (3, "conv2d")]
