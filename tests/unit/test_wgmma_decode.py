"""wgmma_decode's CLUSTER, SHARE_X, SHARE_W, ROTATE and SPLIT_X options without a GPU: off (or absent) they render
every stored winner byte for byte as before (their source hashes in tuned/); on, they compile for sm_90a without
spills, CLUSTER takes no global scratch and keeps the grid, SHARE_X / SHARE_W round the tiles / row groups up to whole
groups and cut x's / W's box, ROTATE starts each block's run of K at its tile's (group's) offset, SPLIT_X gives each
consumer all of the tile of W and half of x, STAGE_C stores C through shared memory in 16-byte vectors, and a
configuration the template cannot build is refused by the check
and by the template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render
from autotune.kernels import gemm_wgmma_decode as wd
from autotune.kernels.gemm import GEMM
from tests.template_checks import assert_compiles_for_sm90, assert_refused_twice

ROOT = Path(__file__).resolve().parents[2]
STORED = sorted(ROOT.glob("tuned/*/gemm.json"))
WIDE = dict(BW=256, MB=64, CONSUMERS=2, STAGES=4, SPLIT_K=8, CLUSTER=True)


def _stored_decode_entries() -> list[tuple[str, dict]]:
    out = []
    for path in STORED:
        for key, entry in json.loads(path.read_text())["entries"].items():
            if entry.get("template") == "wgmma_decode":
                out.append((f"{path.parent.name}:{key}", entry))
    return out


def _unshared(entry: dict) -> bool:
    return entry["params"].get("SHARE_X", 1) == 1 and entry["params"].get("SHARE_W", 1) == 1


def rendered(p, shape=(64, 4096, 4096), dtype="float16"):
    return render("gemm", "wgmma_decode", p, GEMM.problem(list(shape), dtype, "NT"))


def test_stored_winners_render_byte_for_byte_with_cluster_absent_or_off():
    """test_export checks every entry as stored; this adds CLUSTER written out as off, and the kernel's name."""
    entries = [(k, e) for k, e in _stored_decode_entries() if not e["params"].get("CLUSTER", False) and _unshared(e)]
    assert entries, "no stored wgmma_decode entry without CLUSTER to compare against"
    for key, entry in entries:
        dtype, layout, label = key.split(":", 1)[1].split("/")
        problem = GEMM.problem(label, dtype, layout)
        params = {k: v for k, v in entry["params"].items() if k != "CLUSTER"}
        assert render("gemm", "wgmma_decode", params, problem).source_hash == entry["source_hash"], key
        off = render("gemm", "wgmma_decode", {**params, "CLUSTER": False, "SHARE_X": 1, "SHARE_W": 1}, problem)
        assert off.source_hash == entry["source_hash"], key
        assert "cluster" not in off.kernel_name and "share" not in off.kernel_name, key


def test_stored_cluster_winners_render_byte_for_byte_with_sharing_at_1():
    entries = [(k, e) for k, e in _stored_decode_entries() if e["params"].get("CLUSTER", False) and _unshared(e)]
    assert entries, "no stored wgmma_decode entry with CLUSTER to compare against"
    for key, entry in entries:
        dtype, layout, label = key.split(":", 1)[1].split("/")
        params = {**entry["params"], "SHARE_X": 1, "SHARE_W": 1}
        r = render("gemm", "wgmma_decode", params, GEMM.problem(label, dtype, layout))
        assert r.source_hash == entry["source_hash"] and "share" not in r.kernel_name, key


@pytest.mark.parametrize(
    ("params", "dtype"),
    [
        (WIDE, "float16"),
        (dict(WIDE, SPLIT_K=2, STAGES=5), "bfloat16"),
        (dict(WIDE, BW=128, CONSUMERS=1, STAGES=6, SPLIT_K=4), "float16"),
        (dict(WIDE, BW=128, STAGES=6, SPLIT_K=3), "bfloat16"),
        (dict(WIDE, BW=64, MB=8, CONSUMERS=1, STAGES=8, SPLIT_K=4), "float16"),
    ],  # fmt: skip
)
def test_cluster_configurations_compile_for_sm90a_without_spills(params, dtype):
    assert wd.check(params) is None
    r = rendered(params, dtype=dtype)
    assert "__cluster_dims__(SPLIT_K, 1, 1)" in r.source and r.kernel_name.endswith("_cluster1")
    assert_compiles_for_sm90(r)


