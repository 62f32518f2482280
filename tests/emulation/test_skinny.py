# ruff: noqa: E501 - the host emulator below is C++ kept in strings
"""The skinny-M GEMM template without a GPU: configurations compile for sm_90 without spills, every
Python check is mirrored by a static_assert, launches and scratch sizes are right, and the kernel computes
the right numbers when its CUDA source runs on the host under a small thread-per-CUDA-thread emulator.
"""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import template_path
from autotune.kernels import gemm_skinny as sk
from autotune.kernels.base import Launch
from tests.host_cuda import HEADER, SPLIT_K_GEMM_MAIN, build, gxx
from tests.sweep import covering, product

DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("NN", "TN")

GOOD = {
    "m1_stream": dict(VEC=4, TX=32, TY=8, MT=1, KR=4, SPLIT_K=8, PREFETCH=True, MINB=4),
    "m32_fma": dict(VEC=4, TX=32, TY=4, MT=32, KR=4, SPLIT_K=4, PREFETCH=False, MINB=1),
    "m16_wide": dict(VEC=8, TX=16, TY=16, MT=16, KR=4, SPLIT_K=2, PREFETCH=True, MINB=1),
    "m64_vec2": dict(VEC=2, TX=32, TY=8, MT=64, KR=2, SPLIT_K=2, PREFETCH=False, MINB=1),
    "scalar_odd": dict(VEC=1, TX=8, TY=4, MT=3, KR=1, SPLIT_K=1, PREFETCH=False, MINB=1),
    "vec16": dict(VEC=16, TX=8, TY=8, MT=4, KR=2, SPLIT_K=3, PREFETCH=True, MINB=2),
    "big_block": dict(VEC=2, TX=128, TY=8, MT=2, KR=2, SPLIT_K=16, PREFETCH=True, MINB=1),
    "one_warp": dict(VEC=4, TX=32, TY=1, MT=8, KR=16, SPLIT_K=1, PREFETCH=False, MINB=1),
}


def name_of(p, dtype, layout):
    return sk.kernel_name(p, dtype, layout)


def compiled(p, dtype, layout):
    name = name_of(p, dtype, layout)
    return compile_source(sk.render(p, dtype, layout, name), name, "sm_90")


# Each configuration in one dtype and layout, in turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: in all of them.
@pytest.mark.parametrize(("label", "dtype", "layout"), covering(GOOD, product(DTYPES, LAYOUTS)))
def test_configurations_compile_for_sm90_without_spills(label, dtype, layout):
    p = GOOD[label]
    assert sk.check(p) is None, label
    r = compiled(p, dtype, layout)
    assert r.ok, f"{label}: {r.error}"
    assert r.registers and r.registers <= sk.derived(p)["REG_CAP"], label
    assert r.spills == 0, f"{label} spills {r.spills} bytes"


def test_render_carries_the_variant_and_the_exact_signature():
    p = GOOD["m1_stream"]
    src = sk.render(p, "bfloat16", "TN", "kname")
    assert "#include <cuda_bf16.h>" in src and "cuda_fp16.h" not in src
    assert "constexpr bool TRANS_A = true;" in src and "constexpr bool TRANS_B = false;" in src
    assert re.search(
        r'extern "C" __global__ void __launch_bounds__\(THREADS, MINB\)\s+kname\(const __nv_bfloat16\* __restrict__ A, '
        r"const __nv_bfloat16\* __restrict__ B, __nv_bfloat16\* __restrict__ C, int M, int N, int K,\s+"
        r"float alpha, float beta, float\* __restrict__ partial, unsigned int\* __restrict__ counters\)",
        src,
    )
    fp32 = sk.render(p, "float32", "NN", "k2")
    assert "#include" not in fp32 and "using T = float;" in fp32 and "{{" not in fp32


def test_variant_keys():
    assert sk.variant("float16", "TN") == {
        "DTYPE": "float16", "T": "__half", "ES": 2, "LAYOUT": "TN", "TRANS_A": True, "TRANS_B": False,
    }  # fmt: skip
    assert sk.variant("float32", "NT")["TRANS_B"] is True
    with pytest.raises(ValueError, match="dtype"):
        sk.variant("float64", "NN")
    with pytest.raises(ValueError, match="layout"):
        sk.variant("float32", "XN")


