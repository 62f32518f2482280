"""CPU tier for dtypes, layouts, the WMMA template and 'auto': specs, checks mirrored by static_asserts,
NVRTC compiles for sm_90, kernel names and the runtime's choice per dtype and layout."""

from __future__ import annotations

import json

import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render, template_hash
from autotune.core.errors import SpecError
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.measure.evaluate import Candidate, Settings, render_candidate, static_check
from autotune.results.store import merge
from autotune.serve.runtime import choose
from autotune.tune.search import study_name
from autotune.tune.spec import parse_spec
from tests.sweep import covering, full_sweep, product

GEMM = FAMILIES["gemm"]
SETTINGS = Settings(arch="sm_90", tolerance=1e-3, max_shared_bytes=227 * 1024)
W = dict(FRAG="m16n16k16", WARPS_M=2, WARPS_N=2, FRAGS_M=2, FRAGS_N=4, BK=32, PAD=8, STAGES=3, SPLIT_K=1, RASTER=1)
TF32 = dict(W, FRAG="m16n16k8", PAD=4)


def _spec(**over):
    raw = {
        "kernel": "gemm", "template": "auto", "dtype": "float16", "shapes": [[256, 256, 256]],
        "params": {"TEMPLATE": ["wmma"], **{k: {"values": [v], "when": "TEMPLATE == 'wmma'"} for k, v in W.items()}},
    }  # fmt: skip
    raw.update(over)
    return parse_spec(raw, "s.yaml")


def test_dtype_and_layout_lists_multiply_the_problems():
    spec = _spec(dtype=["float16", "bfloat16"], layout=["NN", "TN"], shapes=[[64, 64, 64], "8x4096x4096"])
    assert len(spec.problems) == 8
    assert {(p.dtype, p.layout) for p in spec.problems} == {(d, lay) for d in ("float16", "bfloat16")
                                                             for lay in ("NN", "TN")}  # fmt: skip
    assert spec.dtypes == ("float16", "bfloat16") and spec.layouts == ("NN", "TN")


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"layout": "NX"}, "layout: unknown layout 'NX'; expected one of NN, NT, TN, TT"),
        ({"layout": ["NN", "NN"]}, "layout: lists a name twice"),
        ({"layout": []}, "layout: expected a name or a list of names"),
        ({"dtype": ["float16", "int8"]}, "dtype: template 'auto' does not implement 'int8'"),
        ({"dtype": 16}, "dtype: expected a name or a list of names"),
        ({"params": {"FRAG": {"values": ["m16n16k16"], "when": "TEMPLATE == 'wmma'"}, "TEMPLATE": ["wmma"]}},
         "params.FRAG.when: reads TEMPLATE, which must be declared before FRAG"),
        ({"params": {"TEMPLATE": ["wmma", "cutlass"]}}, "params.TEMPLATE: expected one of simt, wmma"),
        ({"params": {"TEMPLATE": ["wmma"], "FRAG": {"values": [16], "when": "TEMPLATE == 'wmma'"}}},
         "params.FRAG: expected strings"),
        ({"params": {"TEMPLATE": ["wmma"]}}, "constraints: no configuration"),
    ],
)  # fmt: skip
def test_bad_dtype_layout_and_auto_specs_name_the_key(over, fragment):
    with pytest.raises(SpecError) as info:
        _spec(**over)
    assert fragment in str(info.value), str(info.value)


def test_auto_resolves_to_the_chosen_template_and_names_missing_branches():
    assert GEMM.resolve("auto", {"TEMPLATE": "wmma", **W}) == "wmma"
    assert GEMM.check("auto", {"TEMPLATE": "wmma", **W}) is None
    partial = {k: v for k, v in W.items() if k != "STAGES"}
    assert "TEMPLATE=wmma needs STAGES" in GEMM.check("auto", {"TEMPLATE": "wmma", **partial})
    assert "TEMPLATE must name a template" in GEMM.check("auto", {"TEMPLATE": "auto", **W})
    p = GEMM.problem("256x256x256", "float16")
    name = GEMM.kernel_name("auto", {"TEMPLATE": "wmma", **W}, p)
    assert name == GEMM.kernel_name("wmma", W, p) and name.startswith("gemm_wmma_f16_nn_frag")


