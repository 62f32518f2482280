# ruff: noqa: E501 - the host emulator shim below is C++ kept in a string
"""The skinny_nt GEMM template (nn.Linear's layout) without a GPU: configurations compile for sm_80 and sm_90
without spills, every Python check is mirrored by a static_assert, launches and scratch sizes are right, and the
kernel computes the right numbers when its CUDA source runs on the host under the thread-per-CUDA-thread emulator.
"""

from __future__ import annotations

import dataclasses
import random
import re
import subprocess

import numpy as np
import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render, template_path
from autotune.kernels import FAMILIES
from autotune.kernels import gemm_skinny_nt as nt
from autotune.kernels.base import Launch
from tests.host_cuda import HEADER, MMA_PTX, SPLIT_K_GEMM_MAIN, build, gxx
from tests.sweep import covering, full_only, full_sweep, product

DTYPES = ("float32", "float16", "bfloat16")
GEMM = FAMILIES["gemm"]

GOOD = {
    "m1": dict(VEC=8, R=2, WARPS_N=1, WARPS_K=4, U=2, MT=1, SPLIT_K=1, MINB=2, MMA=False, PREFETCH=False),
    "m4": dict(VEC=8, R=4, WARPS_N=2, WARPS_K=4, U=2, MT=4, SPLIT_K=1, MINB=1, MMA=False, PREFETCH=True),
    "m16_split": dict(VEC=4, R=4, WARPS_N=2, WARPS_K=2, U=2, MT=16, SPLIT_K=3, MINB=1, MMA=False, PREFETCH=True),
    "scalar": dict(VEC=1, R=3, WARPS_N=1, WARPS_K=1, U=1, MT=3, SPLIT_K=2, MINB=1, MMA=False, PREFETCH=False),
    "vec2_wide": dict(VEC=2, R=1, WARPS_N=4, WARPS_K=2, U=4, MT=2, SPLIT_K=1, MINB=2, MMA=False, PREFETCH=False),
    "big": dict(VEC=8, R=8, WARPS_N=1, WARPS_K=8, U=2, MT=8, SPLIT_K=2, MINB=1, MMA=False, PREFETCH=False),
    "prefetch": dict(VEC=4, R=2, WARPS_N=2, WARPS_K=4, U=2, MT=4, SPLIT_K=2, MINB=2, MMA=False, PREFETCH=True),
    "mma16": dict(VEC=8, R=16, WARPS_N=1, WARPS_K=4, U=2, MT=16, SPLIT_K=1, MINB=2, MMA=True, PREFETCH=False),
    "mma_split": dict(VEC=8, R=8, WARPS_N=2, WARPS_K=2, U=2, MT=32, SPLIT_K=3, MINB=1, MMA=True, PREFETCH=True),
    "default16": nt.default_params(16, "float16"),  # what serving launches for 16-bit NT with 4 < M <= 16
    "default64": nt.default_params(64, "bfloat16"),
}


def compiled(p, dtype, layout, arch="sm_90"):
    name = nt.kernel_name(p, dtype, layout)
    return compile_source(nt.render(p, dtype, layout, name), name, arch)


def _takes(label, combo):
    return nt.check_problem(GOOD[label], nt.Problem(16, 4096, 4096, *combo)) is None


# Each configuration in one dtype and layout it takes, in turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: in all.
@pytest.mark.parametrize(("label", "dtype", "layout"), covering(GOOD, product(DTYPES, nt.LAYOUTS), _takes))
def test_configurations_compile_for_sm90_without_spills(label, dtype, layout):
    p = GOOD[label]
    assert nt.check(p) is None, label
    r = compiled(p, dtype, layout)
    assert r.ok, f"{label} {layout}: {r.error}"
    assert r.registers and r.registers <= nt.derived(p)["REG_CAP"], label
    assert r.spills == 0, f"{label} spills {r.spills} bytes"


def test_a_sample_of_the_tuning_space_compiles_for_sm80_and_sm90():
    from pathlib import Path

    from autotune.tune.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "configs" / "gemm_decode_nt.yaml")
    assert spec.template == "auto"  # skinny_nt and wgmma_decode; this samples skinny_nt's configurations
    fits = [c.as_dict() for c in spec.space.enumerate()]
    fits = [{k: v for k, v in p.items() if k != "TEMPLATE"} for p in fits if p["TEMPLATE"] == "skinny_nt"]
    fits = [p for p in fits if nt.check(p) is None]
    assert len(fits) > 100
    built = 0
    for i, p in enumerate(random.Random(0).sample(fits, 4 if full_sweep() else 2)):  # two in the CPU tier
        dtype = DTYPES[i % 3]
        if nt.check_problem(p, nt.Problem(4, 4096, 4096, dtype, "NT")) is not None:
            continue
        for arch in ("sm_80", "sm_90"):
            r = compiled(p, dtype, "NT", arch)
            assert r.ok, f"{p} {arch}: {r.error}"
            built += 1
    assert built >= 2  # the sample compiled for both architectures at least once


