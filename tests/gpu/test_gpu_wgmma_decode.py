"""GPU tier for wgmma_decode's CLUSTER option (split-K summed in a cluster's shared memory), SHARE_X and SHARE_W
(x's stages shared by TMA multicast among neighbouring tiles of W, W's among neighbouring row groups of x, alone and
with CLUSTER; tiles or row groups rounded up to whole groups), ROTATE (each block's run of K walked from an offset of
its own, with CLUSTER, the global split-K and either sharing), SPLIT_X (the two consumers on halves of x's rows),
STAGE_C (C stored through shared memory: 16-byte rows where N allows, one element at a time at the edges and where it
does not), X_AS_M (x's rows the wgmma's M: pairs of columns of C, single ones where N is odd), rings past 12 stages,
and MB = 128 (M up to 128 in one row of blocks): on fresh random inputs at M = 33, 50, 64, 100 and 128, N and K odd
multiples of 8 (the TMA's zero fill, predicated stores, uneven shares of the accumulator pairs, splits left without
K), fp16 and bf16, and alpha/beta on a relaunch. The configurations without the options are tested in
test_gpu_wgmma.py."""

from __future__ import annotations

import pytest

from autotune.kernels import FAMILIES
from autotune.measure.verify import tolerance_for
from tests.gpu.test_gpu_gemm_variants import _launch_twice, _wrong_on
from tests.gpu.test_gpu_gemm_variants import settings as settings  # the module's fixture

