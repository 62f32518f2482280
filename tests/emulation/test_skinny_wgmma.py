"""The 3xTF32 wgmma skinny GEMM template (sm_90a) without a GPU: configurations compile for sm_90a without spills
or wgmma serialization, every Python check is mirrored by a static_assert, launches and scratch sizes are right,
and the kernel meets the float32 tolerance when its CUDA source runs on the host under the lane-exact wgmma
emulation (tests/host_cuda.py's WGMMA_PTX, which runs a wgmma only when a wait_group retires it, so a missing
wait shows in the numbers), on shapes that are no multiple of any tile, with split-K, beta and an unaligned B.
"""

from __future__ import annotations

import pytest

from autotune.build.compiler import ARCH_SPECIFIC, compile_source, target_arch
from autotune.build.templates import render
from autotune.kernels import gemm_skinny_wgmma as wg
from autotune.kernels.base import Launch
from autotune.kernels.gemm import GEMM
from tests.host_cuda import (
    CLUSTER_MAIN,
    CLUSTER_PRELUDE,
    HEADER,
    MMA_PTX,
    SPLIT_K_GEMM_MAIN,
    TMA_PTX,
    WGMMA_PTX,
    gxx,
    run_split_k_gemm,
)
from tests.sweep import full_only, label_cover, share
from tests.template_checks import assert_compile_cleanly, assert_refused_twice

LAYOUTS = ("NN", "TN")

GOOD = {
    "m64": dict(WG=2, MB=64, KC=32, STAGES=4, ROUND=128, SPLIT_K=4, CLUSTER=True, MINB=1, TMA=True),
    "m32": dict(WG=1, MB=32, KC=16, STAGES=3, ROUND=32, SPLIT_K=2, CLUSTER=False, MINB=1, TMA=False),
    "m8_deep": dict(WG=1, MB=8, KC=32, STAGES=3, ROUND=256, SPLIT_K=8, CLUSTER=True, MINB=2, TMA=True),
    "wide": dict(WG=4, MB=16, KC=16, STAGES=3, ROUND=64, SPLIT_K=1, CLUSTER=False, MINB=1, TMA=True),
    "split3": dict(WG=1, MB=16, KC=32, STAGES=5, ROUND=64, SPLIT_K=3, CLUSTER=False, MINB=2, TMA=False),
    "cluster2": dict(WG=2, MB=16, KC=16, STAGES=3, ROUND=32, SPLIT_K=2, CLUSTER=True, MINB=1, TMA=False),
    "m64_split": dict(WG=2, MB=64, KC=16, STAGES=3, ROUND=32, SPLIT_K=4, CLUSTER=False, MINB=1, TMA=True),
    "m32_tma": dict(WG=1, MB=32, KC=32, STAGES=4, ROUND=64, SPLIT_K=2, CLUSTER=False, MINB=2, TMA=True),
}


def rendered(p, layout, shape=(64, 4096, 4096)):
    problem = GEMM.problem(list(shape), "float32", layout)
    return render("gemm", "skinny_wgmma", p, problem)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_configurations_compile_for_sm90a_without_spills_or_serialization(layout):
    """The configurations that hold every parameter value, each in one layout, in turn (tests/sweep.py);
    AUTOTUNE_FULL_SWEEP=1: every configuration in both."""
    good = {k: GOOD[k] for k in share(label_cover(GOOD), [(x,) for x in LAYOUTS], (layout,))}
    for label, c in assert_compile_cleanly(wg, rendered, good, layout).items():  # the sources ask for sm_90a
        assert "serialized" not in c.log, f"{label}: ptxas serialized the wgmmas"


def test_the_source_asks_for_sm90a_and_refuses_other_architectures():
    r = rendered(GOOD["m32"], "NN")
    assert ARCH_SPECIFIC in r.source
    assert target_arch(r.source, "sm_90") == "sm_90a" and target_arch(r.source, "sm_90a") == "sm_90a"
    assert target_arch('extern "C" __global__ void k() {}', "sm_90") == "sm_90"
    c = compile_source(r.source, r.kernel_name, "sm_100")  # sm_100a has no wgmma: a compile error, not a crash
    assert not c.ok and "sm_90a" in c.error