def test_render_carries_the_variant_and_the_exact_signature():
    p = GOOD["m1"]
    src = nt.render(p, "bfloat16", "TT", "kname")
    assert "#include <cuda_bf16.h>" in src and "cuda_fp16.h" not in src
    assert "constexpr bool TRANS_A = true;" in src
    assert re.search(
        r'extern "C" __global__ void __launch_bounds__\(THREADS, MINB\)\s+kname\(const __nv_bfloat16\* __restrict__ A, '
        r"const __nv_bfloat16\* __restrict__ B, __nv_bfloat16\* __restrict__ C, int M, int N, int K,\s+"
        r"float alpha, float beta, float\* __restrict__ partial, unsigned int\* __restrict__ counters\)",
        src,
    )
    fp32 = nt.render(p, "float32", "NT", "k2")
    assert "#include" not in fp32 and "using T = float;" in fp32 and "{{" not in fp32


def test_variant_keys_and_refusals():
    assert nt.variant("float16", "NT") == {
        "DTYPE": "float16", "T": "__half", "ES": 2, "LAYOUT": "NT", "TRANS_A": False, "TRANS_B": True, "BIAS": False,
    }  # fmt: skip
    with pytest.raises(ValueError, match="dtype"):
        nt.variant("float64", "NT")
    with pytest.raises(ValueError, match="layout"):
        nt.variant("float32", "NN")


def test_derived_values():
    d = nt.derived(GOOD["m4"])
    assert d["THREADS"] == 256 and d["BN"] == 8 and d["KSTEP"] == 256
    assert d["SHARED_BYTES"] == 4 * 8 * 4 * 4 and d["REG_CAP"] == 255
    assert nt.derived(GOOD["m1"])["REG_CAP"] == 255  # 65536 / (128 threads x 2 blocks) = 256, capped at 255
    assert nt.derived({**GOOD["big"], "MINB": 2})["REG_CAP"] == 128
    assert nt.derived({**GOOD["big"], "MINB": 4})["REG_CAP"] == 64


# A broken variant of a good configuration, and the words its reason must contain.
BROKEN = [
    ("m1", dict(VEC=3), "VEC"),
    ("m1", dict(WARPS_N=8, WARPS_K=8), "1024"),
    ("m4", dict(MINB=16), "threads per SM"),
    ("m16_split", dict(MT=64), "accumulators"),
    ("m1", dict(R=8, U=8), "in flight"),
    ("m1", dict(SPLIT_K=70000), "z limit"),
    ("m4", dict(MINB=4), "registers"),
    ("mma16", dict(VEC=4), "VEC = 8"),
    ("mma16", dict(R=12), "multiple of 8"),
    ("mma16", dict(MT=8), "multiple of 16"),
    ("mma16", dict(MT=64, R=32, WARPS_K=16), "shared memory"),
    ("mma16", dict(R=32, U=16), "in flight"),
]


@pytest.mark.parametrize("base,change,words", BROKEN)
def test_check_rejects_with_a_reason_and_the_template_agrees(base, change, words):
    p = {**GOOD[base], **change}
    reason = nt.check(p)
    assert reason is not None and words in reason, reason
    assert reason.count(".") <= 1 and len(reason) < 160  # one short sentence
    r = compiled(p, "float16", "NT")
    assert not r.ok and re.search(r"static assert|static_assert", r.log), r.error


def test_registers_are_counted_per_dtype_by_check_problem_and_the_template():
    # 16-byte loads of fp16 fill 4 registers per row and step, of fp32 (VEC 8) 8: fine for one, too many for the other.
    p = dict(VEC=8, R=4, WARPS_N=1, WARPS_K=4, U=4, MT=16, SPLIT_K=1, MINB=2, MMA=False, PREFETCH=False)
    assert nt.check(p) is None
    assert nt.check_problem(p, nt.Problem(8, 4096, 4096, "float16", "NT")) is None
    reason = nt.check_problem(p, nt.Problem(8, 4096, 4096, "float32", "NT"))
    assert reason and "registers" in reason and "float32" in reason
    assert compiled(p, "float16", "NT").spills == 0
    r = compiled(p, "float32", "NT")
    assert not r.ok and "registers per thread" in r.log


