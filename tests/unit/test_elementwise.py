"""The drop-in's elementwise kernels (autotune.kernels.elementwise): NVRTC compiles of every form, launch grids,
and when a call may read its operands in 16-byte packs. No torch and no GPU needed."""

from __future__ import annotations

import random

import pytest


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_elementwise_kernels_compile_without_spills(dtype):
    from autotune.build.compiler import compile_source
    from autotune.build.templates import render_file
    from autotune.kernels import elementwise as ew

    for kernel in ew.KERNELS:
        if dtype not in kernel.dtypes:
            with pytest.raises(ValueError, match=f"not {dtype}"):
                kernel.context(dtype)
            continue
        forms = (False, True) if kernel is ew.SILU_MUL else (False,)
        for vector in forms:
            source = render_file(kernel.template, kernel.context(dtype, vector))
            r = compile_source(source, kernel.kernel_name, "sm_90")
            assert r.ok, r.error
            assert r.spills == 0 and r.registers <= 64
            assert (f"{ew.vec(dtype)} a step" in source) == vector
    most = 132 * ew.WAVES
    assert ew.vec("float16") == ew.vec("bfloat16") == 8 and ew.vec("float32") == 4
    assert ew.grid(1, 1, 132) == (1, 1, 1) and ew.grid(1, 10**9, 132) == (most, 1, 1)
    assert ew.grid(10**9, 49, 132) == (1, most, 1) and ew.grid(2048, 14336, 132) == (56, most // 56, 1)


@pytest.mark.parametrize("seed", range(20))
def test_packs_need_whole_packs_in_columns_strides_and_addresses(seed):
    from autotune.kernels import elementwise as ew

    rng = random.Random(seed)
    dtype = rng.choice(["float32", "float16", "bfloat16"])
    v, size = ew.vec(dtype), ew.SIZES[dtype]
    cols = rng.randrange(1, 4) * v
    strides = (cols, cols * rng.randrange(1, 4))
    addresses = tuple(rng.randrange(1, 1000) * 256 for _ in range(3))
    assert ew.packs(dtype, cols, strides, addresses)
    odd = rng.randrange(1, v) if v > 1 else 0
    assert not ew.packs(dtype, cols + odd, strides, addresses)  # columns not whole packs
    assert not ew.packs(dtype, cols, (cols, strides[1] + odd), addresses)  # a row stride not whole packs
    assert not ew.packs(dtype, cols, strides, (addresses[0], addresses[1] + size, addresses[2]))  # misaligned


def test_a_launch_grid_and_its_packed_scalars_are_made_once_per_sizes(monkeypatch):
    np = pytest.importorskip("numpy")
    from autotune.kernels import elementwise as ew
    from autotune.serve import elementwise as se
    from autotune.serve import launcher

    monkeypatch.setattr(se, "_launches", {})
    made = []

    def scalars():
        made.append(1)
        return np.int64(4), np.int32(1000)

    grid1, packed1 = se._sized(("silu_mul", 4, 1000), 4, 1000, 132, scalars)
    grid2, packed2 = se._sized(("silu_mul", 4, 1000), 4, 1000, 132, scalars)
    assert made == [1] and grid1 == grid2 == ew.grid(4, 1000, 132) and packed1 is packed2
    se._sized(("silu_mul", 5, 1000), 5, 1000, 132, scalars)
    assert made == [1, 1]  # other sizes: made again
    if launcher._cupy_args():  # this CuPy has argument classes: nothing is converted again per launch
        assert all(type(v) is launcher._VALUE for v in packed1)
        assert type(launcher.pointer(4096)) is launcher._PTR
    monkeypatch.setattr(se, "_MOST_LAUNCHES", 2)
    se._sized(("silu_mul", 6, 1000), 6, 1000, 132, scalars)
    assert len(se._launches) == 1  # full: cleared, then this one kept
