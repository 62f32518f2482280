"""A's and B's tensor maps for skinny_wgmma without a GPU: when a map is made, when zeros stand in, the errors."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from autotune.core import tensormap
from autotune.kernels import gemm_skinny_wgmma as wg
from autotune.kernels.gemm import GEMM

P = dict(WG=2, MB=64, KC=32, STAGES=5, ROUND=256, SPLIT_K=4, CLUSTER=False, MINB=1, TMA=True)


def operand(ptr):
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr))


def test_maps_are_made_only_where_the_kernel_reads_them(monkeypatch):
    calls = []

    def fake(ptr, width, height, row_bytes, box, swizzle=tensormap.SWIZZLE_128B):
        calls.append((ptr, width, height, row_bytes, box, swizzle))
        return np.full(1, b"\x01" * 128, dtype=np.dtype((np.void, 128)))

    monkeypatch.setattr(tensormap, "tiled_2d_f32", fake)
    maps = wg.TensorMaps(P, GEMM.problem([64, 4096, 1000], "float32", "NN"))
    a, b = maps.bind(operand(0x20000), operand(0x10000))
    assert b.shape == (1,) and b.dtype.itemsize == 128 and bytes(b[0]) == b"\x01" * 128
    assert calls == [
        (0x20000, 1000, 64, 1000 * 4, (32, 64), tensormap.SWIZZLE_128B),  # A: K x M, boxes of KC x MB
        (0x10000, 4096, 1000, 4096 * 4, (32, 32), tensormap.SWIZZLE_128B),  # B: N x K, boxes of 32 x KC
    ]
    assert maps.bind(operand(0x20000), operand(0x10000))[1] is b and len(calls) == 2  # kept per address
    # an operand not 16-byte aligned: the kernel copies it by cp.async and never reads its map
    a, b = maps.bind(operand(0x20004), operand(0x10004))
    assert bytes(a[0]) == bytes(b[0]) == bytes(128) and len(calls) == 2
    # N % 4 != 0 (B), K % 4 != 0 (A), or layout TN (A): no map
    odd = wg.TensorMaps(P, GEMM.problem([64, 4097, 1001], "float32", "NN"))
    assert all(bytes(m[0]) == bytes(128) for m in odd.bind(operand(0x20000), operand(0x10000)))
    tn = wg.TensorMaps({**P, "KC": 16}, GEMM.problem([64, 4096, 1000], "float32", "TN"))
    a, b = tn.bind(operand(0x20000), operand(0x10000))
    assert bytes(a[0]) == bytes(128) and calls[-1] == (0x10000, 4096, 1000, 4096 * 4, (32, 16), 3)
    nn16 = wg.TensorMaps({**P, "KC": 16}, GEMM.problem([64, 4096, 1000], "float32", "NN"))
    nn16.bind(operand(0x20000), operand(0x10000))
    assert calls[-2] == (0x20000, 1000, 64, 4000, (16, 64), tensormap.SWIZZLE_64B)  # 64-byte rows of A


def test_kernel_args_bind_the_maps_to_this_launchs_operands(monkeypatch):
    def fake(ptr, *args, **kwargs):  # a map that names its address
        return np.full(1, ptr.to_bytes(8, "little") * 16, "V128")

    monkeypatch.setattr(tensormap, "tiled_2d_f32", fake)
    problem = GEMM.problem([64, 4096, 4096], "float32", "NN")
    scratch = ("partial", "counters", wg.TensorMaps(P, problem))
    for ptr in (0x20000, 0x30000):
        args = GEMM.kernel_args(problem, (operand(ptr + 0x100), operand(ptr)), "c", 1.0, 0.0, scratch)
        assert len(args) == 12 and args[8:10] == ("partial", "counters")
        assert bytes(args[10][0])[:8] == (ptr + 0x100).to_bytes(8, "little")
        assert bytes(args[11][0])[:8] == ptr.to_bytes(8, "little")


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
    with pytest.raises(
        tensormap.TensorMapError, match=r"64 x 96 map of 4-byte elements with 32 x 16 boxes \(CUresult 1\)"
    ):
        tensormap.tiled_2d_f32(0x10000, 96, 64, 384, (32, 16))
