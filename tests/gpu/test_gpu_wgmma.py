"""GPU tier for the wgmma template (sm_90a): every dtype and layout on fresh random inputs, shapes no tile
divides (the TMA's zero fill and the predicated epilogue), K shorter than a stage, alpha/beta on a relaunch, and
the refusal of rows that are not whole 16 bytes; staging in boxes (EPI_BOXES) and pingpong consumers; tile widths
that are no multiple of 64 (BN 176, 208, 80; 176, 112, 240 with the TMA store); SWAP_AB (C^T = B^T A^T); a split tail
(SPLIT) on tiles that fill the GPU in part and on a wave plus a few, summing to the same bits on every launch; the
walk turned back (SNAKE)."""

from __future__ import annotations

import pytest

from autotune.kernels import FAMILIES
from autotune.measure.verify import tolerance_for
from tests.gpu.test_gpu_gemm_variants import _launch_twice, _wrong_on
from tests.gpu.test_gpu_gemm_variants import settings as settings  # the module's fixture

pytestmark = pytest.mark.gpu
GEMM = FAMILIES["gemm"]
WG = dict(BM=128, BN=256, CONSUMERS=2, STAGES=4, RASTER=8, CLUSTER_M=1, TMA_STORE=False)
# SWAP_AB (C^T = B^T A^T, C stored transposed): cuBLAS's 2040 x 2056 cut by TMA, block pairs from registers,
# pingpong consumers, a split tail, cuBLAS's 4096^3 structure (two consumers of 128 of C's columns)
SWAP = [
    dict(WG, BM=192, BN=176, CONSUMERS=3, STAGES=3, TMA_STORE=True, SWAP_AB=True),
    dict(WG, STAGES=3, CLUSTER_M=2, SWAP_AB=True),
    dict(WG, BM=64, BN=144, STAGES=4, RASTER=3, TMA_STORE=True, PINGPONG=True, SWAP_AB=True),
    dict(WG, BM=64, BN=144, CONSUMERS=1, STAGES=6, TMA_STORE=True, SPLIT=4, SWAP_AB=True),
    dict(WG, BM=256, BN=128, STAGES=3, RASTER=16, TMA_STORE=True, SWAP_AB=True),  # 128 rows a consumer: 2 boxes
]
CONFIGS = [
    WG,
    dict(WG, BM=256, BN=128, STAGES=3, RASTER=1, CLUSTER_M=2),
    dict(WG, STAGES=3, CLUSTER_M=2, TMA_STORE=True),
    dict(WG, BN=128, CONSUMERS=1, STAGES=5, RASTER=3, TMA_STORE=True),
    dict(WG, BM=64, BN=192, CONSUMERS=1, STAGES=2, RASTER=2, CLUSTER_M=2),
    # staging in boxes of 64 columns (two in turn; one), and pingpong consumers (whole tiles in turn; with boxes;
    # storing from registers)
    dict(WG, TMA_STORE=True, EPI_BOXES=2),
    dict(WG, BM=256, BN=128, STAGES=3, RASTER=1, TMA_STORE=True, EPI_BOXES=1),
    dict(WG, BN=128, STAGES=5, TMA_STORE=True, PINGPONG=True),
    dict(WG, BM=64, STAGES=4, RASTER=3, TMA_STORE=True, EPI_BOXES=1, PINGPONG=True),
    dict(WG, BM=64, BN=192, STAGES=5, RASTER=16, PINGPONG=True),
    # three consumers, 192-row tiles (staged in one box; from registers in block pairs)
    dict(WG, BM=192, BN=192, CONSUMERS=3, TMA_STORE=True, EPI_BOXES=1),
    dict(WG, BM=192, BN=128, CONSUMERS=3, STAGES=4, RASTER=3, CLUSTER_M=2),
    # BN no multiple of 64, stored from registers: 192 x 176 in block pairs (an N-major B in 3 boxes, 2 and 1 a
    # block), 128 x 208 (4 boxes, 16 columns unread), 64 x 80 with a split tail
    dict(WG, BM=192, BN=176, CONSUMERS=3, STAGES=4, CLUSTER_M=2),
    dict(WG, BN=208, STAGES=3, RASTER=3),
    dict(WG, BM=64, BN=80, CONSUMERS=1, STAGES=6, RASTER=2, SPLIT=2),
    # and stored by TMA in boxes of 16 columns: 192 x 176 (cuBLAS's 2040 x 2056 cut), pingpong 128 x 112, block pairs
    # of 128 x 240
    dict(WG, BM=192, BN=176, CONSUMERS=3, STAGES=3, TMA_STORE=True),
    dict(WG, BN=112, STAGES=4, RASTER=3, TMA_STORE=True, PINGPONG=True),
    dict(WG, BN=240, STAGES=3, CLUSTER_M=2, TMA_STORE=True),
    # A's and B's maps without L2 promotion, and with 128 bytes (host side only: the same code)
    dict(WG, STAGES=3, TMA_STORE=True, L2_PROMOTION=0),
    dict(WG, BM=192, BN=192, CONSUMERS=3, CLUSTER_M=2, TMA_STORE=True, EPI_BOXES=1, L2_PROMOTION=128),
    *SWAP,
    # SNAKE (a block's every other tile walks K backwards, every other group of RASTER rows its columns right to
    # left; 2040 x 2056 has 144 such tiles, so some blocks walk a second, backwards): stored by TMA, block pairs of
    # 192 x 176 from registers, pingpong consumers, a split tail's runs backwards
    dict(WG, STAGES=3, RASTER=3, TMA_STORE=True, SNAKE=True),
    dict(WG, BM=192, BN=176, CONSUMERS=3, STAGES=3, RASTER=2, CLUSTER_M=2, SNAKE=True),
    dict(WG, BN=112, STAGES=4, RASTER=3, TMA_STORE=True, PINGPONG=True, SNAKE=True),
    dict(WG, BN=128, CONSUMERS=1, STAGES=5, RASTER=3, SPLIT=4, SNAKE=True),
    # L2 hints (EVICT_*): A's lines kept, B's and C's let go first, stored by TMA; block pairs multicasting B with a
    # hint, stored from registers
    dict(WG, STAGES=3, RASTER=3, TMA_STORE=True, SNAKE=True, EVICT_A="last", EVICT_B="first", EVICT_C="first"),
    dict(WG, BM=192, BN=176, CONSUMERS=3, STAGES=3, RASTER=2, CLUSTER_M=2, EVICT_A="first", EVICT_B="last"),
    # a split tail: 1000^3's 32 tiles all in 2 runs; 2040 x 2056's 12 tiles past a wave of 132 in 2 runs; and 8 runs
    # of 128 x 128 tiles with one consumer (fewer where K has fewer stages)
    dict(WG, STAGES=3, TMA_STORE=True, SPLIT=2),
    dict(WG, BN=128, CONSUMERS=1, STAGES=5, RASTER=3, SPLIT=8),
    dict(WG, BM=192, BN=192, CONSUMERS=3, STAGES=3, TMA_STORE=True, SPLIT=3),
]
SPLIT_TAIL = CONFIGS[-3:]
# every extent a multiple of 8 (the maps' rows), none a multiple of the tiles; M and N odd where they lead no row
SHAPES = [(8, 8, 8), (136, 264, 72), (1000, 1000, 1000), (2040, 2056, 2072), (520, 4104, 4088)]
ODD = {"NN": [(129, 264, 40), (1, 4096, 4096)], "NT": [(129, 263, 72), (3, 4095, 4096)],
       "TN": [(136, 264, 77)], "TT": [(136, 263, 72)]}  # fmt: skip