@pytest.mark.parametrize("split_k", [1, 3])
def test_mb_128_compiles_without_cluster_too(split_k):
    """M up to 128 in one row of blocks: the wgmma's N = 128, through store_c or the global split-K sum."""
    p = dict(BW=128, MB=128, CONSUMERS=1 if split_k == 1 else 2, STAGES=6, SPLIT_K=split_k)
    assert wd.check(p) is None
    r = rendered(p, shape=(128, 4104, 4088))
    assert "__cluster_dims__" not in r.source and "m64n128k16" in r.source
    assert_compiles_for_sm90(r)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(SPLIT_K=1), ["CLUSTER", "SPLIT_K = 2 to 8"]),
        (dict(SPLIT_K=16), ["CLUSTER", "SPLIT_K = 2 to 8"]),
        (dict(MB=128, STAGES=2), ["CLUSTER", "partial tile", "ring"]),
    ],  # fmt: skip
)
def test_a_cluster_the_template_cannot_build_is_refused_by_the_check_and_the_template(change, words):
    assert_refused_twice(wd, lambda p, _layout: rendered(p), {**WIDE, **change}, words)


def test_cluster_must_be_a_bool():
    assert "CLUSTER must be true or false" in wd.check(dict(WIDE, CLUSTER=2))


def test_cluster_keeps_the_grid_and_needs_no_global_scratch():
    p = GEMM.problem("50x1000x4104", "float16", "NT")  # 4 tiles of 256 rows of W, one row of blocks of x
    assert wd.launch(WIDE, p).grid == (4 * 8, 1, 1)
    assert wd.scratch(WIDE, p) == (0, 0)
    assert wd.scratch(dict(WIDE, CLUSTER=False), p)[1] == 4
    assert GEMM.check_problem("wgmma_decode", WIDE, p) is None


SHARED = dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, SHARE_X=2)


X_DIMS, W_DIMS = "(GROUP * SPLITS_IN_CLUSTER, 1, 1)", "(SPLITS_IN_CLUSTER, GROUP, 1)"
SHARE_W = dict(BW=64, MB=32, CONSUMERS=1, STAGES=8, SPLIT_K=1, CLUSTER=False, SHARE_W=2)