def test_mma_takes_16_bit_inputs_only_and_the_template_agrees():
    p = GOOD["mma16"]
    reason = nt.check_problem(p, nt.Problem(16, 4096, 4096, "float32", "NT"))
    assert reason and "16-bit" in reason and "MMA = false" in reason
    r = compiled(p, "float32", "NT")
    assert not r.ok and "MMA takes 16-bit elements" in r.log
    assert nt.derived(p)["KSTEP"] == 32 and nt.accumulators(p) == 8 and nt.in_flight(p) == 4


def test_launch_grid_block_and_shared_bytes():
    p = GOOD["m4"]
    d = nt.derived(p)
    assert nt.launch(p, nt.Problem(4, 4096, 4096, "float16")) == Launch((1, 512, 1), (256, 1, 1), d["SHARED_BYTES"])
    # 35 rows in groups of 16 -> 3; 8457 rows of W in strips of 8 -> 1058
    assert nt.launch(GOOD["m16_split"], nt.Problem(35, 8457, 2561, "float32")).grid == (3, 1058, 3)
    assert nt.launch(GOOD["scalar"], nt.Problem(3, 5, 7, "bfloat16", "TT")).grid == (1, 2, 2)


def test_scratch_sizes():
    assert nt.scratch(GOOD["m4"], nt.Problem(4, 4096, 4096, "float16")) == (0, 0)
    assert nt.scratch(GOOD["m16_split"], nt.Problem(35, 8457, 2561, "float32")) == (3 * 35 * 8457, 3 * 1058)


def test_check_problem():
    p = GOOD["m1"]
    assert nt.check_problem(p, nt.Problem(35, 8457, 2561, "bfloat16", "TT")) is None
    assert "layout NN" in nt.check_problem(p, nt.Problem(1, 4096, 4096, "float16", "NN"))
    assert "float64" in nt.check_problem(p, nt.Problem(1, 4096, 4096, "float64", "NT"))
    # 2-row strips: 65535 of them cover N = 131070; one row more needs a 65536th strip
    assert nt.check_problem(p, nt.Problem(1, 65535 * 2, 64, "float16", "NT")) is None
    assert "65536 column strips" in nt.check_problem(p, nt.Problem(1, 65535 * 2 + 1, 64, "float16", "NT"))
    big = GOOD["big"]  # SPLIT_K 2: 2 * M * N floats of partials, at most 512 MiB
    assert nt.check_problem(big, nt.Problem(256, 1 << 18, 64, "float16", "NT")) is None
    assert "MiB" in nt.check_problem(big, nt.Problem(257, 1 << 18, 64, "float16", "NT"))


def test_params_kinds_and_the_family_registration():
    # Every parameter is read by the template (else it would be a tuning dimension that changes nothing), every
    # kind names a parameter, and the configurations here set exactly the parameters.
    source = template_path("gemm", "skinny_nt").read_text()
    assert [p for p in nt.PARAMS if not re.search(rf"\b{p}\b", source)] == []
    assert set(dict(nt.KINDS)) <= set(nt.PARAMS)
    assert all(set(p) == set(nt.PARAMS) for p in GOOD.values())
    info = GEMM.templates["skinny_nt"]
    assert info.layouts == ("NT", "TT") and set(info.dtypes) == set(DTYPES)
    assert "skinny_nt" in GEMM.templates["auto"].kind("TEMPLATE")
    problem = GEMM.problem("16x4096x14336", "bfloat16", "NT")
    assert GEMM.check_problem("skinny_nt", GOOD["m16_split"], problem) is None
    assert GEMM.check_problem("skinny_nt", GOOD["m16_split"], GEMM.problem("16x4096x14336", "bfloat16")) is not None
    assert GEMM.scratch("skinny_nt", GOOD["m16_split"], problem) == nt.scratch(GOOD["m16_split"], problem)
    assert GEMM.kernel_name("skinny_nt", GOOD["m1"], problem).startswith("gemm_skinny_nt_bf16_nt_vec8_r2_")


