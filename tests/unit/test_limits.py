"""Device limits live in autotune/core/limits.py only, reach every template check, and come from the device or the
per-architecture table; the kernel modules form no import cycle; every template implements ``Template``."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from autotune.core import limits
from autotune.core.limits import ARCH_LIMITS, SM90, DeviceLimits, for_arch, limits_from_attributes
from autotune.kernels import FAMILIES, Template
from autotune.kernels.family import TemplateFamily

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"
# names that state a device limit: what DeviceLimits holds, under the names modules used to copy it
LIMIT_NAME = re.compile(
    r"^(MAX_(SHARED|THREADS|GRID|REGS|REGISTERS|BLOCKS|CLUSTER)\w*|\w*_PER_(SM|BLOCK|MULTIPROCESSOR)|"
    r"SM_(SHARED|THREADS|REGS|REGISTERS|BLOCKS)\w*|(SHARED|REGS|THREADS)_PER\w*)$"
)


def _assigned_names(tree: ast.Module) -> list[tuple[str, int]]:
    """Upper-case names bound at module or class level, with their lines."""
    out = []
    bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for body in bodies:
        for node in body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []  # fmt: skip
            for t in targets:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name) and name.id.isupper():
                        out.append((name.id, node.lineno))
    return out


def limit_definitions(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Device-limit constant name -> the places (module:line) that define it, over every module under ``root``."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for name, line in _assigned_names(ast.parse(path.read_text(), str(path))):
            if LIMIT_NAME.match(name):
                found.setdefault(name, []).append(f"{path.relative_to(root.parent)}:{line}")
    return found


def test_no_module_defines_a_device_limit_constant():
    found = limit_definitions()
    home = "autotune/core/limits.py"
    outside = {n: where for n, where in found.items() if any(not w.startswith(home) for w in where)}
    assert not outside, f"device limits defined outside autotune/core/limits.py: {outside}"
    twice = {n: where for n, where in found.items() if len(where) > 1}
    assert not twice, f"device limits defined twice: {twice}"


def test_the_scan_finds_a_copied_limit(tmp_path):
    """The check above can fail: a module that copies limits is caught, once per definition."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("MAX_SHARED = 227 * 1024\nclass T:\n    MAX_THREADS_PER_SM: int = 2048\n")
    (tmp_path / "pkg" / "b.py").write_text("MAX_SHARED = 224 * 1024\nPACK_THREADS = 256\nMAX_ACCUMULATORS = 128\n")
    found = limit_definitions(tmp_path / "pkg")
    assert found == {"MAX_SHARED": ["pkg/a.py:1", "pkg/b.py:1"], "MAX_THREADS_PER_SM": ["pkg/a.py:3"]}


@pytest.mark.parametrize("arch", sorted(ARCH_LIMITS))
def test_the_table_is_consistent(arch):
    lim = for_arch(arch)
    assert lim.arch == arch and for_arch(arch + "a") is lim
    assert lim.max_shared_per_block + lim.shared_reserved_per_block == lim.shared_per_sm  # the guide's 1 KB
    assert lim.threads_per_block <= lim.threads_per_sm and lim.threads_per_sm % 32 == 0
    assert lim.registers_per_block <= lim.registers_per_sm
    assert lim.max_grid_y == lim.max_grid_z < lim.max_grid_x


def test_an_unknown_arch_is_one_sentence():
    with pytest.raises(ValueError, match=r"no device limits are known for 'sm_75'; expected one of sm_80"):
        for_arch("sm_75")


def test_device_attributes_override_the_table_and_missing_ones_fall_back():
    attrs = {"MaxSharedMemoryPerBlockOptin": 101376, "MaxThreadsPerMultiProcessor": 1536, "MaxGridDimY": 1000}
    lim = limits_from_attributes("sm_86", attrs)
    assert (lim.max_shared_per_block, lim.threads_per_sm, lim.max_grid) == (101376, 1536, (2**31 - 1, 1000, 65535))
    assert lim.shared_per_sm == ARCH_LIMITS["sm_86"].shared_per_sm  # not reported: the table's
    assert limits_from_attributes("sm_100", {}).registers_per_sm == SM90.registers_per_sm  # unknown arch: sm_90's