@pytest.mark.parametrize(
    ("params", "dtype", "layout", "fragment"),
    [
        (W, "float32", "NN", "wmma computes float16, bfloat16, tfloat32, not float32"),
        (W, "tfloat32", "NN", "tfloat32 uses the m16n16k8 fragment"),
        (TF32, "float16", "NN", "tfloat32 uses the m16n16k8 fragment"),
        (dict(W, FRAG="m32n8k16"), "float16", "NN", "fragments of B would start off a 32-byte boundary"),
        (dict(W, FRAG="m8n32k16"), "float16", "TN", "fragments of A would start off a 32-byte boundary"),
        (dict(W, PAD=4), "float16", "NN", "PAD must be a multiple of 8 elements"),
        (dict(W, SPLIT_K=16), "float16", "NN", "SPLIT_K=16 leaves slices without a whole BK=32 tile"),
    ],
)  # fmt: skip
def test_wmma_problem_checks(params, dtype, layout, fragment):
    reason = GEMM.check_problem("wmma", params, GEMM.problem("256x256x256", dtype, layout))
    assert reason is not None and fragment in reason, reason


def test_wmma_static_checks():
    assert "at least 2" in GEMM.check("wmma", dict(W, STAGES=1))
    assert "accumulators" in GEMM.check("wmma", dict(W, FRAGS_M=8, FRAGS_N=8))
    assert "threads per block" in GEMM.check("wmma", dict(W, WARPS_M=8, WARPS_N=8))
    assert "BK must be a multiple" in GEMM.check("wmma", dict(W, BK=8))
    assert GEMM.check("wmma", W) is None


# Every dtype and layout renders both alignments (16-byte copies, then element loads) and compiles one of them, in
# turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1 compiles both.
WMMA_COMBOS = product(["float16", "bfloat16", "tfloat32"], ["NN", "NT", "TN", "TT"])


def _wmma_cases() -> list[tuple]:
    """(dtype, layout, the shape compiled or None). float16 and bfloat16 share the m16n16k16 fragment code: in the CPU
    tier only the first of them in each layout compiles (every layout once, both dtypes, both alignments), the other
    four render only; every tfloat32 combination compiles. AUTOTUNE_FULL_SWEEP=1: every one compiles."""
    out, seen = [], set()
    for (dtype, layout), shape in covering(WMMA_COMBOS, [("256x256x256",), ("255x257x253",)]):
        half = dtype != "tfloat32"
        out.append((dtype, layout, None if half and layout in seen and not full_sweep() else shape))
        seen |= {layout} if half else set()
    return out


@pytest.mark.parametrize(("dtype", "layout", "compiled"), _wmma_cases())
def test_wmma_compiles_for_sm90_in_every_dtype_layout_and_alignment(dtype, layout, compiled):
    params = TF32 if dtype == "tfloat32" else W
    sources = set()
    for shape in ("256x256x256", "255x257x253"):
        c = render_candidate(Candidate("gemm", "wmma", GEMM.problem(shape, dtype, layout), Config.of(params)), SETTINGS)
        assert c.status is None, c.reason
        sources.add(c.source_hash)
        if shape == compiled:
            r = compile_source(c.source, c.kernel_name, "sm_90")
            assert r.ok, r.error
            assert r.spills == 0 and r.registers <= 255
    assert len(sources) == 2


def test_a_config_the_checks_reject_trips_a_static_assert_when_compiled_anyway():
    problem = GEMM.problem("256x256x256", "float16", "NN")
    bad = dict(W, FRAG="m32n8k16")
    assert GEMM.check_problem("wmma", bad, problem) is not None
    r = render("gemm", "wmma", bad, problem)
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and "B fragments must start 32-byte aligned" in result.error