def _needs_sm90(settings):
    if settings.arch != "sm_90":
        pytest.skip(f"wgmma is sm_90a code; this GPU is {settings.arch}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize(
    "params",
    CONFIGS,
    ids=lambda p: (
        "{BM}x{BN}c{CONSUMERS}s{STAGES}r{RASTER}cl{CLUSTER_M}st{TMA_STORE:d}".format(**p)
        + (f"sk{p['SPLIT']}" if "SPLIT" in p else "")
        + (f"eb{p['EPI_BOXES']}" if "EPI_BOXES" in p else "")
        + ("pp" if p.get("PINGPONG") else "")
        + (f"l2p{p['L2_PROMOTION']}" if "L2_PROMOTION" in p else "")
        + ("swap" if p.get("SWAP_AB") else "")
        + ("snake" if p.get("SNAKE") else "")
        + "".join(f"e{x.lower()}{p[f'EVICT_{x}']}" for x in "ABC" if f"EVICT_{x}" in p)
    ),
)
def test_wgmma_is_correct_for_every_dtype_and_layout(settings, dtype, layout, params):
    """Shapes the configuration refuses (TMA_STORE with N % 8 != 0) are left out; the CPU tier checks refusals."""
    _needs_sm90(settings)
    shapes = [s for s in [*SHAPES, *ODD[layout]] if not (params["TMA_STORE"] and s[1] % 8)]
    failures = _wrong_on(settings, "wgmma", dtype, layout, params, shapes)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_relaunches_with_alpha_beta(settings, dtype):
    _needs_sm90(settings)
    for layout, params in (("NN", WG), ("TT", CONFIGS[1]), ("NT", CONFIGS[2]), ("TN", CONFIGS[3]),
                           ("NN", CONFIGS[5]), ("TT", CONFIGS[7]), ("TN", CONFIGS[8]), ("NT", CONFIGS[9]),
                           ("NN", CONFIGS[10]), ("TN", CONFIGS[11]),
                           *zip(("NN", "NT", "TN", "TT", "NN"), SWAP, strict=True)):  # fmt: skip
        problem = GEMM.problem([264, 1000, 3000], dtype, layout)
        errors = _launch_twice(settings, "wgmma", params, problem, alpha=0.75, beta=-1.5)
        assert all(e < tolerance_for(dtype) for e in errors), (layout, params, errors)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_split_tail_relaunches_the_same_sums(settings, dtype):
    """The split tail's counters are left zero (checked by _launch_twice), so a second launch on the same scratch sums
    right too, and to the same bits: the runs add in run order whichever arrives last."""
    _needs_sm90(settings)
    for layout, params, shape in (("NN", SPLIT_TAIL[0], [264, 1000, 3000]), ("TT", SPLIT_TAIL[1], [1000, 1000, 1000]),
                                  ("NT", SPLIT_TAIL[0], [2040, 2056, 2072]),
                                  ("TN", SPLIT_TAIL[2], [2040, 2056, 2072])):  # fmt: skip
        errors = _launch_twice(settings, "wgmma", params, GEMM.problem(shape, dtype, layout), alpha=0.75, beta=-1.5)
        assert all(e < tolerance_for(dtype) for e in errors), (layout, params, errors)
        assert errors[0] == errors[1], (layout, params, errors)


