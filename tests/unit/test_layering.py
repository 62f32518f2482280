"""The package's layering, read from its import graph (``ast`` over every module under autotune/).

Each module belongs to one stage of the pipeline (``STAGES``, the one place that says which); a module imports
only from its own stage or earlier ones, and no chain of imports leads back to where it started. Imports inside
functions count: a lazy import is still a dependency, only a later one. There are no exceptions: no module is
exempt from either rule, nor from the check below that generic modules name no kernel family or template.

The order differs from the data-flow picture in one place, on purpose: ``results`` (the tuned/ files) comes before
``tune``, because a tuning session stores its winners with ``store``; T4 records are read from studies, so ``t4``
sits with ``tune``. Measuring and serving share the launch path, so ``serve`` may import ``measure``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Stages in pipeline order. A module is named by its dotted path under autotune ("" is the package itself); a
# name ending in ".*" takes every module under that package.
STAGES: dict[str, tuple[str, ...]] = {
    # leaves: records, expressions and limits that everything may use
    "core": _names("core core.*"),
    "kernels": _names("kernels kernels.*"),
    "build": _names("build build.*"),
    "measure": _names("measure measure.*"),
    "results": _names("results results.*"),
    # the search, and the Optuna studies it runs on
    "tune": _names("tune tune.* studies studies.*"),
    "serve": _names("serve serve.*"),
    "report": _names("report report.*"),
    # the entry points: the command line, the torch drop-in, and the package's public names ("")
    "cli": (*_names("cli cli_parser compile_only torch __main__"), ""),
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


@functools.cache
def graph() -> dict[str, set[str]]:
    """Each module's imports, read when a test first needs them (not at collection, in every xdist worker)."""
    return {name: _imports(name) for name in MODULES}


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


def test_every_stage_is_a_folder_and_only_the_entry_points_stay_at_the_top():
    """The folders show the pipeline: a module's folder is its stage (autotune/tune/ and autotune/studies/ are
    both "tune"); only the entry points live directly under autotune/."""
    top_level = sorted(m for m in MODULES if m and "." not in m and not (PACKAGE / m).is_dir())
    assert top_level == sorted(m for m in STAGES["cli"] if m)
    for module in MODULES:
        folder = module.split(".")[0]
        if (PACKAGE / folder).is_dir():
            assert stage_of(module) == stage_of(folder), f"{_shown(module)} sits outside its stage's folder"


def test_every_package_folder_is_installed():
    """pyproject.toml lists the packages a (non-editable) install copies: every folder of autotune/."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(("autotune", *p.parent.relative_to(PACKAGE).parts)) for p in PACKAGE.rglob("__init__.py")}
    assert folders - listed == set(), "pyproject.toml's packages lack these folders: a pip install would miss them"


def _upward_imports() -> list[tuple[str, str]]:
    return [
        (m, dep)
        for m, deps in sorted(graph().items())
        for dep in sorted(deps)
        if stage_of(m) and stage_of(dep) and ORDER[stage_of(dep)] > ORDER[stage_of(m)]
    ]


def test_a_module_imports_only_from_its_own_stage_or_earlier_ones():
    wrong = [f"{_shown(m)} ({stage_of(m)}) imports {_shown(dep)} ({stage_of(dep)})" for m, dep in _upward_imports()]
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
        for w in sorted(graph()[v]):
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

    for v in sorted(graph()):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    cycles = _cycles()
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(map(_shown, c)) for c in cycles)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from .core.errors import AutotuneError\n", {"core.errors"}),
        ("from .core import hooks\nfrom . import __version__\n", {"core.hooks", ""}),
        ("def f():\n    from .kernels import FAMILIES\n", {"kernels"}),
        ("import autotune.results.store as s\n", {"results.store"}),
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
    """What differs between families or templates is asked of them (``FAMILIES[kernel].<method>``): the problem
    ``load()``'s sizes name (``load_problem``), the default spec files (``spec_files``), the vendor library and its
    call (``vendor_library``, ``vendor_call``, ``vendor_torch_call``). A name passed as an argument is no branch:
    the public entry points name the family they serve (``autotune.conv2d`` calls ``load("conv2d", ...)``, the
    drop-in maps nn.Linear to ``"gemm"``), and the drop-in's own branches are on torch's module types
    (``autotune.torch.Kind``)."""
    names = _kernel_names()
    generic = {m: p for m, p in MODULES.items() if stage_of(m) != "kernels"}
    hits = [(m, line, name) for m, p in generic.items() for line, name in named_kernels(p.read_text(), names)]
    wrong = "\n".join(f"{_shown(m)}:{line} names {name!r}" for m, line, name in hits)
    assert not wrong, "move what these branches know into the family or template (autotune/kernels):\n" + wrong


def test_the_name_check_sees_comparisons_memberships_and_subscripts():
    source = 'if kernel == "gemm": pass\nok = t not in ("auto", "naive")\nf = FAMILIES["conv2d"]\nx = {"gemm": 1}\n'
    assert named_kernels(source, {"gemm", "naive", "conv2d"}) == [(1, "gemm"), (2, "naive"), (3, "conv2d")]
