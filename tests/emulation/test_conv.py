# ruff: noqa: E501 - the host emulator below is C++ kept in strings
"""CPU tier for the conv2d family: problem parsing and sizes, the spec, checks mirrored by static_asserts,
NVRTC compiles for sm_90 without spills, launch geometry, and the direct template's numbers when its CUDA
source runs on the host under a small thread-per-CUDA-thread emulator (g++)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render, template_path
from autotune.core.errors import SpecError
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.kernels.conv import ConvProblem
from autotune.measure.evaluate import Candidate, Settings, render_candidate, static_check
from autotune.results.store import entry_key
from autotune.tune.search import study_name
from autotune.tune.spec import load_spec, parse_spec
from tests.host_cuda import FLAGS, HEADER, MMA_PTX, build, gxx
from tests.sweep import covering, product

ROOT = Path(__file__).resolve().parents[2]
CONV = FAMILIES["conv2d"]
SETTINGS = Settings(arch="sm_90", tolerance=1e-5, max_shared_bytes=227 * 1024)
D = dict(TP=8, TQ=16, KB=64, QT=4, KT=8, CB=8, PAD=1)  # the default configuration
GOOD = {
    "default": D,
    "small": dict(TP=4, TQ=8, KB=8, QT=2, KT=2, CB=4, PAD=0),  # 64 threads, PIX < 32: warps span channel groups
    "wide_q": dict(TP=4, TQ=32, KB=32, QT=4, KT=4, CB=4, PAD=0),
    "odd_pad": dict(TP=16, TQ=16, KB=32, QT=2, KT=8, CB=16, PAD=3),
    "many_k": dict(TP=8, TQ=8, KB=128, QT=8, KT=8, CB=4, PAD=1),
    "odd_tiles": dict(TP=3, TQ=12, KB=24, QT=3, KT=3, CB=3, PAD=2),  # 3*4*8 = 96 threads
}


# --- problems ---------------------------------------------------------------------------------------


def test_a_mapping_a_label_and_a_list_give_the_same_problem():
    m = CONV.problem({"N": 32, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "stride": 1, "pad": 1}, "float32")
    assert m.label == "n32c64h56w56k64r3s3u1p1"
    assert CONV.problem(m.label, "float32") == m
    assert CONV.problem([32, 64, 56, 56, 64, 3, 3, 1, 1], "float32") == m
    assert m.layout == "NCHW" and "/" not in m.label and "." not in m.label
    d = CONV.problem({"N": 1, "C": 3, "H": 7, "W": 5, "K": 5, "R": 3, "S": 3}, "float16", "NHWC")
    assert (d.stride, d.pad, d.dtype, d.layout) == (1, 0, "float16", "NHWC")
    assert CONV.problem(d.label, "float16", "NHWC") == d


def test_sizes():
    p = CONV.problem([2, 3, 7, 5, 4, 3, 3, 2, 1], "float32")
    assert (p.P, p.Q) == (4, 3)  # (7 + 2 - 3) // 2 + 1, (5 + 2 - 3) // 2 + 1
    assert p.flops == 2 * 2 * 4 * 4 * 3 * 3 * 3 * 3
    assert p.bytes == (2 * 3 * 7 * 5 + 4 * 3 * 3 * 3 + 2 * 4 * 4 * 3) * 4
    assert CONV.problem(p.label, "float16").bytes == p.bytes // 2
    assert p.storage == "float32" and p.dims == (2, 3, 7, 5, 4, 3, 3, 2, 1)
    big = CONV.problem([32, 3, 224, 224, 64, 7, 7, 2, 3], "float32")
    assert (big.P, big.Q) == (112, 112)
    assert CONV.problem([1, 1, 5, 5, 1, 5, 5, 1, 0], "float32").P == 1


@pytest.mark.parametrize(
    ("shape", "dtype", "layout", "fragment"),
    [
        ("n1c3h7w5k5r3s3u1", "float32", "NCHW", "expected a mapping {N, C, H, W, K, R, S, stride, pad}"),
        ("n1c3h7w5k5r3s3u1p1/x", "float32", "NCHW", "got 'n1c3h7w5k5r3s3u1p1/x'"),
        ([1, 3, 7, 5, 5, 3, 3], "float32", "NCHW", "expected a list of 9 integers"),
        ([1, 3, 7, 5, 5, 3, 3, 0, 1], "float32", "NCHW", "convolution stride must be an integer >= 1, got 0"),
        ([1, 3, 7, 5, 5, 3, 3, 1, -1], "float32", "NCHW", "convolution pad must be an integer >= 0, got -1"),
        ([1, 3, 7.0, 5, 5, 3, 3, 1, 1], "float32", "NCHW", "convolution H must be an integer >= 1, got 7.0"),
        ([1, True, 7, 5, 5, 3, 3, 1, 1], "float32", "NCHW", "convolution C must be an integer >= 1, got True"),
        ({"N": 1, "C": 3, "H": 7, "W": 5, "K": 5, "R": 3}, "float32", "NCHW", "convolution shape misses S"),
        ({"N": 1, "C": 3, "H": 7, "W": 5, "K": 5, "R": 3, "S": 3, "dilation": 2}, "float32", "NCHW",
         "unknown convolution key 'dilation'"),
        ([1, 3, 3, 3, 5, 7, 3, 1, 1], "float32", "NCHW", "filter 7x3 is larger than the padded input 5x5"),
        ([1, 3, 7, 5, 5, 3, 3, 1, 1], "bfloat16", "NCHW", "unknown conv2d dtype 'bfloat16'"),
        ([1, 3, 7, 5, 5, 3, 3, 1, 1], "float32", "NN", "unknown conv2d layout 'NN'; expected one of NCHW, NHWC"),
        ([1, 3, 2**31, 5, 5, 3, 3, 1, 1], "float32", "NCHW", "32-bit coordinates"),
        (42, "float32", "NCHW", "got 42"),
    ],
)  # fmt: skip
def test_bad_shapes_say_what_is_wrong_in_one_sentence(shape, dtype, layout, fragment):
    with pytest.raises(ValueError) as info:
        CONV.problem(shape, dtype, layout)
    msg = str(info.value)
    assert fragment in msg and "\n" not in msg, msg


# --- the spec ---------------------------------------------------------------------------------------


def test_the_conv_spec_loads_with_feasible_start_points():
    spec = load_spec(ROOT / "configs" / "conv.yaml")
    assert (spec.kernel, spec.template, spec.dtype, spec.layouts) == ("conv2d", "auto", "float32", ("NCHW",))
    labels = [p.label for p in spec.problems]
    assert "n1c64h56w56k64r3s3u1p1" in labels and "n1c256h14w14k256r3s3u1p1" in labels
    assert "n32c64h56w56k64r3s3u1p1" in labels and len(labels) == len(set(labels)) == 6
    assert spec.budget.trials and spec.start_from
    assert {"direct", "implicit_simt", "winograd"} <= {c.as_dict()["TEMPLATE"] for c in spec.start_from}
    for config in spec.start_from:
        for problem in spec.problems:
            assert static_check(Candidate("conv2d", "auto", problem, config), SETTINGS) is None
    name = study_name(spec, spec.problems[0])
    assert name.startswith("conv2d.auto.float32.n32c64h56w56k64r3s3u1p1.NCHW.")
    assert entry_key("float32", "NCHW", labels[0]) == "float32/NCHW/n32c64h56w56k64r3s3u1p1"


def _raw(**over):
    raw = {"kernel": "conv2d", "template": "direct", "dtype": "float32", "shapes": [[1, 3, 7, 5, 5, 3, 3, 1, 1]],
           "params": {k: [v] for k, v in D.items()}}  # fmt: skip
    raw.update(over)
    return raw


def test_a_spec_without_layout_gets_nchw_and_layout_lists_multiply():
    assert parse_spec(_raw()).layouts == ("NCHW",)
    spec = parse_spec(_raw(dtype=["float32", "float16"], layout=["NCHW", "NHWC"],
                           shapes=["n1c3h7w5k5r3s3u2p1", {"N": 2, "C": 4, "H": 9, "W": 9, "K": 8, "R": 1, "S": 1}]))  # fmt: skip
    assert len(spec.problems) == 8


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"layout": "NN"}, "layout: unknown layout 'NN'; expected one of NCHW, NHWC"),
        ({"shapes": [[1, 3, 7, 5, 5, 3, 3, 0, 1]]}, "shapes[0]: convolution stride must be an integer >= 1"),
        ({"dtype": "bfloat16"}, "dtype: template 'direct' does not implement 'bfloat16'"),
        ({"params": {**{k: [v] for k, v in D.items()}, "QT": [3]}}, "constraints: no configuration"),
    ],
)
def test_bad_conv_specs_name_the_key(over, fragment):
    with pytest.raises(SpecError) as info:
        parse_spec(_raw(**over), "c.yaml")
    assert fragment in str(info.value), str(info.value)


# --- checks, static_asserts, compiles, launches ---------------------------------------------------

REJECTED = [
    (dict(D, QT=3), "QT must divide TQ"),
    (dict(D, KT=3), "KT must divide KB"),
    (dict(D, TP=3, KB=16), "TP*(TQ/QT)*(KB/KT) threads must be a whole number of warps, at most 1024"),
    (dict(D, TP=64), "TP*(TQ/QT)*(KB/KT) threads must be a whole number of warps, at most 1024"),
    (dict(D, QT=8, KT=16, KB=128, TP=8), "at most 64 accumulators per thread (QT*KT)"),
]


@pytest.mark.parametrize(("params", "reason"), REJECTED)
def test_every_check_is_a_static_assert(params, reason):
    assert CONV.check("direct", params) == reason
    problem = CONV.problem("n1c3h7w5k5r3s3u1p1", "float32")
    r = render("conv2d", "direct", params, problem)  # rendered anyway, as if the check were skipped
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and "static assert" in result.error and reason in result.error, result.error


def test_good_configs_pass_the_checks():
    for label, p in GOOD.items():
        assert CONV.check("direct", p) is None, label
    assert "unknown conv2d template" in CONV.check("fft", D)


def test_problem_checks():
    p = CONV.problem("n32c64h56w56k64r3s3u1p1", "float32")
    assert CONV.check_problem("direct", D, p) is None
    bf16 = ConvProblem(1, 3, 7, 5, 5, 3, 3, 1, 1, "bfloat16")
    assert CONV.check_problem("direct", D, bf16) == "direct computes float32, float16, not bfloat16"
    huge = CONV.problem("n1c64h64w64k64r11s11u1p5", "float32")
    reason = CONV.check_problem("direct", dict(D, CB=16), huge)
    assert reason.startswith("needs") and "11x11 stride-1 filter" in reason and "smaller CB" in reason
    assert CONV.check_problem("direct", dict(D, CB=1, KB=32, KT=4), huge) is None
    many = CONV.problem("n70000c3h7w5k5r3s3u1p1", "float32")
    assert "grid.z" in CONV.check_problem("direct", D, many)
    # A limit of the device (not of the template) is decided by static_check against the device's settings.
    small_device = Settings(arch="sm_90", tolerance=1e-5)  # 48 KB
    cand = Candidate("conv2d", "direct", CONV.problem("n1c3h224w224k64r7s7u2p3", "float32"), Config.of(D))
    assert "the device allows 49152" in static_check(cand, small_device)


def test_launch_geometry_and_shared_memory():
    p = CONV.problem("n32c64h56w56k64r3s3u1p1", "float32")
    launch = CONV.launch("direct", D, p)
    assert launch.grid == (7 * 4, 1, 32) and launch.block == (8 * 4 * 8, 1, 1)
    ht, wt = 7 * 1 + 3, 15 * 1 + 3
    assert launch.shared_bytes == 4 * (8 * 9 * (64 + 4) + 8 * ht * (wt + 1))
    q = CONV.problem("n2c17h13w11k9r5s5u1p2", "float16", "NHWC")  # P = 13, Q = 11
    small = GOOD["small"]
    launch = CONV.launch("direct", small, q)
    assert launch.grid == (4 * 2, 2, 2) and launch.block == (64, 1, 1)
    assert launch.shared_bytes == 4 * (4 * 25 * 12 + 4 * (3 + 5) * (7 + 5))  # shared stays float for fp16
    s2 = CONV.problem("n1c3h224w224k64r7s7u2p3", "float32")
    d = CONV.derived("direct", D, s2)
    assert (d["HT"], d["WT"], d["WS"]) == (7 * 2 + 7, 15 * 2 + 7, 15 * 2 + 7 + 1)


def test_names_context_and_one_source_per_dtype_and_layout():
    p = CONV.problem("n1c3h7w5k5r3s3u2p1", "float16", "NHWC")
    assert CONV.kernel_name("direct", D, p) == "conv2d_direct_f16_nhwc_tp8_tq16_kb64_qt4_kt8_cb8_pad1"
    assert CONV.kernel_name("direct", D) == "conv2d_direct_tp8_tq16_kb64_qt4_kt8_cb8_pad1"
    ctx = CONV.context("direct", D, p)
    assert {k: ctx[k] for k in ("DTYPE", "T", "ES", "LAYOUT")} == {"DTYPE": "float16", "T": "__half", "ES": 2,
                                                                     "LAYOUT": "NHWC"}  # fmt: skip
    assert "SHARED_BYTES" not in ctx  # the source never depends on the shape
    other = CONV.problem("n32c64h56w56k64r7s7u1p3", "float16", "NHWC")
    assert render("conv2d", "direct", D, p).source_hash == render("conv2d", "direct", D, other).source_hash
    assert render("conv2d", "direct", D, CONV.problem(p.label, "float16")).source_hash != render(
        "conv2d", "direct", D, p).source_hash  # fmt: skip
    assert template_path("conv2d", "direct") == ROOT / "templates" / "conv" / "direct.cu.j2"
    assert CONV.default_config("float16", "NHWC") == ("direct", D)
    assert CONV.scratch("direct", D, p) is None
    with pytest.raises(ValueError, match="alpha 1, beta 0"):
        CONV.kernel_args(p, (None, None), None, alpha=2.0)


# Each configuration in one dtype and layout, in turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: in all of them.
@pytest.mark.parametrize(
    ("label", "dtype", "layout"), covering(GOOD, product(["float32", "float16"], ["NCHW", "NHWC"]))
)
def test_configurations_compile_for_sm90_without_spills(label, dtype, layout):
    problem = CONV.problem("n32c64h56w56k64r3s3u1p1", dtype, layout)
    c = render_candidate(Candidate("conv2d", "direct", problem, Config.of(GOOD[label])), SETTINGS)
    assert c.status is None, f"{label}: {c.reason}"
    r = compile_source(c.source, c.kernel_name, "sm_90")
    assert r.ok, f"{label}: {r.error}"
    assert r.spills == 0 and r.registers <= 255, f"{label}: {r.registers} registers, {r.spills} spilled"


# --- the kernel's arithmetic, run on the host ------------------------------------------------------
# The rendered CUDA source is compiled with g++ against a few shims: one fiber per CUDA thread,
# __syncthreads as a host_barrier, blocks one after another, shared memory filled with NaN before each
# block. It checks indexing, halos, padding, strides and every predicated edge; not the GPU's speed.

EMU_HEADER = HEADER

EMU_MAIN = r"""// argv: dir N C H W K R S stride pad P Q gx gy gz threads smem_bytes [scratch_floats scratch_counters]
int main(int argc, char** argv) {
  std::string dir = argv[1];
  int a[11]; for (int i = 0; i < 11; ++i) a[i] = atoi(argv[2 + i]);
  gridDim = {(unsigned)atoi(argv[13]), (unsigned)atoi(argv[14]), (unsigned)atoi(argv[15])};
  int threads = atoi(argv[16]); g_smem_bytes = (unsigned)atol(argv[17]);
  auto x = slurp(dir + "/x.bin"); auto w = slurp(dir + "/w.bin");
  // NaN after the tensors' ends (0xff bytes: NaN in float and half): a read past the last image or filter, even
  // one multiplied by a zero filter, shows in the output.
  x.resize(x.size() + 65536, (char)0xff); w.resize(w.size() + 65536, (char)0xff);
  std::vector<T> y((size_t)a[0] * a[4] * a[9] * a[10]);
  std::vector<float> smem(g_smem_bytes / 4 + 4);
  g_smem = smem.data() + (4 - ((uintptr_t)smem.data() / 4) % 4) % 4;
#ifdef SCRATCH  // a split reduction: partial sums and tile counters zeroed once, then two launches
  std::vector<float> partial(atol(argv[18]), NAN);  // never read before written
  std::vector<unsigned> counters(atol(argv[19]), 0u);
#define SCRATCH_ARGS , partial.data(), counters.data()
  for (int launch = 0; launch < 2; ++launch) {
#else
#define SCRATCH_ARGS
  {
#endif
  std::memset(y.data(), 0xff, y.size() * sizeof(T));  // NaN in float and half: unwritten outputs fail
  for (unsigned z = 0; z < gridDim.z; ++z)
    for (unsigned by = 0; by < gridDim.y; ++by)
      for (unsigned bx = 0; bx < gridDim.x; ++bx) {
        blockIdx = {bx, by, z};
        host_barrier bar(threads);
        g_bar = &bar;
#ifdef AUTOTUNE_HOST_EMULATION  // the mma emulation (MMA_PTX) meets each warp at its barrier
        const auto warp_bars = host_warp_barriers(threads);
#endif
        std::fill(smem.begin(), smem.end(), NAN);  // stale shared memory must never matter
        host_launch(threads, [&](int t) {
          threadIdx = {(unsigned)t, 0, 0};
          KERNEL((const T*)x.data(), (const T*)w.data(), y.data(), a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10] SCRATCH_ARGS);
        });
      }
  }
#ifdef SCRATCH
  for (unsigned c : counters) if (c != 0) { fprintf(stderr, "a tile counter was left at %u\n", c); return 4; }
#endif
  FILE* f = fopen((dir + "/y.bin").c_str(), "wb"); fwrite(y.data(), sizeof(T), y.size(), f); fclose(f);
  return 0;
}
"""


def reference(x, w, p):
    """float64 direct convolution in NCHW (numpy), the same sum as the family's CuPy reference."""
    xp = np.pad(x, ((0, 0), (0, 0), (p.pad, p.pad), (p.pad, p.pad)))
    y = np.zeros((p.K, p.N, p.P, p.Q))
    hi, wi = p.stride * (p.P - 1) + 1, p.stride * (p.Q - 1) + 1
    for r in range(p.R):
        for s in range(p.S):
            y += np.tensordot(w[:, :, r, s], xp[:, :, r : r + hi : p.stride, s : s + wi : p.stride], axes=([1], [1]))
    return y.transpose(1, 0, 2, 3)


