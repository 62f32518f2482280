"""Templates render for every candidate of the default space; a sample compiles with NVRTC for sm_90."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from autotune.build.compiler import compile_source, include_dirs_for
from autotune.build.templates import render
from autotune.core.errors import HeadersNotFoundError
from autotune.kernels import FAMILIES
from autotune.measure.evaluate import Candidate, Settings, render_candidate, static_check
from autotune.tune.spec import load_spec
from tests.sweep import full_sweep

F32 = FAMILIES["gemm"].problem("64x64x64", "float32")

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(arch="sm_90", tolerance=1e-5, max_shared_bytes=227 * 1024)


@pytest.fixture(scope="module")
def gemm_candidates():
    spec = load_spec(ROOT / "configs" / "gemm_simt.yaml")  # the simt space alone
    problem = spec.problems[0]
    cands = [Candidate("gemm", "simt", problem, c) for c in spec.space.enumerate()]
    return [c for c in cands if static_check(c, SETTINGS) is None]


def test_every_candidate_of_the_default_space_renders(gemm_candidates):
    assert len(gemm_candidates) > 1000
    names = set()
    for cand in gemm_candidates:
        c = render_candidate(cand, SETTINGS)
        assert c.status is None, c.reason
        assert f"void __launch_bounds__(THREADS)\n{c.kernel_name}(" in c.source
        assert "{{" not in c.source and "{%" not in c.source
        names.add(c.kernel_name)
    assert len(names) == len(gemm_candidates), "two configurations rendered to the same kernel name"


def test_missing_template_parameter_is_an_error_not_an_empty_string():
    import jinja2

    from autotune.build.templates import _environment

    template = _environment().get_template("gemm/naive.cu.j2")
    with pytest.raises(jinja2.UndefinedError, match="BY"):
        template.render(BX=16, kernel_name="k")


def test_render_is_deterministic_and_hash_tracks_source():
    p = dict(BM=64, BN=64, BK=8, WM=32, WN=32, WNITER=1, TM=4, TN=4, VEC=4, PAD=4, DBUF=True)
    a, b = render("gemm", "simt", p, F32), render("gemm", "simt", dict(p), F32)
    assert a == b
    c = render("gemm", "simt", {**p, "PAD": 0}, F32)
    assert c.source_hash != a.source_hash and c.template_hash == a.template_hash


def _sample(gemm_candidates) -> list:
    """Candidates drawn at random (seed 0; four in the CPU tier, six in the full sweep): compiled here and, from the
    session's compile cache, the first four by the resources test below, whose check is on the cubin, not on which
    configurations they are."""
    return random.Random(0).sample(gemm_candidates, 6 if full_sweep() else 4)


def test_a_sample_of_candidates_compiles_for_sm90(gemm_candidates):
    for cand in _sample(gemm_candidates):
        c = render_candidate(cand, SETTINGS)
        r = compile_source(c.source, c.kernel_name, "sm_90")
        assert r.ok, f"{c.kernel_name}: {r.error}"
        assert r.cubin and r.registers and r.registers > 0
        assert r.spill_stores is not None and r.stack_bytes is not None


def test_naive_template_compiles():
    r = render("gemm", "naive", dict(BX=16, BY=16), F32)
    res = compile_source(r.source, r.kernel_name, "sm_90")
    assert res.ok and res.registers


def test_static_assert_mirrors_the_family_check():
    # A configuration the family rejects also fails to compile: the template guards itself.
    bad = dict(BM=64, BN=64, BK=8, WM=32, WN=32, WNITER=1, TM=4, TN=4, VEC=4, PAD=4, DBUF=True)
    bad["WM"] = 48
    assert FAMILIES["gemm"].check("simt", bad) is not None
    r = render("gemm", "simt", bad, F32)
    res = compile_source(r.source, r.kernel_name, "sm_90")
    assert not res.ok and re.search(r"static assert|static_assert", res.log)


def test_compile_errors_are_results_with_the_first_error_line():
    r = compile_source('extern "C" __global__ void k() { undeclared_thing(); }', "k", "sm_90")
    assert not r.ok and r.cubin is None
    assert "undeclared_thing" in r.error


def test_header_discovery_finds_mma_h_or_says_where_it_looked():
    try:
        dirs = include_dirs_for(("mma.h",))
    except HeadersNotFoundError as exc:
        assert "searched" in str(exc) and "CUDA_HOME" in str(exc)
    else:
        assert (Path(dirs[0]) / "mma.h").is_file()


def test_missing_headers_are_named(monkeypatch):
    include_dirs_for.cache_clear()
    try:
        with pytest.raises(HeadersNotFoundError, match="no_such_header_xyz.h"):
            include_dirs_for(("no_such_header_xyz.h",))
    finally:
        include_dirs_for.cache_clear()


def test_resources_come_from_the_cubin_when_the_log_has_no_report(gemm_candidates):
    # NVRTC 13.0 answers a repeated compile from its cache with an empty log: the cubin must tell.
    from autotune.build.compiler import CompileResult, _with_resources, cubin_resources

    spilling = dict(BM=256, BN=32, BK=16, WM=128, WN=32, WNITER=2, TM=4, TN=4, VEC=1, PAD=0, DBUF=True)
    from autotune.core.space import Config

    sample = _sample(gemm_candidates)[:2]
    sample.append(Candidate("gemm", "simt", sample[0].problem, Config.of(spilling)))
    for cand in sample:
        c = render_candidate(cand, SETTINGS)
        r = compile_source(c.source, c.kernel_name, "sm_90")
        assert cubin_resources(r.cubin, c.kernel_name) == (r.registers, r.stack_bytes)
        silent = _with_resources(CompileResult(c.kernel_name, r.cubin, "", 0.0))
        assert silent.registers == r.registers and silent.stack_bytes == r.stack_bytes
        assert (silent.spills > 0) == (r.spills > 0)
    assert cubin_resources(b"not an elf file", "k") == (None, None)
    assert cubin_resources(r.cubin, "no_such_kernel") == (None, None)


def test_the_template_hash_covers_the_shared_helpers_a_template_imports():
    from autotune.build.templates import _with_shared, template_root

    root = template_root()
    mma = _with_shared("gemm/mma.cu.j2")
    assert mma.startswith((root / "gemm" / "mma.cu.j2").read_bytes())
    for shared in ("cp_async.cuh.j2", "ldmatrix.cuh.j2"):
        assert (root / "common" / shared).read_bytes() in mma
    # a template that imports nothing hashes as its own bytes, as it did before templates/common existed
    assert _with_shared("gemm/simt.cu.j2") == (root / "gemm" / "simt.cu.j2").read_bytes()


# The PTX helpers templates still declare themselves: helper -> the templates declaring it. These differ in form
# from the shared ones; sharing them would change the rendered source of stored entries (their hashes), so they
# wait for a re-tune.
DECLARED_IN_TEMPLATES = {
    "mma_m16n8k16": {"gemm/skinny_nt"},  # its element types spliced in from a C macro
    "mma_tf32": {"gemm/skinny_tc", "conv/winograd"},  # emulation guard outside / inside the function
    # skinny_wgmma.cu.j2 is the lead's (issue 23): it renders byte for byte the same importing
    # common/cp_async.cuh.j2's cp_async16_and_4 for its cp_async16/cp_async4 and common/mbarrier.cuh.j2's mbarrier
    # for its mbar_* (its commit and wait sit apart, so those two stay until a re-tune).
    "cp_async16": {"gemm/skinny_wgmma"},
    "cp_async4": {"gemm/skinny_wgmma"},
    "cp_async_commit": {"gemm/skinny_wgmma"},
    "cp_async_wait": {"gemm/skinny_wgmma"},
    **{f"mbar_{op}": {"gemm/skinny_wgmma"} for op in ("init", "fence_init", "expect_tx", "wait")},
}


def test_shared_ptx_helpers_are_declared_in_templates_common_only():
    """cp.async, ldmatrix, mma.sync and mbarrier wrappers live in templates/common/ and are imported from there."""
    declared: dict[str, set[str]] = {}
    for path in sorted((ROOT / "templates").glob("*/*.cu.j2")):
        name = f"{path.parent.name}/{path.name.removesuffix('.cu.j2')}"
        for helper in re.findall(r"__device__ __forceinline__ void (cp_async\w*|ldmatrix\w*|mma_\w+|mbar_\w+)\(",
                                 path.read_text()):  # fmt: skip
            declared.setdefault(helper, set()).add(name)
    assert declared == DECLARED_IN_TEMPLATES
    common = "".join(p.read_text() for p in (ROOT / "templates" / "common").glob("*.j2"))
    shared = ("cp_async16", "cp_async4", "cp_async_commit", "cp_async_wait", "ldmatrix_x4", "mma_m16n8k16", "mbar_init")
    for helper in shared:
        assert f"void {helper}(" in common