def test_render_names_the_math_and_uses_three_wgmmas_per_k_step():
    r = rendered(GOOD["m32"], "TN")
    assert r.kernel_name == "gemm_skinny_wgmma_f32_tn_wg1_mb32_kc16_stages3_round32_split_k2_cluster0_minb1_tma0"
    assert "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 { " in r.source
    assert '"+f"(d[15])' in r.source and '"+f"(d[16])' not in r.source  # MB / 2 accumulators
    # per k-step: residual x high, high x residual, high x high (the first of a window from zero)
    assert r.source.count("wgmma_tf32(d, f") == 4 and r.source.count("wgmma_tf32_zero(d, f") == 1
    assert "fence.proxy.async.shared::cta" in r.source
    assert "constexpr int CHUNKS_PER_ROUND = ROUND / KC;" in r.source and "float2 r[KS][2];" in r.source
    assert "constexpr bool TRANS_A = true;" in r.source
    assert "constexpr bool TMA = false;" in r.source
    assert "constexpr bool TMA = true;" in rendered(GOOD["m32_tma"], "NN").source
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in r.source


def test_derived_values():
    d = wg.derived(GOOD["m64"])
    assert (d["THREADS"], d["BN"], d["BNP"], d["KS"], d["ND"]) == (256, 128, 136, 4, 32)
    # B's boxes, then A's rows padded by 4, rounded up to 1024 bytes (TMA's swizzle pattern)
    assert d["STAGE"] == 32 * 128 + max(64 * 36, 32 * 68) == 25 * 256 and d["SPLIT"] == 32 * 64
    assert wg.derived(GOOD["m32"])["STAGE"] == 7 * 256 > 16 * 64 + max(32 * 20, 16 * 36)
    assert d["ALD"] == 36 and wg.derived(GOOD["m64"], {"TRANS_A": True})["ALD"] == 68
    ring_and_split = (4 * d["STAGE"] + 6 * d["SPLIT"]) * 4
    # and the cluster's split-K slots, 1024 bytes to align the ring, two barriers per stage (B's boxes, A's)
    assert d["SHARED_BYTES"] == ring_and_split + 64 * 128 * 4 + 1024 + 4 * 16
    assert wg.derived({**GOOD["m64"], "CLUSTER": False})["SHARED_BYTES"] == ring_and_split + 1024 + 4 * 16
    assert d["REG_CAP"] == 255 and wg.derived(GOOD["wide"])["REG_CAP"] == 128
    assert wg.derived(GOOD["m8_deep"])["REG_CAP"] == 255 and wg.derived({**GOOD["m64"], "MINB": 2})["REG_CAP"] == 128


BROKEN = [
    ("m32", dict(WG=3), ["WG"]),
    ("m32", dict(MB=12), ["MB"]),
    ("m32", dict(MB=24), ["MB"]),
    ("m32", dict(MB=128), ["MB"]),
    ("m32", dict(KC=8), ["KC"]),
    ("m32", dict(KC=64), ["KC"]),
    ("m32", dict(ROUND=8), ["ROUND"]),
    ("m32", dict(ROUND=16), ["ROUND"]),
    ("m32", dict(ROUND=24), ["ROUND"]),
    ("m32", dict(ROUND=512), ["ROUND"]),
    ("m32", dict(STAGES=2), ["STAGES"]),
    ("m32", dict(STAGES=9), ["STAGES"]),
    ("m32", dict(WG=4, MINB=8), ["threads per SM"]),
    ("m64", dict(WG=4, STAGES=8), ["shared memory"]),
    ("m64", dict(STAGES=3, MINB=2), ["exceed an SM"]),
    ("m64", dict(WG=4, STAGES=3, CLUSTER=False), ["registers per thread"]),
    ("m64", dict(SPLIT_K=3), ["CLUSTER", "SPLIT_K"]),
    ("m64", dict(SPLIT_K=16), ["CLUSTER", "SPLIT_K"]),
]


@pytest.mark.parametrize("base,change,words", BROKEN)
def test_check_rejects_with_a_reason_and_the_template_agrees(base, change, words):
    assert_refused_twice(wg, rendered, {**GOOD[base], **change}, words)