def test_kernel_names_and_studies_carry_dtype_layout_and_alignment():
    p = GEMM.problem("4095x4097x4093", "bfloat16", "TN")
    assert GEMM.kernel_name("wmma", W, p).startswith("gemm_wmma_bf16_tn_uab_")
    assert GEMM.kernel_name("wmma", W, GEMM.problem("4096x4096x4093", "float16", "NN")).startswith(
        "gemm_wmma_f16_nn_ua_"
    )
    spec = _spec(layout="TN")
    assert ".float16.256x256x256.TN." in study_name(spec, spec.problems[0])
    assert ".float16.256x256x256." in study_name(_spec(), _spec().problems[0])
    # the simt template stays float32/NN: every other combination is rejected before compiling
    simt = dict(BM=64, BN=64, BK=8, WM=32, WN=32, WNITER=1, TM=4, TN=4, VEC=4, PAD=4, DBUF=True)
    cand = Candidate("gemm", "simt", GEMM.problem("64x64x64", "float32", "TN"), Config.of(simt))
    assert static_check(cand, SETTINGS) == "simt computes layout NN only, not TN"


def _entry(template, params, problem, ms):
    name = GEMM.kernel_name(template, params, problem)
    return {"template": template, "params": params, "verified": True, "median_ms": ms,
            "template_hash": template_hash("gemm", template), "kernel_name": name}  # fmt: skip


def test_runtime_lookup_respects_dtype_layout_and_skips_configs_that_do_not_fit(tmp_path):
    gpu = "nvidia-h200-sm90"
    path = tmp_path / gpu / "gemm.json"
    header = {"kernel": "gemm"}
    split = dict(W, SPLIT_K=8)
    big = GEMM.problem("4096x4096x4096", "float16", "NN")
    merge(path, header, "float16/NN/4096x4096x4096", _entry("wmma", split, big, 1.0))
    merge(path, header, "float16/NN/1024x1024x1024", _entry("wmma", W, big, 0.1))
    merge(path, header, "float16/TN/4096x4096x4096", _entry("wmma", dict(W, FRAGS_M=1), big, 1.0))
    doc = json.loads(path.read_text())
    assert len(doc["entries"]) == 3
    # exact
    assert choose("gemm", big, gpu, "sm_90", tmp_path).params == split
    # nearest of the same dtype and layout whose config fits: SPLIT_K=8 needs K >= 256, so 3000x3000x100
    # takes the 1024^3 entry although 4096^3 is not farther in every dimension
    c = choose("gemm", GEMM.problem("3000x3000x100", "float16", "NN"), gpu, "sm_90", tmp_path)
    assert c.step == "nearest" and c.params == W
    assert (
        choose("gemm", GEMM.problem("2000x2000x2000", "float16", "TN"), gpu, "sm_90", tmp_path).params["FRAGS_M"] == 1
    )
    # another dtype finds nothing tuned: the default is a tensor-core config the GPU tier verifies
    c = choose("gemm", GEMM.problem("100x100x100", "bfloat16", "NT"), gpu, "sm_90", tmp_path)
    assert c.step == "default" and c.template == "wmma"
    assert GEMM.check_problem(c.template, c.params, GEMM.problem("100x100x100", "bfloat16", "NT")) is None
    assert choose("gemm", GEMM.problem("100x100x100", "float32", "NT"), gpu, "sm_90", tmp_path).template == "skinny_nt"
    assert choose("gemm", GEMM.problem("100x100x100", "float32", "TN"), gpu, "sm_90", tmp_path).template == "skinny"


def test_defaults_are_valid_for_every_dtype():
    for dtype, layout in [(d, lay) for d in ("float16", "bfloat16", "tfloat32") for lay in ("NN", "NT", "TN", "TT")] + [
        ("float32", "NN"),
        ("float32", "NT"),
        ("float32", "TN"),
        ("float32", "TT"),
    ]:
        template, params = GEMM.default_config(dtype, layout)
        problem = GEMM.problem("4095x4097x4093", dtype, layout)
        assert GEMM.check(template, params) is None and GEMM.check_problem(template, params, problem) is None


