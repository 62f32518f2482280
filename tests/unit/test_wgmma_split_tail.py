"""A split tail in the wgmma template (SPLIT > 1) without a GPU: its kernels compile for sm_90a without spills, broken
settings are refused by the check and the template alike, configurations stored before SPLIT render the same source,
and the cut the kernel walks (mirrored by ``gemm_wgmma.walk``) hands out every stage of every tile exactly once: the
whole tiles in turn, then the tail tiles' runs of K, neighbouring tiles' same runs side by side."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

import pytest

from autotune.build.templates import render
from autotune.kernels import gemm_wgmma as wg
from autotune.kernels.gemm import GEMM
from tests.sweep import full_only
from tests.template_checks import assert_compiles_for_sm90, assert_refused_twice

GOOD = dict(BM=128, BN=256, CONSUMERS=2, STAGES=3, RASTER=8, CLUSTER_M=1, TMA_STORE=True, SPLIT=2)
TUNED = Path(__file__).resolve().parents[2] / "tuned" / "nvidia-h200-sm90" / "gemm.json"


def rendered(p, layout="NN", dtype="float16", shape=(1000, 1000, 1000)):
    return render("gemm", "wgmma", p, GEMM.problem(list(shape), dtype, layout))


@pytest.mark.parametrize(
    ("params", "layout", "dtype", "registers"),
    [
        (GOOD, "NN", "float16", 168),  # two consumers: the 168 registers setmaxnreg's budget assumes, no spills
        *full_only([(dict(GOOD, BN=128, CONSUMERS=1, STAGES=4, TMA_STORE=False, SPLIT=8), "TT", "bfloat16", None)]),
    ],  # fmt: skip
)
def test_split_tail_configurations_compile_for_sm90a_without_spills(params, layout, dtype, registers):
    assert wg.check(params) is None
    c = assert_compiles_for_sm90(rendered(params, layout, dtype))
    if registers:
        assert c.registers == registers


@pytest.mark.parametrize(
    ("change", "words"),
    [(dict(SPLIT=0), ["SPLIT"]), (dict(SPLIT=33), ["SPLIT", "32"]), (dict(CLUSTER_M=2), ["CLUSTER_M = 1"])],
)
def test_a_broken_split_tail_setting_is_refused_by_the_check_and_the_template(change, words):
    assert_refused_twice(wg, rendered, {**GOOD, **change}, words)


def test_stored_configurations_render_as_before_split_existed():
    """Every stored entry renders its stored source under its name; one without a split tail renders the same with
    SPLIT absent or 1 (entries stored before SPLIT existed have none), and another with SPLIT 2."""
    entries = {k: e for k, e in json.loads(TUNED.read_text())["entries"].items() if e["template"] == "wgmma"}
    assert entries and any(wg.split(e["params"]) == 1 for e in entries.values())
    for key, e in entries.items():
        dtype, layout, shape = key.split("/")
        problem = GEMM.problem(shape, dtype, layout)
        stored = (e["source_hash"], e["kernel_name"])
        r = render("gemm", "wgmma", e["params"], problem)
        assert (r.source_hash, r.kernel_name) == stored, key
        if wg.split(e["params"]) > 1:
            continue
        plain = {k: v for k, v in e["params"].items() if k != "SPLIT"}
        for params in (plain, dict(plain, SPLIT=1)):
            r = render("gemm", "wgmma", params, problem)
            assert (r.source_hash, r.kernel_name) == stored, key
        assert "split" in render("gemm", "wgmma", dict(plain, SPLIT=2), problem).kernel_name


def _check_walk(params, problem, blocks):
    """Every (tile, stage) once; tiles before dp whole, in turn; each tail tile in min(SPLIT, kblocks) runs of
    nearly equal length (a slot each: tile x runs partials); the blocks' loads within one unit of each other."""
    tail = wg.Tail.of(params, problem, blocks)
    tiles = wg.groups(params, problem)
    seen, runs = defaultdict(int), defaultdict(list)
    work = wg.walk(params, problem, blocks)
    for b, items in enumerate(work):
        for t, k0, k1 in items:
            assert 0 <= k0 < k1 <= tail.kblocks and 0 <= t < tiles
            for k in range(k0, k1):
                seen[t, k] += 1
            if t < tail.dp:
                assert (k0, k1) == (0, tail.kblocks) and t % blocks == b
            else:
                runs[t].append(k1 - k0)
    assert len(seen) == tiles * tail.kblocks and set(seen.values()) == {1}
    assert tail.sk < blocks or tail.sk == 0
    for lengths in runs.values():
        assert len(lengths) == tail.pieces == min(wg.split(params), tail.kblocks) and max(lengths) - min(lengths) <= 1
    units = [len(items) for items in work]
    assert max(units) - min(units) <= 1 + (tail.sk * tail.pieces > 0)


def test_the_split_tail_walk_covers_every_stage_once_on_random_problems():
    rng = random.Random(7)
    for _ in range(120):
        params = dict(GOOD, BM=rng.choice([64, 128, 256]), BN=rng.choice([64, 128, 256]),
                      SPLIT=rng.choice([1, 2, 3, 4, 8, 16, 32]))  # fmt: skip
        m, n = rng.choice([1, 8, 200, 1000, 4096, 5000]), rng.choice([8, 16, 264, 1000, 4096])
        problem = GEMM.problem([m, n, rng.choice([8, 64, 72, 1000, 4096, 40000])], "float16")
        _check_walk(params, problem, rng.choice([1, 3, 66, 114, 132]))


def test_the_tail_is_the_last_partial_wave_in_runs_side_by_side():
    """2040 x 2056 x 2072 in 128 x 256 tiles on 132 SMs: 144 tiles, one whole wave, the last 12 tiles' 33 stages in
    4 runs; block b's tail unit is run b // 12 of tile 132 + b % 12, so the 12 blocks at one run read the same
    stages. A multiple of the grid has no tail, and SPLIT 1 is the plain walk."""
    problem = GEMM.problem("2040x2056x2072", "float16")
    tail = wg.Tail.of(dict(GOOD, SPLIT=4), problem, 132)
    assert tail == wg.Tail(kblocks=33, dp=132, sk=12, pieces=4)
    assert [tail.unit(u) for u in (0, 11, 12, 47)] == [(132, 0, 8), (143, 0, 8), (132, 8, 16), (143, 24, 33)]
    assert wg.Tail.of(GOOD, GEMM.problem("4096x4096x4096", "float16"), 128).sk == 0
    plain = dict(GOOD, SPLIT=1)
    assert wg.walk(plain, GEMM.problem("4096x4096x4096", "float16"), 132)[5] == [(t, 0, 64) for t in range(5, 512, 132)]


def test_split_tail_grid_and_scratch(monkeypatch):
    monkeypatch.setattr(wg, "multiprocessors", lambda: 132)
    few = GEMM.problem("1000x1000x1000", "float16")  # 8 x 4 tiles, all of them the tail: 2 runs each with SPLIT 2
    assert wg.launch(GOOD, few).grid == (64, 1, 1)
    assert wg.launch(dict(GOOD, SPLIT=8), few).grid == (132, 1, 1)
    assert wg.scratch(GOOD, few) == (32 * 2 * 128 * 256, 32 * 2)
    tail = GEMM.problem("2040x2056x2072", "float16")  # 12 tail tiles in 4 runs
    assert wg.scratch(dict(GOOD, SPLIT=4), tail) == (12 * 4 * 128 * 256, 12 * 2)
    assert wg.scratch(dict(GOOD, SPLIT=1), few) == (0, 0)
    assert GEMM.check_problem("wgmma", GOOD, few) is None
