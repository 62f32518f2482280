# ruff: noqa: E501 - the host emulator below is C++ kept in strings
"""The 3xTF32 tensor-core skinny GEMM template without a GPU: configurations compile for sm_90 without spills,
every Python check is mirrored by a static_assert, launches and scratch sizes are right, and the kernel meets
the float32 tolerance (not tfloat32's) when its CUDA source runs on the host under the lane-exact mma.sync
m16n8k8 tf32 emulation, on shapes that are no multiple of any tile, with split-K, beta and an unaligned B.
"""

from __future__ import annotations

import re

import pytest

from autotune.build.templates import render
from autotune.kernels import gemm_skinny_tc as tc
from autotune.kernels.base import Launch
from autotune.kernels.gemm import GEMM
from tests.host_cuda import HEADER, MMA_PTX, SPLIT_K_GEMM_MAIN, gxx, run_split_k_gemm
from tests.sweep import share
from tests.template_checks import assert_compile_cleanly, assert_refused_twice

LAYOUTS = ("NN", "TN")

GOOD = {
    "m64": dict(WARPS=8, CW=1, MB=64, KC=16, STAGES=4, SPLIT_K=8, MINB=1),
    "m32": dict(WARPS=4, CW=1, MB=32, KC=16, STAGES=4, SPLIT_K=8, MINB=2),
    "m16_wide": dict(WARPS=4, CW=2, MB=16, KC=16, STAGES=3, SPLIT_K=4, MINB=2),
    "m8_deep": dict(WARPS=4, CW=1, MB=8, KC=32, STAGES=4, SPLIT_K=16, MINB=2),
    "one_warp": dict(WARPS=1, CW=1, MB=8, KC=8, STAGES=2, SPLIT_K=1, MINB=1),
    "split3": dict(WARPS=2, CW=2, MB=16, KC=16, STAGES=3, SPLIT_K=3, MINB=2),
}


def rendered(p, layout, shape=(64, 4096, 4096)):
    problem = GEMM.problem(list(shape), "float32", layout)
    return render("gemm", "skinny_tc", p, problem)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_configurations_compile_for_sm90_without_spills(layout):
    """Each configuration in one layout, in turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: in both."""
    assert_compile_cleanly(tc, rendered, {k: GOOD[k] for k in share(GOOD, [(x,) for x in LAYOUTS], (layout,))}, layout)


def test_render_names_the_math_and_uses_three_tf32_mmas_per_k_step():
    r = rendered(GOOD["m32"], "TN")
    assert r.kernel_name == "gemm_skinny_tc_f32_tn_warps4_cw1_mb32_kc16_stages4_split_k8_minb2"
    assert "3xTF32" in r.source and "cp.async.cg.shared.global" in r.source
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in r.source
    assert len(re.findall(r"mma_tf32\(d\[c\]\[u\]\[j\], a[hl]\[c\]\[u\], b[hl]0, b[hl]1\);", r.source)) == 3
    assert "constexpr bool TRANS_A = true;" in r.source and "constexpr int LDA = 40;" in r.source
    assert "constexpr int LDA = 36;" in rendered(GOOD["m32"], "NN").source
    assert re.search(r"\(const float\* __restrict__ A, const float\* __restrict__ B, float\* __restrict__ C, int M, "
                     r"int N, int K,\s+float alpha, float beta, float\* __restrict__ partial, unsigned int\* __restrict__ counters\)", r.source)  # fmt: skip


def test_derived_values():
    d = tc.derived(GOOD["m64"])
    assert (d["THREADS"], d["BN"], d["BNP"], d["NT"], d["KS"]) == (256, 256, 264, 8, 2)
    assert d["LDA"] == 36 and tc.derived(GOOD["m64"], {"TRANS_A": True})["LDA"] == 72  # 4 / 8 mod 32
    assert d["A_FLOATS"] == max(64 * 36, 16 * 72)
    assert d["SHARED_BYTES"] == 4 * (16 * 264 + 64 * 36) * 4
    assert tc.derived(GOOD["one_warp"])["LDA"] == 36 and tc.derived(GOOD["one_warp"], {"TRANS_A": True})["LDA"] == 8
    assert d["REG_CAP"] == 255 and tc.derived(GOOD["m32"])["REG_CAP"] == 255
    assert tc.derived(GOOD["m16_wide"])["REG_CAP"] == 255 and tc.derived({**GOOD["m32"], "WARPS": 8})["REG_CAP"] == 128


BROKEN = [
    ("m32", dict(WARPS=17), ["WARPS"]),
    ("m32", dict(CW=3), ["CW"]),
    ("m32", dict(MB=12), ["MB", "multiple of 8"]),
    ("m32", dict(MB=72), ["MB"]),
    ("m32", dict(KC=20), ["KC"]),
    ("m32", dict(STAGES=1), ["STAGES"]),
    ("m32", dict(STAGES=9), ["STAGES"]),
    ("m32", dict(WARPS=16, MINB=8), ["threads per SM"]),
    ("m64", dict(CW=4), ["accumulators"]),
    ("m64", dict(KC=128, STAGES=8), ["shared memory"]),
    ("m32", dict(STAGES=8, WARPS=8), ["exceed an SM"]),
    ("m64", dict(MINB=2), ["registers per thread"]),
]


