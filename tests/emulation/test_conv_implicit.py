# ruff: noqa: E501 - parametrized shape tables read better on one line
"""CPU tier for the implicit-GEMM conv2d templates (implicit_simt, implicit_wmma) and the conv2d "auto"
template: checks mirrored by static_asserts, alignment variants and launch geometry, NVRTC compiles for sm_90
without spills, the SIMT kernel's numbers under the host emulator (tests/host_cuda.py) on odd shapes, and the
conv specs that make the algorithm a search dimension."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render, template_hash
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.measure.evaluate import Candidate, Settings, render_candidate, static_check
from autotune.tune.spec import load_spec, parse_spec
from tests.emulation.test_conv import run_emulated
from tests.host_cuda import HEADER, gxx
from tests.sweep import covering, full_only, full_sweep, product, value_cover

ROOT = Path(__file__).resolve().parents[2]
CONV = FAMILIES["conv2d"]
SETTINGS = Settings(arch="sm_90", tolerance=1e-5, max_shared_bytes=227 * 1024)
S = dict(BM=128, BN=128, BK=8, TM=8, TN=8, PAD=4)  # 256 threads, 8x8 register tiles
SIMT_GOOD = {
    "big": S,
    "narrow_n": dict(BM=128, BN=64, BK=8, TM=8, TN=4, PAD=4),
    "mid": dict(BM=64, BN=64, BK=8, TM=4, TN=4, PAD=4),  # two elements per thread and tile: vectors of 2
    "deep": dict(BM=64, BN=64, BK=16, TM=4, TN=4, PAD=0),
    "small": dict(BM=32, BN=32, BK=8, TM=2, TN=2, PAD=4),  # one element per thread and tile: scalar loads
    "tiny": dict(BM=16, BN=16, BK=8, TM=2, TN=4, PAD=8),  # one warp, VM = 2
}
WM = dict(WARPS_M=2, WARPS_N=4, FRAGS_M=4, FRAGS_N=2, BK=32, PAD=8, STAGES=3)  # 128 x 128 x 32
WMMA_GOOD = {
    "big": WM,
    "small": dict(WARPS_M=1, WARPS_N=1, FRAGS_M=1, FRAGS_N=1, BK=16, PAD=8, STAGES=2),
    "wide": dict(WARPS_M=2, WARPS_N=2, FRAGS_M=2, FRAGS_N=4, BK=64, PAD=8, STAGES=4),
}


# --- checks, static_asserts, variants, launches ------------------------------------------------------

SIMT_REJECTED = [
    (dict(S, BM=96), "BM, BN, BK, TM and TN must be powers of two"),
    (dict(S, TM=3), "BM, BN, BK, TM and TN must be powers of two"),
    (dict(S, BN=4, TN=8), "the thread tile TM x TN must fit in the block tile BM x BN"),
    (dict(S, TM=16, BM=256), "at most 64 accumulators per thread (TM*TN)"),
    (dict(S, BM=16, TM=8, BN=16, TN=8), "(BM/TM)*(BN/TN) threads must be a whole number of warps, at most 1024"),
    (dict(S, TM=2, TN=2), "(BM/TM)*(BN/TN) threads must be a whole number of warps, at most 1024"),
    (dict(S, BK=2), "BK must be at least 4 (one vector) and at most the thread count"),
    (dict(S, BK=512), "BK must be at least 4 (one vector) and at most the thread count"),
    (dict(S, BM=256, BN=16, TM=8, TN=4, BK=4), "the BM x BK and BN x BK tiles must split evenly over the threads"),
    (dict(S, PAD=2), "PAD must be a multiple of 4 floats (16-byte rows for vector reads)"),
]
WMMA_REJECTED = [
    (dict(WM, WARPS_M=8, WARPS_N=8), "threads per block exceeds 1024"),
    (dict(WM, FRAGS_M=8, FRAGS_N=4), "at most 128 accumulators per thread (FRAGS_M*FRAGS_N*8)"),
    (dict(WM, BK=24), "BK must be a multiple of the fragment's K (16)"),
    (dict(WM, WARPS_M=1, WARPS_N=1, BK=512), "BK/8 (16-byte copies per tile row) must divide the thread count"),
    (dict(WM, PAD=4), "PAD must be a multiple of 8 halves (16 bytes)"),
    (dict(WM, STAGES=1), "STAGES must be at least 2"),
]


@pytest.mark.parametrize(
    ("template", "params", "reason"),
    [("implicit_simt", p, r) for p, r in SIMT_REJECTED] + [("implicit_wmma", p, r) for p, r in WMMA_REJECTED],
)
def test_every_check_is_a_static_assert(template, params, reason):
    got = CONV.check(template, params)
    assert got is not None and reason in got, got
    dtype = "float16" if template == "implicit_wmma" else "float32"
    problem = CONV.problem("n1c8h7w5k5r3s3u1p1", dtype, "NHWC")
    r = render("conv2d", template, params, problem)  # rendered anyway, as if the check were skipped
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and "static assert" in result.error and reason in result.error, result.error


def test_the_shared_memory_limit_is_a_static_assert():
    big = dict(S, BM=512, BN=128, BK=128, TM=8, TN=8, PAD=0)  # 1024 threads, 2 * 128 * 640 floats
    assert "more than 232448" in CONV.check("implicit_simt", big)
    r = render("conv2d", "implicit_simt", big, CONV.problem("n1c8h7w5k5r3s3u1p1", "float32", "NHWC"))
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and "needs more shared memory than the 232448 bytes" in result.error


def test_good_configs_pass_the_checks():
    for label, p in SIMT_GOOD.items():
        assert CONV.check("implicit_simt", p) is None, label
    for label, p in WMMA_GOOD.items():
        assert CONV.check("implicit_wmma", p) is None, label


def test_problem_checks():
    p = CONV.problem("n32c64h56w56k64r3s3u1p1", "float32", "NCHW")
    assert CONV.check_problem("implicit_simt", S, p) is None
    assert CONV.check_problem("implicit_wmma", WM, p) == "implicit_wmma computes float16, not float32"
    assert CONV.check_problem("implicit_wmma", WM, CONV.problem(p.label, "float16", "NCHW")) is None
    huge_k = CONV.problem("n1c8h7w5k9000000r1s1u1p0", "float32", "NHWC")
    assert "grid.y" in CONV.check_problem("implicit_simt", S, huge_k)
    huge_m = CONV.problem("n70000c3h224w224k8r1s1u1p0", "float32", "NHWC")
    assert "32-bit indices" in CONV.check_problem("implicit_simt", S, huge_m)


def test_alignment_variants_follow_the_problem():
    ctx = CONV.context("implicit_simt", S, CONV.problem("n1c64h9w9k8r3s3u1p1", "float32", "NHWC"))
    assert (ctx["ALIGN_A"], ctx["ALIGN_B"], ctx["VA"], ctx["VB"]) == (True, True, 4, 4)
    ctx = CONV.context("implicit_simt", S, CONV.problem("n1c3h9w9k8r3s3u1p1", "float32", "NHWC"))
    assert (ctx["ALIGN_A"], ctx["ALIGN_B"], ctx["VA"], ctx["VB"]) == (False, False, 1, 1)
    ctx = CONV.context("implicit_simt", S, CONV.problem("n1c3h9w9k8r7s4u1p1", "float32", "NCHW"))
    assert (ctx["ALIGN_A"], ctx["ALIGN_B"], ctx["VA"], ctx["VB"]) == (False, True, 1, 4)  # 3*7*4 = 84
    ctx = CONV.context("implicit_simt", SIMT_GOOD["mid"], CONV.problem("n1c64h9w9k8r3s3u1p1", "float32", "NHWC"))
    assert (ctx["VA"], ctx["VB"], ctx["A_ROWS"], ctx["TA_K"]) == (2, 2, 1, 4)
    w = CONV.context("implicit_wmma", WM, CONV.problem("n1c4h9w9k8r3s3u1p1", "float16", "NHWC"))
    assert (w["ALIGN_A"], w["ALIGN_B"]) == (False, False)  # 16-byte copies need C % 8 == 0
    names = {CONV.kernel_name("implicit_simt", S, CONV.problem(f"n1c{c}h9w9k8r3s3u1p1", "float32", lay))
             for c in (64, 3) for lay in ("NCHW", "NHWC")}  # fmt: skip
    assert names == {
        "conv2d_implicit_simt_f32_nchw_bm128_bn128_bk8_tm8_tn8_pad4",
        "conv2d_implicit_simt_f32_nchw_ub_bm128_bn128_bk8_tm8_tn8_pad4",
        "conv2d_implicit_simt_f32_nhwc_bm128_bn128_bk8_tm8_tn8_pad4",
        "conv2d_implicit_simt_f32_nhwc_uab_bm128_bn128_bk8_tm8_tn8_pad4",
    }
    # the source depends on the alignment, never on the rest of the shape
    a = render("conv2d", "implicit_simt", S, CONV.problem("n1c64h9w9k8r3s3u1p1", "float32", "NHWC"))
    b = render("conv2d", "implicit_simt", S, CONV.problem("n32c128h28w28k128r3s3u2p1", "float32", "NHWC"))
    assert a.source_hash == b.source_hash


def test_launch_geometry_and_shared_memory():
    p = CONV.problem("n32c64h56w56k64r3s3u1p1", "float32")
    launch = CONV.launch("implicit_simt", S, p)
    assert launch.grid == (32 * 56 * 56 // 128, 1, 1) and launch.block == (256, 1, 1)
    assert launch.shared_bytes == 2 * 8 * (128 + 4 + 128 + 4) * 4
    q = CONV.problem("n2c17h13w11k9r5s5u1p2", "float16", "NHWC")  # M = 2*13*11 = 286
    launch = CONV.launch("implicit_wmma", WM, q)
    assert launch.grid == (3, 1, 1) and launch.block == (256, 1, 1)
    assert launch.shared_bytes == max(3 * (128 + 128) * (32 + 8) * 2, 128 * 132 * 4)
    d = CONV.derived("implicit_wmma", WMMA_GOOD["wide"], q)
    assert (d["BM"], d["BN"], d["CPR"], d["RP"], d["A_ITERS"], d["B_ITERS"]) == (64, 128, 8, 16, 4, 8)
    assert CONV.scratch("implicit_simt", S, q) is None


# Each configuration in one dtype, layout and alignment variant (C = 64 aligned, C = 3 scalar), in turn
# (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: in all of them.
@pytest.mark.parametrize(
    ("label", "dtype", "layout", "c"), covering(SIMT_GOOD, product(["float32", "float16"], ["NCHW", "NHWC"], [64, 3]))
)
def test_simt_configurations_compile_for_sm90_without_spills(label, dtype, layout, c):
    problem = CONV.problem(f"n32c{c}h56w56k64r3s3u1p1", dtype, layout)
    cand = render_candidate(Candidate("conv2d", "implicit_simt", problem, Config.of(SIMT_GOOD[label])), SETTINGS)
    assert cand.status is None, f"{label}: {cand.reason}"
    r = compile_source(cand.source, cand.kernel_name, "sm_90")
    assert r.ok, f"{label}: {r.error}"
    assert r.spills == 0 and r.registers <= 255, f"{label}: {r.registers} registers, {r.spills} spilled"


@pytest.mark.parametrize(("label", "layout", "c"), covering(WMMA_GOOD, product(["NHWC", "NCHW"], [64, 3])))
def test_wmma_configurations_compile_for_sm90_without_spills(label, layout, c):
    problem = CONV.problem(f"n32c{c}h56w56k64r3s3u1p1", "float16", layout)
    cand = render_candidate(Candidate("conv2d", "implicit_wmma", problem, Config.of(WMMA_GOOD[label])), SETTINGS)
    assert cand.status is None, f"{label}: {cand.reason}"
    r = compile_source(cand.source, cand.kernel_name, "sm_90")
    assert r.ok, f"{label}: {r.error}"
    assert r.spills == 0 and r.registers <= 255, f"{label}: {r.registers} registers, {r.spills} spilled"


# --- the SIMT kernel's arithmetic, run on the host ------------------------------------------------


WMMA_SHIM = r"""// Host stand-ins for the WMMA and cp.async subset implicit_wmma uses: every lane holds a whole 16x16 fragment
// (lanes compute the same values), cp.async copies at once (zero-filled when src-size is 0).
namespace nvcuda { namespace wmma {
struct row_major {}; struct col_major {}; struct matrix_a {}; struct matrix_b {}; struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class E, class L = void> struct fragment { float v[16][16]; };
template <class F> void fill_fragment(F& f, float x) { for (auto& r : f.v) for (float& e : r) e = x; }
template <class Use, class E, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, E, L>& f, const __half* p, unsigned ld) {
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) f.v[i][j] = __half2float(std::is_same_v<L, row_major> ? p[i * ld + j] : p[j * ld + i]);
}
template <class A, class B, class C, class D> void mma_sync(D& d, const A& a, const B& b, const C& c) {
  float t[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) { float s = c.v[i][j]; for (int k = 0; k < 16; ++k) s += a.v[i][k] * b.v[k][j]; t[i][j] = s; }
  std::memcpy(d.v, t, sizeof t);
}
template <class F> void store_matrix_sync(float* p, const F& f, unsigned ld, layout_t) {
  for (int i = 0; i < 16; ++i) for (int j = 0; j < 16; ++j) p[i * ld + j] = f.v[i][j];
}
} }
inline void cp_async16(void* dst, const void* src, bool in) { if (in) std::memcpy(dst, src, 16); else std::memset(dst, 0, 16); }
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
"""


def _emulate(tmp_path, template, params, problem):
    """The kernel's output (float64, NCHW) and the float64 reference on the same rounded inputs."""
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    r = render("conv2d", template, params, problem)
    src = "\n".join(line for line in r.source.splitlines() if not line.startswith("#include"))
    if template == "implicit_wmma":  # drop the device-only helpers: the shim provides them
        start, end = src.index("__device__ __forceinline__ void cp_async16"), src.index('extern "C"')
        src = src[:start] + src[end:]
        shared, emulated = (
            "extern __shared__ __align__(128) unsigned char smem_raw[];",
            "unsigned char* smem_raw = (unsigned char*)g_smem;",
        )
    else:
        shared, emulated = "extern __shared__ __align__(16) float smem[];", "float* smem = g_smem;"
    assert shared in src
    src = src.replace(shared, emulated)
    header = HEADER + "#include <type_traits>\n" + WMMA_SHIM
    return run_emulated(tmp_path, compiler, template, params, problem, src, r.kernel_name, header)