def test_report_reads_dtype_and_layout_from_study_names():
    from autotune.report import name_parts, problem_work

    p = name_parts("gemm.auto.float16.255x257x253.TN.aab5e728.4b4eb4")
    assert (p["dtype"], p["layout"], p["shape"], p["space_digest"]) == ("float16", "TN", "255x257x253", "4b4eb4")
    assert problem_work(p["kernel"], p["shape"], p["dtype"], p["layout"]) == (
        2 * 255 * 257 * 253,
        (255 * 253 + 253 * 257 + 255 * 257) * 2,
    )
    assert name_parts("gemm.simt.float32.4096x4096x4096.34107aaa")["layout"] == "NN"
    assert name_parts("conv2d.direct.float32.n1c64h56w56k64r3s3u1p1.NCHW.ab12cd34.ef56")["layout"] == "NCHW"


def test_export_describes_grid_z_and_scratch_for_split_k_and_conv(tmp_path):
    import re
    import shutil
    import subprocess

    from autotune.results.export import export

    tuned = tmp_path / "tuned" / "nvidia-h200-sm90"
    tuned.mkdir(parents=True)
    gemm_problem = GEMM.problem("64x4096x4096", "float16")
    split = dict(W, SPLIT_K=4)
    merge(tuned / "gemm.json", {"kernel": "gemm"}, "float16/NN/64x4096x4096", _entry("wmma", split, gemm_problem, 0.03))
    conv = FAMILIES["conv2d"]
    cparams = conv.default_config("float32")[1]
    cp_ = conv.problem("n1c64h56w56k64r3s3u1p1", "float32", "NCHW")
    merge(tuned / "conv2d.json", {"kernel": "conv2d"}, f"float32/NCHW/{cp_.label}",
          {"template": "direct", "params": cparams, "verified": True, "median_ms": 0.1,
           "template_hash": template_hash("conv2d", "direct")})  # fmt: skip
    paths = export(tmp_path / "tuned", tmp_path / "out")
    header = paths[0].read_text()
    grid = GEMM.launch("wmma", split, gemm_problem).grid
    floats, counters = GEMM.scratch("wmma", split, gemm_problem)
    row = next(line for line in header.splitlines() if "64x4096x4096" in line)
    assert f"{grid[2]}u" in row and f"{floats}ull, {counters}ull" in row and grid[2] == 4
    assert re.search(r'"conv2d", "float32", "NCHW", "n1c64h56w56k64r3s3u1p1", 0, 0, 0', header)
    if shutil.which("cc"):
        subprocess.run(["cc", "-fsyntax-only", "-x", "c", str(paths[0])], check=True)


def test_a_layout_the_template_does_not_compute_is_refused_when_the_spec_loads():
    simt = {k: [v] for k, v in dict(BM=64, BN=64, BK=8, WM=32, WN=32, WNITER=1, TM=4, TN=4, VEC=4, PAD=4,
                                     DBUF=True).items()}  # fmt: skip
    raw = {"kernel": "gemm", "template": "simt", "dtype": "float32", "layout": ["NN", "TN"],
           "shapes": [[64, 64, 64]], "params": simt}  # fmt: skip
    with pytest.raises(SpecError, match="layout: template 'simt' computes NN; not 'TN'"):
        parse_spec(raw, "s.yaml")
    raw.update(template="skinny", layout="NT", params={"VEC": [4], "TX": [32], "TY": [8], "MT": [8], "KR": [4],
                                                       "SPLIT_K": [1], "PREFETCH": [True], "MINB": [2]})  # fmt: skip
    with pytest.raises(SpecError, match="computes NN, TN; not 'NT'"):
        parse_spec(raw, "s.yaml")


def test_auto_refuses_a_template_its_choice_leaves_out():
    from autotune.kernels import FAMILIES

    reason = FAMILIES["gemm"].check("auto", {"TEMPLATE": "naive", "BX": 8, "BY": 8})
    assert reason is not None and reason.startswith("TEMPLATE must name a template") and "naive" not in reason