@pytest.mark.parametrize("base,change,words", BROKEN)
def test_check_rejects_with_a_reason_and_the_template_agrees(base, change, words):
    assert_refused_twice(tc, rendered, {**GOOD[base], **change}, words)


def test_launch_scratch_and_check_problem():
    p = GOOD["m64"]
    problem = tc.Problem(64, 4096, 4096, "float32")
    assert tc.launch(p, problem) == Launch((1, 16, 8), (256, 1, 1), tc.derived(p)["SHARED_BYTES"])
    assert tc.launch(p, tc.Problem(65, 4097, 7, "float32")).grid == (2, 17, 8)
    assert tc.scratch(p, problem) == (8 * 64 * 4096, 16)
    assert tc.scratch(GOOD["one_warp"], problem) == (0, 0)
    assert tc.check_problem(p, problem) is None
    assert "float32" in tc.check_problem(p, tc.Problem(64, 64, 64, "float16"))
    assert "NT" in tc.check_problem(p, tc.Problem(64, 64, 64, "float32", "NT"))
    assert "512 MiB" in tc.check_problem({**p, "SPLIT_K": 4096}, tc.Problem(64, 4096, 4096, "float32"))
    assert GEMM.check_problem("skinny_tc", p, GEMM.problem("8x8x8", "bfloat16", "NN")) is not None


def test_params_and_kinds():
    assert all(set(p) == set(tc.PARAMS) for p in GOOD.values())
    assert "skinny_tc" in GEMM.templates and GEMM.templates["skinny_tc"].dtypes == ("float32",)


# --- the kernel's arithmetic, run on the host -------------------------------------------------------------
# One fiber per CUDA thread, blocks one after another (the split-K block with the highest z is always the
# last to arrive), mma.sync and cvt.rna.tf32 emulated lane by lane (tests/host_cuda.py). Shared memory starts as
# NaN, so a fragment read from an unwritten slot poisons C.


def _emulate(tmp_path, p, layout, shape, alpha, beta, b_offset, reps=2, patch=lambda src: src):
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    r = rendered(p, layout, shape)
    src = "\n".join(line for line in r.source.splitlines() if not line.startswith("#include"))
    decl = "extern __shared__ __align__(16) float smem[];"
    assert decl in src
    src = src.replace(decl, "float* smem = g_smem;").replace("__shared__ int s_last;", "static int s_last;")
    src = patch(src)
    body = f"using T = float;\n{src}\n#define KERNEL {r.kernel_name}\n{SPLIT_K_GEMM_MAIN}"
    launch = tc.launch(p, tc.Problem(*shape, "float32", layout))
    return run_split_k_gemm(tmp_path, f"{HEADER}\n{MMA_PTX}", body, shape, layout, alpha, beta, launch, b_offset, reps)


EMULATED = [
    # config, layout, (M, N, K), alpha, beta, B shifted by this many floats (0: 16-byte aligned)
    ("m32", "NN", (32, 256, 300), 1.0, 0.0, 0),  # float4 loads, split-K 8 over an odd K
    ("m16_wide", "TN", (13, 300, 77), 1.5, 0.5, 0),  # N % 4 == 0 but past the strip, beta, rows past M
    ("m8_deep", "NN", (5, 130, 261), 1.0, -1.0, 1),  # unaligned B: scalar fallback, empty split-K slices
    ("one_warp", "TN", (3, 37, 19), 2.0, 0.25, 0),  # N % 4 != 0: 4-byte copies; no split-K: alpha/beta
    ("one_warp", "NN", (8, 40, 1000), 1.0, 0.0, 0),  # 125 chunks through a 2-stage ring
    ("split3", "NN", (17, 129, 200), 1.0, 0.0, 2),  # split 3, two row groups, 8-byte-aligned B
]


@pytest.mark.parametrize("label,layout,shape,alpha,beta,b_offset", EMULATED)
def test_emulated_kernel_meets_the_float32_tolerance(tmp_path, label, layout, shape, alpha, beta, b_offset):
    err = _emulate(tmp_path, GOOD[label], layout, shape, alpha, beta, b_offset)
    assert err < 1e-5, f"relative error {err:.2e} (float32 tolerance 1e-5)"


def test_one_tf32_product_alone_misses_the_float32_tolerance(tmp_path):
    """The residual products are what make it fp32: without them the same kernel is a plain tf32 GEMM."""
    residual_terms = ("mma_tf32(d[c][u][j], al[c][u], bh0, bh1);", "mma_tf32(d[c][u][j], ah[c][u], bl0, bl1);")

    def high_parts_only(src):
        for term in residual_terms:
            assert src.count(term) == 1
            src = src.replace(term, "")
        return src

    args = (GOOD["one_warp"], "NN", (8, 64, 256), 1.0, 0.0, 0)
    assert _emulate(tmp_path, *args) < 1e-5
    assert _emulate(tmp_path, *args, patch=high_parts_only) > 1e-4
