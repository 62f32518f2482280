"""Property test of the lookup: every valid problem of every family, dtype and layout gets something to serve,
without a GPU. Random problems (fixed seeds, many draws) lean on the edges real models hit: 1x1 filters,
padding 0, stride > 1, M, N or K = 1, huge K, tiny and huge images."""

from __future__ import annotations

import math
import random
import warnings
from pathlib import Path

import pytest

from autotune.build.templates import render, template_hash
from autotune.core.errors import AutotuneError
from autotune.kernels import FAMILIES
from autotune.kernels.conv import ITEMSIZE as CONV_DTYPES
from autotune.kernels.conv import LAYOUTS as CONV_LAYOUTS
from autotune.kernels.gemm import ITEMSIZE as GEMM_DTYPES
from autotune.kernels.gemm import LAYOUTS as GEMM_LAYOUTS
from autotune.measure.vendor import vendor_for
from autotune.results.store import merge
from autotune.serve import dispatch, runtime
from tests.sweep import full_only

H200 = "nvidia-h200-sm90"
DRAWS = 250


def size(rng: random.Random, high: int) -> int:
    return rng.choice([1, 1, 2, 3, 7, 8, 16, 17, 64, 127, 256, 1000, 4096, rng.randint(1, high)])


def gemm_problem(rng: random.Random):
    k = rng.choice([size(rng, 70000), 500_000, 2**20, 11008])
    shape = [size(rng, 70000), size(rng, 70000), k]
    return "gemm", FAMILIES["gemm"].problem(shape, rng.choice(list(GEMM_DTYPES)), rng.choice(GEMM_LAYOUTS))