@pytest.mark.parametrize(
    ("params", "dtype", "dims", "multicast"),
    [
        (SHARED, "float16", X_DIMS, "&xmap"),
        (dict(SHARED, CLUSTER=False, SHARE_X=4), "bfloat16", X_DIMS, "&xmap"),
        (dict(SHARED, BW=128, MB=16, STAGES=6, SPLIT_K=1, CLUSTER=False), "float16", X_DIMS, "&xmap"),
        (dict(SHARED, BW=128, MB=32, CONSUMERS=2, STAGES=6, SPLIT_K=3), "bfloat16", X_DIMS, "&xmap"),
        (dict(SHARED, BW=256, MB=128, CONSUMERS=2, STAGES=4, SHARE_X=4), "float16", X_DIMS, "&xmap"),
        (SHARE_W, "float16", W_DIMS, "&wmap"),
        (dict(SHARE_W, SPLIT_K=2, CLUSTER=True), "bfloat16", W_DIMS, "&wmap"),
        (dict(SHARE_W, BW=128, CONSUMERS=2, MB=16, SPLIT_K=2, SHARE_W=4), "float16", W_DIMS, "&wmap"),
        (dict(SHARE_W, BW=256, CONSUMERS=2, MB=64, STAGES=4, SPLIT_K=4, CLUSTER=True), "bfloat16", W_DIMS, "&wmap"),
    ],  # fmt: skip
)
def test_shared_operand_configurations_multicast_and_compile_for_sm90a_without_spills(params, dtype, dims, multicast):
    assert wd.check(params) is None
    r = rendered(params, dtype=dtype)
    name = "x" if multicast == "&xmap" else "w"
    assert f"__cluster_dims__{dims}" in r.source and f"_share_{name}{params[f'SHARE_{name.upper()}']}" in r.kernel_name
    dst = "(W_STAGE + r * X_SLICE * BK) * 2" if name == "x" else "r * W_SLICE * BK * 2"
    assert f"tma_load_2d_multicast(w + {dst}, {multicast}, kb * BK" in r.source
    assert_compiles_for_sm90(r)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(SHARE_X=3), ["SHARE_X must be one of 1, 2, 4"]),
        (dict(MB=8), ["SHARE_X = 2 needs MB >= 16"]),
        (dict(MB=16, SHARE_X=4), ["SHARE_X = 4 needs MB >= 32"]),
        (dict(SPLIT_K=8), ["clusters of 16 blocks", "portable cluster"]),
        (dict(SHARE_X=4, SPLIT_K=4), ["clusters of 16 blocks"]),
        (dict(SHARE_X=1, SHARE_W=3), ["SHARE_W must be one of 1, 2, 4"]),
        (dict(SHARE_W=2), ["SHARE_X and SHARE_W cannot both"]),
        (dict(SHARE_X=1, SHARE_W=4, SPLIT_K=4), ["SHARE_W = 4", "clusters of 16 blocks"]),
    ],  # fmt: skip
)
def test_a_sharing_the_template_cannot_build_is_refused_by_the_check_and_the_template(change, words):
    assert_refused_twice(wd, lambda p, _layout: rendered(p), {**SHARED, **change}, words)


def test_sharing_must_be_a_whole_number_of_blocks_not_a_bool():
    assert "SHARE_X must be one of" in wd.check(dict(SHARED, SHARE_X=True))
    assert "SHARE_W must be one of" in wd.check(dict(SHARE_W, SHARE_W=True))


def test_share_x_rounds_the_tiles_up_to_whole_groups_and_keeps_the_scratch_per_real_tile():
    p = GEMM.problem("64x4104x4096", "float16", "NT")  # 65 tiles of 64 rows of W
    four = dict(SHARED, CLUSTER=False, SHARE_X=4)
    assert wd.launch(four, p).grid == (68 * 2, 1, 1)
    assert wd.launch(dict(four, SHARE_X=1), p).grid == (65 * 2, 1, 1)
    assert wd.scratch(four, p)[1] == 65  # a counter per real tile: the padding tiles have none
    assert wd.launch(SHARED, GEMM.problem("64x4096x4096", "float16", "NT")).grid == (64 * 2, 1, 1)
    assert GEMM.check_problem("wgmma_decode", four, p) is None


def test_share_w_rounds_the_row_groups_up_to_whole_groups_and_keeps_the_scratch_per_real_row_group():
    p = GEMM.problem("50x4096x4096", "float16", "NT")  # 4 row groups of 16 rows of x
    w = dict(SHARE_W, MB=16, SPLIT_K=2)
    assert wd.launch(w, p).grid == (64 * 2, 4, 1)
    assert wd.launch(dict(w, SHARE_W=4), GEMM.problem("65x4096x4096", "float16", "NT")).grid == (128, 8, 1)
    assert wd.scratch(dict(w, SHARE_W=4), GEMM.problem("65x4096x4096", "float16", "NT"))[1] == 64 * 5
    assert GEMM.check_problem("wgmma_decode", w, p) is None


def test_share_x_cuts_the_box_of_x_each_block_copies():
    p = GEMM.problem("64x4096x4096", "float16", "NT")
    assert wd.TensorMaps(dict(SHARED, SHARE_X=4, SPLIT_K=1, CLUSTER=False), p).mb == 16
    assert wd.TensorMaps(dict(SHARED, SHARE_X=1), p).mb == 64
    assert wd.TensorMaps({k: v for k, v in SHARED.items() if k != "SHARE_X"}, p).mb == 64
    assert wd.TensorMaps(SHARE_W, p).bw == 32 and wd.TensorMaps(SHARE_W, p).mb == 32
    assert wd.TensorMaps(dict(SHARE_W, SHARE_W=1), p).bw == 64