EMULATED = [
    # config, shape [N, C, H, W, K, R, S, stride, pad], dtype, layout
    ("tiny", [1, 3, 7, 5, 5, 3, 3, 2, 1], "float32", "NCHW"),
    ("tiny", [2, 17, 13, 11, 9, 5, 5, 1, 2], "float32", "NHWC"),  # odd C: scalar loads
    ("mid", [2, 16, 9, 11, 70, 3, 3, 1, 1], "float32", "NHWC"),  # vectors of 2, K past one channel block
    ("small", [2, 17, 13, 11, 9, 5, 5, 1, 2], "float16", "NCHW"),
    ("narrow_n", [2, 20, 9, 9, 33, 1, 1, 1, 0], "float16", "NHWC"),  # 1x1, vectors of 4
    ("deep", [1, 3, 19, 17, 16, 7, 7, 2, 3], "float32", "NCHW"),  # 7x7 stride 2 pad 3
    ("tiny", [1, 12, 10, 12, 7, 3, 3, 3, 0], "float16", "NHWC"),  # stride 3, no padding, C % 4 == 0
    ("mid", [1, 5, 6, 6, 7, 6, 4, 1, 0], "float32", "NCHW"),  # even, non-square filter, KG % 4 == 0
    # AUTOTUNE_FULL_SWEEP=1 only (tests/sweep.py): the 7x7 stride-2 filter in NHWC (NCHW above; NHWC in the others)
    *full_only([("deep", [1, 8, 19, 17, 16, 7, 7, 2, 3], "float32", "NHWC")]),
]