def conv_problem(rng: random.Random):
    r = rng.choice([1, 1, 3, 3, 5, 7])
    s = rng.choice([r, r, 1, 3])
    stride, pad = rng.choice([1, 1, 2, 2, 4]), rng.choice([0, 0, 1, r // 2, 3])
    h = max(r, rng.choice([1, 2, 7, 14, 28, 56, 112, 224, 1024, 4096]))
    w = max(s, rng.choice([1, 7, 14, 56, 224, 4096]))
    shape = dict(N=rng.choice([1, 2, 8, 32, 256]), C=rng.choice([1, 3, 4, 64, 256, 2048]), H=h, W=w,
                 K=rng.choice([1, 8, 64, 1000, 2048]), R=r, S=s, stride=stride, pad=pad)  # fmt: skip
    return "conv2d", FAMILIES["conv2d"].problem(shape, rng.choice(list(CONV_DTYPES)), rng.choice(CONV_LAYOUTS))


def entry(kernel, template, params, label, dtype, layout, **extra):
    """A test-data entry (not a measurement) of a real template, with the hashes the lookup checks."""
    p = FAMILIES[kernel].problem(label, dtype, layout)
    source = render(kernel, template, params, p).source_hash
    e = {"template": template, "params": params, "verified": True, "median_ms": 1.0,
         "template_hash": template_hash(kernel, template), "source_hash": source}  # fmt: skip
    return {**e, **extra}


@pytest.fixture(scope="module")
def tmp_tuned(tmp_path_factory) -> Path:
    """Entries beside the committed ones: padding 0, 1x1 filters, stride 2, M = 1, and entries without vendor
    times or slower than their vendor."""
    d = tmp_path_factory.mktemp("tuned")
    conv = FAMILIES["conv2d"]
    for label, layout in (("n1c64h56w56k256r1s1u1p0", "NCHW"), ("n8c128h28w28k128r3s3u2p1", "NHWC"),
                          ("n1c3h224w224k64r7s7u2p3", "NCHW")):  # fmt: skip
        for dtype in ("float32", "float16"):
            t, params = conv.default_config(dtype, layout)
            e = entry("conv2d", t, params, label, dtype, layout, vendor_median_ms=0.5)
            merge(d / H200 / "conv2d.json", {}, f"{dtype}/{layout}/{label}", e)
    gemm = FAMILIES["gemm"]
    for dtype in GEMM_DTYPES:
        for layout in GEMM_LAYOUTS:
            try:
                t, params = gemm.default_config(dtype, layout)
            except ValueError:
                continue
            for label in ("1x4096x4096", "4096x1x11008", "512x16x500000"):
                e = entry("gemm", t, params, label, dtype, layout, vendor_median_ms=2.0)
                merge(d / H200 / "gemm.json", {}, f"{dtype}/{layout}/{label}", e)
    return d


def servable(kernel: str, problem, tuned: Path) -> dispatch.Decision:
    """The CPU part of serving a problem: the lookup chain, then the dispatch with the online choice off."""
    try:
        lookup = runtime.choose(kernel, problem, H200, "sm_90", tuned, problem.layout)
    except AutotuneError as exc:  # only when no template of ours computes it: the vendor must serve
        assert "computes layout" in str(exc) or "no " in str(exc), exc
        lookup = None
    vendor, missing = vendor_for(kernel, problem.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no vendor here" warnings: what is served is checked below
        decision = dispatch.decide(lookup, vendor=vendor, vendor_missing=missing, online=False, capturing=False,
                                   cached=None, measure=lambda: pytest.fail("nothing is measured offline"))  # fmt: skip
    return decision


# Seed 1 in the CPU tier (250 draws a tuned dir); AUTOTUNE_FULL_SWEEP=1 draws seeds 2 and 3 too (tests/sweep.py).
@pytest.mark.parametrize("seed", [1, *full_only([2, 3])])
@pytest.mark.parametrize("where", ["committed", "tmp"])
def test_every_valid_problem_gets_a_kernel_that_fits_or_the_vendor(seed, where, tmp_tuned):
    tuned = runtime.default_tuned_dir() if where == "committed" else tmp_tuned
    rng = random.Random(seed)
    steps: set[str] = set()
    for _ in range(DRAWS):
        kernel, problem = (gemm_problem if rng.random() < 0.5 else conv_problem)(rng)
        d = servable(kernel, problem, tuned)
        steps.add(d.step)
        if d.vendor:
            assert vendor_for(kernel, problem.dtype)[0] is not None, (kernel, problem)
        else:
            assert FAMILIES[kernel].check_problem(d.template, d.params, problem) is None, (kernel, problem, d)
        for c in runtime.ranked_choices(kernel, problem, H200, "sm_90", tuned, problem.layout):
            assert FAMILIES[kernel].check_problem(c.template, c.params, problem) is None, (kernel, problem, c)
    assert "vendor" in steps  # the online choice is off: untuned problems go to the vendor


def test_padding_zero_and_one_by_one_filters_find_the_nearest_entry(tmp_tuned):
    """The ResNet-50 layers that raised 'math domain error' (padding 0 made _distance take log(0))."""
    conv = FAMILIES["conv2d"]
    for label in ("n1c256h56w56k64r1s1u1p0", "n32c1024h14w14k2048r1s1u2p0", "n1c64h56w56k64r3s3u1p1"):
        p = conv.problem(label, "float32", "NCHW")
        for tuned in (runtime.default_tuned_dir(), tmp_tuned):
            c = runtime.choose("conv2d", p, H200, "sm_90", tuned, "NCHW")
            assert conv.check_problem(c.template, c.params, p) is None
    near = runtime.choose("conv2d", conv.problem("n2c64h56w56k256r1s1u1p0", "float32"), H200, "sm_90", tmp_tuned)
    assert near.step == "nearest" and near.source.endswith("n1c64h56w56k256r1s1u1p0")


def test_distance_is_finite_and_zero_only_for_equal_sizes():
    rng = random.Random(7)
    for _ in range(2000):
        a = tuple(rng.choice([0, 1, 2, 3, 7, 2**20, 2**31 - 1]) for _ in range(9))
        b = tuple(rng.choice([0, 1, 2, 3, 7, 2**20, 2**31 - 1]) for _ in range(9))
        d = runtime._distance(a, b)
        assert math.isfinite(d) and d >= 0 and d == pytest.approx(runtime._distance(b, a)) and (d == 0) == (a == b)