def test_launch_scratch_and_check_problem():
    p = GOOD["m64"]
    problem = wg.Problem(64, 4096, 4096, "float32")
    assert wg.launch(p, problem) == Launch((1, 32, 4), (256, 1, 1), wg.derived(p)["SHARED_BYTES"])
    assert wg.launch(p, wg.Problem(65, 4097, 7, "float32")).grid == (2, 33, 4)
    assert wg.scratch(p, problem) == (0, 0)  # a cluster sums its partial tiles in shared memory
    assert wg.scratch({**p, "CLUSTER": False}, problem) == (4 * 64 * 4096, 2 * 32)  # arrived, stored: per tile
    assert wg.scratch(GOOD["wide"], problem) == (0, 0)
    assert wg.check_problem(p, problem) is None
    assert "float32" in wg.check_problem(p, wg.Problem(64, 64, 64, "float16"))
    assert "NT" in wg.check_problem(p, wg.Problem(64, 64, 64, "float32", "NT"))
    assert "512 MiB" in wg.check_problem({**p, "SPLIT_K": 4096, "CLUSTER": False}, problem)
    assert GEMM.check_problem("skinny_wgmma", p, GEMM.problem("8x8x8", "bfloat16", "NN")) is not None


def test_params_and_the_auto_template():
    assert all(set(p) == set(wg.PARAMS) for p in GOOD.values())
    assert GEMM.templates["skinny_wgmma"].dtypes == ("float32",)
    assert "skinny_wgmma" in GEMM.templates["auto"].kind("TEMPLATE")


# --- the kernel's arithmetic, run on the host -------------------------------------------------------------
# One fiber per CUDA thread, blocks one after another, wgmma emulated per warpgroup when its group retires
# (tests/host_cuda.py). Shared memory starts as NaN, so a fragment or descriptor read of an unwritten slot
# poisons C.


def _emulate(tmp_path, p, layout, shape, alpha, beta, b_offset, reps=3, patch=lambda src: src, map_rows=None):
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    r = rendered(p, layout, shape)
    src = "\n".join(line for line in r.source.splitlines() if not line.startswith("#include"))
    decl = "extern __shared__ __align__(128) float smem[];"
    assert decl in src
    if p["CLUSTER"]:  # the tile's blocks run at once, each with its own shared memory
        src = src.replace(decl, "float* smem = host_block_smem();")
        src = src.replace("__cluster_dims__(1, 1, SPLIT_K)", "")
        src = f"{CLUSTER_PRELUDE}\n{src}"
    else:
        src = src.replace(decl, "float* smem = g_smem;").replace("__shared__ int s_last;", "static int s_last;")
    src = patch(src)
    # A's and B's tensor maps as the host makes them (TensorMaps; A's read only for NN): B in boxes of 32 columns x
    # KC rows, A in boxes of KC columns x MB rows (map_rows: B's boxes of another height, a wrong map for a test)
    kc, mb = p["KC"], p["MB"]
    amap = f"host_tensor_map(a.data(), K, M, {kc}, {mb}, {4 * kc})"
    bmap = f"host_tensor_map(bptr, N, K, 32, {map_rows or kc}, 128)"
    extra = f"#define KERNEL_EXTRA_ARGS , {amap}, {bmap}\n"
    main = f"#define KERNEL {r.kernel_name}\n{extra}{CLUSTER_MAIN if p['CLUSTER'] else SPLIT_K_GEMM_MAIN}"
    header = f"{HEADER}\n{MMA_PTX}\n{WGMMA_PTX}\n{TMA_PTX}"
    launch = wg.launch(p, wg.Problem(*shape, "float32", layout))
    return run_split_k_gemm(tmp_path, header, f"using T = float;\n{src}\n{main}", shape, layout, alpha, beta, launch,
                            b_offset, reps)  # fmt: skip


