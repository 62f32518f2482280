"""benchmarks/power_ceiling.py: its tensor-core ceiling kernel compiles for sm_90a without spills in both dtypes and
issues the wgmma the GEMM issues, its FLOP count follows the launch, and the ratio to cuBLAS pairs rounds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune.build.compiler import compile_source

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import power_ceiling  # noqa: E402


@pytest.mark.parametrize(("dtype", "mma"), [("float16", "f16.f16"), ("bfloat16", "bf16.bf16")])
def test_the_ceiling_kernel_compiles_for_sm90a_without_spills(dtype, mma):
    source = power_ceiling.ceiling_source(dtype)
    assert f"wgmma.mma_async.sync.aligned.m64n256k16.f32.{mma}" in source
    r = compile_source(source, "mma_ceiling", "sm_90")
    assert r.ok, r.error
    assert r.spill_stores == 0 and r.spill_loads == 0


def test_ceiling_flops_count_every_wgmma_of_the_launch():
    one = 2 * 64 * 256 * 16  # one m64n256k16
    assert power_ceiling.ceiling_flops(132, 1) == one * power_ceiling.KSTEPS * power_ceiling.WARPGROUPS * 132
    assert power_ceiling.ceiling_flops(132, 124) == 124 * power_ceiling.ceiling_flops(132, 1)


def test_x_vendor_is_the_median_of_each_rounds_ratio():
    rows = [{"round": r, "side": s, "ms": ms} for r, pairs in enumerate([(2.0, 2.2), (2.0, 1.9), (1.0, 1.05)])
            for s, ms in zip(("ours", "cuBLAS"), pairs, strict=True)]  # fmt: skip
    rows.append({"round": 0, "side": "ceiling", "ms": 1.0})
    assert power_ceiling.x_vendor(rows) == pytest.approx(1.05)
    assert power_ceiling.x_vendor([{"round": 0, "side": "ours", "ms": 1.0}]) is None


def test_without_a_gpu_it_says_so_in_one_sentence(monkeypatch, capsys):
    import types

    from autotune.core.errors import NoGPUError

    def no_gpu():
        raise NoGPUError("no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES)")

    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml"))
    monkeypatch.setattr(power_ceiling, "current_gpu", no_gpu)
    monkeypatch.setattr(sys, "argv", ["power_ceiling.py", "--quick"])
    assert power_ceiling.main() == 2
    err = capsys.readouterr().err
    assert err.strip() == "power_ceiling: no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES)"
