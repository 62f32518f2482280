"""The wgmma template (sm_90a) without a GPU: configurations compile for sm_90a in every layout and dtype without
spills, at the register count setmaxnreg plans for; each Python check is mirrored by a static_assert; problems
whose rows the tensor maps cannot take are refused with the reason; the launch is a persistent grid."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render
from autotune.core.tensormap import SWIZZLE_32B, SWIZZLE_128B
from autotune.kernels import gemm_wgmma as wg
from autotune.kernels import gemm_wgmma_decode as wd
from autotune.kernels import gemm_wgmma_tf32x3 as wt
from autotune.kernels.gemm import GEMM
from autotune.kernels.gemm_wgmma_maps import CMap
from tests.sweep import case_cover
from tests.template_checks import assert_compiles_for_sm90, assert_refused_twice

GOOD = dict(BM=128, BN=256, CONSUMERS=2, STAGES=4, RASTER=8, CLUSTER_M=1, TMA_STORE=False)
HINTS = dict(EVICT_A="last", EVICT_B="first", EVICT_C="first")  # L2 eviction priorities of A's, B's and C's lines


def rendered(p, layout, dtype="float16", shape=(4096, 4096, 4096)):
    return render("gemm", "wgmma", p, GEMM.problem(list(shape), dtype, layout))


@pytest.mark.parametrize(
    ("params", "layout", "dtype", "registers"),
    [
        (GOOD, "NN", "float16", 168),
        (dict(GOOD, BM=256, BN=128, STAGES=3, CLUSTER_M=2), "TT", "bfloat16", 168),
        (dict(GOOD, BN=128, CONSUMERS=1, STAGES=3, RASTER=1, CLUSTER_M=2, TMA_STORE=True), "NT", "float16", None),
        # pingpong consumers (whole 128 x 128 tiles in turn) staging their rows in one box of 64 columns
        (dict(GOOD, BN=128, STAGES=6, TMA_STORE=True, EPI_BOXES=1, PINGPONG=True), "TN", "bfloat16", 168),
        # three consumers, 192-row tiles: 512 threads compile at 128 registers
        (dict(GOOD, BM=192, BN=192, CONSUMERS=3, TMA_STORE=True, EPI_BOXES=1), "NN", "float16", 128),
        (dict(GOOD, BM=192, BN=192, CONSUMERS=3, STAGES=3, TMA_STORE=True), "TT", "bfloat16", 128),
        # BN not a multiple of 64: B's tile in whole 64-column boxes (N-major B: 3 boxes for 176, shared by a block
        # pair in turn), or BN rows (K-major: a pair's halves of 104 rows); split tail with 80 columns
        (dict(GOOD, BM=192, BN=176, CONSUMERS=3, CLUSTER_M=2), "NN", "float16", 128),
        (dict(GOOD, BM=192, BN=176, CONSUMERS=3), "NT", "bfloat16", 128),
        (dict(GOOD, BN=208, STAGES=3, CLUSTER_M=2), "TT", "float16", 168),
        (dict(GOOD, BM=64, BN=80, CONSUMERS=1, STAGES=6, SPLIT=4), "TN", "bfloat16", None),
        # and stored by TMA in boxes of 16 columns: three consumers, pingpong consumers, block pairs
        (dict(GOOD, BM=192, BN=176, CONSUMERS=3, STAGES=3, TMA_STORE=True), "NN", "float16", 128),
        (dict(GOOD, BN=112, STAGES=4, TMA_STORE=True, PINGPONG=True), "TN", "bfloat16", 168),
        (dict(GOOD, BN=240, STAGES=3, CLUSTER_M=2, TMA_STORE=True), "NT", "float16", 168),
        # SWAP_AB (C^T = B^T A^T, C stored transposed): cuBLAS's 2040 x 2056 cut (176 of C's rows x 192 columns),
        # block pairs from registers, pingpong consumers, a split tail
        (dict(GOOD, BM=192, BN=176, CONSUMERS=3, STAGES=3, TMA_STORE=True, SWAP_AB=True), "NN", "float16", 128),
        (dict(GOOD, STAGES=3, CLUSTER_M=2, SWAP_AB=True), "TN", "bfloat16", 168),
        (dict(GOOD, BM=64, BN=144, STAGES=4, TMA_STORE=True, PINGPONG=True, SWAP_AB=True), "NT", "float16", 168),
        (
            dict(GOOD, BM=64, BN=144, CONSUMERS=1, STAGES=6, TMA_STORE=True, SPLIT=4, SWAP_AB=True),
            "TT",
            "bfloat16",
            None,
        ),
        # SNAKE: every other tile's K backwards (a split tail's runs too), every other row group right to left
        (dict(GOOD, STAGES=3, RASTER=16, TMA_STORE=True, L2_PROMOTION=0, SNAKE=True), "NN", "float16", 168),
        (dict(GOOD, BM=64, BN=80, CONSUMERS=1, STAGES=6, SPLIT=4, SNAKE=True), "TT", "bfloat16", None),
        # L2 hints on the TMA copies and stores: A's kept, B's and C's let go first; block pairs' multicast of B
        (dict(GOOD, STAGES=3, RASTER=16, TMA_STORE=True, SNAKE=True, **HINTS), "NT", "bfloat16", 168),
        (dict(GOOD, BM=192, BN=176, CONSUMERS=3, STAGES=3, CLUSTER_M=2, TMA_STORE=True, **HINTS), "NN", "float16", 128),
        (dict(GOOD, BN=128, CONSUMERS=1, STAGES=3, CLUSTER_M=2, EVICT_A="first", EVICT_B="last"), "TT", "float16", 0),
    ],  # fmt: skip
)
def test_configurations_compile_for_sm90a_without_spills(params, layout, dtype, registers):
    assert wg.check(params) is None
    r = rendered(params, layout, dtype)
    c = assert_compiles_for_sm90(r)  # the source asks for sm_90a
    if registers:  # 384 threads (two consumers) start at 168 registers, 512 at 128: setmaxnreg's budget assumes it
        assert c.registers == registers


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(CONSUMERS=4), ["CONSUMERS"]),
        (dict(CONSUMERS=3), ["BM / CONSUMERS"]),
        (dict(CONSUMERS=3, BM=192, STAGES=3), ["three consumers", "accumulators", "BN <= 192"]),
        (dict(CONSUMERS=3, BM=384, BN=128, STAGES=2), ["BM", "at most 256"]),
        (dict(BN=72), ["BN", "multiple of 16"]),
        (dict(BN=272), ["BN", "to 256"]),
        (dict(BN=176, TMA_STORE=True, EPI_BOXES=1), ["EPI_BOXES", "multiple of 64", "176"]),
        (dict(BM=192), ["BM / CONSUMERS"]),
        (dict(CONSUMERS=1, BM=128, BN=256), ["accumulators"]),
        (dict(STAGES=9), ["STAGES"]),
        (dict(RASTER=0), ["RASTER"]),
        (dict(STAGES=5), ["shared memory"]),
        (dict(CLUSTER_M=4), ["CLUSTER_M"]),
        (dict(TMA_STORE=True), ["staging tile", "shared memory"]),
        (dict(TMA_STORE=True, EPI_BOXES=3), ["EPI_BOXES"]),
        (dict(STAGES=3, TMA_STORE=True, EPI_BOXES=1, SWAP_AB=True), ["SWAP_AB", "EPI_BOXES must be 0"]),
        (dict(EPI_BOXES=1), ["EPI_BOXES", "TMA_STORE"]),
        (dict(BN=128, STAGES=3, PINGPONG=True, CLUSTER_M=2), ["PINGPONG", "CLUSTER_M = 1"]),
        (dict(STAGES=3, PINGPONG=True), ["BM x BN", "accumulators"]),
        (dict(EVICT_B="keep"), ["EVICT_B", "normal, last or first"]),
    ],  # fmt: skip
)
def test_a_broken_configuration_is_refused_by_the_check_and_the_template(change, words):
    assert_refused_twice(wg, rendered, {**GOOD, **change}, words)


def test_staging_boxes_buy_a_stage_and_pingpong_stages_whole_tiles_per_consumer():
    """EPI_BOXES: a consumer's staging is 1 or 2 boxes of 64 columns instead of its rows (128 x 256 tiles then fit 4
    stages); PINGPONG: each consumer stages (and the C map's box spans) the whole tile's BM rows."""
    stored = dict(GOOD, TMA_STORE=True)
    assert "shared memory" in wg.check(stored)
    stage = (128 + 256) * 64 * 2
    for boxes in (1, 2):
        d = wg.derived(dict(stored, EPI_BOXES=boxes))
        assert wg.check(dict(stored, EPI_BOXES=boxes)) is None
        assert d["SHARED_BYTES"] == 4 * stage + 2 * boxes * 64 * 128 + 1024 + 16 * 4
    pp = dict(stored, BN=128, STAGES=5, PINGPONG=True)
    assert wg.derived(pp)["SHARED_BYTES"] == 5 * (128 + 128) * 64 * 2 + 2 * 128 * 128 * 2 + 1024 + 16 * 5
    assert wg.tensor_maps(pp, GEMM.problem("4096x4096x4096", "float16")).c.box == (64, 128)
    assert wg.tensor_maps(dict(pp, PINGPONG=False), GEMM.problem("4096x4096x4096", "float16")).c.box == (64, 64)
    odd = dict(stored, BM=192, BN=176, CONSUMERS=3, STAGES=3)  # BN no multiple of 64: 16-column boxes, 32 bytes a row
    maps = wg.tensor_maps(odd, GEMM.problem("2040x2056x2072", "float16"))
    assert maps.c == CMap(2056, 2040, (16, 64), SWIZZLE_32B) and wg.tensor_maps(stored, maps.problem).c.box[0] == 64
    # B's tile: whole 64-column boxes where B is N-major (layout ?N), its 176 rows where K-major (?T)
    for layout, b_rows in (("NN", 192), ("TN", 192), ("NT", 176), ("TT", 176)):
        need = wg.WgmmaTemplate().derived(odd, GEMM.problem("2040x2056x2072", "float16", layout))["SHARED_BYTES"]
        assert need == 3 * (192 + b_rows) * 64 * 2 + 192 * 176 * 2 + 1024 + 16 * 3, layout
    assert wg.derived(odd)["SHARED_BYTES"] == 3 * (192 + 176) * 64 * 2 + 192 * 176 * 2 + 1024 + 16 * 3  # the fewest
    # so 64 x 144 tiles fit 7 stages where B is K-major (its 144 rows), and are refused where it is N-major (192)
    seven, problem = dict(GOOD, BM=64, BN=144, CONSUMERS=1, STAGES=7, TMA_STORE=True), maps.problem
    assert wg.check(seven) is None and wg.check_problem(seven, dataclasses.replace(problem, layout="NT")) is None
    assert "in layout NN, 7 stages need 248944 bytes" in wg.check_problem(seven, problem)  # 7 x 256 rows + staging
    assert wg.check_problem(dict(seven, SWAP_AB=True), problem) is None  # it computes C^T in layout TT
    assert "n0 + 16 * j" in rendered(odd, "NN").source and "n0 + 16 * j" not in rendered(stored, "NN").source
    named = rendered(dict(pp, EPI_BOXES=1), "NN").kernel_name
    assert named.endswith("_epi_boxes1_pingpong1") and rendered(stored | {"STAGES": 3}, "NN").kernel_name.endswith(
        "tma_store1"
    )


@pytest.mark.parametrize(
    ("shape", "layout", "bad"),
    [
        ("4095x4097x4093", "NN", "4093 (A)"),
        ("4096x4097x4096", "NN", "4097 (B)"),
        ("4093x4096x4096", "TN", "4093 (A)"),
        ("4096x4096x4093", "NT", "4093 (B)"),
    ],  # fmt: skip
)
def test_rows_that_are_not_whole_16_bytes_are_refused_naming_the_operand(shape, layout, bad):
    reason = GEMM.check_problem("wgmma", GOOD, GEMM.problem(shape, "float16", layout))
    assert reason and bad in reason and "multiples of 8" in reason
    assert GEMM.check_problem("wgmma", GOOD, GEMM.problem("4096x4096x4096", "float16", layout)) is None
    assert "float16" in GEMM.check_problem("wgmma", GOOD, GEMM.problem("64x64x64", "float32"))
    stored = dict(GOOD, TMA_STORE=True)
    assert "N = 4092" in GEMM.check_problem("wgmma", stored, GEMM.problem("64x4092x64", "float16", "NT"))
    assert GEMM.check_problem("wgmma", GOOD, GEMM.problem("64x4092x64", "float16", "NT")) is None


def test_the_grid_is_one_persistent_block_per_sm_or_per_tile(monkeypatch):
    problem = GEMM.problem("4096x4096x4096", "float16")
    monkeypatch.setattr(wg, "multiprocessors", lambda: 132)
    assert wg.launch(GOOD, problem).grid == (132, 1, 1)
    assert wg.launch(GOOD, GEMM.problem("256x512x64", "float16")).grid == (4, 1, 1)
    monkeypatch.setattr(wg, "multiprocessors", lambda: None)
    assert wg.launch(GOOD, problem).grid == (32 * 16, 1, 1)
    assert wg.launch(GOOD, problem).block == (384, 1, 1)
    pairs = dict(GOOD, CLUSTER_M=2)  # whole clusters: 33 tiles of 128 rows make 17 pairs
    assert wg.launch(pairs, GEMM.problem("4224x256x64", "float16")).grid == (34, 1, 1)
    monkeypatch.setattr(wg, "multiprocessors", lambda: 133)
    assert wg.launch(pairs, problem).grid == (132, 1, 1)


DECODE = dict(BW=128, MB=16, CONSUMERS=1, STAGES=6, SPLIT_K=4)


def rendered_decode(p, layout="NT", dtype="float16", shape=(16, 4096, 4096)):
    return render("gemm", "wgmma_decode", p, GEMM.problem(list(shape), dtype, layout))


@pytest.mark.parametrize(
    ("params", "dtype"),
    [
        (DECODE, "float16"),
        (dict(DECODE, BW=256, MB=64, CONSUMERS=2, SPLIT_K=1, STAGES=3), "bfloat16"),
        (dict(DECODE, BW=64, MB=8, STAGES=12, SPLIT_K=16), "float16"),
    ],  # fmt: skip
)
def test_decode_configurations_compile_for_sm90a_without_spills(params, dtype):
    assert wd.check(params) is None
    r = rendered_decode(params, dtype=dtype)
    assert_compiles_for_sm90(r)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(CONSUMERS=3), ["CONSUMERS"]),
        (dict(BW=192), ["BW / CONSUMERS"]),
        (dict(MB=24), ["MB"]),
        (dict(STAGES=1), ["STAGES"]),
        (dict(SPLIT_K=65), ["SPLIT_K"]),
        (dict(STAGES=12, BW=256, CONSUMERS=2), ["shared"]),
    ],  # fmt: skip
)
def test_a_broken_decode_configuration_is_refused_by_the_check_and_the_template(change, words):
    assert_refused_twice(wd, lambda p, _layout: rendered_decode(p), {**DECODE, **change}, words)


def test_decode_takes_nn_linear_layout_with_whole_16_byte_rows_only():
    assert GEMM.check_problem("wgmma_decode", DECODE, GEMM.problem("16x4096x4096", "float16", "NT")) is None
    assert "only with X_AS_M" in GEMM.check_problem(
        "wgmma_decode", DECODE, GEMM.problem("16x4096x4096", "float16", "NN")
    )
    assert "layouts NT" in GEMM.check_problem("wgmma_decode", DECODE, GEMM.problem("16x4096x4096", "float16", "TN"))
    assert "K = 4093" in GEMM.check_problem("wgmma_decode", DECODE, GEMM.problem("16x4096x4093", "float16", "NT"))
    assert GEMM.check_problem("wgmma_decode", DECODE, GEMM.problem("3x4097x4096", "bfloat16", "NT")) is None


def test_decode_grid_and_split_k_scratch():
    p = GEMM.problem("100x1000x4096", "float16", "NT")  # 8 tiles of 128 rows of W, 7 rows of 16 of x
    assert wd.launch(DECODE, p).grid == (8 * 4, 7, 1)
    floats, counters = wd.scratch(DECODE, p)
    assert counters == 8 * 7
    assert floats == 8 * 7 * 4 * 128 * (128 // 64 * 16 // 2)  # a partial tile per split: 128 threads x 16 floats
    assert wd.scratch(dict(DECODE, SPLIT_K=1), p) == (0, 0)


TF32X3 = dict(BN=128, PRODUCERS=1, CONSUMERS=2, STAGES=3, ROUND=256, RASTER=8, SPLIT_K=1, PREFETCH=False)


def rendered_tf32x3(p, layout="NN", shape=(4096, 4096, 4096)):
    return render("gemm", "wgmma_tf32x3", p, GEMM.problem(list(shape), "float32", layout))


TF32X3_COMPILED = [
    (TF32X3, "NN", (4096, 4096, 4096)),
    (dict(TF32X3, PRODUCERS=2, CONSUMERS=1, STAGES=4), "NT", (4095, 4097, 4093)),
    (dict(TF32X3, BN=64, CONSUMERS=1, STAGES=4, ROUND=64), "TT", (129, 63, 1000)),
    (dict(TF32X3, SPLIT_K=4), "NN", (128, 4096, 4096)),
    (dict(TF32X3, PRODUCERS=2, CONSUMERS=1, STAGES=4, SPLIT_K=2), "NT", (4095, 4097, 4093)),
    (dict(TF32X3, BN=64, PRODUCERS=2, STAGES=4, SPLIT_K=3), "NT", (4095, 4097, 4093)),
    (dict(TF32X3, BN=64, PRODUCERS=2, STAGES=4), "NN", (4095, 4097, 4093)),
    (dict(TF32X3, BN=64, PRODUCERS=3, CONSUMERS=1, STAGES=4, SPLIT_K=32), "TT", (1000, 1000, 1000)),
    (dict(TF32X3, CONSUMERS=1, PREFETCH=True), "NN", (4096, 4096, 4096)),
    (dict(TF32X3, PREFETCH=True), "NN", (4096, 4096, 4096)),  # setmaxnreg: the producer at 184 registers
    (dict(TF32X3, SPLIT_K=3, PREFETCH=True), "TT", (4095, 4097, 4093)),
    (dict(TF32X3, PRODUCERS=2, CONSUMERS=1, STAGES=4, SPLIT_K=4, PREFETCH=True), "TN", (128, 4096, 4096)),
    (dict(TF32X3, BN=64, SPLIT_K=2, PREFETCH=True), "NT", (4095, 4097, 4093)),
    (dict(TF32X3, BN=64, PRODUCERS=2, CONSUMERS=1, STAGES=4, PREFETCH=True), "TT", (1000, 1000, 1000)),
]  # fmt: skip


def _tf32x3_facets(case):
    """What a case exercises: its parameters, layout, 16-byte loads or scalar ones, and the register split the test
    asserts (four warpgroups: 128 a thread; PREFETCH of wide tiles: 168; else none)."""
    p, layout, shape = case
    warpgroups = p["PRODUCERS"] + p["CONSUMERS"]
    split = 128 if warpgroups == 4 else 168 if p["PREFETCH"] and 64 * p["CONSUMERS"] + p["BN"] > 192 else None
    return {**p, "layout": layout, "aligned": all(x % 4 == 0 for x in shape[1:]), "register_split": split}


# The cases that hold every parameter value, layout, alignment and register split (tests/sweep.py: 7 of 14);
# AUTOTUNE_FULL_SWEEP=1: all of them.
@pytest.mark.parametrize(("params", "layout", "shape"), case_cover(TF32X3_COMPILED, _tf32x3_facets))
def test_tf32x3_compiles_for_sm90a_without_spills_or_serialization(params, layout, shape):
    """Aligned and misaligned variants (16-byte loads or scalar ones) in every layout, with and without split-K
    and PREFETCH (two stages of loads a producer thread). Four warpgroups, and PREFETCH of 128 x 128 tiles, move
    registers from the consumers to the producers (setmaxnreg): at an even share they spilled 8-120 bytes. Their
    shares add up to the launch's registers a thread only if the kernel starts at the launch bound's maximum."""
    assert wt.check(params) is None
    r = rendered_tf32x3(params, layout, shape)
    c = assert_compiles_for_sm90(r)
    assert "serialized" not in c.log
    warpgroups = params["PRODUCERS"] + params["CONSUMERS"]
    if warpgroups == 4 or (params["PREFETCH"] and 64 * params["CONSUMERS"] + params["BN"] > 192):
        assert c.registers == (128 if warpgroups == 4 else 168)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(PRODUCERS=4), ["PRODUCERS"]),
        (dict(CONSUMERS=3), ["CONSUMERS"]),
        (dict(PRODUCERS=2), ["four warpgroups", "BN = 64"]),
        (dict(BN=256), ["BN"]),
        (dict(STAGES=5), ["STAGES"]),
        (dict(ROUND=48), ["ROUND"]),
        (dict(ROUND=32), ["from 64"]),
        (dict(RASTER=0), ["RASTER"]),
        (dict(SPLIT_K=0), ["SPLIT_K"]),
        (dict(SPLIT_K=33), ["SPLIT_K"]),
        (dict(BN=64, PRODUCERS=2, PREFETCH=True), ["PREFETCH", "three warpgroups"]),
    ],  # fmt: skip
)
def test_a_broken_tf32x3_configuration_is_refused_by_the_check_and_the_template(change, words):
    p = {**TF32X3, **change}
    reason = wt.check(p)
    assert reason and all(w in reason for w in words), reason
    r = rendered_tf32x3(p)
    c = compile_source(r.source, r.kernel_name, "sm_90")
    assert not c.ok and "static assert" in c.error, f"the template accepted {p}"


def test_tf32x3_work_units_grid_and_split_k_scratch(monkeypatch):
    """A unit is a tile and a run of K's stages; K shorter than SPLIT_K stages makes fewer splits (the kernel counts
    the same); partials are a BM x BN tile a unit, counters one per tile and warp of 16 rows."""
    p = dict(TF32X3, SPLIT_K=4)  # tiles of 128 x 128
    skinny = GEMM.problem("128x4096x4096", "float32")
    monkeypatch.setattr(wt, "multiprocessors", lambda: 132)
    assert wt.units(p, skinny) == 32 * 4
    assert wt.launch(p, skinny).grid == (128, 1, 1)
    assert wt.scratch(p, skinny) == (32 * 4 * 128 * 128, 32 * 8)
    assert wt.launch(dict(p, SPLIT_K=8), skinny).grid == (132, 1, 1)
    short = GEMM.problem("1000x1000x70", "float32")  # 3 stages of 32: at most 3 splits
    assert wt.splits(dict(p, SPLIT_K=8), short) == 3
    assert wt.scratch(dict(p, SPLIT_K=8), short) == (64 * 3 * 128 * 128, 64 * 8)
    assert wt.scratch(p, GEMM.problem("1000x1000x32", "float32")) == (0, 0)  # one stage: one split, no scratch
    assert wt.scratch(TF32X3, skinny) == (0, 0)
    one = dict(p, BN=64, CONSUMERS=1, SPLIT_K=3)
    assert wt.scratch(one, GEMM.problem("65x65x4096", "float32")) == (4 * 3 * 64 * 64, 4 * 4)
    monkeypatch.setattr(wt, "multiprocessors", lambda: None)
    assert wt.launch(p, GEMM.problem("4096x4096x4096", "float32")).grid == (32 * 32 * 4, 1, 1)
    assert GEMM.scratch("wgmma_tf32x3", p, skinny) == wt.scratch(p, skinny)


def test_tf32x3_refuses_split_k_partials_past_512_mib():
    big = GEMM.problem("8192x8192x8192", "float32")
    reason = GEMM.check_problem("wgmma_tf32x3", dict(TF32X3, SPLIT_K=4), big)
    assert reason and "512 MiB" in reason and "SPLIT_K" in reason
    assert GEMM.check_problem("wgmma_tf32x3", dict(TF32X3, SPLIT_K=2), big) is None
    assert GEMM.check_problem("wgmma_tf32x3", TF32X3, big) is None


def test_the_main_fp32_spec_searches_three_templates_from_valid_starting_points():
    """configs/gemm.yaml: simt beside both wgmma fp32 templates over the same six shapes; every starting point is
    a configuration its template builds and that computes every shape, but for split-K's partials past 512 MiB on
    the large shapes (refused before compiling: there the tiles fill the GPU without splits)."""
    from pathlib import Path

    from autotune.tune.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "configs" / "gemm.yaml")
    template = next(p for p in spec.space.params if p.name == "TEMPLATE")
    assert set(template.values) == {"simt", "skinny_wgmma", "wgmma_tf32x3"}
    labels = ["4096x4096x4096", "8192x8192x8192", "4095x4097x4093", "1000x1000x1000", "16x4096x4096", "128x4096x4096"]
    assert [p.label for p in spec.problems] == labels
    keys = {c.key for c in spec.space.enumerate()}
    started = set()
    for config in spec.start_from:
        params = config.as_dict()
        assert config.key in keys and GEMM.check("auto", params) is None, params
        for problem in spec.problems:
            reason = GEMM.check_problem("auto", params, problem)
            assert reason is None or ("512 MiB" in reason and problem.M * problem.N >= 4096**2), (params, reason)
        started.add((params["TEMPLATE"], params.get("SPLIT_K", 1) > 1))
    assert {("simt", False), ("skinny_wgmma", True), ("wgmma_tf32x3", False), ("wgmma_tf32x3", True)} <= started


def test_tf32x3_configurations_stored_before_split_k_and_prefetch_keep_their_kernel_names():
    """SPLIT_K and PREFETCH have defaults (1, False): a configuration without them is valid, renders the same source
    as one at the defaults, and its kernel name lists neither."""
    old = {k: v for k, v in TF32X3.items() if k not in ("SPLIT_K", "PREFETCH")}
    problem = GEMM.problem("1000x1000x1000", "float32")
    assert wt.check(old) is None and wt.scratch(old, problem) == (0, 0)
    name = GEMM.kernel_name("wgmma_tf32x3", old, problem)
    assert name == GEMM.kernel_name("wgmma_tf32x3", TF32X3, problem)
    assert "split_k" not in name and "prefetch" not in name
    assert rendered_tf32x3(old).source == rendered_tf32x3(TF32X3).source
    assert "split_k4" in GEMM.kernel_name("wgmma_tf32x3", dict(TF32X3, SPLIT_K=4), problem)


def test_l2_promotion_names_the_kernel_and_sets_only_a_and_bs_tensor_maps():
    """L2_PROMOTION is the L2 promotion of A's and B's tensor maps (host side): 256 (or absent) renders and names the
    kernel as before; another value only renames it (the same code), and the maps ask for that promotion."""
    base = dict(GOOD, STAGES=3, TMA_STORE=True)
    problem = GEMM.problem([2040, 2056, 2072], "float16", "NN")
    plain = rendered(base, "NN")
    assert rendered(dict(base, L2_PROMOTION=256), "NN").source == plain.source
    for value, enum in ((0, 0), (64, 1), (128, 2), (256, 3)):
        assert wg.check(dict(base, L2_PROMOTION=value)) is None
        r = rendered(dict(base, L2_PROMOTION=value), "NN")
        if value != 256:
            assert r.kernel_name == plain.kernel_name + f"_l2_promotion{value}"
            assert r.source.replace(r.kernel_name, "") == plain.source.replace(plain.kernel_name, "")
        assert wg.tensor_maps(dict(base, L2_PROMOTION=value), problem).promotion == enum
    assert wg.tensor_maps(base, problem).promotion == 3
    assert "L2_PROMOTION must be one of 0, 64, 128, 256" in wg.check(dict(base, L2_PROMOTION=32))
    assert "L2_PROMOTION must be one of" in wg.check(dict(base, L2_PROMOTION=True))


def _logical(stored, trans):
    """The operand a layout letter hands over: stored as given (N) or its transpose (T)."""
    return stored.T if trans == "T" else stored


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("shape", [(3, 5, 7), (64, 16, 40), (5, 5, 5)])
def test_swap_ab_computes_c_transposed_from_the_same_memory(layout, shape):
    """The swapped problem's A is the caller's B array and its B the caller's A, read in the swapped layout: what
    they hand over is B^T and A^T, and their product is C^T (C stored row-major is C^T column-major)."""
    import numpy as np

    rng = np.random.default_rng(sum(shape))
    p = GEMM.problem(list(shape), "float16", layout)
    a = rng.standard_normal((p.K, p.M) if layout[0] == "T" else (p.M, p.K))
    b = rng.standard_normal((p.N, p.K) if layout[1] == "T" else (p.K, p.N))
    q = wg.swapped(p)
    assert (q.M, q.N, q.K) == (p.N, p.M, p.K) and q.dtype == p.dtype
    a2, b2 = _logical(b, q.layout[0]), _logical(a, q.layout[1])  # the kernel's A and B: the caller's B and A
    assert a2.shape == (q.M, q.K) and b2.shape == (q.K, q.N)
    c = _logical(a, layout[0]) @ _logical(b, layout[1])
    np.testing.assert_allclose(a2 @ b2, c.T)
    assert wg.swapped(q) == p  # swapping twice is the caller's problem


def test_swap_ab_launches_on_the_swapped_problem_with_the_callers_b_as_the_kernels_a(monkeypatch):
    import numpy as np

    params = dict(GOOD, BM=192, BN=176, CONSUMERS=3, STAGES=3, TMA_STORE=True, SWAP_AB=True)
    problem = GEMM.problem("2040x2056x2072", "float16", "NN")
    monkeypatch.setattr(wg, "multiprocessors", lambda: None)
    assert wg.launch(params, problem).grid == (11 * 12, 1, 1)  # 2056 / 192 (C's columns) x 2040 / 176 (its rows)
    assert wg.launch(dict(params, SWAP_AB=False, BN=192), problem).grid == (11 * 11, 1, 1)
    maps = wg.tensor_maps(params, problem)
    assert maps.swap and maps.problem == wg.swapped(problem) and maps.problem.layout == "TT"
    assert maps.c == CMap(2056, 2040, (64, 176), SWIZZLE_128B) and (maps.bm, maps.bn_box) == (192, 176)
    monkeypatch.setattr(type(maps), "_map", lambda self, which, ptr: ("map", which, ptr))
    arr = lambda ptr: type("Array", (), {"data": type("Ptr", (), {"ptr": ptr})()})()  # noqa: E731
    a, b, out = arr(1), arr(2), arr(3)
    args = wg.TEMPLATE.kernel_args(problem, (a, b), out, 1.0, 0.0, ("partial", "counters", maps))
    assert args[:3] == (b, a, out) and args[3:6] == (np.int32(2056), np.int32(2040), np.int32(2072))
    assert args[8:] == ("partial", "counters", ("map", 0, 2), ("map", 1, 1), ("map", 2, 3))
    assert "swap_ab1" in rendered(params, "NN").kernel_name and "_f16_nn_" in rendered(params, "NN").kernel_name