pytestmark = pytest.mark.gpu
GEMM = FAMILIES["gemm"]
CONFIGS = [
    dict(BW=256, MB=64, CONSUMERS=2, STAGES=4, SPLIT_K=8, CLUSTER=True),
    dict(BW=128, MB=64, CONSUMERS=1, STAGES=6, SPLIT_K=4, CLUSTER=True),
    dict(BW=128, MB=32, CONSUMERS=2, STAGES=6, SPLIT_K=3, CLUSTER=True),  # 8 pairs a thread over 3 ranks
    dict(BW=64, MB=8, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True),
    dict(BW=256, MB=128, CONSUMERS=2, STAGES=4, SPLIT_K=8, CLUSTER=True),
    dict(BW=128, MB=128, CONSUMERS=2, STAGES=6, SPLIT_K=2, CLUSTER=True),
    dict(BW=128, MB=128, CONSUMERS=1, STAGES=6, SPLIT_K=1),
    dict(BW=128, MB=128, CONSUMERS=2, STAGES=5, SPLIT_K=3),  # MB 128 through the global split-K sum
    dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, SHARE_X=2),  # clusters of 2 x 2
    dict(BW=64, MB=64, CONSUMERS=1, STAGES=6, SPLIT_K=2, SHARE_X=4),  # global split-K; N=4104: 65 tiles, grid 68
    dict(BW=128, MB=16, CONSUMERS=1, STAGES=6, SPLIT_K=1, SHARE_X=2),  # slices of 8 rows
    dict(BW=128, MB=32, CONSUMERS=2, STAGES=6, SPLIT_K=3, CLUSTER=True, SHARE_X=2),  # clusters of 6
    dict(BW=256, MB=128, CONSUMERS=2, STAGES=4, SPLIT_K=2, CLUSTER=True, SHARE_X=4),  # clusters of 8
    dict(BW=64, MB=32, CONSUMERS=1, STAGES=8, SPLIT_K=1, SHARE_W=2),  # two row groups on one tile of W
    dict(BW=64, MB=32, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, SHARE_W=2),  # clusters of 2 x 2
    dict(BW=128, MB=16, CONSUMERS=2, STAGES=6, SPLIT_K=3, SHARE_W=4),  # global split-K; M=33: 3 row groups, grid 4
    dict(BW=256, MB=64, CONSUMERS=2, STAGES=4, SPLIT_K=4, CLUSTER=True, SHARE_W=2),  # clusters of 8
    dict(BW=64, MB=32, CONSUMERS=1, STAGES=18, SPLIT_K=1, SHARE_W=2),  # a ring past 12 stages
    dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, ROTATE=True),  # K walked from a tile's offset
    dict(BW=128, MB=32, CONSUMERS=2, STAGES=5, SPLIT_K=3, ROTATE=True),  # global split-K: uneven or empty runs
    dict(BW=64, MB=32, CONSUMERS=1, STAGES=6, SPLIT_K=1, SHARE_X=2, ROTATE=True),  # one offset a group
    dict(BW=64, MB=32, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, SHARE_W=2, ROTATE=True),
    dict(BW=64, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, CLUSTER=True, SPLIT_X=True),  # consumers split x's rows
    dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, SPLIT_X=True),  # two m64 slices of W each
    dict(BW=64, MB=32, CONSUMERS=2, STAGES=6, SPLIT_K=3, SPLIT_X=True),  # global split-K, 8 rows of x a consumer
    dict(BW=128, MB=128, CONSUMERS=2, STAGES=5, SPLIT_K=2, CLUSTER=True, SPLIT_X=True),  # 64 rows of x a consumer
    dict(BW=64, MB=16, CONSUMERS=2, STAGES=8, SPLIT_K=1, SHARE_X=2, SPLIT_X=True, ROTATE=True),
    dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, STAGE_C=True),  # C through shared memory, 16-byte rows
    dict(BW=64, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=3, SPLIT_X=True, STAGE_C=True),  # the global sum's last block
    dict(BW=128, MB=16, CONSUMERS=1, STAGES=6, SPLIT_K=1, SHARE_X=2, STAGE_C=True),  # padded tiles store nothing
    dict(BW=64, MB=32, CONSUMERS=1, STAGES=8, SPLIT_K=2, SHARE_W=2, STAGE_C=True),  # padded row groups too
    dict(BW=256, MB=128, CONSUMERS=2, STAGES=4, SPLIT_K=2, STAGE_C=True),  # 128 rows of 260 floats staged
    dict(BW=32, MB=64, CONSUMERS=1, STAGES=16, SPLIT_K=1, X_AS_M=True),  # x's rows the wgmma's M, pairs of columns
    dict(BW=32, MB=64, CONSUMERS=1, STAGES=16, SPLIT_K=1, SHARE_X=2, X_AS_M=True),  # x multicast to two tiles
    dict(BW=16, MB=64, CONSUMERS=2, STAGES=12, SPLIT_K=3, X_AS_M=True),  # m64n8 a consumer, the global sum
    dict(BW=128, MB=64, CONSUMERS=2, STAGES=6, SPLIT_K=1, SHARE_W=2, ROTATE=True, X_AS_M=True),  # padded row groups
    dict(BW=112, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, X_AS_M=True),  # m64n56 a consumer: tiles no power of 2
    dict(BW=32, MB=64, CONSUMERS=1, STAGES=12, SPLIT_K=3, CLUSTER=True, X_AS_M=True),  # pairs of columns summed
    dict(BW=64, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=2, CLUSTER=True, SHARE_X=2, X_AS_M=True),  # clusters of 2 x 2
    dict(BW=112, MB=64, CONSUMERS=1, STAGES=10, SPLIT_K=1, X_AS_M=True, STAGE_C=True),  # pairs staged, 16-byte rows
    dict(BW=48, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=3, X_AS_M=True, STAGE_C=True),  # the global sum's last block
    dict(BW=128, MB=8, CONSUMERS=1, STAGES=3, SPLIT_K=1, KBOXES=2),  # two boxes of 64 K a stage
    dict(BW=64, MB=16, CONSUMERS=1, STAGES=4, SPLIT_K=2, CLUSTER=True, KBOXES=4),  # K no multiple of a stage's 256
    dict(BW=64, MB=64, CONSUMERS=1, STAGES=4, SPLIT_K=3, X_AS_M=True, STAGE_C=True, KBOXES=2),  # the global sum
    dict(BW=128, MB=32, CONSUMERS=2, STAGES=3, SPLIT_K=3, ROTATE=True, KBOXES=2),  # runs of stages from an offset
    dict(BW=64, MB=8, CONSUMERS=1, STAGES=5, SPLIT_K=2, CLUSTER=True, KBOXES=2, W_PROMOTION=0),  # W's map: none
    dict(BW=112, MB=64, CONSUMERS=1, STAGES=5, SPLIT_K=1, X_AS_M=True, STAGE_C=True, W_PROMOTION=128),
]
# M past MB (a second row of blocks) or short of it; N no multiple of BW (nor of 8: C's rows not whole 16 bytes); K
# no multiple of a stage, shorter than the splits, or long (the Llama MLP's down projection)
SHAPES = [(33, 1000, 1000), (37, 1001, 1000), (50, 4104, 4088), (64, 4096, 4096), (100, 264, 14344), (128, 4104, 72),
          (64, 14336, 4096), (1, 8, 8)]  # fmt: skip