def test_the_family_default_for_nt_decode_is_skinny_nt_and_fits():
    for dtype in DTYPES:
        for layout in ("NT", "TT"):
            for m in (1, 4, 16, 64):
                template, params = GEMM.default_config(dtype, layout, M=m)
                assert template == "skinny_nt", (dtype, layout, m)
                assert params["MMA"] == (dtype != "float32" and m > 4)  # tensor cores once M fills some rows
                problem = GEMM.problem([m, 4097, 4093], dtype, layout)
                assert GEMM.check(template, params) is None and GEMM.check_problem(template, params, problem) is None
    assert GEMM.default_config("float16", "NT", M=512)[0] == "wmma"  # tensor cores once M fills their tiles
    assert GEMM.default_config("float32", "NT")[0] == "skinny_nt"  # the only fp32 template that reads W in place


# --- the kernel's arithmetic, run on the host ---------------------------------------------------------
# The rendered CUDA source is compiled with g++ against the shims of tests/host_cuda.py (one fiber per CUDA
# thread, __syncthreads and __syncwarp as host_barriers, blocks one after another) plus a warp shuffle through a
# per-warp exchange. It checks indexing, edges, the scalar fallback, layout TT, beta, split-K and the reset of the
# counters; it cannot check the GPU's memory model or speed.

SHFL = r"""
float g_shfl[2][32][32];  // two exchanges in turn, so a shuffle meets its warp once (as the mma's: host_cuda.py)
HOST_FIBER_LOCAL(unsigned, t_shfl_turn, 0);
inline float __shfl_xor_sync(unsigned, float v, int o) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  float (&x)[32] = g_shfl[t_shfl_turn ^= 1u][w];
  x[l] = v;
  __syncwarp();
  return x[l ^ o];
}
"""


def _bits(x, dtype):
    if dtype == "bfloat16":
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.ascontiguousarray(x, dtype={"float32": np.float32, "float16": np.float16}[dtype])


def _values(raw, dtype, shape):
    if dtype == "bfloat16":
        u = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape).astype(np.float64)
    return np.frombuffer(raw, {"float32": np.float32, "float16": np.float16}[dtype]).reshape(shape).astype(np.float64)


def _emulate(tmp_path, p, dtype, layout, shape, alpha, beta, b_offset, reps=3, bias=False):
    """The relative error of the emulated kernel's C against float64; with ``bias``, the bias epilogue variant
    (rendered by the framework, the bias its last argument) against float64 plus a bias of sqrt(K) scale."""
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    M, N, K = shape
    if bias:
        r = render("gemm", "skinny_nt", p, dataclasses.replace(GEMM.problem([M, N, K], dtype, layout), bias=True))
        name, src = r.kernel_name, r.source
        extra = f'static const std::vector<char> g_bias = slurp("{tmp_path}/bias.bin");\n'
        extra += "#define KERNEL_EXTRA_ARGS , (const T*)g_bias.data()\n"
    else:
        name, extra = nt.kernel_name(p, dtype, layout), ""
        src = nt.render(p, dtype, layout, name)
    src = "\n".join(line for line in src.splitlines() if not line.startswith("#include"))
    src = src.replace("extern __shared__ __align__(16) float red[];", "float* red = g_smem;")
    src = src.replace("__shared__ int s_last;", "static int s_last;")
    build(tmp_path, f"{HEADER}\n{MMA_PTX}\n{SHFL}", f"{src}\n#define KERNEL {name}\n{extra}{SPLIT_K_GEMM_MAIN}")

    rng = np.random.default_rng(0)
    a = _values(_bits(rng.standard_normal((M, K)), dtype).tobytes(), dtype, (M, K))
    w = _values(_bits(rng.standard_normal((N, K)), dtype).tobytes(), dtype, (N, K))
    c = _values(_bits(rng.standard_normal((M, N)), dtype).tobytes(), dtype, (M, N))
    _bits(a.T if layout[0] == "T" else a, dtype).tofile(tmp_path / "a.bin")
    _bits(w, dtype).tofile(tmp_path / "b.bin")
    _bits(c, dtype).tofile(tmp_path / "c.bin")
    add = _values(_bits(rng.standard_normal(N) * np.sqrt(K), dtype).tobytes(), dtype, (N,)) if bias else 0.0
    _bits(np.asarray(add) if bias else np.zeros(1), dtype).tofile(tmp_path / "bias.bin")
    launch = nt.launch(p, nt.Problem(M, N, K, dtype, layout))
    args = [tmp_path / "k", tmp_path, M, N, K, alpha, beta, *launch.grid, launch.block[0]]
    args += [launch.shared_bytes, b_offset, reps]
    run = subprocess.run([str(x) for x in args], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = _values((tmp_path / "out.bin").read_bytes(), dtype, (M, N))
    assert not np.isnan(out).any()
    ref = alpha * (a @ w.T) + add + beta * c
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}

