"""B's tensor map for skinny_wgmma without a GPU: when a map is made, when zeros stand in for it, and the errors."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from autotune import tensormap
from autotune.kernels import gemm_skinny_wgmma as wg
from autotune.kernels.gemm import GEMM

P = dict(WG=2, MB=64, KC=32, STAGES=5, ROUND=256, SPLIT_K=4, CLUSTER=False, MINB=1, TMA=True)


def operand(ptr):
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr))


def test_a_map_is_made_only_where_the_kernel_reads_it(monkeypatch):
    calls = []

    def fake(ptr, width, height, row_bytes, box, swizzle=tensormap.SWIZZLE_128B):
        calls.append((ptr, width, height, row_bytes, box, swizzle))
        return np.full(1, b"\x01" * 128, dtype=np.dtype((np.void, 128)))

    monkeypatch.setattr(tensormap, "tiled_2d_f32", fake)
    m = wg.BMap(P, GEMM.problem([64, 4096, 1000], "float32", "NN"))
    got = m.bind(operand(0x10000))
    assert got.shape == (1,) and got.dtype.itemsize == 128 and bytes(got[0]) == b"\x01" * 128
    assert calls == [(0x10000, 4096, 1000, 4096 * 4, (32, 32), tensormap.SWIZZLE_128B)]
    assert m.bind(operand(0x10000)) is got and len(calls) == 1  # kept per address
    # B not 16-byte aligned, or N % 4 != 0: the kernel copies B 4 bytes at a time and never reads the map
    assert bytes(m.bind(operand(0x10004))[0]) == bytes(128) and len(calls) == 1
    odd = wg.BMap(P, GEMM.problem([64, 4097, 1000], "float32", "NN"))
    assert bytes(odd.bind(operand(0x10000))[0]) == bytes(128) and len(calls) == 1


def test_kernel_args_bind_the_map_to_this_launchs_b(monkeypatch):
    def fake(ptr, *args, **kwargs):  # a map that names its address
        return np.full(1, ptr.to_bytes(8, "little") * 16, "V128")

    monkeypatch.setattr(tensormap, "tiled_2d_f32", fake)
    problem = GEMM.problem([64, 4096, 4096], "float32", "NN")
    scratch = ("partial", "counters", wg.BMap(P, problem))
    for ptr in (0x20000, 0x30000):
        args = GEMM.kernel_args(problem, ("a", operand(ptr)), "c", 1.0, 0.0, scratch)
        assert len(args) == 11 and args[8:10] == ("partial", "counters")
        assert bytes(args[10][0])[:8] == ptr.to_bytes(8, "little")


def test_errors_name_what_is_wrong(monkeypatch):
    with pytest.raises(tensormap.TensorMapError, match="16-byte aligned"):
        tensormap.tiled_2d_f32(0x10004, 64, 64, 256, (32, 32))

    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    tensormap._encode.cache_clear()
    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    try:
        with pytest.raises(tensormap.TensorMapError, match="CUDA driver"):
            tensormap.tiled_2d_f32(0x10000, 64, 64, 256, (32, 32))
    finally:
        tensormap._encode.cache_clear()


def test_a_refused_map_says_which(monkeypatch):
    tensormap._encode.cache_clear()
    monkeypatch.setattr(tensormap, "_encode", lambda: lambda *args: 1)  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(tensormap.TensorMapError, match=r"64 x 96 float32 map with 32 x 16 boxes \(CUresult 1\)"):
        tensormap.tiled_2d_f32(0x10000, 96, 64, 384, (32, 16))
