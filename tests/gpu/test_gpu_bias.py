"""GPU tier for the bias epilogue (``serve.bias_epilogue``): the variant of each template that has one is built
from a served configuration and verified on its first use, then computes ``alpha A W^T + bias + beta C`` on fresh
random inputs of odd shapes (split-K, a cluster, TMA stores or none); a Linear with a bias served by our kernels is
one launch with the bias in the epilogue, eager and inside a captured CUDA graph, and matches torch."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from autotune.kernels import FAMILIES
from autotune.measure.verify import tolerance_for
from tests.gpu.test_gpu_torch import torch as torch  # the module's fixture: a CUDA torch, a fresh cache

pytestmark = pytest.mark.gpu
GEMM = FAMILIES["gemm"]

CASES = [
    ("wgmma_decode", dict(BW=64, MB=8, CONSUMERS=1, STAGES=8, SPLIT_K=1), "float16", (1, 4104, 512)),
    ("wgmma_decode", dict(BW=64, MB=16, CONSUMERS=1, STAGES=8, SPLIT_K=4), "bfloat16", (13, 1000, 4096)),
    ("wgmma_decode", dict(BW=128, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, CLUSTER=True), "float16", (50, 4104, 4088)),
    ("wgmma_decode", dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, SHARE_X=2), "bfloat16",
     (64, 4104, 4096)),
    ("wgmma_decode", dict(BW=64, MB=32, CONSUMERS=1, STAGES=8, SPLIT_K=1, SHARE_W=2), "float16", (50, 4104, 4096)),
    ("wgmma_decode", dict(BW=64, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, CLUSTER=True, SPLIT_X=True), "bfloat16",
     (50, 4104, 4088)),
    ("wgmma_decode", dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, SPLIT_X=True), "float16", (64, 1000, 4096)),
    ("wgmma_decode", dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, STAGE_C=True), "bfloat16", (50, 4104, 4096)),
    ("wgmma_decode", dict(BW=64, MB=32, CONSUMERS=1, STAGES=6, SPLIT_K=2, STAGE_C=True), "float16", (33, 1000, 4096)),
    ("wgmma_decode", dict(BW=32, MB=64, CONSUMERS=1, STAGES=16, SPLIT_K=1, X_AS_M=True), "float16", (37, 1001, 4096)),
    ("wgmma_decode", dict(BW=16, MB=64, CONSUMERS=2, STAGES=12, SPLIT_K=2, X_AS_M=True), "bfloat16", (64, 4104, 4096)),
    ("wgmma", dict(BM=128, BN=256, CONSUMERS=2, STAGES=3, RASTER=8, TMA_STORE=True, CLUSTER_M=1), "bfloat16",
     (300, 1000, 1024)),
    ("wgmma", dict(BM=128, BN=128, CONSUMERS=2, STAGES=4, RASTER=8, TMA_STORE=False, CLUSTER_M=2), "float16",
     (257, 1001, 1000)),
    ("wgmma", dict(BM=128, BN=256, CONSUMERS=2, STAGES=3, RASTER=8, TMA_STORE=True, CLUSTER_M=1, SPLIT=4), "float16",
     (300, 1000, 4096)),  # a split tail: the bias added once, by the run that sums the tile
    ("wgmma", dict(BM=192, BN=176, CONSUMERS=3, STAGES=3, RASTER=8, TMA_STORE=True, CLUSTER_M=1, SWAP_AB=True),
     "float16", (300, 1000, 1024)),  # SWAP_AB: the bias runs along the kernel's rows (C's columns)
    ("wgmma", dict(BM=128, BN=128, CONSUMERS=2, STAGES=4, RASTER=8, TMA_STORE=False, CLUSTER_M=2, SWAP_AB=True),
     "bfloat16", (257, 1001, 1000)),
    ("skinny_nt", dict(VEC=4, R=2, WARPS_N=2, WARPS_K=4, U=2, MT=4, SPLIT_K=2, MINB=2, MMA=False, PREFETCH=True),
     "float32", (5, 1001, 999)),
    ("skinny_nt", dict(VEC=8, R=8, WARPS_N=2, WARPS_K=2, U=2, MT=32, SPLIT_K=3, MINB=1, MMA=True, PREFETCH=True),
     "float16", (35, 4096, 4096)),
]  # fmt: skip


@pytest.fixture
def cupy():
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("no CUDA device")
    if cp.cuda.Device().compute_capability != "90":
        pytest.skip("these configurations include sm_90a templates")
    return cp


@pytest.mark.parametrize(("template", "params", "dtype", "shape"), CASES, ids=lambda v: str(v)[:24])
def test_the_bias_variant_is_verified_and_adds_the_bias_per_column(cupy, template, params, dtype, shape):
    from autotune.serve import bias_epilogue, runtime

    problem = GEMM.problem(list(shape), dtype, "NT")
    choice = runtime.Choice(template, params, "exact", "test")
    ours = runtime.build_launcher("gemm", problem, choice, "sm_90")
    biased = bias_epilogue.with_bias(ours)
    assert biased is not None and biased.takes_bias
    assert biased.serving["bias"].startswith("epilogue verified on its first use")
    assert bias_epilogue.with_bias(ours) is biased  # decided once

    a, b = GEMM.make_inputs(problem, seed=11)
    bias = GEMM.make_bias(problem, seed=12)
    c0 = GEMM.make_inputs(dataclasses.replace(problem, K=problem.N), seed=13)[0]  # M x N values for beta
    for alpha, beta in ((1.0, 0.0), (0.5, 1.0)):
        out = c0.copy()
        biased(a, b, out, alpha, beta, bias)
        want = alpha * GEMM.reference(problem, (a, b)) + GEMM.decode(problem, bias).astype(cupy.float64)[None, :]
        want = want + beta * GEMM.decode(problem, c0).astype(cupy.float64)
        got = GEMM.decode(problem, out).astype(cupy.float64)
        err = float(cupy.linalg.norm(got - want) / cupy.linalg.norm(want))
        assert err < tolerance_for(dtype), f"alpha {alpha} beta {beta}: relative error {err:.2e}"


@pytest.fixture
def ours(torch, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_VENDOR", "0")  # our kernels serve every problem they compute


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("rows", [1, 16, 64])
def test_a_linear_with_a_bias_is_one_launch_eager_and_in_a_cuda_graph(torch, ours, monkeypatch, dtype, rows):
    import autotune.torch as at
    from autotune.serve.torch_backend import AutotuneBackend

    dt = getattr(torch, dtype)
    layer = torch.nn.Linear(1024, 1000).to("cuda", dt).eval()
    with torch.no_grad():
        layer.bias.mul_(30.0)  # as large as the products' sums: a bias lost would show
    opt = at.optimize(copy.deepcopy(layer))
    monkeypatch.setattr(AutotuneBackend, "bias_rows", staticmethod(lambda *a: pytest.fail("rows copied")))
    x = torch.randn(rows, 1024, device="cuda", dtype=dt)
    static = torch.zeros_like(x)
    with torch.inference_mode():
        want = torch.nn.functional.linear(x.double(), layer.weight.double(), layer.bias.double())
        eager = [opt(x) for _ in range(3)]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = opt(static)
        static.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
    tol = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5}[dtype]
    for got in (*eager, captured):
        err = float((got.double() - want).norm() / want.norm())
        assert err < tol, f"relative error {err:.2e}"
    assert at.report(opt).count("autotune") >= 3
