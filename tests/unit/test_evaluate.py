"""Static pruning after compiling: spills, register limits and the occupancy estimate (no GPU)."""

from __future__ import annotations

import pytest

from autotune.build.compiler import CompileResult
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.measure.evaluate import Candidate, Settings, Status, blocks_per_sm, finish, render_candidate

SETTINGS = Settings(arch="sm_90", tolerance=1e-5, max_shared_bytes=227 * 1024)
SIMT = dict(BM=128, BN=128, BK=8, WM=64, WN=32, WNITER=2, TM=8, TN=4, VEC=4, PAD=4, DBUF=True)  # 256 threads


def compiled(registers: int, spills: int = 0):
    problem = FAMILIES["gemm"].problem([256, 256, 256], "float32")
    c = render_candidate(Candidate("gemm", "simt", problem, Config.of(SIMT)), SETTINGS)
    r = CompileResult(c.kernel_name, b"x", "", 0.1, registers=registers, static_smem=0, stack_bytes=0,
                      spill_stores=spills, spill_loads=0)  # fmt: skip
    return finish(c, r, SETTINGS)


def test_spilling_kernels_are_invalid_before_any_launch():
    c = compiled(128, spills=64)
    assert c.status is Status.INVALID and "spills 64 bytes" in c.reason


def test_more_registers_than_a_block_may_hold_is_invalid():
    c = compiled(300)  # 300 x 256 threads > 65536 registers: such a block cannot launch
    assert c.status is Status.INVALID and "registers" in c.reason


def test_occupancy_estimate_follows_registers():
    low, high = compiled(64), compiled(200)
    assert low.status is None and high.status is None
    assert low.occupancy > high.occupancy > 0


@pytest.mark.parametrize(
    ("registers", "threads", "shared", "blocks"),
    [(32, 256, 0, 8), (128, 256, 16896, 2), (253, 256, 33792, 1), (64, 1024, 0, 1), (32, 128, 200 * 1024, 1)],
)
def test_blocks_per_sm(registers, threads, shared, blocks):
    assert blocks_per_sm(registers, threads, shared, SETTINGS) == blocks