def test_rings_past_12_stages_compile_and_a_ring_past_the_shared_memory_is_refused():
    """Up to 24 stages (a long K per block keeps more of W in flight); 12 or fewer render as before they existed."""
    deep = dict(BW=64, MB=32, CONSUMERS=1, STAGES=18, SPLIT_K=1, SHARE_W=2)
    assert wd.check(deep) is None
    r = rendered(deep)
    assert "STAGES <= 24" in r.source and "STAGES <= 12" not in r.source
    assert_compiles_for_sm90(r)
    assert "STAGES <= 12" in rendered(dict(deep, STAGES=12)).source
    assert "more than the" in wd.check(dict(deep, MB=64, STAGES=18))  # 18 stages of 16 KiB: past 227 KiB
    too_deep = dict(deep, MB=8, STAGES=25, SHARE_W=1)
    assert_refused_twice(wd, lambda p, _layout: rendered(p), too_deep, ["STAGES must be 2 to 24"])


@pytest.mark.parametrize(
    ("params", "dtype", "group"),
    [
        (dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, ROTATE=True), "float16", "tile / 1 "),
        (dict(BW=128, MB=32, CONSUMERS=2, STAGES=5, SPLIT_K=3, ROTATE=True), "bfloat16", "tile / 1 "),
        (dict(BW=64, MB=32, CONSUMERS=1, STAGES=6, SPLIT_K=1, SHARE_X=2, ROTATE=True), "float16", "tile / 2 "),
        (
            dict(BW=64, MB=32, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, SHARE_W=2, ROTATE=True),
            "bfloat16",
            "tile / 1 ",
        ),
    ],  # fmt: skip
)
def test_rotate_walks_k_from_the_tiles_or_the_groups_offset_and_compiles_for_sm90a_without_spills(params, dtype, group):
    """A SHARE_X group fills one ring, so its blocks share one offset (their tile over SHARE_X); off, the loop is the
    plain one (the stored winners' sources, checked above)."""
    assert wd.check(params) is None
    r = rendered(params, dtype=dtype)
    assert r.kernel_name.endswith("_rotate1") and f"rot = run > 0 ? {group}% run : 0" in r.source
    assert_compiles_for_sm90(r)
    off = rendered(dict(params, ROTATE=False), dtype=dtype)
    assert "rotate" not in off.kernel_name and "rot = " not in off.source
    assert "for (int kb = kb0; kb < kb1; ++kb) {\n        mbar_wait(empty" in off.source


def test_rotate_must_be_a_bool():
    assert "ROTATE must be true or false" in wd.check(dict(WIDE, ROTATE=1))


@pytest.mark.parametrize(
    ("params", "dtype", "n"),
    [
        (dict(BW=64, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, CLUSTER=True, SPLIT_X=True), "float16", 32),
        (dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, SPLIT_X=True), "bfloat16", 32),
        (dict(BW=64, MB=32, CONSUMERS=2, STAGES=6, SPLIT_K=3, SPLIT_X=True), "float16", 16),
        (dict(BW=128, MB=128, CONSUMERS=2, STAGES=5, SPLIT_K=2, CLUSTER=True, SPLIT_X=True), "bfloat16", 64),
        (dict(BW=64, MB=16, CONSUMERS=2, STAGES=8, SPLIT_K=1, SHARE_X=2, SPLIT_X=True), "float16", 8),
    ],  # fmt: skip
)
def test_split_x_gives_each_consumer_all_of_w_and_half_of_x_and_compiles_for_sm90a_without_spills(params, dtype, n):
    assert wd.check(params) is None
    r = rendered(params, dtype=dtype)
    assert r.kernel_name.endswith("_split_x1") and f"wgmma.mma_async.sync.aligned.m64n{n}k16" in r.source
    assert "const unsigned x = w + W_STAGE * 2 + c * MBC * 128;" in r.source and "c * WGW" not in r.source
    assert wd.accumulators(params) == params["BW"] // 64 * n // 2
    assert_compiles_for_sm90(r)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(CONSUMERS=1), ["SPLIT_X needs CONSUMERS = 2"]),
        (dict(BW=256, STAGES=4), ["with SPLIT_X, BW must be 64 or 128"]),
        (dict(MB=8), ["SPLIT_X needs MB of 16 to 128"]),
    ],  # fmt: skip
)
def test_a_split_x_the_template_cannot_build_is_refused_by_the_check_and_the_template(change, words):
    p = {**dict(BW=64, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, CLUSTER=True, SPLIT_X=True), **change}
    assert_refused_twice(wd, lambda q, _layout: rendered(q), p, words)