# The winograd template's cp.async helpers on the host: held back until waited for (host_cuda.host_cp_*), not
# copied at once, so the emulation fails where a wait is missing. (The device branches are not compiled here.)
HOST_CP_ASYNC = (
    ("  *dst = ok ? to_f(*src) : 0.0f;\n}", "  host_cp_async(dst, ok ? to_f(*src) : 0.0f);\n}"),
    ("void copy_raw_commit() {", "void copy_raw_commit() { host_cp_commit();"),
    ("void copy_raw_wait() {", "void copy_raw_wait() { host_cp_wait(0);"),
    ("void copy_raw_wait_pending() {", "void copy_raw_wait_pending() { host_cp_wait(PENDING);"),
)


def _emulate(tmp_path, params, problem, smem_short=0, template="direct"):
    """The kernel's output (float64, NCHW) and the float64 reference on the same rounded inputs."""
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    r = render("conv2d", template, params, problem)
    src = "\n".join(line for line in r.source.splitlines() if not line.startswith("#include"))
    src = src.replace("extern __shared__ __align__(16) float smem[];", "float* smem = g_smem;")
    asm = next(
        line for line in src.splitlines() if line.startswith("__device__ __forceinline__ unsigned dynamic_smem_bytes()")
    )
    src = src.replace(asm, "inline unsigned dynamic_smem_bytes() { return g_smem_bytes; }")
    src = src.replace("__shared__ int s_last;", "static int s_last;")  # a split reduction's flag: one per block
    if "void copy_raw_commit() {" in src:  # winograd's cp.async helpers: copies land only when waited for
        missing = [old for old, _ in HOST_CP_ASYNC[:3] if old not in src]  # (copy_raw_wait_pending: DEPTH only)
        assert not missing, f"the template's cp.async helpers changed; HOST_CP_ASYNC no longer finds {missing}"
        for old, new in HOST_CP_ASYNC:
            src = src.replace(old, new)
    header = EMU_HEADER + MMA_PTX if "mma_tf32(" in src else EMU_HEADER  # winograd MMA: the lane-exact mma emulation
    return run_emulated(tmp_path, compiler, template, params, problem, src, r.kernel_name, header, smem_short)