DECODE = [
    dict(BW=128, MB=16, CONSUMERS=1, STAGES=6, SPLIT_K=4),
    dict(BW=64, MB=8, CONSUMERS=1, STAGES=8, SPLIT_K=1),
    dict(BW=128, MB=64, CONSUMERS=2, STAGES=4, SPLIT_K=3),
    dict(BW=256, MB=32, CONSUMERS=2, STAGES=3, SPLIT_K=8),
]
# M past MB (a second row of blocks), N no multiple of BW, K no multiple of a stage or shorter than the splits
DECODE_SHAPES = [(1, 4096, 4096), (3, 1000, 1000), (16, 14336, 4096), (64, 4096, 14336), (100, 333, 72), (1, 8, 8)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("params", DECODE, ids=lambda p: "bw{BW}-mb{MB}-c{CONSUMERS}-s{STAGES}-sk{SPLIT_K}".format(**p))
def test_wgmma_decode_is_correct_in_nn_linear_layout(settings, dtype, params):
    _needs_sm90(settings)
    failures = _wrong_on(settings, "wgmma_decode", dtype, "NT", params, DECODE_SHAPES)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_decode_split_k_relaunches_with_alpha_beta(settings, dtype):
    """The split-K counters are left zero, so a second launch on the same scratch sums right too."""
    _needs_sm90(settings)
    problem = GEMM.problem([5, 1000, 3000], dtype, "NT")
    errors = _launch_twice(settings, "wgmma_decode", DECODE[0], problem, alpha=0.75, beta=-1.5)
    assert all(e < tolerance_for(dtype) for e in errors), errors


TF32X3 = [
    dict(BN=128, PRODUCERS=1, CONSUMERS=2, STAGES=3, ROUND=256, RASTER=8, SPLIT_K=1),
    dict(BN=128, PRODUCERS=2, CONSUMERS=1, STAGES=4, ROUND=128, RASTER=1, SPLIT_K=1),
    dict(BN=64, PRODUCERS=1, CONSUMERS=1, STAGES=2, ROUND=64, RASTER=3, SPLIT_K=1),
    dict(BN=64, PRODUCERS=2, CONSUMERS=2, STAGES=4, ROUND=256, RASTER=8, SPLIT_K=1),
    # split-K: 4 splits of 128 x 128 tiles; 3 of 4-warpgroup tiles; 7 (runs of K's stages that differ in length,
    # more splits than K = 65 has stages, more units than SMs at 1000^3 and 4095x4097x4093)
    dict(BN=128, PRODUCERS=1, CONSUMERS=2, STAGES=3, ROUND=256, RASTER=8, SPLIT_K=4),
    dict(BN=64, PRODUCERS=2, CONSUMERS=2, STAGES=4, ROUND=128, RASTER=3, SPLIT_K=3),
    dict(BN=128, PRODUCERS=2, CONSUMERS=1, STAGES=4, ROUND=64, RASTER=1, SPLIT_K=7),
    # PREFETCH (a producer's next stage loaded before the current one is stored): one producer, two taking turns
    # (each walks every second stage, across units), with split-K, and 128 x 128 tiles (setmaxnreg: the producer
    # at 184 registers, the consumers at 160)
    dict(BN=128, PRODUCERS=1, CONSUMERS=2, STAGES=3, ROUND=256, RASTER=8, SPLIT_K=1, PREFETCH=True),
    dict(BN=128, PRODUCERS=1, CONSUMERS=2, STAGES=3, ROUND=128, RASTER=3, SPLIT_K=4, PREFETCH=True),
    dict(BN=128, PRODUCERS=1, CONSUMERS=1, STAGES=4, ROUND=256, RASTER=8, SPLIT_K=1, PREFETCH=True),
    dict(BN=128, PRODUCERS=2, CONSUMERS=1, STAGES=3, ROUND=128, RASTER=1, SPLIT_K=3, PREFETCH=True),
    dict(BN=64, PRODUCERS=1, CONSUMERS=2, STAGES=4, ROUND=64, RASTER=16, SPLIT_K=5, PREFETCH=True),
]
# odd extents and leading dimensions (scalar loads), K shorter than a stage, one stage, a few windows
TF32X3_SHAPES = [(1, 1, 1), (37, 91, 13), (129, 257, 65), (1000, 1000, 1000), (128, 4096, 4096), (4095, 4097, 4093)]


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize(
    "params",
    TF32X3,
    ids=lambda p: (
        "bn{BN}-p{PRODUCERS}-c{CONSUMERS}-s{STAGES}-r{ROUND}-sk{SPLIT_K}".format(**p)
        + ("-pf" if p.get("PREFETCH") else "")
    ),
)
def test_wgmma_tf32x3_meets_the_float32_tolerance(settings, layout, params):
    _needs_sm90(settings)
    failures = _wrong_on(settings, "wgmma_tf32x3", "float32", layout, params, TF32X3_SHAPES)
    assert not failures, "\n".join(failures)


def test_wgmma_tf32x3_relaunches_with_alpha_beta(settings):
    """With split-K the last warp of a tile applies alpha and beta and leaves its counter zero, so a second launch
    on the same scratch sums right too."""
    _needs_sm90(settings)
    for layout, params in (("NN", TF32X3[0]), ("TN", TF32X3[8]), ("NT", TF32X3[10]), ("TT", TF32X3[6])):
        problem = GEMM.problem([300, 1001, 2999], "float32", layout)
        errors = _launch_twice(settings, "wgmma_tf32x3", params, problem, alpha=0.75, beta=-1.5)
        assert all(e < tolerance_for("float32") for e in errors), (layout, params, errors)
