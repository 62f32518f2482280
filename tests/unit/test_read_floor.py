"""benchmarks/read_floor.py, the plain streaming read that decode kernels are measured against: its kernels compile,
the bulk read's runs cover the array, and on the GPU every variant reads every byte."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from autotune.build.compiler import compile_source

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import read_floor  # noqa: E402


@pytest.mark.parametrize(("source", "kernel"), [(read_floor.SOURCE, "read_floor8"),
                                                (read_floor.BULK_SOURCE, "read_bulk16k")])  # fmt: skip
def test_the_read_kernels_compile_for_sm90_without_spills(source, kernel):
    r = compile_source(source, kernel, "sm_90")
    assert r.ok, r.error
    assert r.spill_stores == 0 and r.spill_loads == 0


@pytest.mark.parametrize("seed", range(3))
def test_the_bulk_runs_cover_the_array_with_the_fewest_aligned_bytes(seed):
    rng = random.Random(seed)
    for _ in range(300):
        nbytes, blocks = 16 * rng.randint(1, 1 << rng.randint(1, 24)), rng.choice([132, 264, 396, 7])
        per = read_floor.bulk_run_bytes(nbytes, blocks)
        align = read_floor.BULK_ALIGN if nbytes >= blocks * read_floor.BULK_ALIGN else 16
        assert per % align == 0 and per * blocks >= nbytes > (per - align) * blocks, (nbytes, blocks, per)


@pytest.mark.gpu
@pytest.mark.parametrize("words", [4, 1000, 33_333, 1 << 22])
def test_every_variant_reads_every_byte_on_the_gpu(words):
    import cupy as cp

    from autotune.measure.bench import L2Flusher, TimingPlan

    a = cp.random.default_rng(words).integers(0, 1 << 31, words, dtype=cp.int32)
    expected = read_floor.word_sum(a)
    launches = read_floor.flushed_launches(a)
    hopper = int(cp.cuda.Device().compute_capability) >= 90
    assert len(launches) == len(read_floor.VARIANTS) + hopper * len(read_floor.BULK_VARIANTS)
    for launch, sums in launches:
        launch()
        assert int(sums.get()[0]) == expected
    ms, verified = read_floor.flushed_ms(a, L2Flusher(), TimingPlan(warmup=1, min_repeats=3, max_repeats=5))
    assert verified and ms > 0