def run_emulated(tmp_path, compiler, template, params, problem, src, kernel_name, header, smem_short=0):
    """Build a conv kernel's host-adapted source with ``header`` and EMU_MAIN, run it on fresh random inputs;
    (its output as float64 NCHW, the float64 reference on the same rounded inputs)."""
    flags = FLAGS
    need = CONV.scratch(template, params, problem)
    if need is not None:  # a split reduction (SPLIT_C): its partial sums and counters; launched twice
        flags += ("-DSCRATCH",)  # its sizes are arguments: one executable serves every shape
    build(tmp_path, header, f"{src}\n#define KERNEL {kernel_name}\n{EMU_MAIN}\n", flags)

    p = problem
    dt = np.float16 if p.dtype == "float16" else np.float32
    rng = np.random.default_rng(0)
    x = rng.standard_normal((p.N, p.C, p.H, p.W)).astype(dt)
    w = rng.standard_normal((p.K, p.C, p.R, p.S)).astype(dt)
    nhwc = p.layout == "NHWC"
    (x.transpose(0, 2, 3, 1) if nhwc else x).tofile(tmp_path / "x.bin")  # tofile writes C order
    (w.transpose(0, 2, 3, 1) if nhwc else w).tofile(tmp_path / "w.bin")
    launch = CONV.launch(template, params, p)
    args = [
        tmp_path / "k",
        tmp_path,
        *p.dims,
        p.P,
        p.Q,
        *launch.grid,
        launch.block[0],
        launch.shared_bytes - smem_short,
        *(need or ()),
    ]
    run = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    y = np.fromfile(tmp_path / "y.bin", dtype=dt).astype(np.float64)
    y = y.reshape(p.N, p.P, p.Q, p.K).transpose(0, 3, 1, 2) if nhwc else y.reshape(p.N, p.K, p.P, p.Q)
    return y, reference(x.astype(np.float64), w.astype(np.float64), p)