def test_split_x_must_be_a_bool():
    assert "SPLIT_X must be true or false" in wd.check(dict(WIDE, SPLIT_X=1))


@pytest.mark.parametrize(
    ("params", "dtype"),
    [
        (dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, STAGE_C=True), "float16"),
        (dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, SPLIT_X=True, STAGE_C=True), "bfloat16"),
        (dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=3, STAGE_C=True), "float16"),
        (dict(BW=128, MB=16, CONSUMERS=1, STAGES=6, SPLIT_K=1, SHARE_X=2, STAGE_C=True), "bfloat16"),
        (dict(BW=256, MB=128, CONSUMERS=2, STAGES=4, SPLIT_K=2, STAGE_C=True), "float16"),
        (dict(BW=112, MB=64, CONSUMERS=1, STAGES=10, SPLIT_K=1, X_AS_M=True, STAGE_C=True), "float16"),
        (dict(BW=64, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, X_AS_M=True, STAGE_C=True), "bfloat16"),
    ],  # fmt: skip
)
def test_stage_c_stores_c_through_the_ring_and_compiles_for_sm90a_without_spills(params, dtype):
    """Both ends of a block's tile go through stage_store_c (no split-K, and the last block of the global split-K
    sum), which stores whole rows of 8 as 16-byte vectors; off, the source is the plain one (checked above)."""
    assert wd.check(params) is None
    r = rendered(params, dtype=dtype)
    assert r.kernel_name.endswith(("_stage_c1", "_stage_c1_x_as_m1")) and "*reinterpret_cast<uint4*>(dst) =" in r.source
    if wd.x_as_m(params):  # the fragment's pairs of neighbouring columns staged as float2s
        assert "*reinterpret_cast<float2*>(tile + m * SROW + n) =" in r.source
    calls = r.source.count("stage_store_c(acc, reinterpret_cast<float*>(ring), C, M, N")
    assert calls == 2 and "  store_c(acc, C" not in r.source  # SPLIT_K 1's and the global sum's (if constexpr)
    assert_compiles_for_sm90(r)
    assert "stage_store_c" not in rendered(dict(params, STAGE_C=False), dtype=dtype).source


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(SPLIT_K=2, CLUSTER=True), ["STAGE_C", "not with CLUSTER"]),
        (dict(BW=128, MB=128, STAGES=2, SPLIT_K=2), ["staged tile of C", "fit in the ring"]),  # 67.6 of 64 KiB
    ],  # fmt: skip
)
def test_a_stage_c_the_template_cannot_build_is_refused_by_the_check_and_the_template(change, words):
    p = {**dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, STAGE_C=True), **change}
    assert_refused_twice(wd, lambda q, _layout: rendered(q), p, words)


def test_stage_c_must_be_a_bool_and_takes_a_ring_just_large_enough():
    assert "STAGE_C must be true or false" in wd.check(dict(WIDE, CLUSTER=False, STAGE_C=1))
    assert wd.check(dict(BW=64, MB=128, CONSUMERS=1, STAGES=2, SPLIT_K=2, STAGE_C=True)) is None  # 34.8 of 48 KiB


