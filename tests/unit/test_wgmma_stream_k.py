"""Stream-K in the wgmma template (SPLIT > 1) without a GPU: its kernels compile for sm_90a without spills, broken
settings are refused by the check and the template alike, configurations stored before SPLIT render the same source,
and the cut the kernel walks (mirrored by ``gemm_wgmma.walk``) hands out every stage of every tile exactly once,
balanced, to at most SPLIT + 1 blocks a tile, each piece with a partial slot of its own."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

import pytest

from autotune.build.templates import render
from autotune.kernels import gemm_wgmma as wg
from autotune.kernels.gemm import GEMM
from tests.template_checks import assert_compiles_for_sm90, assert_refused_twice

GOOD = dict(BM=128, BN=256, CONSUMERS=2, STAGES=3, RASTER=8, CLUSTER_M=1, TMA_STORE=True, SPLIT=2)
TUNED = Path(__file__).resolve().parents[2] / "tuned" / "nvidia-h200-sm90" / "gemm.json"


def rendered(p, layout="NN", dtype="float16", shape=(1000, 1000, 1000)):
    return render("gemm", "wgmma", p, GEMM.problem(list(shape), dtype, layout))


@pytest.mark.parametrize(
    ("params", "layout", "dtype", "registers"),
    [
        (GOOD, "NN", "float16", 168),  # two consumers: the 168 registers setmaxnreg's budget assumes, no spills
        (dict(GOOD, BN=128, CONSUMERS=1, STAGES=4, TMA_STORE=False, SPLIT=8), "TT", "bfloat16", None),
    ],  # fmt: skip
)
def test_stream_k_configurations_compile_for_sm90a_without_spills(params, layout, dtype, registers):
    assert wg.check(params) is None
    c = assert_compiles_for_sm90(rendered(params, layout, dtype))
    if registers:
        assert c.registers == registers


@pytest.mark.parametrize(
    ("change", "words"),
    [(dict(SPLIT=0), ["SPLIT"]), (dict(SPLIT=33), ["SPLIT", "32"]), (dict(CLUSTER_M=2), ["CLUSTER_M = 1"])],
)
def test_a_broken_stream_k_setting_is_refused_by_the_check_and_the_template(change, words):
    assert_refused_twice(wg, rendered, {**GOOD, **change}, words)


def test_stored_configurations_render_as_before_split_existed():
    """SPLIT absent or 1: the same source and kernel name as the entries stored before it (their source hash)."""
    entries = {k: e for k, e in json.loads(TUNED.read_text())["entries"].items() if e["template"] == "wgmma"}
    assert entries
    for key, e in entries.items():
        dtype, layout, shape = key.split("/")
        problem = GEMM.problem(shape, dtype, layout)
        for params in (e["params"], dict(e["params"], SPLIT=1)):
            r = render("gemm", "wgmma", params, problem)
            assert (r.source_hash, r.kernel_name) == (e["source_hash"], e["kernel_name"]), key
        assert "split" in render("gemm", "wgmma", dict(e["params"], SPLIT=2), problem).kernel_name


def _check_walk(params, problem, blocks):
    """Every (tile, stage) once; tiles before dp whole; a tile's pieces with its sharers in order, at most SPLIT + 1
    of them, each a slot of its own; a block's stream-K run at most ``per`` stages."""
    sk = wg.StreamK.of(params, problem, blocks)
    tiles = wg.groups(params, problem)
    seen, pieces, slots = defaultdict(int), defaultdict(list), set()
    for b, items in enumerate(wg.walk(params, problem, blocks)):
        assert sum(k1 - k0 for t, k0, k1 in items if t >= sk.dp) <= sk.per
        for t, k0, k1 in items:
            assert 0 <= k0 < k1 <= sk.kblocks and 0 <= t < tiles
            for k in range(k0, k1):
                seen[t, k] += 1
            if t < sk.dp:
                assert (k0, k1) == (0, sk.kblocks) and t % blocks == b
            elif k1 - k0 < sk.kblocks:  # a piece: a partial in slot (b, slot), a counter below blocks * consumers
                pieces[t - sk.dp].append(b)
                slots.add((b, sk.slot(b, t - sk.dp)))
                assert t - sk.dp < blocks
    assert len(seen) == tiles * sk.kblocks and set(seen.values()) == {1}
    assert len(slots) == sum(map(len, pieces.values()))  # no two pieces share a slot
    for s, holders in pieces.items():
        assert holders == list(sk.sharers(s)) and 2 <= len(holders) <= wg.split(params) + 1


def test_the_stream_k_walk_covers_every_stage_once_on_random_problems():
    rng = random.Random(7)
    for _ in range(300):
        params = dict(GOOD, BM=rng.choice([64, 128, 256]), BN=rng.choice([64, 128, 256]),
                      SPLIT=rng.choice([1, 2, 3, 4, 8, 16, 32]))  # fmt: skip
        m, n = rng.choice([1, 8, 200, 1000, 4096, 5000]), rng.choice([8, 16, 264, 1000, 4096])
        problem = GEMM.problem([m, n, rng.choice([8, 64, 72, 1000, 4096, 40000])], "float16")
        _check_walk(params, problem, rng.choice([1, 3, 66, 114, 132]))


def test_stream_k_cuts_only_the_last_partial_wave():
    """4096^3 in 128 x 256 tiles on 132 SMs: 512 tiles, 3 whole waves, the last 116 tiles' 64 stages each dealt out
    57 a block (7424 / 132 rounded up); a multiple of the grid is left whole, and SPLIT 1 is the plain walk."""
    problem = GEMM.problem("4096x4096x4096", "float16")
    assert wg.StreamK.of(GOOD, problem, 132) == wg.StreamK(kblocks=64, dp=396, units=116 * 64, per=57)
    assert wg.StreamK.of(GOOD, problem, 128).units == 0
    plain = dict(GOOD, SPLIT=1)
    assert wg.walk(plain, problem, 132)[5] == [(t, 0, 64) for t in range(5, 512, 132)]


def test_stream_k_grid_scratch_and_refusals(monkeypatch):
    monkeypatch.setattr(wg, "multiprocessors", lambda: 132)
    few = GEMM.problem("1000x1000x1000", "float16")  # 8 x 4 tiles: 2 blocks a tile with SPLIT 2
    assert wg.launch(GOOD, few).grid == (64, 1, 1)
    assert wg.launch(dict(GOOD, SPLIT=8), few).grid == (132, 1, 1)
    assert wg.scratch(GOOD, few) == (2 * 64 * 128 * 256, 64 * 2)
    assert wg.scratch(dict(GOOD, SPLIT=1), few) == (0, 0)
    assert GEMM.check_problem("wgmma", GOOD, few) is None
    reason = GEMM.check_problem("wgmma", GOOD, GEMM.problem("128x256x2000000000", "float16"))
    assert reason and "K = 2000000000" in reason and "SPLIT" in reason