EMULATED = [
    # config, layout, (M, N, K), alpha, beta, B shifted by this many floats (0: 16-byte aligned)
    ("m32", "NN", (32, 160, 300), 1.0, 0.0, 0),  # 16-byte copies of A and B, split-K 2, odd chunk counts
    ("m32", "TN", (29, 130, 77), 1.5, 0.5, 1),  # TN with M % 4 != 0: 4-byte A and B copies, beta, rows past M
    ("m8_deep", "NN", (5, 70, 261), 1.0, -1.0, 0),  # K % 4 != 0: 4-byte A copies; cluster of 8
    ("split3", "TN", (48, 100, 400), 1.0, 0.0, 2),  # TN 16-byte A copies, split 3, 8-byte-aligned B
    ("wide", "NN", (17, 300, 200), 2.0, 0.25, 0),  # four warpgroups, no split-K: alpha and beta in the kernel
    ("m64", "NN", (64, 128, 1000), 1.0, 0.0, 0),  # cluster of 4: split-K in shared memory, 8 chunks per slice
    ("cluster2", "TN", (13, 200, 333), 1.5, 0.5, 1),  # cluster of 2 with beta, rows past M, columns past N
    ("m8_deep", "NN", (8, 64, 100), 1.0, 0.0, 0),  # cluster of 8 with empty slices (they still meet the barriers)
    ("m32_tma", "NN", (30, 100, 300), 1.0, 0.0, 0),  # TMA: boxes past N and past K (zeros), a partial last chunk
    ("m32_tma", "NN", (32, 96, 256), 1.0, 0.0, 1),  # TMA on, B unaligned: 4-byte copies (no map is read)
    ("m64_split", "TN", (40, 200, 240), 0.5, 0.0, 0),  # TMA with cluster-free split-K 4, edge tiles
    # AUTOTUNE_FULL_SWEEP=1 only (tests/sweep.py): the CPU tier runs these paths above (split-K through global memory
    # with beta: m32, m64_split TN; TMA in TN: m64_split TN; a cluster in TN: cluster2)
    *full_only([
        ("m8_deep", "TN", (8, 64, 100), 1.0, 0.0, 0),  # cluster of 8 with empty slices, A stored K x M
        ("m64_split", "NN", (64, 128, 256), 1.0, 0.5, 0),  # whole 64 x 128 tiles, split-K 4 through global memory, beta
        ("m32_tma", "TN", (32, 64, 256), 1.0, 0.5, 0),  # TMA, TN, whole tiles
    ]),
]  # fmt: skip


@pytest.mark.parametrize("label,layout,shape,alpha,beta,b_offset", EMULATED)
def test_emulated_kernel_meets_the_float32_tolerance(tmp_path, label, layout, shape, alpha, beta, b_offset):
    err = _emulate(tmp_path, GOOD[label], layout, shape, alpha, beta, b_offset)
    assert err < 1e-5, f"relative error {err:.2e} (float32 tolerance 1e-5)"


def test_the_emulation_catches_a_fragment_rewritten_before_its_wait(tmp_path):
    """With wait_group 2 instead of 1, a chunk's B^T fragments are rewritten while the wgmmas of two chunks back,
    which read them, are still in flight; the emulation runs those wgmmas at their wait, with the new registers,
    as a GPU may."""
    wait = "wgmma_wait<1>();  // retires chunk s - 2"

    def late(src):
        assert src.count(wait) == 1
        return src.replace(wait, "wgmma_wait<2>();  // retires chunk s - 2")

    p = {**GOOD["split3"], "ROUND": 128}  # 4 chunks a window: chunk 3 rewrites the set chunk 1 reads
    args = (p, "NN", (16, 64, 512), 1.0, 0.0, 0)
    assert _emulate(tmp_path, *args) < 1e-5
    assert _emulate(tmp_path, *args, patch=late) > 1e-3


def test_the_residual_products_make_it_fp32(tmp_path):
    """Without the two residual products the same kernel is a plain tf32 GEMM, which misses the float32 tolerance."""
    small = (
        "if (first) wgmma_tf32_zero(d, fl[F][0], a_desc(hi, 0));",
        "else wgmma_tf32(d, fl[F][0], a_desc(hi, 0));",
        "if (j > 0) wgmma_tf32(d, fl[F][j], a_desc(hi, j));",
        "wgmma_tf32(d, fh[F][j], a_desc(lo, j));",
    )

    def high_parts_only(src):
        for term in small:
            assert src.count(term) == 1
        for term in small:
            src = src.replace(term, "")
        high = "wgmma_tf32(d, fh[F][j], a_desc(hi, j));"
        assert src.count(high) == 1  # a window's first high product zeroes d instead
        return src.replace(high, "if (j == 0 && first) wgmma_tf32_zero(d, fh[F][j], a_desc(hi, j)); else " + high)

    args = (GOOD["m32"], "NN", (8, 64, 256), 1.0, 0.0, 0)
    assert _emulate(tmp_path, *args) < 1e-5
    assert _emulate(tmp_path, *args, patch=high_parts_only) > 1e-4