def test_derived_values():
    d = sk.derived(GOOD["m32_fma"], sk.variant("float32", "NN"))
    assert d["THREADS"] == 128 and d["BN"] == 128 and d["KCHUNK"] == 16
    assert d["AS_LD"] == 32 and d["ACNT"] == 4  # 16 x 32 A elements over 128 threads
    assert d["SHARED_BYTES"] == max(2 * 16 * 32 * 4, 4 * d["RROWS"] * 128 * 4)
    assert d["RROWS"] == 16 and d["REG_CAP"] == 255  # 32 KiB of reduction buffer: 16 rows of 4 x 128 floats
    narrow = sk.derived(dict(GOOD["vec16"]))
    assert narrow["AS_LD"] == 8  # TX < 32: a warp reads several A rows, so rows are padded by 4
    assert sk.derived(GOOD["big_block"])["REG_CAP"] == 64  # 1024 threads
    assert sk.derived({**GOOD["big_block"], "MINB": 2})["REG_CAP"] == 32


# A broken variant of a good configuration, and the words its reason must contain.
BROKEN = [
    ("m1_stream", dict(VEC=3), "VEC"),
    ("m1_stream", dict(TX=20, TY=1), "warps"),
    ("m1_stream", dict(TX=64, TY=32), "1024"),
    ("m32_fma", dict(MT=33), "accumulators"),
    ("m16_wide", dict(KR=16), "B registers"),
    ("m1_stream", dict(SPLIT_K=70000), "z limit"),
    ("scalar_odd", dict(MT=40, KR=8), "stage"),
    ("m1_stream", dict(MINB=16), "threads per SM"),
    ("m32_fma", dict(MINB=4), "registers"),
    ("one_warp", dict(MT=64, KR=16, TY=32, VEC=1, TX=32), "shared memory"),
]


@pytest.mark.parametrize("base,change,words", BROKEN)
def test_check_rejects_with_a_reason_and_the_template_agrees(base, change, words):
    p = {**GOOD[base], **change}
    reason = sk.check(p)
    assert reason is not None and words in reason, reason
    assert reason.count(".") <= 1 and len(reason) < 160  # one short sentence
    r = compiled(p, "float32", "NN")
    assert not r.ok and re.search(r"static assert|static_assert", r.log), r.error


def test_registers_are_counted_per_dtype_by_check_problem_and_the_template():
    # 16-byte loads of fp16 fill 4 registers per K row, of fp32 8: fine for one dtype, too many for the other.
    p = dict(VEC=8, TX=32, TY=8, MT=8, KR=4, SPLIT_K=4, PREFETCH=True, MINB=2)
    assert sk.check(p) is None
    assert sk.check_problem(p, sk.Problem(8, 4096, 4096, "float16")) is None
    reason = sk.check_problem(p, sk.Problem(8, 4096, 4096, "float32"))
    assert reason and "registers" in reason and "float32" in reason
    assert compiled(p, "float16", "NN").spills == 0
    r = compiled(p, "float32", "NN")
    assert not r.ok and "registers per thread" in r.log


def test_nt_layout_trips_the_template_too():
    r = compiled(GOOD["m1_stream"], "float16", "NT")
    assert not r.ok and "layout NT" in r.log


def test_launch_grid_block_and_shared_bytes():
    p = GOOD["m1_stream"]
    d = sk.derived(p)
    assert sk.launch(p, sk.Problem(1, 4096, 4096, "float32")) == Launch((1, 32, 8), (256, 1, 1), d["SHARED_BYTES"])
    q = GOOD["m32_fma"]
    # 35 rows in groups of 32 -> 2; 8457 columns in strips of 128 -> 67
    assert sk.launch(q, sk.Problem(35, 8457, 2561, "float16", "TN")).grid == (2, 67, 4)
    assert sk.launch(GOOD["scalar_odd"], sk.Problem(3, 5, 7, "bfloat16")).grid == (1, 1, 1)


def test_scratch_sizes():
    p = GOOD["m1_stream"]
    assert sk.scratch(p, sk.Problem(1, 4096, 4096, "float32")) == (8 * 4096, 32)
    assert sk.scratch(GOOD["m32_fma"], sk.Problem(35, 8457, 2561, "float16")) == (4 * 35 * 8457, 2 * 67)
    assert sk.scratch(GOOD["scalar_odd"], sk.Problem(64, 1000, 999, "float32")) == (0, 0)


def test_check_problem():
    p = GOOD["m1_stream"]
    assert sk.check_problem(p, sk.Problem(35, 8457, 2561, "bfloat16", "TN")) is None
    assert "layout NT" in sk.check_problem(p, sk.Problem(1, 4096, 4096, "float32", "NT"))
    assert "float64" in sk.check_problem(p, sk.Problem(1, 4096, 4096, "float64"))
    # 128-column strips: 65535 of them cover N = 8388480; one column more needs a 65536th strip
    assert sk.check_problem(p, sk.Problem(1, 65535 * 128, 64, "float32")) is None
    assert "65536 column strips" in sk.check_problem(p, sk.Problem(1, 65535 * 128 + 1, 64, "float32"))
    # partials: SPLIT_K * M * N floats; 8 * 64 * 262144 * 4 bytes = 512 MiB is the most allowed
    big = {**p, "SPLIT_K": 8}
    assert sk.check_problem(big, sk.Problem(64, 262144, 4096, "float32")) is None
    assert "MiB" in sk.check_problem(big, sk.Problem(65, 262144, 4096, "float32"))
    assert sk.check_problem({**p, "SPLIT_K": 1}, sk.Problem(65, 262144, 4096, "float32")) is None