def _needs_sm90(settings):
    if settings.arch != "sm_90":
        pytest.skip(f"wgmma is sm_90a code; this GPU is {settings.arch}")


def _label(p):
    label = "bw{BW}-mb{MB}-c{CONSUMERS}-s{STAGES}-sk{SPLIT_K}".format(**p) + ("-cluster" if p.get("CLUSTER") else "")
    label += "".join(f"-{k[-1].lower()}{p[k]}" for k in ("SHARE_X", "SHARE_W") if p.get(k, 1) > 1)
    label += ("-rotate" if p.get("ROTATE") else "") + ("-split-x" if p.get("SPLIT_X") else "")
    label += ("-stage-c" if p.get("STAGE_C") else "") + ("-x-as-m" if p.get("X_AS_M") else "")
    label += f"-kboxes{p['KBOXES']}" if p.get("KBOXES", 1) > 1 else ""
    return label + (f"-w-promotion{p['W_PROMOTION']}" if p.get("W_PROMOTION", 256) != 256 else "")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("params", CONFIGS, ids=_label)
def test_wgmma_decode_cluster_and_mb128_are_correct_on_odd_shapes(settings, dtype, params):
    _needs_sm90(settings)
    failures = _wrong_on(settings, "wgmma_decode", dtype, "NT", params, SHAPES)
    assert not failures, "\n".join(failures)


RELAUNCHED = (0, 2, 7, 9, 11, 15, 16, 19, 22, 24, 27, 28, 30, 33, 34, 35, 37, 38, 42, 43)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("params", [CONFIGS[i] for i in RELAUNCHED], ids=_label)
def test_wgmma_decode_cluster_relaunches_with_alpha_beta(settings, dtype, params):
    """No counters to leave zero with CLUSTER, and none for the padding tiles or row groups of SHARE_X and SHARE_W:
    a second launch sums right too, and beta reads C once."""
    _needs_sm90(settings)
    problem = GEMM.problem([50, 1000, 3000], dtype, "NT")
    errors = _launch_twice(settings, "wgmma_decode", params, problem, alpha=0.75, beta=-1.5)
    assert all(e < tolerance_for(dtype) for e in errors), errors


NN_CONFIGS = [
    dict(BW=64, MB=64, CONSUMERS=1, STAGES=12, SPLIT_K=2, X_AS_M=True),  # the global split-K sum
    dict(BW=128, MB=64, CONSUMERS=2, STAGES=8, SPLIT_K=1, SHARE_X=2, X_AS_M=True),  # x multicast to two tiles
    dict(BW=128, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=3, X_AS_M=True),  # two 64-column atoms in one wgmma
    dict(BW=256, MB=64, CONSUMERS=2, STAGES=4, SPLIT_K=1, ROTATE=True, X_AS_M=True),
    dict(BW=256, MB=64, CONSUMERS=2, STAGES=4, SPLIT_K=8, CLUSTER=True, X_AS_M=True),  # K summed in clusters of 8
    dict(BW=128, MB=64, CONSUMERS=1, STAGES=6, SPLIT_K=4, CLUSTER=True, SHARE_X=2, X_AS_M=True),  # of 4 x 2
    dict(BW=64, MB=64, CONSUMERS=1, STAGES=8, SPLIT_K=2, CLUSTER=True, X_AS_M=True, W_PROMOTION=0),  # B's map: none
]
# layout NN: N a multiple of 8 (B's rows whole 16 bytes), no multiple of 64 (a box past N) at 1000, 4104 and 264
NN_SHAPES = [(33, 1000, 1000), (50, 4104, 4088), (64, 4096, 4096), (100, 264, 14344), (1, 8, 8), (8, 4096, 4096),
             (128, 4104, 72)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("params", NN_CONFIGS, ids=_label)
def test_wgmma_decode_layout_nn_is_correct_on_odd_shapes(settings, dtype, params):
    """Layout NN (B stored K x N, a plain row-major matrix) with X_AS_M, then a relaunch with alpha and beta."""
    _needs_sm90(settings)
    failures = _wrong_on(settings, "wgmma_decode", dtype, "NN", params, NN_SHAPES)
    assert not failures, "\n".join(failures)
    errors = _launch_twice(settings, "wgmma_decode", params, GEMM.problem([50, 1000, 3000], dtype, "NN"), 0.75, -1.5)
    assert all(e < tolerance_for(dtype) for e in errors), errors