@pytest.mark.parametrize(("label", "shape", "dtype", "layout"), EMULATED)
def test_emulated_simt_kernel_matches_float64(tmp_path, label, shape, dtype, layout):
    problem = CONV.problem(shape, dtype, layout)
    assert CONV.check_problem("implicit_simt", SIMT_GOOD[label], problem) is None
    y, ref = _emulate(tmp_path, "implicit_simt", SIMT_GOOD[label], problem)
    assert np.isfinite(y).all(), f"{(~np.isfinite(y)).sum()} outputs unwritten"
    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    assert err < {"float32": 1e-5, "float16": 2e-3}[dtype], f"relative error {err:.2e}"


# --- the algorithm as a search dimension ------------------------------------------------------------


def test_auto_chooses_among_every_registered_template():
    info = CONV.templates["auto"]
    concrete = [t for t in CONV.templates if t != "auto"]
    assert {"direct", "implicit_simt", "implicit_wmma"} <= set(concrete)
    assert info.kind("TEMPLATE") == "choice:" + ",".join(concrete)
    assert set(info.optional) == {p for t in concrete for p in CONV.templates[t].params}
    assert info.dtypes == ("float32", "float16") and set(info.layouts) == {"NCHW", "NHWC"}
    assert template_hash("conv2d", "auto")  # over every template file it chooses from


