"""The bias epilogue (``GemmProblem.bias``) without a GPU: stored winners render byte for byte as before, the bias
variants of the templates that have it compile for sm_90a without spills, the others refuse it, the launcher
passes the bias last, and ``serve.bias_epilogue`` builds variants only of our own one-launch kernels."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render
from autotune.kernels import FAMILIES
from autotune.kernels.base import Launch
from autotune.serve import bias_epilogue, launcher
from autotune.serve.runtime import Choice

GEMM = FAMILIES["gemm"]
TUNED = Path(__file__).resolve().parents[2] / "tuned" / "nvidia-h200-sm90" / "gemm.json"
EPILOGUE = ("skinny_nt", "wgmma", "wgmma_decode")


def stored():
    return [(k, e) for k, e in json.loads(TUNED.read_text())["entries"].items() if e["template"] in EPILOGUE]


def test_stored_winners_render_their_verified_source_and_a_bias_variant_of_their_own():
    """With the bias off a stored winner's source is the one it was verified with (its stored hash); with it on,
    another source and another kernel name."""
    entries = stored()
    assert {e["template"] for _, e in entries} >= {"wgmma", "wgmma_decode"}
    for key, e in entries:
        dtype, layout, label = key.split("/")
        plain = GEMM.problem(label, dtype, layout)
        r = render("gemm", e["template"], e["params"], plain)
        assert r.source_hash == e["source_hash"], key
        biased = render("gemm", e["template"], e["params"], dataclasses.replace(plain, bias=True))
        assert biased.source_hash != r.source_hash and "_bias_" in biased.kernel_name, key
        assert "const T* __restrict__ bias" in biased.source and "bias" not in r.kernel_name


@pytest.mark.parametrize(
    ("template", "params", "dtype", "label"),
    [
        ("wgmma_decode", dict(BW=64, MB=8, CONSUMERS=1, STAGES=8, SPLIT_K=1), "float16", "1x4096x4096"),
        ("wgmma_decode", dict(BW=64, MB=16, CONSUMERS=1, STAGES=8, SPLIT_K=4), "bfloat16", "16x4096x4096"),
        (
            "wgmma_decode",
            dict(BW=128, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, CLUSTER=True),
            "float16",
            "64x4096x4096",
        ),
        (
            "wgmma",
            dict(BM=128, BN=256, CONSUMERS=2, STAGES=3, RASTER=8, TMA_STORE=True, CLUSTER_M=1),
            "bfloat16",
            "2048x4096x4096",
        ),
        (
            "wgmma",
            dict(BM=128, BN=128, CONSUMERS=2, STAGES=4, RASTER=8, TMA_STORE=False, CLUSTER_M=2),
            "float16",
            "1000x1000x1000",
        ),
        (
            "skinny_nt",
            dict(VEC=4, R=2, WARPS_N=2, WARPS_K=4, U=2, MT=4, SPLIT_K=2, MINB=2, MMA=False, PREFETCH=True),
            "float32",
            "3x1000x1000",
        ),
        (
            "skinny_nt",
            dict(VEC=8, R=8, WARPS_N=2, WARPS_K=2, U=2, MT=32, SPLIT_K=3, MINB=1, MMA=True, PREFETCH=True),
            "float16",
            "16x4096x4096",
        ),
    ],  # fmt: skip
)
def test_bias_variants_compile_for_sm90a_without_spills(template, params, dtype, label):
    problem = GEMM.problem(label, dtype, "NT")
    biased = dataclasses.replace(problem, bias=True)
    assert GEMM.check_problem(template, params, biased) is None
    r = render("gemm", template, params, biased)
    c = compile_source(r.source, r.kernel_name, "sm_90a")
    assert c.ok, c.error
    assert c.spills == 0


@pytest.mark.parametrize("template", ["mma", "simt", "wmma", "skinny", "skinny_wgmma", "wgmma_tf32x3"])
def test_templates_without_the_epilogue_refuse_the_bias_variant(template):
    dtype = GEMM.templates[template].dtypes[0]  # refused before the configuration is looked at
    problem = dataclasses.replace(GEMM.problem("64x64x64", dtype, "NT"), bias=True)
    assert GEMM.check_problem(template, {}, problem) == f"{template} has no bias epilogue"


class Fn:
    def __init__(self):
        self.launches = []

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        self.launches.append(args)


def skinny_nt_launcher(bias: bool):
    params = dict(VEC=4, R=2, WARPS_N=2, WARPS_K=4, U=2, MT=4, SPLIT_K=1, MINB=2, MMA=False, PREFETCH=True)
    problem = dataclasses.replace(GEMM.problem("4x64x64", "float32", "NT"), bias=bias)
    fn = Fn()
    made = launcher.Launcher("gemm", problem, Choice("skinny_nt", params, "exact", "test"), fn,
                             Launch((1, 1, 1), (256, 1, 1), 0), "k", lambda: (np.zeros(1), np.zeros(1)))  # fmt: skip
    return made, fn


@pytest.mark.parametrize("packed", [True, False])
def test_the_launcher_passes_the_bias_last_where_its_kernel_takes_one(monkeypatch, packed):
    monkeypatch.setattr(launcher, "PACKED", packed)
    monkeypatch.setattr(launcher, "stream_key", lambda ptr: ptr)
    monkeypatch.setattr(launcher, "_stream_key", lambda: 0)
    stream = type("Stream", (), {"ptr": 0, "__enter__": lambda s: s, "__exit__": lambda s, *e: False})()
    plain, fn_plain = skinny_nt_launcher(bias=False)
    biased, fn_biased = skinny_nt_launcher(bias=True)
    plain.launch_ptrs(1024, 2048, 4096, 1.0, 0.0, stream)
    biased.launch_ptrs(1024, 2048, 4096, 1.0, 0.0, stream, 8192)
    (p_args,), (b_args,) = fn_plain.launches, fn_biased.launches
    assert len(b_args) == len(p_args) + 1
    want = launcher.pointer(8192)  # CuPy's argument object for an address where this CuPy has one, else the int
    assert type(b_args[-1]) is type(want) and (b_args[-1] == 8192 if type(want) is int else True)
    biased(np.zeros(1), np.zeros(1), np.zeros(1), 1.0, 0.0, "the bias array")  # the array path: the bias last too
    assert fn_biased.launches[-1][-1] == "the bias array" and len(fn_biased.launches[-1]) == len(b_args)


def test_with_bias_builds_nothing_for_launchers_that_are_not_ours_or_already_biased(monkeypatch):
    monkeypatch.setattr(bias_epilogue, "_build", lambda launcher: pytest.fail("nothing to build"))
    monkeypatch.setattr("autotune.measure.streams.capturing", lambda: False)
    vendor = type("VendorLauncher", (), {"vendor": True})()
    assert bias_epilogue.with_bias(vendor) is None
    biased, _ = skinny_nt_launcher(bias=True)
    assert bias_epilogue.with_bias(biased) is None


def test_with_bias_is_decided_once_per_launcher_and_never_during_a_capture(monkeypatch):
    ours, _ = skinny_nt_launcher(bias=False)
    built, capturing = [], [True]
    monkeypatch.setattr(bias_epilogue, "_build", lambda launcher: built.append(launcher) or "the variant")
    monkeypatch.setattr("autotune.measure.streams.capturing", lambda: capturing[0])
    bias_epilogue.forget()
    assert bias_epilogue.with_bias(ours) is None and built == []  # nothing may be synchronized in a capture
    capturing[0] = False
    assert bias_epilogue.with_bias(ours) == "the variant" == bias_epilogue.with_bias(ours)
    assert built == [ours]
    bias_epilogue.forget()
    assert bias_epilogue.with_bias(ours) == "the variant" and built == [ours, ours]
    bias_epilogue.forget()


def test_a_variant_that_fails_verification_is_not_served(monkeypatch):
    ours, _ = skinny_nt_launcher(bias=False)
    cupy = pytest.importorskip("cupy")
    made = []
    monkeypatch.setattr("autotune.core.device.current_gpu", lambda device: SimpleNamespace(arch="sm_90"))
    monkeypatch.setattr(cupy.cuda, "Device", lambda *a: SimpleNamespace(id=0))

    def build(kernel, problem, choice, arch):
        made.append(problem)
        return SimpleNamespace(serving={})

    monkeypatch.setattr(bias_epilogue.runtime, "build_launcher", build)
    for ok in (False, True):
        monkeypatch.setattr(bias_epilogue, "_verified", lambda biased, ok=ok: (ok, "relative error 0.7"))
        got = bias_epilogue._build(ours)
        assert got is None if not ok else got.serving["bias"].startswith("epilogue verified on its first use")
    assert [p.bias for p in made] == [True, True] and made[0].label == ours.problem.label