@pytest.mark.parametrize(
    ("params", "dtype", "n"),
    [
        (dict(BW=32, MB=64, CONSUMERS=1, STAGES=16, SPLIT_K=1, X_AS_M=True), "float16", 32),
        (dict(BW=32, MB=64, CONSUMERS=1, STAGES=16, SPLIT_K=1, SHARE_X=2, X_AS_M=True), "bfloat16", 32),
        (dict(BW=16, MB=64, CONSUMERS=2, STAGES=12, SPLIT_K=3, X_AS_M=True), "float16", 8),
        (dict(BW=256, MB=64, CONSUMERS=2, STAGES=4, SPLIT_K=1, ROTATE=True, X_AS_M=True), "bfloat16", 128),
        (dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=2, SHARE_W=2, X_AS_M=True), "float16", 64),
        (dict(BW=112, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=1, X_AS_M=True), "bfloat16", 56),  # 14336 = 128 x 112
        (dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=4, CLUSTER=True, X_AS_M=True), "float16", 64),
    ],  # fmt: skip
)
def test_x_as_m_makes_x_the_wgmmas_m_and_compiles_for_sm90a_without_spills(params, dtype, n):
    """x's 64 rows are the wgmma's M and the consumer's BW / CONSUMERS rows of W its N; C leaves as 4-byte pairs of
    neighbouring columns (and the global split-K sum's last block stores through the same store_c)."""
    assert wd.check(params) is None
    r = rendered(params, dtype=dtype)
    assert r.kernel_name.endswith("_x_as_m1") and f"wgmma.mma_async.sync.aligned.m64n{n}k16" in r.source
    assert "wgmma_tile(acc, dx, tile_desc<false>(w + c * WGW * 128, j));" in r.source
    assert "*reinterpret_cast<unsigned*>(dst) =" in r.source and "constexpr int MI" not in r.source
    assert wd.accumulators(params) == n // 2
    assert_compiles_for_sm90(r)
    assert "x_as_m" not in rendered(dict(params, X_AS_M=False, BW=128, CONSUMERS=1, STAGES=4), dtype=dtype).source


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(MB=32), ["X_AS_M needs MB = 64"]),
        (dict(SPLIT_X=True, CONSUMERS=2, BW=64), ["X_AS_M", "not SPLIT_X"]),
        (dict(STAGE_C=True, SPLIT_K=2, CLUSTER=True), ["STAGE_C", "not with CLUSTER"]),
        (dict(BW=36), ["with X_AS_M, BW / CONSUMERS must be a multiple of 8 rows of W from 8 to 128"]),
        (dict(BW=256, STAGES=4), ["with X_AS_M, BW / CONSUMERS must be"]),
    ],  # fmt: skip
)
def test_an_x_as_m_the_template_cannot_build_is_refused_by_the_check_and_the_template(change, words):
    p = {**dict(BW=32, MB=64, CONSUMERS=1, STAGES=16, SPLIT_K=1, X_AS_M=True), **change}
    assert_refused_twice(wd, lambda q, _layout: rendered(q), p, words)


def test_x_as_m_must_be_a_bool_and_share_w_needs_whole_atoms_of_w():
    assert "X_AS_M must be true or false" in wd.check(dict(WIDE, X_AS_M=1))
    p = dict(BW=8, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=1, SHARE_W=2, X_AS_M=True)
    assert "SHARE_W = 2 needs BW a multiple of 16" in wd.check(p)
    p = dict(p, BW=24)  # 12 rows a block: its slice of the stage would start mid-atom
    assert_refused_twice(wd, lambda q, _layout: rendered(q), p, ["SHARE_W = 2 needs BW a multiple of 16"])
    assert wd.check(dict(p, BW=32)) is None