def test_auto_resolves_to_the_chosen_template():
    p = CONV.problem("n2c17h13w11k9r5s5u1p2", "float16", "NHWC")
    params = {"TEMPLATE": "implicit_wmma", **WM}
    assert CONV.resolve("auto", params) == "implicit_wmma"
    assert CONV.check("auto", params) is None and CONV.check_problem("auto", params, p) is None
    assert CONV.launch("auto", params, p) == CONV.launch("implicit_wmma", WM, p)
    assert CONV.kernel_name("auto", params, p) == CONV.kernel_name("implicit_wmma", WM, p)
    r = render("conv2d", "auto", params, p)
    assert r.template == "implicit_wmma" and r.source == render("conv2d", "implicit_wmma", WM, p).source
    simt = {"TEMPLATE": "implicit_simt", **S}
    assert CONV.check_problem("auto", simt, CONV.problem(p.label, "float32", "NCHW")) is None
    assert CONV.check_problem("auto", params, CONV.problem(p.label, "float32", "NHWC")).startswith(
        "implicit_wmma computes float16"
    )
    assert CONV.check("auto", {"TEMPLATE": "nope", **S}).startswith("TEMPLATE must name a template (direct, ")
    assert CONV.check("auto", {"TEMPLATE": "implicit_simt", "BM": 128}) == (
        "TEMPLATE=implicit_simt needs BN, BK, TM, TN, PAD (check the 'when' conditions)"
    )