TMA_MUTATIONS = {
    # each mistake as the kernel's text and that text with the mistake made while MUTATED holds (_switched)
    # every wait on parity 0: from a stage's second use on, the wait passes before its boxes land
    "stale phase": ("mbar_wait(landed + rd, ph);", "mbar_wait(landed + rd, MUTATED ? 0u : ph);"),
    # reading B as if TMA did not swizzle
    "no swizzle": (
        "((((c >> 2) & 7) ^ (r & 7)) << 2)",
        "(MUTATED ? (((c >> 2) & 7) << 2) : ((((c >> 2) & 7) ^ (r & 7)) << 2))",
    ),
    # A read as if TMA did not swizzle
    "A unswizzled": (
        "return (o ^ (((o >> 7) & (KC == 32 ? 7 : 3)) << 4)) >> 2;",
        "return MUTATED ? o >> 2 : (o ^ (((o >> 7) & (KC == 32 ? 7 : 3)) << 4)) >> 2;",
    ),
    # split A (chunk s + 1) without waiting for its box
    "A not waited": ("if (s + 1 < nsteps) mbar_wait(landed_a", "if (!MUTATED && s + 1 < nsteps) mbar_wait(landed_a"),
    # B's rows in plain order while A's split keeps the interleaved one
    "k order": (
        "b_index(2 * t, bcol), b_hi = b_index(2 * t + 1, bcol)",
        "b_index(MUTATED ? t : 2 * t, bcol), b_hi = b_index(MUTATED ? t + 4 : 2 * t + 1, bcol)",
    ),
}
MUTATION_ENV = "HOST_MUTATION"


def _switched(src):
    """The kernel with every mistake of TMA_MUTATIONS in it, each made only while the environment's HOST_MUTATION
    names it (its place in sorted order, from 1): one g++ build for all of them. Without HOST_MUTATION, the kernel
    as rendered."""
    for i, name in enumerate(sorted(TMA_MUTATIONS), 1):
        old, new = TMA_MUTATIONS[name]
        assert src.count(old) == 1 and "MUTATED" in new
        src = src.replace(old, new.replace("MUTATED", f"(host_mutation == {i})"))
    pick = f'std::getenv("{MUTATION_ENV}") ? std::atoi(std::getenv("{MUTATION_ENV}")) : 0'
    return f"static const int host_mutation = {pick};\n{src}"


@pytest.mark.parametrize("mutation", sorted(TMA_MUTATIONS))
def test_the_emulation_catches_tma_mistakes(tmp_path, monkeypatch, mutation):
    """The TMA emulation lands a box only at the wait on its phase and swizzles as the hardware does, so a wait on
    the wrong phase, an unswizzled read of A or B, B's rows out of A's k order, or A split without its wait each
    miss the tolerance or stop the emulation."""
    args = (GOOD["m32_tma"], "NN", (32, 64, 512), 1.0, 0.0, 0)  # 8 chunks a slice through a ring of 4
    monkeypatch.delenv(MUTATION_ENV, raising=False)
    assert _emulate(tmp_path, *args, reps=1) < 1e-5
    assert _emulate(tmp_path, *args, reps=1, patch=_switched) < 1e-5  # every mistake switched off
    monkeypatch.setenv(MUTATION_ENV, str(sorted(TMA_MUTATIONS).index(mutation) + 1))
    try:
        err = _emulate(tmp_path, *args, reps=1, patch=_switched)
    except AssertionError as stopped:  # the emulation refused it (a box never waited for is never landed)
        assert "mbarrier" in str(stopped)
    else:
        assert err > 1e-3


def test_the_emulation_checks_the_maps_box_against_the_expected_bytes(tmp_path):
    """A map whose boxes are taller than the KC rows the kernel expects (a host bug) stops the emulation, as it
    would corrupt shared memory or hang on a GPU."""
    with pytest.raises(AssertionError, match="expect_tx of 8192 bytes, boxes of 16384"):
        _emulate(tmp_path, GOOD["m32_tma"], "NN", (32, 64, 256), 1.0, 0.0, 0, reps=1, map_rows=64)