def test_checks_see_the_limits_they_are_given():
    """A configuration sm_90 takes is refused for an arch with less shared memory or fewer threads per SM."""
    gemm, conv = FAMILIES["gemm"], FAMILIES["conv2d"]
    wino = dict(TILES=32, KB=64, CB=8, KT=8, TT=4, ET=2, SPAD=4, PIPE=1, MINB=1)  # 106496 bytes of shared memory
    assert conv.check("winograd", wino) is None and conv.check("winograd", wino, SM90) is None
    assert "more than 101376" in conv.check("winograd", wino, for_arch("sm_86"))
    skinny = dict(VEC=1, TX=32, TY=8, MT=1, KR=1, SPLIT_K=8, PREFETCH=False, MINB=7)  # 7 x 256 threads an SM
    assert gemm.check("skinny", skinny) is None
    assert "exceed 1536 threads per SM" in gemm.check("skinny", skinny, for_arch("sm_89"))
    tiny = dataclasses.replace(SM90, max_grid=(2**31 - 1, 4, 65535))
    simt = gemm.default_config("float32")[1]
    problem = gemm.problem("4096x64x64", "float32")
    assert gemm.check_problem("simt", simt, problem) is None
    assert "more than the 4 a grid allows" in gemm.check_problem("simt", simt, problem, tiny)


def test_limits_import_no_gpu_library():
    tree = ast.parse(Path(limits.__file__).read_text())
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert all("cupy" not in ast.unparse(n) for n in top)
    assert isinstance(SM90, DeviceLimits)


@pytest.mark.gpu
def test_the_device_agrees_with_the_table_for_its_arch():
    lim = limits.from_device()
    table = for_arch(lim.arch)
    for field in ("max_shared_per_block", "shared_per_sm", "threads_per_sm", "registers_per_sm", "max_grid"):
        assert getattr(lim, field) == getattr(table, field), field


def _imports(path: Path, package: str) -> set[str]:
    """Modules of ``package`` that ``path`` imports, at any depth (function-level imports included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [a.name for a in node.names]
            out |= {f"{package}.{n.split('.')[0]}" for n in names}
    return out


def test_the_kernel_modules_form_no_import_cycle():
    folder = PACKAGE / "kernels"
    graph = {f"kernels.{p.stem}": _imports(p, "kernels") for p in folder.glob("*.py")}
    graph = {m: {d for d in deps if d in graph} for m, deps in graph.items()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module not in done:
            for dep in graph[module]:
                visit(dep, (*path, module))
            done.add(module)

    for module in graph:
        visit(module, ())
    assert "kernels.conv" not in graph["kernels.conv_im2col"]


def test_every_template_implements_the_base_and_sits_in_its_own_module():
    modules = set()
    for family in FAMILIES.values():
        assert isinstance(family, TemplateFamily)
        for t in family.implementations():
            assert isinstance(t, Template) and t.family == family.name
            assert family.templates[t.name] == t.info()
            assert (t.arch == "sm_80") == (not t.arch_note), t.name  # more than sm_80: one sentence says so
            assert t.c_abi().startswith(t.name + " ") or t.c_abi().startswith(t.name + ":"), t.name
            modules.add(type(t).__module__)
    assert len(modules) == sum(len(f.implementations()) for f in FAMILIES.values())
    from autotune.kernels import conv, gemm

    for family, module in ((FAMILIES["gemm"], gemm), (FAMILIES["conv2d"], conv)):  # the registry is the one list
        assert set(family.templates) == {m.TEMPLATE.name for m in module.REGISTRY} | {"auto"}


def test_templates_say_which_architectures_they_need():
    gemm = FAMILIES["gemm"]
    wgmma, mma = gemm.template("skinny_wgmma"), gemm.template("mma")
    assert wgmma.arch == "sm_90a" and wgmma.arch_reason("sm_90") is None and wgmma.arch_reason("sm_90a") is None
    assert wgmma.arch_reason("sm_80") == wgmma.arch_note and "sm_90a" in wgmma.arch_note
    assert all(mma.arch_reason(a) is None for a in ARCH_LIMITS)
    assert "not an architecture name" in mma.arch_reason("hopper")