@pytest.mark.parametrize(
    ("name", "dtype", "layout", "templates"),
    [
        ("conv.yaml", "float32", "NCHW", {"direct", "implicit_simt", "winograd"}),
        (
            "conv_fp16.yaml",
            "float16",
            "NHWC",
            {"direct", "implicit_simt", "implicit_wmma", "implicit_mma", "im2col_gemm"},
        ),
    ],
)
def test_the_conv_specs_load_with_feasible_start_points(name, dtype, layout, templates):
    spec = load_spec(ROOT / "configs" / name)
    assert (spec.kernel, spec.template, spec.dtypes, spec.layouts) == ("conv2d", "auto", (dtype,), (layout,))
    labels = [p.label for p in spec.problems]
    assert "n32c64h56w56k64r3s3u1p1" in labels and "n32c512h7w7k512r3s3u1p1" in labels
    assert "n1c64h56w56k64r3s3u1p1" in labels and "n1c256h14w14k256r3s3u1p1" in labels and len(labels) == 6
    assert spec.budget.trials <= 300 and spec.budget.minutes <= 0.5
    assert {c.as_dict()["TEMPLATE"] for c in spec.start_from} <= templates
    for config in spec.start_from:
        for problem in spec.problems:
            cand = Candidate("conv2d", "auto", problem, config)
            assert static_check(cand, SETTINGS) is None, (config, problem.label)
    assert _feasible_templates(spec.space) == templates