@pytest.mark.parametrize(
    ("params", "dtype", "n"),
    [
        (dict(BW=64, MB=64, CONSUMERS=1, STAGES=12, SPLIT_K=2, X_AS_M=True), "float16", 64),
        (dict(BW=128, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=1, SHARE_X=2, X_AS_M=True), "bfloat16", 64),
        (dict(BW=128, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=4, X_AS_M=True), "float16", 128),
        (dict(BW=256, MB=64, CONSUMERS=2, STAGES=4, SPLIT_K=8, CLUSTER=True, X_AS_M=True), "bfloat16", 128),
    ],  # fmt: skip
)
def test_layout_nn_reads_b_n_major_in_64_column_boxes_and_compiles_for_sm90a_without_spills(params, dtype, n):
    """Layout NN (B stored K x N) with X_AS_M: B's boxes of 64 columns x 64 K, the wgmma's B N-major (transposed)."""
    problem = GEMM.problem([16, 4096, 4096], dtype, "NN")
    assert wd.check(params) is None and wd.check_problem(params, problem) is None
    r = render("gemm", "wgmma_decode", params, problem)
    assert r.kernel_name.startswith(f"gemm_wgmma_decode_{'bf16' if dtype == 'bfloat16' else 'f16'}_nn_")
    assert f"m64n{n}k16" in r.source and "p, 1, 1, 0, 1;" in r.source  # scale-d, scale-a/b, tnspA 0, tnspB 1
    assert "tma_load_2d(w + b * 8192, &wmap, n0 + 64 * b, kb * BK, full + stage);" in r.source
    assert "tile_desc<true>(w + c * WGW * 128, j)" in r.source
    assert_compiles_for_sm90(r)


@pytest.mark.parametrize(
    ("change", "shape", "words"),
    [
        (dict(X_AS_M=False), (16, 4096, 4096), ["layout NN", "only with X_AS_M"]),
        (dict(BW=32), (16, 4096, 4096), ["in layout NN, BW / CONSUMERS must be 64 or 128"]),
        (dict(BW=128, CONSUMERS=2, SHARE_W=2, SPLIT_K=1), (16, 4096, 4096), ["in layout NN, SHARE_W must be 1"]),
        (dict(), (16, 4100, 4096), ["N = 4100 is no multiple of 8"]),
    ],  # fmt: skip
)
def test_a_layout_nn_problem_the_template_cannot_compute_is_refused_by_the_check_and_the_template(change, shape, words):
    p = {**dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=2, X_AS_M=True), **change}
    problem = GEMM.problem(list(shape), "float16", "NN")
    reason = wd.check_problem(p, problem)
    assert reason and all(w in reason for w in words), reason
    if problem.N % 8 == 0:  # the rest are the template's own static_asserts (an odd N is the tensor map's refusal)
        r = render("gemm", "wgmma_decode", p, problem)
        c = compile_source(r.source, r.kernel_name, "sm_90")
        assert not c.ok and "static assert" in c.error, f"the template accepted {p}"


def test_layout_nn_builds_b_s_tensor_map_n_major(monkeypatch):
    """The map of B in layout NN: dims {N, K}, rows N * 2 bytes, boxes of 64 columns x 64 rows of K."""
    calls = []
    problem = GEMM.problem([16, 4096, 2048], "float16", "NN")
    maps = wd.TensorMaps(dict(BW=128, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=1, X_AS_M=True), problem)
    monkeypatch.setattr("autotune.core.tensormap.tiled_2d", lambda *args: calls.append(args[1:5]) or object())
    maps._map(0, 1 << 20)
    maps._map(1, 2 << 20)
    assert calls == [(2048, 16, 4096, (64, 64)), (4096, 2048, 8192, (64, 64))]