EMULATED = [
    # config, dtype, layout, (M, N, K), alpha, beta, W shifted by this many elements (0: aligned)
    ("m1", "float16", "NT", (1, 37, 1000), 1.0, 0.0, 0),  # 16-byte loads, K not a multiple of a step
    ("m4", "float32", "NT", (3, 41, 512), 1.5, 0.0, 0),  # fp32 VEC 8: two 16-byte loads; M < MT
    ("m4", "float16", "NT", (3, 17, 512), 1.0, 0.0, 4),  # W 8-byte aligned only: scalar fallback
    ("m16_split", "float32", "NT", (16, 13, 515), 1.0, 0.25, 1),  # split-K 3, odd K, unaligned W, a partial N tile
    ("scalar", "bfloat16", "TT", (3, 5, 7), 1.0, -1.0, 1),  # empty split-K slice, tiny shape
    ("vec2_wide", "bfloat16", "NT", (3, 11, 334), 2.0, 0.0, 0),  # R 1, four warps along N
    ("big", "float16", "NT", (16, 9, 2048), 0.5, 0.0, 0),  # R 8, eight warps along K, split-K 2, N tile of one column
    ("prefetch", "float32", "NT", (5, 7, 3001), 1.0, 0.5, 0),  # several passes per warp, the last one partial
    ("mma16", "float16", "NT", (1, 37, 1000), 1.0, 0.0, 0),  # tensor cores, one row of A, 16-byte loads
    ("mma_split", "float16", "TT", (35, 29, 300), 1.0, -1.0, 0),  # two row groups, A stored K x M, split-K 3
    ("mma_split", "bfloat16", "NT", (3, 41, 2048), 2.0, 0.0, 4),  # W 8-byte aligned only: scalar fallback
    ("default16", "float16", "NT", (9, 20, 1536), 1.0, 0.0, 0),  # two passes per warp with PREFETCH
    ("default64", "bfloat16", "NT", (64, 33, 1024), 1.0, 0.0, 0),
    # AUTOTUNE_FULL_SWEEP=1 only (tests/sweep.py): the CPU tier runs these paths above, in other dtypes or configurations
    # (A stored K x M: scalar, mma_split; several passes: prefetch fp32; the mma K-odd fallback: mma_split's W; the
    # fallback on odd K: vec_ok, the flag that m4's W shifted by 4 elements clears; beta: m16_split, prefetch)
    *full_only([
        ("m1", "bfloat16", "NT", (1, 19, 517), 1.0, 0.5, 0),  # K odd: scalar fallback, beta
        ("m16_split", "float16", "TT", (16, 9, 260), 1.0, -1.0, 0),  # A stored K x M, a last N tile of one column
        ("prefetch", "bfloat16", "TT", (4, 9, 4100), 1.0, 0.0, 0),  # three passes, A stored K x M
        ("mma16", "bfloat16", "NT", (16, 19, 517), 1.0, 0.5, 0),  # K odd: scalar fallback, beta
    ]),
]  # fmt: skip


@pytest.mark.parametrize("label,dtype,layout,shape,alpha,beta,b_offset", EMULATED)
def test_emulated_kernel_matches_float64(tmp_path, label, dtype, layout, shape, alpha, beta, b_offset):
    err = _emulate(tmp_path, GOOD[label], dtype, layout, shape, alpha, beta, b_offset)
    assert err < TOL[dtype], f"relative error {err:.2e}"


@pytest.mark.parametrize(
    "label,dtype,shape,alpha,beta",
    [
        ("m1", "float32", (1, 37, 1000), 1.0, 0.0),  # one block per tile: the bias added where C is stored
        ("m16_split", "float16", (16, 13, 515), 1.0, 0.5),  # split-K 3: the bias added by the last block, beta too
        ("mma_split", "bfloat16", (35, 29, 300), 2.0, 0.0),  # tensor cores, two row groups, split-K 3
    ],  # fmt: skip
)
def test_emulated_bias_epilogue_adds_the_bias_per_column(tmp_path, label, dtype, shape, alpha, beta):
    err = _emulate(tmp_path, GOOD[label], dtype, "NT", shape, alpha, beta, 0, bias=True)
    assert err < TOL[dtype], f"relative error {err:.2e}"