def _feasible_templates(space):
    """The TEMPLATE values with a configuration in ``space`` that the checks pass: one search a value (the space of
    conv.yaml has 425,552 configurations; enumerating and checking them all took 20 s of CI)."""
    (param,) = [p for p in space.params if p.name == "TEMPLATE"]

    def ok(values):
        return CONV.check("auto", values) is None

    fixed = [dataclasses.replace(space, params=tuple(dataclasses.replace(p, values=(t,)) if p is param else p
                                                     for p in space.params)) for t in param.values]  # fmt: skip
    return {t for t, one in zip(param.values, fixed, strict=True) if one.first_feasible(ok) is not None}


@pytest.mark.parametrize("name", ["conv.yaml", "conv_fp16.yaml"])
def test_start_points_compile_without_spills(name):
    """Every parameter value of the start points compiles (tests/sweep.py's value_cover). The winograd start points
    of conv.yaml compile in test_conv_winograd's test_the_winograd_start_points_compile_without_spills (a value cover
    of them with those of conv_winograd.yaml and conv_b1.yaml); here too with AUTOTUNE_FULL_SWEEP=1."""
    spec = load_spec(ROOT / "configs" / name)
    problem = spec.problems[0]
    points = [c for c in spec.start_from if full_sweep() or c.as_dict()["TEMPLATE"] != "winograd"]
    assert {c.as_dict()["TEMPLATE"] for c in points} >= {"implicit_simt"}
    for config in value_cover(points):
        c = render_candidate(Candidate("conv2d", "auto", problem, config), SETTINGS)
        r = compile_source(c.source, c.kernel_name, "sm_90")
        assert r.ok and r.spills == 0, (name, config, r.error, r.spills)


def test_a_spec_may_name_an_implicit_template_directly():
    raw = {"kernel": "conv2d", "template": "implicit_wmma", "dtype": "float16", "layout": ["NHWC", "NCHW"],
           "shapes": [[1, 3, 7, 5, 5, 3, 3, 1, 1]], "params": {k: [v] for k, v in WM.items()}}  # fmt: skip
    assert len(parse_spec(raw).problems) == 2
    with pytest.raises(Exception, match="does not implement 'float32'"):
        parse_spec({**raw, "dtype": "float32"})


WMMA_EMULATED = [
    # config, shape [N, C, H, W, K, R, S, stride, pad], layout
    ("small", [2, 16, 9, 7, 20, 3, 3, 1, 1], "NHWC"),  # cp.async, zero-filled padding, K and M tails
    ("small", [1, 3, 11, 9, 5, 7, 7, 2, 3], "NHWC"),  # odd C: register gathers across taps; odd K: scalar stores
    ("small", [1, 8, 10, 12, 7, 3, 3, 3, 0], "NCHW"),  # C*R*S % 8 == 0: w by cp.async, x gathered
    ("wide", [1, 24, 6, 7, 40, 1, 1, 1, 0], "NHWC"),  # 1x1, BK = 64 past C*R*S = 24, 4 stages
    # AUTOTUNE_FULL_SWEEP=1 only (tests/sweep.py): odd C in NCHW (odd C: the NHWC case; NCHW: the stride-3 case)
    *full_only([("small", [2, 17, 13, 11, 9, 5, 5, 1, 2], "NCHW")]),
]


@pytest.mark.parametrize(("label", "shape", "layout"), WMMA_EMULATED)
def test_emulated_wmma_kernel_matches_float64(tmp_path, label, shape, layout):
    """Indexing, zero-fill, pipeline order and epilogue of implicit_wmma; the tensor cores are a host stand-in."""
    problem = CONV.problem(shape, "float16", layout)
    assert CONV.check_problem("implicit_wmma", WMMA_GOOD[label], problem) is None
    y, ref = _emulate(tmp_path, "implicit_wmma", WMMA_GOOD[label], problem)
    assert np.isfinite(y).all(), f"{(~np.isfinite(y)).sum()} outputs unwritten"
    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    assert err < 2e-3, f"relative error {err:.2e}"