def test_params_and_kinds():
    # Every parameter is read by the template (one that is not would be a tuning dimension that changes nothing),
    # every kind names a parameter, and the configurations here set exactly the parameters.
    source = template_path("gemm", "skinny").read_text()
    assert [p for p in sk.PARAMS if not re.search(rf"\b{p}\b", source)] == []
    assert set(dict(sk.KINDS)) <= set(sk.PARAMS)
    assert all(set(p) == set(sk.PARAMS) for p in GOOD.values())


# --- the kernel's arithmetic, run on the host ---------------------------------------------------------
# The rendered CUDA source is compiled with g++ against a few shims: one fiber per CUDA thread,
# __syncthreads as a host_barrier, blocks one after another (so the split-K block with the highest z is
# always the last to arrive). It checks indexing, edges, the scalar fallback, beta, split-K and the reset
# of the counters; it cannot check the GPU's memory model or speed.

EMU_HEADER = HEADER

EMU_MAIN = SPLIT_K_GEMM_MAIN


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


def _emulate(tmp_path, p, dtype, layout, shape, alpha, beta, b_offset, reps=2):
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    name = name_of(p, dtype, layout)
    src = sk.render(p, dtype, layout, name)
    src = "\n".join(line for line in src.splitlines() if not line.startswith("#include"))
    src = src.replace("extern __shared__ __align__(16) float smem[];", "float* smem = g_smem;")
    src = src.replace("__shared__ int s_last;", "static int s_last;")
    build(tmp_path, EMU_HEADER, f"{src}\n#define KERNEL {name}\n{EMU_MAIN}\n")

    M, N, K = shape
    rng = np.random.default_rng(0)
    a = _values(_bits(rng.standard_normal((M, K)), dtype).tobytes(), dtype, (M, K))
    b = _values(_bits(rng.standard_normal((K, N)), dtype).tobytes(), dtype, (K, N))
    c = _values(_bits(rng.standard_normal((M, N)), dtype).tobytes(), dtype, (M, N))
    _bits(a.T if layout[0] == "T" else a, dtype).tofile(tmp_path / "a.bin")
    _bits(b, dtype).tofile(tmp_path / "b.bin")
    _bits(c, dtype).tofile(tmp_path / "c.bin")
    launch = sk.launch(p, sk.Problem(M, N, K, dtype, layout))
    args = [tmp_path / "k", tmp_path, M, N, K, alpha, beta, *launch.grid, launch.block[0]]
    args += [launch.shared_bytes, b_offset, reps]
    run = subprocess.run([str(x) for x in args], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = _values((tmp_path / "out.bin").read_bytes(), dtype, (M, N))
    ref = alpha * (a @ b) + beta * c
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}

EMULATED = [
    # config, dtype, layout, (M, N, K), alpha, beta, B shifted by this many elements (0: aligned)
    ("m1_stream", "float32", "NN", (1, 264, 300), 1.0, 0.0, 0),  # vector loads, split-K 8, odd K
    ("m1_stream", "float32", "NN", (2, 257, 261), 1.5, 0.5, 1),  # scalar fallback, beta
    ("vec16", "float16", "TN", (35, 257, 261), 1.0, 0.25, 0),  # N % 16 != 0: scalar fallback
    ("vec16", "bfloat16", "NN", (16, 128, 64), 0.5, 0.0, 0),  # vector loads, empty split-K slices
    ("scalar_odd", "bfloat16", "TN", (3, 5, 7), 1.0, -1.0, 1),
    ("one_warp", "float16", "NN", (9, 96, 200), 2.0, 0.0, 4),  # TY == 1, 8-byte-aligned B
]


@pytest.mark.parametrize("label,dtype,layout,shape,alpha,beta,b_offset", EMULATED)
def test_emulated_kernel_matches_float64(tmp_path, label, dtype, layout, shape, alpha, beta, b_offset):
    err = _emulate(tmp_path, GOOD[label], dtype, layout, shape, alpha, beta, b_offset)
    assert err < TOL[dtype], f"relative error {err:.2e}"