EMULATED = [
    # config, shape [N, C, H, W, K, R, S, stride, pad], dtype, layout
    ("small", [1, 3, 7, 5, 5, 3, 3, 2, 1], "float32", "NCHW"),
    ("small", [2, 17, 13, 11, 9, 5, 5, 1, 2], "float32", "NHWC"),
    ("odd_tiles", [2, 17, 13, 11, 9, 5, 5, 1, 2], "float16", "NCHW"),
    ("odd_tiles", [2, 20, 9, 9, 33, 1, 1, 1, 0], "float16", "NHWC"),  # 1x1
    ("wide_q", [1, 3, 19, 17, 16, 7, 7, 2, 3], "float32", "NCHW"),  # 7x7 stride 2 pad 3
    ("default", [1, 9, 10, 12, 70, 3, 3, 1, 1], "float32", "NHWC"),  # K past one channel block
    ("default", [1, 9, 10, 12, 70, 3, 3, 3, 0], "float16", "NCHW"),  # stride 3, no padding
    ("many_k", [1, 5, 6, 6, 7, 6, 4, 1, 0], "float32", "NHWC"),  # even, non-square filter
]


@pytest.mark.parametrize(("label", "shape", "dtype", "layout"), EMULATED)
def test_emulated_kernel_matches_float64(tmp_path, label, shape, dtype, layout):
    problem = CONV.problem(shape, dtype, layout)
    assert CONV.check_problem("direct", GOOD[label], problem) is None
    y, ref = _emulate(tmp_path, GOOD[label], problem)
    assert np.isfinite(y).all(), f"{(~np.isfinite(y)).sum()} outputs unwritten"
    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    assert err < {"float32": 1e-5, "float16": 2e-3}[dtype], f"relative error {err:.2e}"


def test_a_launch_with_too_little_shared_memory_writes_nothing(tmp_path):
    problem = CONV.problem([1, 3, 7, 5, 5, 3, 3, 2, 1], "float32")
    y, _ = _emulate(tmp_path, GOOD["small"], problem, smem_short=4)
    assert np.isnan(y).all()