@pytest.mark.parametrize(
    ("params", "dtype", "boxes"),
    [
        (dict(BW=64, MB=16, CONSUMERS=1, STAGES=4, SPLIT_K=2, CLUSTER=True, KBOXES=2), "bfloat16", 2),
        (dict(BW=112, MB=64, CONSUMERS=1, STAGES=2, SPLIT_K=1, X_AS_M=True, STAGE_C=True, KBOXES=4), "float16", 4),
        (dict(BW=64, MB=16, CONSUMERS=1, STAGES=2, SPLIT_K=3, ROTATE=True, KBOXES=4), "float16", 4),
    ],  # fmt: skip
)
def test_kboxes_copies_boxes_of_64_k_side_by_side_and_compiles_for_sm90a_without_spills(params, dtype, boxes):
    """A stage of KBOXES boxes: the producer copies each box of W and of x, the consumers take 4 k-steps of each, the
    ring holds KBOXES times the bytes a stage, and K is walked in stages of 64 KBOXES; at 1 the source is as before."""
    assert wd.check(params) is None
    r = rendered(params, shape=(params["MB"], 4104, 4104), dtype=dtype)
    assert r.kernel_name.endswith(f"_kboxes{boxes}") and f"constexpr int KBOXES = {boxes};" in r.source
    assert "for (int jb = 0; jb < KBOXES * BK / 16; ++jb)" in r.source
    assert "(K + KBOXES * BK - 1) / (KBOXES * BK)" in r.source
    one = wd.derived(dict(params, KBOXES=1))["SHARED_BYTES"] - 1024 - 16 * params["STAGES"] - 16
    assert wd.derived(params)["SHARED_BYTES"] - 1024 - 16 * params["STAGES"] - 16 == boxes * one
    assert_compiles_for_sm90(r)
    shape = (params["MB"], 4104, 4104)
    plain = rendered(dict(params, KBOXES=1), shape=shape, dtype=dtype)
    absent = rendered({k: v for k, v in params.items() if k != "KBOXES"}, shape=shape, dtype=dtype)
    assert "KBOXES" not in plain.source and plain.source == absent.source


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(KBOXES=3), ["KBOXES must be one of 1, 2, 4"]),
        (dict(KBOXES=2, SHARE_X=2), ["KBOXES", "not with SHARE_X or SHARE_W"]),
        (dict(KBOXES=4, STAGES=12), ["12 stages need", "shared memory"]),
    ],  # fmt: skip
)
def test_a_kboxes_the_template_cannot_build_is_refused_by_the_check_and_the_template(change, words):
    p = {**dict(BW=128, MB=16, CONSUMERS=1, STAGES=4, SPLIT_K=1), **change}
    assert_refused_twice(wd, lambda q, _layout: rendered(q), p, words)


def test_kboxes_must_be_a_count_and_is_refused_in_layout_nn():
    flag = dict(BW=128, MB=16, CONSUMERS=1, STAGES=4, SPLIT_K=1, KBOXES=True)
    assert "KBOXES must be one of 1, 2, 4" in wd.check(flag)
    p = dict(BW=64, MB=64, CONSUMERS=1, STAGES=4, SPLIT_K=1, X_AS_M=True, KBOXES=2)
    assert wd.check(p) is None
    assert "KBOXES must be 1" in wd.check_problem(p, GEMM.problem([64, 4096, 4096], "float16", "NN"))


def test_w_promotion_names_the_kernel_and_sets_only_ws_tensor_map():
    """W_PROMOTION is the L2 promotion of W's tensor map (host side): 256 (or absent) renders as before; another
    value names the kernel and its comment line, and TensorMaps asks cuda.h's enum of it for W, 256 bytes for x."""
    base = dict(BW=64, MB=8, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True)
    assert rendered(dict(base, W_PROMOTION=256)).source == rendered(base).source
    for value, enum in ((0, 0), (64, 1), (128, 2)):
        r = rendered(dict(base, W_PROMOTION=value))
        assert r.kernel_name.endswith(f"_w_promotion{value}") and f"  w_promotion {value}\n" in r.source
        assert r.source.replace(f"  w_promotion {value}", "").replace(r.kernel_name, "") == rendered(
            base
        ).source.replace(rendered(base).kernel_name, "")
        problem = GEMM.problem([4, 4096, 4096], "float16", "NT")
        assert wd.TensorMaps(dict(base, W_PROMOTION=value), problem).w_promotion == enum
    assert wd.TensorMaps(base, GEMM.problem([4, 4096, 4096], "float16", "NT")).w_promotion == 3
    assert "W_PROMOTION must be one of 0, 64, 128, 256" in wd.check(dict(base, W_PROMOTION=32))
    assert "W_PROMOTION must be one of" in wd.check(dict(base, W_PROMOTION=True))
    assert "W_PROMOTION must be one of" in wd.check(dict(base, W_PROMOTION=[256]))  # a corrupt entry: no TypeError
