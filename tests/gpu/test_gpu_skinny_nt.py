"""GPU tier for the skinny_nt template (nn.Linear's layout): random configurations of its tuning space and the
family's defaults on odd shapes, every dtype, NT and TT, verified against float64 on fresh random inputs; W at an
unaligned base address (the scalar fallback) and split-K launched twice with alpha/beta."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.kernels import gemm_skinny_nt as nt
from autotune.measure.bench import TimingPlan
from autotune.measure.evaluate import Candidate, Settings, Status, evaluate, load_kernel, prepare
from autotune.measure.verify import tolerance_for

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
GEMM = FAMILIES["gemm"]
QUICK = TimingPlan(warmup=1, min_repeats=2, max_repeats=3, target_ms=1.0, probe=2)
DTYPES = ("float16", "bfloat16", "float32")
# M in 1..64 and beyond one row group, N and K odd, prime or one past a step, the judged sizes among them
SHAPES = [(1, 1, 1), (1, 4096, 4096), (3, 37, 1001), (16, 257, 4095), (64, 4099, 520), (65, 33, 14336), (7, 14336, 96)]


@pytest.fixture(scope="module")
def settings():
    from autotune.core.device import current_gpu

    gpu = current_gpu()
    return Settings(arch=gpu.arch, tolerance=1e-5, max_shared_bytes=gpu.max_shared_per_block, timing=QUICK,
                    allow_spills=True)  # fmt: skip


def _space_sample(count: int, seed: int, mma: bool) -> list[dict]:
    """``count`` skinny_nt configurations of configs/gemm_decode_nt.yaml's space (which also holds wgmma_decode's)
    that the module accepts, with MMA or not, drawn at random."""
    from autotune.tune.spec import load_spec

    spec = load_spec(ROOT / "configs" / "gemm_decode_nt.yaml")
    configs = [c.as_dict() for c in spec.space.enumerate()]
    configs = [{k: v for k, v in p.items() if k != "TEMPLATE"} for p in configs if p.get("TEMPLATE") == "skinny_nt"]
    return random.Random(seed).sample([p for p in configs if nt.check(p) is None and p["MMA"] == mma], count)


def _wrong_on(settings, dtype, layout, params, shapes):
    """Every shape where the configuration does not verify on fresh random inputs, as text."""
    s = replace(settings, tolerance=tolerance_for(dtype))
    failures = []
    for shape in shapes:
        problem = GEMM.problem(list(shape), dtype, layout)
        if GEMM.check_problem("skinny_nt", params, problem) is not None:
            continue  # e.g. fp32 registers; the module says why, and the search never builds it
        r = evaluate(Candidate("gemm", "skinny_nt", problem, Config.of(params)), s)
        if r.status is not Status.COMPLETE or r.error is None or r.error >= s.tolerance:
            failures.append(f"{shape} {r.kernel_name}: {r.status} {r.reason} error={r.error}")
    return failures


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index", range(6))
def test_random_configurations_verify_on_odd_shapes(settings, dtype, index):
    mma = dtype != "float32" and index % 2 == 1  # half of the 16-bit draws run on the tensor cores
    params = _space_sample(18, seed=11, mma=mma)[index + 6 * DTYPES.index(dtype)]
    failures = _wrong_on(settings, dtype, "NT", params, SHAPES)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", nt.LAYOUTS)
def test_the_family_defaults_verify(settings, dtype, layout):
    failures = []
    for m in (1, 4, 16, 64):
        template, params = GEMM.default_config(dtype, layout, M=m)
        assert template == "skinny_nt"
        failures += _wrong_on(settings, dtype, layout, params, [(m, 4097, 4093), (m, 14336, 4096), (m, 3, 5)])
    assert not failures, "\n".join(failures)


SPLIT = dict(VEC=8, R=2, WARPS_N=2, WARPS_K=2, U=2, MT=4, SPLIT_K=5, MINB=2, MMA=False, PREFETCH=False)
SPLIT_MMA = dict(VEC=8, R=16, WARPS_N=2, WARPS_K=2, U=2, MT=16, SPLIT_K=5, MINB=2, MMA=True, PREFETCH=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("params", [SPLIT, SPLIT_MMA], ids=["fma", "mma"])
def test_unaligned_weights_and_split_k_relaunch_with_alpha_beta(settings, dtype, offset, params):
    """W a view starting `offset` elements into its buffer (not 16-byte aligned: scalar loads), the same compiled
    kernel and scratch launched twice; both results right and the tile counters back at zero."""
    import cupy as cp

    from autotune.kernels.gemm import bf16_bits, decode

    problem = GEMM.problem([9, 1003, 2048], dtype, "NT")
    if params["MMA"] and dtype == "float32":
        assert GEMM.check_problem("skinny_nt", params, problem) is not None
        return  # refused before compiling (tensor cores take 16-bit inputs)
    c = prepare(Candidate("gemm", "skinny_nt", problem, Config.of(params)), settings)
    assert c.status is None, c.reason
    launch = GEMM.launch("skinny_nt", params, problem)
    fn = load_kernel(c.compiled, launch.shared_bytes)
    a, w = GEMM.make_inputs(problem, seed=3)
    buf = cp.empty(w.size + 8, dtype=w.dtype)
    w_view = buf[offset : offset + w.size].reshape(w.shape)
    w_view[...] = w
    assert (w_view.data.ptr % 16 == 0) == (offset == 0)
    scratch = GEMM.new_scratch("skinny_nt", params, problem)
    c32 = cp.random.default_rng(6).standard_normal((problem.M, problem.N), dtype=cp.float32)
    c0 = bf16_bits(c32) if dtype == "bfloat16" else c32.astype(problem.storage)
    alpha, beta = 0.75, -1.5
    ref = alpha * GEMM.reference(problem, (a, w)) + beta * decode(c0, dtype).astype(cp.float64)
    for _ in range(2):
        out = c0.copy()
        fn(launch.grid, launch.block, GEMM.kernel_args(problem, (a, w_view), out, alpha, beta, scratch),
           shared_mem=launch.shared_bytes)  # fmt: skip
        cp.cuda.Device().synchronize()
        got = decode(out, dtype).astype(cp.float64)
        error = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
        assert error < tolerance_for(dtype), error
    assert int(scratch[1].max()) == 0, "split-K tile counters must be reset for the next launch"
