"""CPU tier for the Winograd F(2x2,3x3) conv2d template: checks mirrored by static_asserts, refusal of other
filters and strides, launch geometry and shared memory, NVRTC compiles for sm_90 without spills, the kernel's
numbers under the host emulator (odd shapes, both layouts and dtypes, fp32 accuracy at C = 512), the spec, and
the measured error shown next to the time in the reports."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest

from autotune import report
from autotune.build.compiler import compile_source
from autotune.build.templates import render, template_path
from autotune.core.space import Config
from autotune.measure.bench import Timing
from autotune.measure.evaluate import Candidate, Status, TrialResult, render_candidate, static_check
from autotune.tune.search import result_attrs
from autotune.tune.spec import load_spec
from tests.emulation.test_conv import CONV, ROOT, SETTINGS, _emulate
from tests.sweep import case_cover, covering, full_sweep, product, share, value_cover

D = dict(TILES=32, KB=32, CB=8, KT=4, TT=8, ET=1, SPAD=4, PIPE=0, MINB=1)  # 512 threads, 32 accumulators
NP = dict(PIPE=0, MINB=1)
GOOD = {
    "default": D,
    "wide": dict(TILES=64, KB=32, CB=8, KT=4, TT=8, ET=2, SPAD=4, **NP),  # 256 threads, 64 accumulators
    "small": dict(TILES=16, KB=16, CB=4, KT=4, TT=4, ET=2, SPAD=0, **NP),  # 128 threads
    "odd_cb": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, **NP),  # 64 threads; a warp spans element groups
    "tall_k": dict(TILES=32, KB=64, CB=4, KT=8, TT=4, ET=2, SPAD=4, **NP),  # 512 threads, KT/4 = 2 float4 chunks
    # pipelined (two shared stages, next step's operands in registers during the GEMMs) and MINB = 2
    "pipe": dict(D, PIPE=1),  # 512 threads, 32 accumulators: fits 128 registers
    "pipe_k16m2": dict(TILES=32, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=4, PIPE=1, MINB=2),  # 256 threads, 2 per SM
    "pipe_small2": dict(TILES=16, KB=16, CB=4, KT=4, TT=4, ET=2, SPAD=0, PIPE=1, MINB=2),  # 128 threads
    "pipe_odd_cb": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, PIPE=1, MINB=1),  # items past the end
    "pipe_tall_k": dict(TILES=16, KB=64, CB=8, KT=8, TT=4, ET=2, SPAD=4, PIPE=1, MINB=1),  # 256 threads, 64 acc
    "t8": dict(TILES=8, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=4, PIPE=1, MINB=1),  # batch 1: 128 threads, TG = 2
    "k8": dict(TILES=16, KB=8, CB=16, KT=4, TT=4, ET=1, SPAD=4, PIPE=0, MINB=2),  # KG = 2
    # PIPE = 2: raw operands by cp.async into a shared buffer (the host emulation copies them synchronously)
    "cp_w2": dict(TILES=64, KB=32, CB=8, KT=8, TT=8, ET=1, SPAD=4, PIPE=2, MINB=1),  # batch-32 winner, 512 threads
    "cp_t8": dict(TILES=8, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=4, PIPE=2, MINB=1),  # 2 filters a thread
    "cp_odd_cb": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, PIPE=2, MINB=1),  # tiles past the end
    "pair": dict(TILES=32, KB=32, CB=8, KT=8, TT=8, ET=1, SPAD=0, PIPE=0, MINB=2),  # batch-32 winner, 2 per SM
    # SPLIT_C: grid.z slices of the input channels, the last block of a tile sums the partial outputs
    "split2": dict(TILES=32, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=2, SPLIT_C=2),  # batch-1 winner
    "split3_p0": dict(TILES=16, KB=16, CB=4, KT=4, TT=4, ET=2, SPAD=0, PIPE=0, MINB=1, SPLIT_C=3),
    "split4_cp": dict(TILES=8, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=8, PIPE=2, MINB=2, SPLIT_C=4),
    # DEPTH: a ring of PIPE 2's raw buffers, several steps of copies in flight (batch 1)
    "deep3": dict(TILES=32, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=2, MINB=1, DEPTH=3),  # 256 threads
    "deep2_odd": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, PIPE=2, MINB=1, DEPTH=2),  # tiles past the end
    "deep4_split": dict(TILES=8, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=8, PIPE=2, MINB=1, SPLIT_C=2, DEPTH=4),
    # TILES not a power of two (TG = 3): 132 or 264 blocks for the batch-1 56x56 layer
    "deep2_regs": dict(TILES=32, KB=16, CB=16, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=1, DEPTH=2, UNROLL=16),
    "deep3_regs_split": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=2, SPAD=8, PIPE=1, MINB=1, DEPTH=3, SPLIT_C=2),
    "t24": dict(TILES=24, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=2),  # 192 threads
    "t12": dict(TILES=12, KB=32, CB=8, KT=8, TT=4, ET=1, SPAD=8, PIPE=1, MINB=2),
    # UNROLL: the GEMMs' channel loop unrolled 4 times or completely
    "unroll_full": dict(TILES=32, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=2, UNROLL=8),
    # ROUNDS: the epilogue in one or two rounds (two or four output pairs a thread)
    "rounds1": dict(TILES=32, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1),
    "rounds2_split": dict(TILES=16, KB=64, CB=8, KT=8, TT=4, ET=2, SPAD=4, PIPE=0, MINB=1, ROUNDS=2, SPLIT_C=2),
    "unroll4_cp": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, PIPE=2, MINB=1, UNROLL=4),
    # CGROUPS: groups of a block on their own slices of the input channels, M summed in the epilogue
    "cg2_p0": dict(TILES=16, KB=16, CB=4, KT=4, TT=4, ET=2, SPAD=0, PIPE=0, MINB=1, CGROUPS=2),  # 2 x 128 threads
    "cg2_regs": dict(
        TILES=24, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=1, DEPTH=2, UNROLL=16, ROUNDS=1, CGROUPS=2
    ),  # 2 x 192 threads, register ring
    "cg3_cp_split": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, PIPE=2, MINB=1, CGROUPS=3, SPLIT_C=2),
    "cg4_pipe": dict(TILES=8, KB=16, CB=4, KT=4, TT=4, ET=1, SPAD=4, PIPE=1, MINB=1, ROUNDS=2, CGROUPS=4),  # 4 x 128
    # PREFETCH: the GEMMs' next channel read from shared memory during this one's FMAs
    "pf_b1": dict(TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, ROUNDS=1, PREFETCH=1),  # batch 1
    "pf_wide": dict(TILES=32, KB=64, CB=8, KT=8, TT=8, ET=2, SPAD=4, PIPE=0, MINB=1, PREFETCH=1),  # 2 float4 chunks
    "pf_odd_cb": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, PIPE=2, MINB=1, PREFETCH=1, UNROLL=4),
    "pf_deep_cg": dict(TILES=24, KB=16, CB=8, KT=4, TT=8, ET=1, SPAD=8, PIPE=1, MINB=1, DEPTH=2, PREFETCH=1, CGROUPS=2),
    # WSTAGE: the step's filters staged in shared buffers by 16-byte cp.async (fp32, C % 4 == 0)
    "ws_b1": dict(
        TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1, PREFETCH=1, WSTAGE=1
    ),  # the batch-1 56x56 NCHW winner with WSTAGE
    "ws_deep3_split": dict(
        TILES=16, KB=8, CB=4, KT=4, TT=4, ET=2, SPAD=8, PIPE=1, MINB=1, DEPTH=3, SPLIT_C=2, WSTAGE=1
    ),
    "ws_t8": dict(TILES=8, KB=16, CB=8, KT=4, TT=4, ET=1, SPAD=4, PIPE=1, MINB=1, DEPTH=2, UNROLL=8, WSTAGE=1),
    # PREFETCH 2: the GEMMs' next two channels in flight
    "pf2_b1": dict(
        TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1, PREFETCH=2, WSTAGE=1
    ),
    "pf2_wide": dict(TILES=16, KB=16, CB=5, KT=8, TT=4, ET=2, SPAD=4, PIPE=0, MINB=1, PREFETCH=2),  # odd CB
    # MMA: the 16 GEMMs on tensor cores (3xTF32); 16 units over 12 warps (uneven), 32 over 4, 16 over 2 with SPLIT_C
    "mma_b1": dict(
        TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1, WSTAGE=1, MMA=1
    ),
    "mma_k32": dict(TILES=16, KB=32, CB=8, KT=8, TT=4, ET=2, SPAD=4, PIPE=0, MINB=1, ROUNDS=1, MMA=1),
    "mma_split": dict(TILES=8, KB=16, CB=8, KT=4, TT=4, ET=2, SPAD=8, PIPE=2, MINB=1, ROUNDS=1, SPLIT_C=2, MMA=1),
    # LEAN: the in-image mask from row and column nibbles, unsigned tile divisions, the channel check in the mask
    "lean_b1": dict(
        TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1, WSTAGE=1, MMA=1, LEAN=1
    ),
    "lean_cp": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, PIPE=2, MINB=1, LEAN=1),  # PIPE 2, odd CB
    # LEAN 2: the epilogue's pair coordinates in the prologue, no epilogue barrier after the step loop's last one
    "lean2_p2": dict(TILES=16, KB=8, CB=3, KT=4, TT=4, ET=4, SPAD=8, PIPE=2, MINB=1, DEPTH=2, ROUNDS=2, LEAN=2),
    "lean2_b1": dict(
        TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1, WSTAGE=1, MMA=1, LEAN=2
    ),
    "lean2_split": dict(TILES=16, KB=8, CB=4, KT=4, TT=4, ET=2, SPAD=8, PIPE=1, MINB=1, DEPTH=3, SPLIT_C=2, LEAN=2),
    # UPAD: U's rows padded apart from V's (MMA: the A fragments' reads; FMA: the float4 reads of U)
    "upad_b1": dict(
        TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1, WSTAGE=1, MMA=1, UPAD=8
    ),
    "upad_fma": dict(TILES=16, KB=16, CB=5, KT=8, TT=4, ET=2, SPAD=4, PIPE=0, MINB=1, PREFETCH=2, UPAD=0),
}
PROBLEM = "n32c64h56w56k64r3s3u1p1"


def test_registered_with_its_parameters_and_a_source_file():
    info = CONV.templates["winograd"]
    assert info.params == ("TILES", "KB", "CB", "KT", "TT", "ET", "SPAD", "PIPE", "MINB", "SPLIT_C", "DEPTH", "UNROLL",
                           "ROUNDS", "CGROUPS", "PREFETCH", "WSTAGE", "MMA", "LEAN", "UPAD")  # fmt: skip
    assert (
        info.optional
        == ("SPLIT_C", "DEPTH", "UNROLL", "ROUNDS", "CGROUPS", "PREFETCH", "WSTAGE", "MMA", "LEAN", "UPAD")
        and info.kind("UNROLL") == "int>=0"
        and info.kind("WSTAGE") == "int>=0"
        and info.kind("MMA") == "int>=0"
    )
    assert info.dtypes == ("float32", "float16") and info.kind("SPAD") == "int>=0" and info.kind("TILES") == "int>=1"
    assert info.kind("PIPE") == "int>=0" and info.kind("MINB") == "int>=1"
    assert template_path("conv2d", "winograd") == ROOT / "templates" / "conv" / "winograd.cu.j2"
    p = CONV.problem("n1c3h7w5k5r3s3u1p1", "float16", "NHWC")
    assert (
        CONV.kernel_name("winograd", D, p) == "conv2d_winograd_f16_nhwc_tiles32_kb32_cb8_kt4_tt8_et1_spad4_pipe0_minb1"
    )
    ctx = CONV.context("winograd", D, p)
    assert ctx["LAYOUT"] == "NHWC" and ctx["THREADS"] == 512
    other = CONV.problem("n32c512h7w7k512r3s3u1p1", "float16", "NHWC")
    assert render("conv2d", "winograd", D, p).source_hash == render("conv2d", "winograd", D, other).source_hash


# --- checks, static_asserts, refusals -------------------------------------------------------------

WS_PIPE = "WSTAGE needs PIPE 1 and DEPTH >= 2 (a ring of DEPTH filter buffers)"
MMA_ONE_ROUND = "MMA needs ROUNDS 1 and CGROUPS 1 (its M goes through shared memory in one round)"
MMA_FMA_ONLY = "MMA needs PREFETCH 0 and UNROLL 0 (they shape the FMA loop it replaces)"
REJECTED = [
    (dict(D, KT=6, KB=36), "KT and TT must be multiples of 4 (float4 reads of U and V)"),
    (dict(D, TT=2), "KT and TT must be multiples of 4 (float4 reads of U and V)"),
    (dict(D, KT=8, KB=36), "KT must divide KB"),
    (dict(D, PIPE=3), "PIPE must be 0, 1 or 2"),
    (dict(D, DEPTH=2), "DEPTH > 1 needs PIPE 1 or 2 (a ring of register sets or cp.async buffers)"),
    (dict(D, PIPE=2, DEPTH=9), "DEPTH must be 1 to 8"),
    (dict(D, ROUNDS=3), "ROUNDS must divide KT"),
    (dict(D, MINB=5), "MINB blocks of THREADS threads must fit one SM (at most 2048 threads)"),
    (dict(D, CGROUPS=9), "CGROUPS must be 1 to 8 (named barriers 1..CGROUPS)"),
    (dict(D, PREFETCH=3), "PREFETCH must be 0, 1 or 2"),
    (dict(D, PIPE=1, DEPTH=2, WSTAGE=2), "WSTAGE must be 0 or 1"),
    (dict(D, WSTAGE=1), WS_PIPE),
    (dict(D, PIPE=1, WSTAGE=1), WS_PIPE),
    (dict(GOOD["odd_cb"], PIPE=1, DEPTH=2, WSTAGE=1),
     "WSTAGE needs CB % 4 == 0 (16-byte chunks of whole channel groups)"),
    (dict(GOOD["small"], PIPE=1, DEPTH=2, CGROUPS=2, WSTAGE=1),
     "WSTAGE needs CGROUPS 1 (one ring of filter buffers a block)"),
    (dict(D, CGROUPS=4), "CGROUPS groups of THREADS threads must be at most 1024 threads"),
    (dict(D, LEAN=3), "LEAN must be 0, 1 or 2"),
    (dict(D, LEAN=2), "LEAN 2 needs DEPTH >= 2 and CGROUPS 1 (the step loop ends at a block barrier)"),
    (dict(D, PIPE=2, DEPTH=2, CGROUPS=2, LEAN=2),
     "LEAN 2 needs DEPTH >= 2 and CGROUPS 1 (the step loop ends at a block barrier)"),
    (dict(GOOD["mma_k32"], MMA=2), "MMA must be 0 or 1"),
    (dict(GOOD["mma_k32"], CB=4), "MMA needs KB % 16 == 0, TILES % 8 == 0 and CB % 8 == 0 (m16n8k8 tiles)"),
    (dict(GOOD["mma_k32"], KB=24, KT=4, ET=4),
     "MMA needs KB % 16 == 0, TILES % 8 == 0 and CB % 8 == 0 (m16n8k8 tiles)"),
    (dict(GOOD["mma_k32"], ROUNDS=2), MMA_ONE_ROUND),
    (dict(GOOD["mma_k32"], CGROUPS=2), MMA_ONE_ROUND),
    (dict(GOOD["mma_k32"], PREFETCH=1), MMA_FMA_ONLY),
    (dict(GOOD["mma_k32"], UNROLL=8), MMA_FMA_ONLY),
    (dict(D, CGROUPS=2, MINB=3), "MINB blocks of THREADS threads must fit one SM (at most 2048 threads)"),
    (dict(GOOD["small"], CB=16, SPAD=8, KB=32, PIPE=1, MINB=2),
     "MINB blocks need 2 x (131072 + 1024) bytes of shared memory, more than an SM's 233472"),
    (dict(D, TILES=36), "TT must divide TILES"),
    (dict(D, ET=3), "ET must divide 16"),
    (dict(D, SPAD=2), "SPAD must be a multiple of 4 (16-byte rows)"),
    (dict(D, UPAD=6), "UPAD must be a non-negative multiple of 4 (16-byte rows)"),
    (dict(D, TILES=8, KB=4), "(16/ET)*(KB/KT)*(TILES/TT) threads must be a whole number of warps, at most 1024"),
    (dict(D, KB=128), "(16/ET)*(KB/KT)*(TILES/TT) threads must be a whole number of warps, at most 1024"),
    (dict(D, KT=8, KB=64, TT=8, TILES=64, ET=4), "at most 128 accumulators per thread (ET*KT*TT)"),
    (dict(D, CB=32, ET=4, TILES=64), "at most 4 input tiles per thread and step (CB*TILES over the threads)"),
    (dict(TILES=128, KB=64, CB=24, KT=4, TT=4, ET=8, SPAD=4, **NP),
     "needs 307200 bytes of shared memory, more than 232448; use a smaller CB, KB or TILES"),
]  # fmt: skip


@pytest.mark.parametrize(("params", "reason"), REJECTED)
def test_every_check_is_a_static_assert(params, reason):
    assert CONV.check("winograd", params) == reason
    problem = CONV.problem("n1c3h7w5k5r3s3u1p1", "float32")
    r = render("conv2d", "winograd", params, problem)  # rendered anyway, as if the check were skipped
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and "static assert" in result.error and reason in result.error, result.error


def test_good_configs_pass_the_checks():
    problem = CONV.problem(PROBLEM, "float32")
    for label, p in GOOD.items():
        assert CONV.check("winograd", p) is None, label
        assert CONV.check_problem("winograd", p, problem) is None, label


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        ("n32c64h56w56k64r1s1u1p0", "not 1x1 stride 1"),
        ("n32c64h56w56k128r3s3u2p1", "not 3x3 stride 2"),
        ("n32c3h224w224k64r7s7u2p3", "not 7x7 stride 2"),
        ("n1c16h15w13k24r5s3u1p1", "not 5x3 stride 1"),
    ],
)
def test_other_filters_and_strides_are_refused_in_one_sentence(shape, words):
    problem = CONV.problem(shape, "float32")
    reason = CONV.check_problem("winograd", D, problem)
    assert reason.startswith("winograd computes F(2x2,3x3), 3x3 filters at stride 1 only") and words in reason
    assert "\n" not in reason and reason.count(".") <= 0  # one sentence, no trailing fragments
    assert static_check(Candidate("conv2d", "winograd", problem, Config.of(D)), SETTINGS) == reason


def test_an_image_past_32_bit_offsets_is_refused():
    huge = CONV.problem([1, 2**16, 256, 256, 8, 3, 3, 1, 1], "float16")
    assert CONV.check_problem("winograd", D, huge) == (
        "winograd indexes one image with 32-bit offsets: H*W*C must be at most 2147483647")  # fmt: skip
    filters = CONV.problem([1, 2**14, 4, 4, 2**14, 3, 3, 1, 1], "float32")  # 2.4e9 filter taps
    assert CONV.check_problem("winograd", D, filters) == (
        "winograd indexes the filters with 32-bit offsets: K*C*9 must be at most 2147483647")  # fmt: skip


def test_any_padding_of_a_3x3_stride_1_filter_is_accepted():
    for pad in (0, 1, 2, 3):
        assert CONV.check_problem("winograd", D, CONV.problem([1, 3, 7, 5, 5, 3, 3, 1, pad], "float16")) is None


# --- geometry and shared memory --------------------------------------------------------------------


def test_launch_geometry_and_shared_memory():
    p = CONV.problem(PROBLEM, "float32")  # 32 images x 28 x 28 tiles
    launch = CONV.launch("winograd", D, p)
    assert launch.grid == (32 * 28 * 28 // 32, 64 // 32, 1) and launch.block == (16 * 8 * 4, 1, 1)
    staged = 16 * 8 * ((32 + 4) + (32 + 4))  # U and V of one step
    assert launch.shared_bytes == 4 * staged
    assert CONV.launch("winograd", dict(D, PIPE=1), p).shared_bytes == 2 * 4 * staged  # two stages
    raw = 16 * 1 + 9 * 1  # PIPE 2: one tile and one filter a thread, copied raw
    assert CONV.launch("winograd", dict(D, PIPE=2), p).shared_bytes == 2 * 4 * staged + 4 * raw * 512
    assert CONV.derived("winograd", dict(D, PIPE=1))["STAGES"] == 2 and CONV.derived("winograd", D)["STAGES"] == 1
    d = CONV.derived("winograd", D, p)
    assert (d["KG"], d["TG"], d["EG"], d["X_ITEMS"], d["W_ITEMS"], d["Y_ITEMS"]) == (8, 4, 16, 1, 1, 1)
    # Batch 1, odd P and Q: tiles over images and rows, the last block partly empty; K past one channel block.
    b1 = CONV.problem([1, 5, 7, 9, 37, 3, 3, 1, 1], "float16", "NHWC")  # P = 7, Q = 9: 4 x 5 tiles
    assert CONV.launch("winograd", GOOD["small"], b1).grid == (2, 3, 1)
    assert CONV.launch("winograd", GOOD["small"], CONV.problem([3, 5, 7, 9, 37, 3, 3, 1, 0], "float32")).grid == (
        -(-3 * 3 * 4 // 16), 3, 1)  # fmt: skip
    # The epilogue's staging can be the larger buffer: few channels per step, many channel groups.
    tall = dict(TILES=32, KB=128, CB=1, KT=4, TT=8, ET=4, SPAD=4, **NP)
    dt = CONV.derived("winograd", tall)
    assert dt["SHARED_BYTES"] == 4 * 16 * 32 * 36 > 4 * 16 * 1 * (132 + 36)


def test_the_grid_is_checked():
    many_k = CONV.problem([1, 1, 4, 4, 2**21, 3, 3, 1, 1], "float32")  # 2**17 channel blocks of 16
    assert CONV.check_problem("winograd", GOOD["small"], many_k).endswith("grid.y allows; use a larger KB")


# --- compiles ---------------------------------------------------------------------------------------


def _fp16_allowed(label, combo):  # WSTAGE and MMA are fp32 only: test_wstage_is_optional_..., test_mma_is_optional_...
    return combo[0] == "float32" or not (GOOD[label].get("WSTAGE") or GOOD[label].get("MMA"))


WINOGRAD_SPECS = ("conv_winograd.yaml", "conv.yaml", "conv_b1.yaml")


def _winograd_points(spec_file):
    spec = load_spec(ROOT / "configs" / spec_file)
    return spec, [c for c in spec.start_from if c.as_dict().get("TEMPLATE", "winograd") == "winograd"]


@functools.cache
def _compiled_points() -> dict[str, list[dict]]:
    """The winograd start points each spec's test compiles: every parameter value of the three specs' points taken
    together (tests/sweep.value_cover: 15 points instead of 28 spec by spec), each compiled for the first spec that
    lists it. The source is the same whichever spec's first problem renders it (float32 NCHW, C = 64: only the
    alignment and the layout reach the source); AUTOTUNE_FULL_SWEEP=1: every point of every spec."""
    first: dict[str, list[dict]] = {f: [] for f in WINOGRAD_SPECS}  # spec -> the points no earlier spec lists
    union: list[dict] = []
    for f in WINOGRAD_SPECS:
        for p in map(_params, _winograd_points(f)[1]):
            if p not in union:
                union.append(p)
                first[f].append(p)
    chosen = value_cover(union)
    return {f: [p for p in points if p in chosen] for f, points in first.items()}


def _params(config) -> dict:
    return {k: v for k, v in config.as_dict().items() if k != "TEMPLATE"}


def _configuration_labels() -> list[str]:
    """The configurations of GOOD that test_configurations_compile_for_sm90_without_spills compiles: those that hold
    every parameter value of GOOD that no start point of _compiled_points holds (tests/sweep.case_cover; the start
    points compile in test_the_winograd_start_points_compile_without_spills: 7 configurations instead of 16);
    AUTOTUNE_FULL_SWEEP=1: every one."""
    if full_sweep():
        return list(GOOD)
    met = {pair for points in _compiled_points().values() for p in points for pair in p.items()}
    return case_cover(list(GOOD), lambda label: {k: v for k, v in GOOD[label].items() if (k, v) not in met})


# Those configurations, each in one dtype and layout, in turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: every
# configuration in all of them.
@pytest.mark.parametrize(
    ("label", "dtype", "layout"),
    covering(_configuration_labels(), product(["float32", "float16"], ["NCHW", "NHWC"]), _fp16_allowed),
)
def test_configurations_compile_for_sm90_without_spills(label, dtype, layout):
    problem = CONV.problem(PROBLEM, dtype, layout)
    c = render_candidate(Candidate("conv2d", "winograd", problem, Config.of(GOOD[label])), SETTINGS)
    assert c.status is None, f"{label}: {c.reason}"
    r = compile_source(c.source, c.kernel_name, "sm_90")
    assert r.ok, f"{label}: {r.error}"
    assert r.spills == 0 and r.registers <= 255, f"{label}: {r.registers} registers, {r.spills} spilled"


# --- the kernel's numbers on the host ---------------------------------------------------------------

EMULATED = [
    # config, shape [N, C, H, W, K, R, S, stride, pad], dtype, layout
    ("default", [2, 5, 7, 9, 6, 3, 3, 1, 1], "float32", "NCHW"),
    ("default", [2, 5, 7, 9, 6, 3, 3, 1, 1], "float32", "NHWC"),
    ("small", [2, 5, 7, 9, 6, 3, 3, 1, 1], "float16", "NCHW"),
    ("small", [2, 5, 7, 9, 6, 3, 3, 1, 1], "float16", "NHWC"),
    ("odd_cb", [2, 5, 7, 9, 6, 3, 3, 1, 0], "float32", "NHWC"),  # no padding: P = 5, Q = 7
    ("odd_cb", [2, 5, 7, 9, 6, 3, 3, 1, 0], "float16", "NCHW"),
    ("tall_k", [1, 17, 8, 6, 70, 3, 3, 1, 2], "float32", "NCHW"),  # pad 2, K past one channel block
    ("wide", [3, 9, 5, 4, 33, 3, 3, 1, 1], "float16", "NHWC"),  # tiles of several images in one block
    # PIPE = 1: one step (C <= CB), two, odd and even step counts; stale stages must never count
    ("pipe", [2, 5, 7, 9, 6, 3, 3, 1, 1], "float32", "NCHW"),
    ("pipe", [2, 21, 7, 9, 6, 3, 3, 1, 1], "float16", "NHWC"),  # 3 steps, the last partial
    ("pipe_k16m2", [2, 17, 7, 9, 20, 3, 3, 1, 1], "float32", "NHWC"),  # 3 steps, K past one channel block
    ("pipe_k16m2", [1, 16, 6, 5, 16, 3, 3, 1, 0], "float16", "NCHW"),  # 2 steps exactly
    ("pipe_small2", [2, 5, 7, 9, 6, 3, 3, 1, 1], "float16", "NCHW"),
    ("pipe_small2", [2, 13, 7, 9, 6, 3, 3, 1, 1], "float32", "NHWC"),  # 4 steps, the last partial
    ("pipe_odd_cb", [2, 10, 7, 9, 6, 3, 3, 1, 0], "float32", "NCHW"),  # CB = 3: 4 steps
    ("pipe_odd_cb", [2, 7, 7, 9, 6, 3, 3, 1, 0], "float16", "NHWC"),
    ("pipe_tall_k", [1, 17, 8, 6, 70, 3, 3, 1, 2], "float32", "NCHW"),  # pad 2, K past one channel block
    ("pipe_tall_k", [3, 9, 5, 4, 33, 3, 3, 1, 1], "float16", "NHWC"),
    ("t8", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),  # 3 steps, K past the channel blocks
    ("t8", [2, 33, 5, 6, 20, 3, 3, 1, 1], "float16", "NHWC"),
    ("k8", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float16", "NCHW"),
    ("k8", [2, 21, 5, 6, 11, 3, 3, 1, 2], "float32", "NHWC"),
    ("cp_w2", [2, 17, 7, 9, 40, 3, 3, 1, 1], "float32", "NCHW"),  # 3 steps, the last partial
    ("cp_w2", [3, 9, 5, 4, 33, 3, 3, 1, 1], "float16", "NHWC"),
    ("cp_t8", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NHWC"),
    ("cp_t8", [2, 33, 5, 6, 20, 3, 3, 1, 0], "float16", "NCHW"),
    ("cp_odd_cb", [2, 10, 7, 9, 6, 3, 3, 1, 0], "float32", "NCHW"),
    ("cp_odd_cb", [2, 7, 7, 9, 6, 3, 3, 1, 1], "float32", "NHWC"),
    ("pair", [2, 17, 7, 9, 40, 3, 3, 1, 1], "float32", "NCHW"),
    ("pair", [2, 17, 7, 9, 40, 3, 3, 1, 1], "float16", "NHWC"),
    # SPLIT_C (each run launches twice on the same scratch: the counters must be back at zero)
    ("split2", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),  # 5 steps in 2 slices, K past a block
    ("split2", [2, 17, 5, 6, 20, 3, 3, 1, 0], "float16", "NHWC"),  # 3 steps
    ("split3_p0", [1, 21, 7, 9, 6, 3, 3, 1, 1], "float32", "NHWC"),  # 6 steps in 3 slices
    ("split3_p0", [2, 9, 7, 5, 17, 3, 3, 1, 2], "float16", "NCHW"),  # 3 steps in 3
    ("split4_cp", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NHWC"),  # 3 steps in 4 slices: one is empty
    ("split4_cp", [2, 5, 6, 7, 19, 3, 3, 1, 1], "float32", "NCHW"),  # 1 step in 4: three empty slices
    # DEPTH: fewer steps than the ring, as many, more (the ring wraps), the last step partial
    ("deep3", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),  # 5 steps: the ring wraps
    ("deep3", [2, 17, 5, 6, 20, 3, 3, 1, 0], "float32", "NHWC"),  # 3 steps, as many as the ring
    ("deep3", [1, 5, 7, 9, 16, 3, 3, 1, 1], "float16", "NCHW"),  # 1 step: two empty groups
    ("deep2_odd", [2, 10, 7, 9, 6, 3, 3, 1, 0], "float32", "NCHW"),  # CB = 3: 4 steps
    ("deep2_odd", [2, 7, 7, 9, 6, 3, 3, 1, 1], "float16", "NHWC"),
    ("deep4_split", [1, 97, 7, 9, 37, 3, 3, 1, 1], "float32", "NHWC"),  # 7 steps in 2 slices of 3 and 4
    ("deep4_split", [2, 40, 6, 7, 19, 3, 3, 1, 2], "float32", "NCHW"),  # 3 steps in 2 slices
    ("deep2_regs", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),  # 3 steps: the last pass has one
    ("deep2_regs", [2, 17, 5, 6, 20, 3, 3, 1, 0], "float16", "NHWC"),  # 2 steps
    ("deep2_regs", [1, 5, 7, 9, 16, 3, 3, 1, 1], "float32", "NHWC"),  # 1 step
    ("deep3_regs_split", [2, 10, 7, 9, 6, 3, 3, 1, 0], "float32", "NCHW"),  # 4 steps in 2 slices of 2
    ("deep3_regs_split", [1, 23, 7, 9, 6, 3, 3, 1, 1], "float32", "NHWC"),  # 8 steps in 2 slices of 4
    ("t24", [1, 17, 11, 13, 20, 3, 3, 1, 1], "float32", "NCHW"),  # 42 tiles: a block and most of another
    ("t24", [2, 9, 7, 9, 37, 3, 3, 1, 0], "float16", "NHWC"),
    ("t12", [1, 17, 11, 13, 40, 3, 3, 1, 1], "float32", "NHWC"),
    ("t12", [2, 9, 7, 9, 37, 3, 3, 1, 2], "float32", "NCHW"),
    ("unroll_full", [1, 17, 11, 13, 20, 3, 3, 1, 1], "float32", "NCHW"),  # 3 steps, the last partial
    ("unroll_full", [2, 9, 7, 9, 37, 3, 3, 1, 0], "float16", "NHWC"),
    ("unroll4_cp", [2, 10, 7, 9, 6, 3, 3, 1, 0], "float32", "NHWC"),  # CB = 3 < UNROLL
    ("rounds1", [1, 17, 11, 13, 20, 3, 3, 1, 1], "float32", "NCHW"),  # K past one channel block
    ("rounds1", [2, 9, 7, 9, 37, 3, 3, 1, 0], "float16", "NHWC"),
    ("rounds2_split", [1, 17, 8, 6, 70, 3, 3, 1, 2], "float32", "NCHW"),  # channels 64..69 in a second block
    ("rounds2_split", [3, 9, 5, 4, 33, 3, 3, 1, 1], "float32", "NHWC"),
    # CGROUPS: fewer steps than groups (empty groups), as many, more; with SPLIT_C, slices of blocks x groups
    ("cg2_p0", [2, 5, 7, 9, 6, 3, 3, 1, 1], "float32", "NCHW"),  # 2 steps: one a group
    ("cg2_p0", [1, 3, 7, 9, 20, 3, 3, 1, 1], "float16", "NHWC"),  # 1 step: group 0 empty, K past a block
    ("cg2_regs", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),  # 5 steps: 2 and 3, the ring wraps
    ("cg2_regs", [2, 17, 5, 6, 20, 3, 3, 1, 0], "float16", "NHWC"),  # 3 steps
    ("cg3_cp_split", [1, 23, 7, 9, 6, 3, 3, 1, 1], "float32", "NCHW"),  # 8 steps over 6 slices
    ("cg3_cp_split", [2, 7, 7, 9, 6, 3, 3, 1, 0], "float32", "NHWC"),  # 3 steps over 6: three empty slices
    ("cg4_pipe", [1, 17, 11, 13, 20, 3, 3, 1, 1], "float32", "NCHW"),  # 5 steps over 4 groups
    ("cg4_pipe", [2, 9, 7, 9, 37, 3, 3, 1, 0], "float16", "NHWC"),  # 3 steps: one group empty
    # PREFETCH: every channel of a step, the last one partial; CB 3 with UNROLL 4 (a partial unrolled pass)
    ("pf_b1", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),  # 3 steps, the last partial, K past a block
    ("pf_b1", [2, 17, 5, 6, 20, 3, 3, 1, 0], "float16", "NHWC"),
    ("pf_wide", [1, 17, 8, 6, 70, 3, 3, 1, 2], "float32", "NHWC"),
    ("pf_odd_cb", [2, 10, 7, 9, 6, 3, 3, 1, 0], "float32", "NCHW"),
    ("pf_deep_cg", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NHWC"),  # 5 steps in 2 groups
    # WSTAGE: both layouts; the last step partial (whole groups of 4 channels past C); K past a channel block;
    # SPLIT_C slices (one empty); the ring wraps
    ("ws_b1", [1, 20, 7, 8, 37, 3, 3, 1, 1], "float32", "NCHW"),  # 2 steps, the second 4 of 16 channels
    ("ws_b1", [1, 20, 7, 8, 37, 3, 3, 1, 1], "float32", "NHWC"),
    ("ws_b1", [3, 8, 5, 4, 33, 3, 3, 1, 2], "float32", "NHWC"),  # pad 2: tiles of three images in a block
    ("ws_deep3_split", [1, 24, 7, 9, 6, 3, 3, 1, 1], "float32", "NCHW"),  # 6 steps in 2 slices of 3
    ("ws_deep3_split", [2, 4, 6, 12, 6, 3, 3, 1, 0], "float32", "NHWC"),  # 1 step in 2 slices: one empty
    ("ws_t8", [2, 28, 5, 6, 20, 3, 3, 1, 0], "float32", "NCHW"),  # 4 steps, the last 4 channels; the ring wraps
    ("ws_t8", [1, 12, 9, 7, 17, 3, 3, 1, 1], "float32", "NHWC"),
    # PREFETCH 2: a partial last step, K past a block; an odd CB (the last fetch lands in slot 0)
    ("pf2_b1", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),
    ("pf2_wide", [1, 17, 8, 6, 70, 3, 3, 1, 2], "float32", "NHWC"),
    ("pf2_wide", [2, 9, 7, 9, 20, 3, 3, 1, 0], "float16", "NCHW"),
    # MMA: a partial last step and channel block (zero rows and columns of the fragments); both layouts; SPLIT_C
    ("mma_b1", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),
    ("mma_b1", [3, 8, 5, 4, 33, 3, 3, 1, 2], "float32", "NHWC"),
    ("mma_k32", [1, 17, 8, 6, 70, 3, 3, 1, 2], "float32", "NHWC"),
    ("mma_k32", [2, 9, 7, 9, 20, 3, 3, 1, 0], "float32", "NCHW"),
    ("mma_split", [2, 20, 9, 11, 37, 3, 3, 1, 1], "float32", "NCHW"),
    # LEAN: pad 1 and 2 (rows and columns outside on both sides), tiles of several images a block, a partial step
    ("lean_b1", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),
    ("lean_b1", [3, 8, 5, 4, 33, 3, 3, 1, 2], "float32", "NHWC"),
    ("lean_cp", [2, 10, 7, 9, 6, 3, 3, 1, 2], "float16", "NCHW"),
    ("lean_cp", [1, 17, 5, 3, 20, 3, 3, 1, 0], "float32", "NHWC"),
    # LEAN 2: two epilogue rounds (the second keeps its barrier); tiles of three images a block; an empty SPLIT_C
    # slice (its step loop never runs)
    ("lean2_p2", [2, 10, 7, 9, 6, 3, 3, 1, 2], "float16", "NCHW"),
    ("lean2_p2", [1, 17, 5, 3, 20, 3, 3, 1, 0], "float32", "NHWC"),
    ("lean2_b1", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),
    ("lean2_b1", [3, 8, 5, 4, 33, 3, 3, 1, 2], "float32", "NHWC"),
    ("lean2_split", [2, 4, 6, 12, 6, 3, 3, 1, 0], "float32", "NHWC"),  # 1 step in 2 slices: one empty
    # UPAD: U's rows 24 floats apart, V's 24 (MMA); U's 16, V's 20 (FMA, odd CB)
    ("upad_b1", [1, 40, 7, 9, 37, 3, 3, 1, 1], "float32", "NCHW"),
    ("upad_fma", [1, 17, 8, 6, 70, 3, 3, 1, 2], "float32", "NHWC"),
    ("upad_fma", [2, 9, 7, 9, 20, 3, 3, 1, 0], "float16", "NCHW"),
]


def _one_build_a_label(cases):
    """The CPU tier's cases: configurations that together hold every parameter value (and both dtypes and
    layouts) of the listed ones (tests/sweep.value_cover), each with all its shapes (they hit the edges), run in the
    dtype and layout of its first case: one g++ build a configuration (a build costs ~10 times a run). The other
    configurations, dtypes and layouts compile in test_configurations_compile_...; AUTOTUNE_FULL_SWEEP=1 runs the
    cases as listed."""
    if full_sweep():
        return cases
    first: dict[str, tuple[str, str]] = {}
    for label, _, dtype, layout in cases:
        first.setdefault(label, (dtype, layout))
    labels = list(first)
    configs = [dict(GOOD[label], dtype=first[label][0], layout=first[label][1]) for label in labels]
    chosen = {labels[configs.index(c)] for c in value_cover(configs)}
    out = []
    for label, shape, _, _ in cases:
        case = (label, shape, *first[label])
        if label in chosen and case not in out:
            out.append(case)
    return out


@pytest.mark.parametrize(("label", "shape", "dtype", "layout"), _one_build_a_label(EMULATED))
def test_emulated_kernel_matches_float64(tmp_path, label, shape, dtype, layout):
    problem = CONV.problem(shape, dtype, layout)
    assert CONV.check_problem("winograd", GOOD[label], problem) is None
    y, ref = _emulate(tmp_path, GOOD[label], problem, template="winograd")
    assert np.isfinite(y).all(), f"{(~np.isfinite(y)).sum()} outputs unwritten"
    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    assert err < {"float32": 1e-5, "float16": 2e-3}[dtype], f"relative error {err:.2e}"


def test_fp32_stays_well_inside_the_tolerance_at_512_channels(tmp_path):
    """The transforms add a few roundings per output; with C = 512 the error is ~6e-7, under 1e-5 by 15x."""
    problem = CONV.problem([1, 512, 7, 7, 16, 3, 3, 1, 1], "float32")
    y, ref = _emulate(tmp_path, D, problem, template="winograd")
    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    assert err < 2e-6, f"relative error {err:.2e}"


def test_a_launch_with_too_little_shared_memory_writes_nothing(tmp_path):
    y, _ = _emulate(tmp_path, D, CONV.problem([1, 3, 7, 5, 5, 3, 3, 1, 1], "float32"), smem_short=4,
                    template="winograd")  # fmt: skip
    assert np.isnan(y).all()


# --- the spec, and the error shown next to the time ------------------------------------------------


def test_the_winograd_spec_loads_with_feasible_start_points():
    spec = load_spec(ROOT / "configs" / "conv_winograd.yaml")
    assert (spec.kernel, spec.template, spec.dtype, spec.layouts) == ("conv2d", "winograd", "float32", ("NCHW",))
    labels = [p.label for p in spec.problems]
    assert "n32c64h56w56k64r3s3u1p1" in labels and "n1c256h14w14k256r3s3u1p1" in labels and len(labels) == 6
    assert spec.start_from
    for config in spec.start_from:
        for problem in spec.problems:
            assert static_check(Candidate("conv2d", "winograd", problem, config), SETTINGS) is None


def _result(error):
    timing = Timing(0.5, 0.49, 0.52, 0.01, 10)
    return TrialResult(Status.COMPLETE, None, "conv2d_winograd_x", Config.of(D), timing, error=error, tflops=30.0)


def test_the_measured_error_is_recorded_and_shown_next_to_the_time():
    r = _result(6.4e-7)
    assert result_attrs(r)["result"]["error"] == 6.4e-7  # stored with the trial in the study
    problem = CONV.problem(PROBLEM, "float32")
    outcome = SimpleNamespace(problem=problem, best=r, vendor_name="cuDNN (torch)", vendor=Timing(0.6, 0.6, 0.6, 0, 5),
                              vendor_ratio=1.2, pareto=(), evaluated=3, new=3)  # fmt: skip
    table = report.final_table([outcome], {})
    header, row = table.splitlines()[:2]
    assert "error" in header.split() and "6.4e-07" in row
    best = report.best_per_shape(report.trials(ROOT / "tests" / "data" / "recorded.journal"))
    shown = report._best_display(best)
    assert "error" in shown.columns and shown["error"].str.contains("e-").all()


@pytest.mark.parametrize("spec_file", WINOGRAD_SPECS)
def test_the_winograd_start_points_compile_without_spills(spec_file):
    """Pipelining holds the next step's raw operands in registers: the start points must still fit them. Every
    start point passes the checks on the spec's first problem; those of _compiled_points compile."""
    spec, points = _winograd_points(spec_file)
    problem = spec.problems[0]
    assert any(c.as_dict()["PIPE"] == 1 for c in points) and any(c.as_dict()["PIPE"] == 0 for c in points)
    compiled = _compiled_points()[spec_file]
    for config in points:
        c = render_candidate(Candidate("conv2d", spec.template, problem, config), SETTINGS)
        assert c.status is None, c.reason
        if _params(config) not in compiled:
            continue
        r = compile_source(c.source, c.kernel_name, "sm_90")
        assert r.ok and r.spills == 0, f"{c.kernel_name}: {r.registers} registers, {r.spills} spilled {r.error}"


# --- SPLIT_C: the input channels split over grid.z ----------------------------------------------------


def test_split_c_is_optional_and_leaves_the_unsplit_source_unchanged():
    """Absent or 1: the kernel name and the source of before the parameter existed (stored winners keep
    their source_hash); above 1 the name says so, the signature takes the scratch and grid.z is the split."""
    p = CONV.problem(PROBLEM, "float32")
    plain, one, four = render("conv2d", "winograd", D, p), render("conv2d", "winograd", dict(D, SPLIT_C=1), p), \
        render("conv2d", "winograd", dict(D, SPLIT_C=4), p)  # fmt: skip
    assert (one.kernel_name, one.source_hash) == (plain.kernel_name, plain.source_hash)
    assert "SPLIT_C" not in plain.source and "partial" not in plain.source and "split_c" not in plain.kernel_name
    assert four.kernel_name == plain.kernel_name + "_split_c4"
    assert "float* __restrict__ partial, unsigned int* __restrict__ counters" in four.source
    assert CONV.launch("winograd", D, p).grid[2] == 1 and CONV.launch("winograd", dict(D, SPLIT_C=4), p).grid[2] == 4


def test_split_c_scratch_and_arguments():
    p = CONV.problem([1, 64, 56, 56, 64, 3, 3, 1, 1], "float32")
    split = dict(GOOD["split2"], SPLIT_C=4)
    gx, gy, gz = CONV.launch("winograd", split, p).grid
    assert (gx, gy, gz) == (-(-784 // 32), 4, 4)
    assert CONV.scratch("winograd", split, p) == (4 * 64 * 56 * 56, gx * gy)
    assert CONV.extra_bytes("winograd", split, p) == 4 * (4 * 64 * 56 * 56 + gx * gy)
    assert CONV.scratch("winograd", D, p) is None and CONV.extra_bytes("winograd", D, p) == 0
    scratch = ("partial", "counters")
    args = CONV.kernel_args(p, ("x", "w"), "y", scratch=scratch)
    assert args[:3] == ("x", "w", "y") and args[-2:] == scratch and len(args) == 3 + 11 + 2
    assert CONV.check("winograd", dict(D, SPLIT_C=0)) == "SPLIT_C must be 1 to 65535 (grid.z)"


def test_unroll_is_optional_and_named_only_when_set():
    p = CONV.problem(PROBLEM, "float32")
    plain, zero, full = render("conv2d", "winograd", D, p), render("conv2d", "winograd", dict(D, UNROLL=0), p), \
        render("conv2d", "winograd", dict(D, UNROLL=8), p)  # fmt: skip
    assert (zero.kernel_name, zero.source_hash) == (plain.kernel_name, plain.source_hash)
    assert "#pragma unroll 2  // deeper" in plain.source and "#pragma unroll 8  // deeper" in full.source
    assert full.kernel_name == plain.kernel_name + "_unroll8"
    cp = render("conv2d", "winograd", GOOD["cp_w2"], p).source
    assert "#pragma unroll 1  // deeper" in cp  # PIPE 2 keeps its registers for the raw copies


def test_depth_is_optional_and_leaves_the_shallow_source_unchanged():
    """Absent or 1: the kernel name and source of before DEPTH existed (stored PIPE 2 winners keep their
    source_hash); above 1 the name says so and the raw ring takes DEPTH times PIPE 2's raw buffer."""
    p = CONV.problem(PROBLEM, "float32")
    cp = GOOD["cp_w2"]
    plain, one, three = render("conv2d", "winograd", cp, p), render("conv2d", "winograd", dict(cp, DEPTH=1), p), \
        render("conv2d", "winograd", dict(cp, DEPTH=3), p)  # fmt: skip
    assert (one.kernel_name, one.source_hash) == (plain.kernel_name, plain.source_hash)
    assert "DEPTH" not in plain.source and "depth" not in plain.kernel_name
    assert three.kernel_name == plain.kernel_name + "_depth3" and "cp.async.wait_group %0" in three.source
    base = CONV.launch("winograd", cp, p).shared_bytes
    raw = 4 * CONV.derived("winograd", cp)["RAW"] * CONV.derived("winograd", cp)["THREADS"]
    assert CONV.launch("winograd", dict(cp, DEPTH=3), p).shared_bytes == base + 2 * raw


def test_prefetch_is_optional_and_leaves_the_plain_source_unchanged():
    p = CONV.problem(PROBLEM, "float32")
    plain, zero, one = render("conv2d", "winograd", D, p), render("conv2d", "winograd", dict(D, PREFETCH=0), p), \
        render("conv2d", "winograd", dict(D, PREFETCH=1), p)  # fmt: skip
    assert (zero.kernel_name, zero.source_hash) == (plain.kernel_name, plain.source_hash)
    assert "PREFETCH" not in plain.source and "fetch(" not in plain.source
    assert one.kernel_name == plain.kernel_name + "_prefetch1" and "if (c + 1 < CB) fetch(c + 1);" in one.source
    assert CONV.launch("winograd", dict(D, PREFETCH=1), p) == CONV.launch("winograd", D, p)


def _without_and_with(base, name):
    """The batch-1 NCHW problem, base without parameter ``name``, and the renders of base with it at 0 (checked
    to be the source without it) and as given."""
    plain = {k: v for k, v in base.items() if k != name}
    p = CONV.problem("n1c64h56w56k64r3s3u1p1", "float32", "NCHW")
    r0, r1 = render("conv2d", "winograd", {**plain, name: 0}, p), render("conv2d", "winograd", base, p)
    assert r0.source_hash == render("conv2d", "winograd", plain, p).source_hash
    return p, plain, r0, r1


def test_wstage_is_optional_and_adds_its_filter_buffers():
    """Absent or 0: the source of before WSTAGE; 1 adds DEPTH buffers of KB x (CB * 9 + 4) floats, and the
    dtypes and channel counts it cannot copy are refused in one sentence."""
    base = GOOD["ws_b1"]
    p, plain, r0, r1 = _without_and_with(base, "WSTAGE")
    assert "WSTAGE" not in r0.source
    assert r1.kernel_name == r0.kernel_name + "_wstage1" and "copy_w(" in r1.source
    assert (
        CONV.launch("winograd", base, p).shared_bytes
        == CONV.launch("winograd", plain, p).shared_bytes + 4 * 2 * 16 * 148
    )
    half = CONV.problem("n1c64h56w56k64r3s3u1p1", "float16", "NCHW")
    assert CONV.check_problem("winograd", base, half) == "WSTAGE copies float32 filters only, not float16"
    odd = CONV.problem("n1c63h56w56k64r3s3u1p1", "float32", "NHWC")
    assert CONV.check_problem("winograd", base, odd) == (
        "WSTAGE copies filters in 16-byte chunks of 4 channels: C = 63 is not a multiple of 4"
    )


def test_mma_is_optional_and_refuses_half_precision():
    """Absent or 0: the source of before MMA; 1 renders the tensor-core GEMMs (same launch), and float16 is
    refused in one sentence. PREFETCH 2 renders its two register buffers; PREFETCH 1 renders as before."""
    base = GOOD["mma_b1"]
    p, plain, r0, r1 = _without_and_with(base, "MMA")
    assert "mma_tf32" not in r0.source
    assert r1.kernel_name == r0.kernel_name + "_mma1" and "mma.sync.aligned.m16n8k8" in r1.source
    assert CONV.launch("winograd", base, p) == CONV.launch("winograd", plain, p)
    half = CONV.problem("n1c64h56w56k64r3s3u1p1", "float16", "NCHW")
    assert CONV.check_problem("winograd", GOOD["mma_k32"], half) == (
        "MMA computes float32 convolutions only (3xTF32), not float16"
    )
    deep, deeper = (CONV.problem(f"n1c{c}h7w7k64r3s3u1p1", "float32", "NCHW") for c in (512, 513))
    assert CONV.check_problem("winograd", base, deep) is None
    assert CONV.check_problem("winograd", base, deeper) == (
        "MMA sums the input channels in tensor-core accumulators, whose error grows with C: it is verified up to "
        "C = 512, not 513"
    )
    assert "fetch(c + 2, b)" in render("conv2d", "winograd", GOOD["pf2_b1"], p).source
    assert "fetch(c + 2, b)" not in render("conv2d", "winograd", GOOD["ws_b1"], p).source


def test_cgroups_is_optional_and_multiplies_threads_and_shared_memory():
    """Absent or 1: the kernel name and source of before CGROUPS existed (stored winners keep their
    source_hash); above 1 the block is CGROUPS groups, each with its own shared buffers and named barrier."""
    p = CONV.problem(PROBLEM, "float32")
    reg = GOOD["deep2_regs"]
    plain, one, two = render("conv2d", "winograd", reg, p), render("conv2d", "winograd", dict(reg, CGROUPS=1), p), \
        render("conv2d", "winograd", dict(reg, CGROUPS=2), p)  # fmt: skip
    assert (one.kernel_name, one.source_hash) == (plain.kernel_name, plain.source_hash)
    assert "CGROUPS" not in plain.source and "bar.sync" not in plain.source and "cgroups" not in plain.kernel_name
    assert two.kernel_name == plain.kernel_name + "_cgroups2" and "bar.sync" in two.source
    base, grouped = CONV.launch("winograd", reg, p), CONV.launch("winograd", dict(reg, CGROUPS=2), p)
    assert grouped.grid == base.grid and grouped.block[0] == 2 * base.block[0]
    assert grouped.shared_bytes == 2 * base.shared_bytes
    assert CONV.check("winograd", dict(reg, CGROUPS=0)) == "CGROUPS must be 1 to 8 (named barriers 1..CGROUPS)"


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_split_c_compiles_for_sm90_without_spills(layout):
    """Each configuration in one layout, in turn (tests/sweep.py), passes the checks on the batch-1 layer and compiles;
    those that test_configurations_compile_for_sm90_without_spills compiles (in one dtype and layout) compile there
    only. AUTOTUNE_FULL_SWEEP=1: every one, in both layouts."""
    problem = CONV.problem([1, 64, 56, 56, 64, 3, 3, 1, 1], "float32", layout)
    labels = "split2 split3_p0 split4_cp deep3 deep4_split unroll_full deep2_regs cg2_regs cg3_cp_split cg4_pipe pf_b1"
    labels += " ws_b1 ws_deep3_split ws_t8"
    compiled_there = set() if full_sweep() else set(_configuration_labels())
    mine = share(labels.split(), [("NCHW",), ("NHWC",)], (layout,))
    assert set(mine) - compiled_there  # each layout compiles some here
    for label in mine:
        c = render_candidate(Candidate("conv2d", "winograd", problem, Config.of(GOOD[label])), SETTINGS)
        assert c.status is None, f"{label}: {c.reason}"
        if label in compiled_there:
            continue
        r = compile_source(c.source, c.kernel_name, "sm_90")
        assert r.ok, f"{label}: {r.error}"
        assert r.spills == 0, f"{label}: {r.spills} spilled"
