# ruff: noqa: E501 - the host launcher below is C++ kept in a string
"""CPU tier for the implicit_mma conv2d template: checks mirrored by static_asserts, problem checks, launch
geometry, NVRTC compiles for sm_90 without spills (with a register margin), the conv spec's start points, and
the kernel's numbers on odd shapes when its CUDA source runs on the host with the lane-exact emulations of
mma.sync, ldmatrix and cp.async (tests/host_cuda.py MMA_PTX)."""

from __future__ import annotations

import contextlib
import importlib
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.kernels import conv_implicit_mma as im
from autotune.measure.evaluate import Candidate, Fixture, Settings, render_candidate, static_check
from autotune.tune.spec import load_spec
from tests.emulation.test_conv import reference
from tests.host_cuda import FLAGS, HEADER, MMA_PTX, build, gxx
from tests.sweep import full_only

evaluate = importlib.import_module("autotune.measure.evaluate")  # the package exports a function of that name
ROOT = Path(__file__).resolve().parents[2]
CONV = FAMILIES["conv2d"]
SETTINGS = Settings(arch="sm_90", tolerance=1e-3, max_shared_bytes=227 * 1024)
P = dict(BM=128, BN=128, BK=32, WM=64, WN=32, STAGES=3)  # 8 warps
GOOD = {
    "128x128x32s3_w64x32": P,
    "128x128x32s3_w64x64": dict(P, WN=64),
    "128x64x32s4": dict(P, BN=64, STAGES=4),
    "64x64x64s3": dict(BM=64, BN=64, BK=64, WM=32, WN=32, STAGES=3),
    "64x128x32s4": dict(BM=64, BN=128, BK=32, WM=32, WN=64, STAGES=4),
    "32x32x16s2": dict(BM=32, BN=32, BK=16, WM=16, WN=16, STAGES=2),
    "64x32x128s2": dict(BM=64, BN=32, BK=128, WM=32, WN=16, STAGES=2),
}
MAX_REGISTERS = {"128x128x32s3_w64x64": 255}  # 128 accumulators: no margin (the others keep >= 24)

REJECTED = [
    (dict(P, WM=24, BM=96), "WM and WN must be multiples of 16"),
    (dict(P, WN=48), "the warp tile WMxWN must divide the block tile BMxBN"),
    (dict(P, BK=48), "BK must be 16, 32, 64 or 128"),
    (dict(P, BK=8), "BK must be 16, 32, 64 or 128"),
    (dict(P, BM=256, BN=256, WM=32, WN=32), "threads per block exceeds 1024"),
    (dict(P, WM=128, WN=64), "more than 128 accumulators per thread (WM*WN/32)"),
    (dict(P, STAGES=1), "STAGES must be 2 to 5"),
    (dict(P, STAGES=6), "STAGES must be 2 to 5"),
    (dict(P, BM=256, BN=256, BK=128, WM=64, WN=64, STAGES=3), "bytes of shared memory, more than 232448"),
]


@pytest.mark.parametrize(("params", "reason"), REJECTED)
def test_every_check_is_a_static_assert(params, reason):
    got = CONV.check("implicit_mma", params)
    assert got is not None and reason in got, got
    r = render("conv2d", "implicit_mma", params, CONV.problem("n1c8h7w5k5r3s3u1p1", "float16", "NHWC"))
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and "static assert" in result.error, result.error
    message = "needs more shared memory than the 232448 bytes" if "shared memory" in reason else reason
    assert message in result.log, result.log[-500:]


def test_good_configs_pass_the_checks():
    for label, p in GOOD.items():
        assert CONV.check("implicit_mma", p) is None, label
        assert CONV.check("auto", {"TEMPLATE": "implicit_mma", **p}) is None, label


def test_problem_checks_refuse_with_one_sentence():
    ok = CONV.problem("n32c64h56w56k64r3s3u1p1", "float16", "NHWC")
    assert CONV.check_problem("implicit_mma", P, ok) is None
    cases = [
        (CONV.problem(ok.label, "float16", "NCHW"), "implicit_mma computes layouts NHWC, not NCHW"),
        (CONV.problem(ok.label, "float32", "NHWC"), "implicit_mma computes float16, not float32"),
        (CONV.problem("n1c12h7w9k8r3s3u1p1", "float16", "NHWC"), "C to be a multiple of 8, not 12"),
        (CONV.problem("n1c8h16380w9k8r3s3u1p2", "float16", "NHWC"), "below 16384"),
        (CONV.problem("n4096c64h200w200k8r1s1u1p1", "float16", "NHWC"), "below 2**31 elements"),
    ]
    for problem, fragment in cases:
        reason = CONV.check_problem("implicit_mma", P, problem)
        assert reason is not None and fragment in reason and reason.count(". ") == 0, reason
    # K, R, S, stride and padding are free, K need not be a multiple of 8
    for label in ("n3c8h9w7k20r3s3u1p1", "n2c16h19w17k13r7s7u2p3", "n1c24h6w7k5r1s1u1p0", "n1c8h5w5k8r5s5u3p4"):
        assert CONV.check_problem("implicit_mma", P, CONV.problem(label, "float16", "NHWC")) is None, label


def test_geometry_and_shared_memory():
    p = CONV.problem("n32c64h56w56k64r3s3u1p1", "float16", "NHWC")
    launch = CONV.launch("implicit_mma", P, p)
    assert launch.grid == (32 * 56 * 56 // 128, 1, 1) and launch.block == (256, 1, 1)
    assert launch.shared_bytes == 3 * (128 + 128) * 32 * 2
    small = GOOD["32x32x16s2"]  # the epilogue's staging sets the size
    assert im.shared_bytes(small) == max(2 * 64 * 16 * 2, 4 * 16 * 24 * 4)
    d = CONV.derived("implicit_mma", GOOD["64x128x32s4"], p)
    assert (d["THREADS"], d["CPR"], d["RP"], d["A_ITERS"], d["B_ITERS"]) == (128, 4, 32, 2, 4)
    q = CONV.problem("n2c16h13w11k130r3s3u1p1", "float16", "NHWC")
    assert CONV.launch("implicit_mma", P, q).grid == (-(-2 * 13 * 11 // 128), 2, 1)
    name = CONV.kernel_name("auto", {"TEMPLATE": "implicit_mma", **P}, q)
    assert name == "conv2d_implicit_mma_f16_nhwc_bm128_bn128_bk32_wm64_wn32_stages3"
    # one source per configuration: the shape never changes it
    a = render("conv2d", "implicit_mma", P, q)
    assert a.source == render("conv2d", "implicit_mma", P, CONV.problem("n1c8h5w5k7r1s1u2p0", "float16", "NHWC")).source


def test_auto_offers_implicit_mma():
    assert "implicit_mma" in CONV.templates["auto"].kind("TEMPLATE")
    r = render(
        "conv2d", "auto", {"TEMPLATE": "implicit_mma", **P}, CONV.problem("n1c8h7w5k5r3s3u1p1", "float16", "NHWC")
    )
    assert r.template == "implicit_mma"


def _compiles_without_spills(label, params, shape):
    """The rendered candidate, after checking it compiles for sm_90 with no spills and some register margin."""
    problem = CONV.problem(shape, "float16", "NHWC")
    c = render_candidate(Candidate("conv2d", "implicit_mma", problem, Config.of(params)), SETTINGS)
    assert c.status is None, c.reason
    r = compile_source(c.source, c.kernel_name, "sm_90")
    assert r.ok, r.error
    assert r.spills == 0 and r.stack_bytes == 0, f"spills {r.spills} bytes ({r.registers} registers)"
    assert r.registers <= MAX_REGISTERS.get(label, 232), f"{r.registers} registers: no margin left"
    return c


@pytest.mark.parametrize("label", list(GOOD))
def test_compiles_for_sm90_without_spills(label):
    c = _compiles_without_spills(label, GOOD[label], "n32c64h56w56k64r3s3u1p1")
    assert "mma.sync" in c.source and "ldmatrix" in c.source


# --- the kernel's arithmetic, run on the host ---------------------------------------------------------

EMU_MAIN = r"""// argv: dir N C H W K R S stride pad P Q gx gy gz threads smem_bytes reps
// Runs the launch `reps` times, the blocks of each launch in a shuffled order; y<rep>.bin is each launch's
// output, and the last line the ldmatrix bank conflicts and loads. With SPLIT defined (SPLIT_K > 1) the kernel
// also takes partials and counters, shared by the launches: any slice may be the last to arrive, and every
// launch must leave the counters at zero.
#include <numeric>
#include <random>
int main(int argc, char** argv) {
  std::string dir = argv[1];
  int a[11]; for (int i = 0; i < 11; ++i) a[i] = atoi(argv[2 + i]);
  gridDim = {(unsigned)atoi(argv[13]), (unsigned)atoi(argv[14]), (unsigned)atoi(argv[15])};
  int threads = atoi(argv[16]); size_t smem_bytes = atol(argv[17]); int reps = atoi(argv[18]);
  blockDim = {(unsigned)threads, 1, 1};
  auto x = slurp(dir + "/x.bin"); auto w = slurp(dir + "/w.bin");
  const size_t outputs = (size_t)a[0] * a[9] * a[10] * a[4];
  std::vector<T> y(outputs);
#ifdef SPLIT
  std::vector<float> partial(gridDim.z * outputs, NAN);  // a partial never written would poison y
  std::vector<unsigned> counters(gridDim.x * gridDim.y, 0u);
#define SCRATCH_ARGS , partial.data(), counters.data()
#else
#define SCRATCH_ARGS
#endif
  std::vector<unsigned char> smem(smem_bytes + 128);
  g_smem_base = smem.data() + (128 - (uintptr_t)smem.data() % 128) % 128;
  g_smem_size = smem_bytes;
  g_smem = (float*)g_smem_base;
  std::vector<unsigned> order(gridDim.x * gridDim.y * gridDim.z);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937 rng(12345);
  for (int rep = 0; rep < reps; ++rep) {
    std::memset(y.data(), 0xff, y.size() * sizeof(T));  // NaN: unwritten outputs fail
    std::shuffle(order.begin(), order.end(), rng);
    for (unsigned b : order) {
      blockIdx = {b % gridDim.x, b / gridDim.x % gridDim.y, b / (gridDim.x * gridDim.y)};
      host_barrier bar(threads);
      g_bar = &bar;
      const auto warp_bars = host_warp_barriers(threads);
      std::fill(smem.begin(), smem.end(), (unsigned char)0xff);  // NaN in fp16 and fp32: stale reads show
      host_launch(threads, [&](int t) {
        threadIdx = {(unsigned)t, 0, 0};
        KERNEL((const T*)x.data(), (const T*)w.data(), y.data(), a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10] SCRATCH_ARGS);
        if (!t_groups.empty() || !t_open.empty()) { fprintf(stderr, "cp.async groups left pending\n"); abort(); }
      });
    }
#ifdef SPLIT
    for (unsigned v : counters) if (v) { fprintf(stderr, "launch %d left a counter at %u\n", rep, v); return 4; }
#endif
    FILE* f = fopen((dir + "/y" + std::to_string(rep) + ".bin").c_str(), "wb"); fwrite(y.data(), sizeof(T), y.size(), f); fclose(f);
  }
  printf("%ld %ld\n", g_conflicts.load(), g_ldmatrix.load());
  return 0;
}
"""


def _build(tmp_path, params, problem, seed):
    """Compile the kernel's host-adapted source with EMU_MAIN (SPLIT defined for SPLIT_K > 1) and write fresh
    NHWC inputs; (x, w) in NCHW."""
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    assert CONV.check("implicit_mma", params) is None and CONV.check_problem("implicit_mma", params, problem) is None
    r = render("conv2d", "implicit_mma", params, problem)
    src = "\n".join(line for line in r.source.splitlines() if not line.startswith("#include"))
    decl = "extern __shared__ __align__(128) unsigned char smem_raw[];"
    assert decl in src
    src = src.replace(decl, "unsigned char* smem_raw = g_smem_base;")
    flags = FLAGS + (("-DSPLIT",) if params.get("SPLIT_K", 1) > 1 else ())
    build(
        tmp_path, f"{HEADER}\n#include <memory>\n{MMA_PTX}", f"{src}\n#define KERNEL {r.kernel_name}\n{EMU_MAIN}", flags
    )
    p = problem
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((p.N, p.C, p.H, p.W)).astype(np.float16)
    w = rng.standard_normal((p.K, p.C, p.R, p.S)).astype(np.float16)
    x.transpose(0, 2, 3, 1).tofile(tmp_path / "x.bin")  # NHWC, and w as K, R, S, C
    w.transpose(0, 2, 3, 1).tofile(tmp_path / "w.bin")
    return x, w


def _as_nchw(y, p):
    return y.astype(np.float64).reshape(p.N, p.P, p.Q, p.K).transpose(0, 3, 1, 2)


def _run(tmp_path, params, problem, reps):
    """Launch ``reps`` times; (each launch's output as float64 NCHW, ldmatrix bank conflicts, ldmatrix count)."""
    p = problem
    launch = CONV.launch("implicit_mma", params, p)
    args = [tmp_path / "k", tmp_path, *p.dims, p.P, p.Q, *launch.grid, launch.block[0], launch.shared_bytes, reps]
    run = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    conflicts, loads = map(int, run.stdout.split())
    ys = [_as_nchw(np.fromfile(tmp_path / f"y{i}.bin", dtype=np.float16), p) for i in range(reps)]
    return ys, conflicts, loads


def emulate(tmp_path, params, problem):
    """(the kernel's output as float64 NCHW, the float64 reference, ldmatrix bank conflicts, ldmatrix count)."""
    x, w = _build(tmp_path, params, problem, seed=0)
    (y,), conflicts, loads = _run(tmp_path, params, problem, reps=1)
    return y, reference(x.astype(np.float64), w.astype(np.float64), problem), conflicts, loads


SMALL = dict(BM=64, BN=32, BK=32, WM=32, WN=16, STAGES=3)  # 4 warps, 2 k-steps a tile
EMULATED = [
    # params, shape [N, C, H, W, K, R, S, stride, pad]
    (SMALL, [2, 8, 7, 9, 12, 3, 3, 1, 1]),  # padding, M tail, K = 12 (element stores), KG = 72 tail
    (dict(SMALL, STAGES=2), [2, 16, 5, 7, 16, 1, 1, 1, 0]),  # 1x1: KG = 16 below one tile
    (dict(SMALL, BK=16, STAGES=4), [1, 16, 11, 9, 20, 7, 7, 2, 3]),  # 7x7 stride 2 pad 3, K = 20
    (dict(BM=32, BN=64, BK=64, WM=16, WN=32, STAGES=5), [1, 24, 6, 5, 40, 3, 3, 2, 2]),  # C = 24, 5 stages
    (dict(BM=64, BN=32, BK=128, WM=32, WN=16, STAGES=2), [1, 32, 6, 6, 8, 5, 3, 1, 0]),  # non-square, BK = 128
]


@pytest.mark.parametrize(
    ("params", "shape"), EMULATED, ids=lambda v: "x".join(map(str, v)) if isinstance(v, list) else None
)
def test_emulated_kernel_matches_float64(tmp_path, params, shape):
    problem = CONV.problem(shape, "float16", "NHWC")
    y, ref, conflicts, loads = emulate(tmp_path, params, problem)
    assert np.isfinite(y).all(), f"{(~np.isfinite(y)).sum()} outputs unwritten"
    err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    assert err < 2e-3, f"relative error {err:.2e}"
    assert loads > 0 and conflicts == 0, f"{conflicts} bank conflicts in {loads} ldmatrix"


# --- the fp16 conv spec ----------------------------------------------------------------------------------


def test_the_fp16_conv_spec_offers_implicit_mma_with_start_points_that_compile():
    spec = load_spec(ROOT / "configs" / "conv_fp16.yaml")
    starts = [c for c in spec.start_from if c.as_dict()["TEMPLATE"] == "implicit_mma"]
    assert len(starts) >= 2
    for config in starts:
        for problem in spec.problems:
            assert static_check(Candidate("conv2d", "auto", problem, config), SETTINGS) is None, (config, problem)
        c = render_candidate(Candidate("conv2d", "auto", spec.problems[0], config), SETTINGS)
        r = compile_source(c.source, c.kernel_name, "sm_90")
        assert r.ok and r.spills == 0, (config, r.error, r.spills)
    feasible = [c for c in spec.space.enumerate() if c.as_dict()["TEMPLATE"] == "implicit_mma"]
    assert feasible and all(CONV.check("auto", c.as_dict()) is None for c in feasible)


# --- split-K: grid.z slices of the reduction, fixed up by the last block of each tile ---------------------

SPLIT = dict(SMALL, SPLIT_K=3)


def test_split_k_is_optional_and_one_names_and_renders_the_kernel_as_before():
    assert CONV.templates["implicit_mma"].optional == ("SPLIT_K",)
    assert CONV.check("auto", {"TEMPLATE": "implicit_mma", **P}) is None  # stored configurations lack it
    q = CONV.problem("n2c16h13w11k130r3s3u1p1", "float16", "NHWC")
    for params in (dict(P, SPLIT_K=1), P):
        assert (
            CONV.kernel_name("implicit_mma", params, q)
            == "conv2d_implicit_mma_f16_nhwc_bm128_bn128_bk32_wm64_wn32_stages3"
        )
        assert CONV.launch("implicit_mma", params, q).grid[2] == 1 and CONV.scratch("implicit_mma", params, q) is None
    assert (
        render("conv2d", "implicit_mma", dict(P, SPLIT_K=1), q).source == render("conv2d", "implicit_mma", P, q).source
    )
    split = render("conv2d", "implicit_mma", dict(P, SPLIT_K=4), q)
    assert split.kernel_name.endswith("_stages3_split_k4") and "partial" in split.source
    assert "partial" not in render("conv2d", "implicit_mma", P, q).source and "counters" not in render(
        "conv2d", "implicit_mma", P, q).source  # fmt: skip


def test_split_k_render_matches_the_stored_winners_source_hash():
    """tuned/ entries were verified with a source; the template must render exactly that source under the kernel
    name they were stored with (SPLIT_K absent or 1 alike), so the runtime still serves them exactly."""
    from autotune.build.templates import installed_renders
    from autotune.serve.runtime import choose

    tuned = ROOT / "tuned"
    checked = 0
    for path in sorted(tuned.glob("*/conv2d.json")):
        for key, e in json.loads(path.read_text())["entries"].items():
            if e["template"] != "implicit_mma":
                continue
            dtype, layout, label = key.split("/")
            problem = CONV.problem(label, dtype, layout)
            unsplit = e["params"].get("SPLIT_K", 1) == 1  # stored before SPLIT_K existed, or tuned unsplit
            for params in (e["params"], {**e["params"], "SPLIT_K": 1}) if unsplit else (e["params"],):
                r = render("conv2d", "implicit_mma", params, problem)
                assert (r.source_hash, r.kernel_name) == (e["source_hash"], e["kernel_name"]), key
            assert installed_renders("conv2d", e, problem)
            choice = choose("conv2d", problem, path.parent.name, "sm_90", tuned, layout)
            assert choice.step == "exact" and choice.params == e["params"], key
            checked += 1
    assert checked >= 5, "no stored implicit_mma winners to compare"


def test_an_entry_whose_source_the_template_no_longer_renders_is_not_served(tmp_path):
    from autotune.results.store import merge
    from autotune.serve.runtime import choose

    problem = CONV.problem("n32c512h7w7k512r3s3u1p1", "float16", "NHWC")
    r = render("conv2d", "implicit_mma", P, problem)
    key = f"float16/NHWC/{problem.label}"
    entry = {"template": "implicit_mma", "params": P, "verified": True, "median_ms": 0.04, "kernel_name": r.kernel_name,
             "template_hash": "an-older-file", "source_hash": r.source_hash}  # fmt: skip
    merge(tmp_path / "gpu-sm90" / "conv2d.json", {"kernel": "conv2d"}, key, entry)
    assert choose("conv2d", problem, "gpu-sm90", "sm_90", tmp_path, "NHWC").step == "exact"  # same source
    merge(tmp_path / "gpu-sm90" / "conv2d.json", {"kernel": "conv2d"}, key, {**entry, "source_hash": "0ther"},
          force=True)  # fmt: skip
    assert choose("conv2d", problem, "gpu-sm90", "sm_90", tmp_path, "NHWC").step == "default"


def test_split_k_checks_geometry_scratch_and_kernel_args():
    p = CONV.problem("n32c512h7w7k512r3s3u1p1", "float16", "NHWC")  # M = 1568, K = 512, C*R*S = 4608
    params = dict(BM=64, BN=128, BK=64, WM=32, WN=32, STAGES=5, SPLIT_K=3)
    launch = CONV.launch("implicit_mma", params, p)
    assert launch.grid == (25, 4, 3) and launch.block == (256, 1, 1)
    assert CONV.scratch("implicit_mma", params, p) == (3 * 1568 * 512, 25 * 4)
    assert CONV.extra_bytes("implicit_mma", params, p) == 4 * (3 * 1568 * 512 + 100)
    assert CONV.extra_bytes("implicit_mma", dict(params, SPLIT_K=1), p) == 0
    for bad in (0, 65, True):
        assert CONV.check("implicit_mma", dict(params, SPLIT_K=bad)) == f"SPLIT_K must be 1 to {im.MAX_SPLIT_K}"
    huge = CONV.problem("n256c64h112w112k256r3s3u1p1", "float16", "NHWC")  # 8 x 3.2M x 256 floats
    reason = CONV.check_problem("implicit_mma", dict(params, SPLIT_K=8), huge)
    assert reason is not None and "more than 512 MiB; use a smaller SPLIT_K" in reason
    assert CONV.check_problem("implicit_mma", dict(params, SPLIT_K=1), huge) is None
    # the conv arguments, then (partial, counters); without scratch the kernel takes the conv arguments only
    partial, counters = object(), object()
    args = CONV.kernel_args(p, ("x", "w"), "y", scratch=(partial, counters))
    assert args[:3] == ("x", "w", "y") and [int(v) for v in args[3:14]] == [*p.dims, p.P, p.Q]
    assert args[14:] == (partial, counters)
    assert len(CONV.kernel_args(p, ("x", "w"), "y")) == 14
    assert CONV.before_args("implicit_mma", params, p, ("x", "w"), (partial, counters)) == ()


def test_split_k_static_assert_mirrors_the_check():
    params = dict(SMALL, SPLIT_K=im.MAX_SPLIT_K + 1)
    r = render("conv2d", "implicit_mma", params, CONV.problem("n1c8h7w5k5r3s3u1p1", "float16", "NHWC"))
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and f"SPLIT_K must be 1 to {im.MAX_SPLIT_K}" in result.log


@pytest.mark.parametrize("label", ["128x128x32s3_w64x32", "64x128x32s4", "32x32x16s2", "128x128x32s3_w64x64"])
def test_split_k_compiles_for_sm90_without_spills(label):
    c = _compiles_without_spills(label, dict(GOOD[label], SPLIT_K=4), "n32c512h7w7k512r3s3u1p1")
    assert "float* __restrict__ partial" in c.source and "atomicAdd(counters" in c.source


def emulate_split(tmp_path, params, problem, reps=2):
    """Each of ``reps`` launches' output as float64 NCHW (same partials and counters, blocks shuffled), and the
    float64 reference."""
    x, w = _build(tmp_path, params, problem, seed=1)
    ys, _, _ = _run(tmp_path, params, problem, reps)
    return ys, reference(x.astype(np.float64), w.astype(np.float64), problem)


def _slices(params, problem):
    """Tiles of each split-K slice, as the kernel spreads them."""
    tiles = -(-problem.C * problem.R * problem.S // params["BK"])
    sk = params["SPLIT_K"]
    return [(z + 1) * tiles // sk - z * tiles // sk for z in range(sk)]


SPLIT_CASES = [
    # params, shape [N, C, H, W, K, R, S, stride, pad]; C*R*S is never a multiple of SPLIT_K * BK
    (dict(SMALL, SPLIT_K=2), [2, 8, 7, 9, 12, 3, 3, 1, 1]),  # 3 tiles: slices of 1 and 2; K = 12: scalar stores
    (dict(SMALL, SPLIT_K=3), [1, 16, 5, 7, 24, 3, 3, 1, 1]),  # 5 tiles: 1, 2, 2; K = 24: 16-byte stores
    (dict(SMALL, SPLIT_K=5), [1, 8, 5, 7, 13, 3, 3, 2, 1]),  # 3 tiles in 5 slices: two are empty; stride 2
    (dict(SMALL, BK=16, STAGES=4, SPLIT_K=5), [2, 24, 9, 5, 40, 3, 3, 1, 1]),  # 14 tiles: 2, 3, 3, 3, 3; 2 x 2 blocks
]
# The first case only with AUTOTUNE_FULL_SWEEP=1 (tests/sweep.py): the others run its paths (slices of unequal sizes:
# the second and the last; scalar stores, K % 8 != 0: the third, K = 13; a batch of 2 with padding: the last).
SPLIT_EMULATED = SPLIT_CASES[1:] + full_only(SPLIT_CASES[:1])


@pytest.mark.parametrize(
    ("params", "shape"), SPLIT_EMULATED, ids=lambda v: "x".join(map(str, v)) if isinstance(v, list) else None
)
def test_emulated_split_k_matches_float64_and_relaunches(tmp_path, params, shape):
    problem = CONV.problem(shape, "float16", "NHWC")
    slices = _slices(params, problem)
    assert sum(slices) * params["BK"] >= problem.C * problem.R * problem.S and len(slices) == params["SPLIT_K"]
    ys, ref = emulate_split(tmp_path, params, problem)
    for i, y in enumerate(ys):
        assert np.isfinite(y).all(), f"launch {i}: {(~np.isfinite(y)).sum()} outputs unwritten"
        err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
        assert err < 2e-3, f"launch {i}: relative error {err:.2e}"
    # the slices are summed in z order whichever block arrives last: the launches agree bit for bit
    np.testing.assert_array_equal(ys[0], ys[1])


def test_the_split_k_cases_cover_empty_slices():
    slices = [_slices(p, CONV.problem(s, "float16", "NHWC")) for p, s in SPLIT_CASES]
    assert slices[2] == [0, 1, 0, 1, 1] and slices[0] == [1, 2]


# --- split-K through the framework: measure, the runtime launcher and export (fake kernels, no GPU) --------


class FakeFn:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def __call__(self, grid, block, args, shared_mem=0):
        self.log.append((self.name, grid, block, args, shared_mem))


def test_measure_launches_split_k_with_its_scratch_after_the_conv_args(monkeypatch):
    p = CONV.problem("n2c16h9w7k24r3s3u1p1", "float16", "NHWC")
    params = dict(SMALL, SPLIT_K=3)
    c = render_candidate(Candidate("conv2d", "implicit_mma", p, Config.of(params)), SETTINGS)
    c = evaluate.replace(c, compiled=evaluate.CompileResult(c.kernel_name, b"cubin", "", 0.0))
    log, asked = [], []
    monkeypatch.setattr(evaluate, "load_kernel", lambda r, smem, name=None: FakeFn(name or r.kernel_name, log))

    def new_scratch(template, params, problem):
        asked.append(CONV.scratch(template, params, problem))
        return ("partial", "counters")

    monkeypatch.setattr(CONV, "new_scratch", new_scratch)
    monkeypatch.setattr(CONV, "new_output", lambda problem: "y")
    monkeypatch.setattr(evaluate.verify, "poison", lambda out: None)
    monkeypatch.setattr(evaluate.verify, "compare", _stop)  # with a GPU the launches ran: stop before verifying
    with contextlib.suppress(_Stop):  # without one, the synchronize ends it (a launch failure)
        evaluate.measure(c, SETTINGS, flush=object(), fixture=Fixture("conv2d", p, ("x", "w"), None))
    launch = CONV.launch("implicit_mma", params, p)
    assert asked == [(3 * p.N * p.P * p.Q * p.K, launch.grid[0] * launch.grid[1])]
    ((name, grid, block, args, shared),) = log
    assert name == c.kernel_name and grid == launch.grid and grid[2] == 3 and shared == launch.shared_bytes
    assert args[:3] == ("x", "w", "y") and len(args) == 16 and args[14:] == ("partial", "counters")


def test_runtime_launcher_keeps_split_k_scratch_per_stream(monkeypatch):
    from autotune.serve import launcher as launcher_module
    from autotune.serve import runtime

    p = CONV.problem("n32c512h7w7k512r3s3u1p1", "float16", "NHWC")
    params = dict(BM=64, BN=128, BK=64, WM=32, WN=32, STAGES=5, SPLIT_K=2)
    made, log = [], []

    def new_scratch():
        made.append((object(), object()))
        return made[-1]

    choice = runtime.Choice("implicit_mma", params, "exact", "test")
    launch = CONV.launch("implicit_mma", params, p)
    launcher = runtime.Launcher("conv2d", p, choice, FakeFn("k", log), launch, "k", new_scratch)
    stream = ["first"]
    monkeypatch.setattr(launcher_module, "_stream_key", lambda: stream[0])
    launcher("x", "w", "y")
    launcher("x", "w", "y")
    stream[0] = "second"
    launcher("x", "w", "y")
    assert [e[3][14:] for e in log] == [made[0], made[0], made[1]] and len(made) == 2
    assert all(e[1] == (25, 4, 2) and e[3][:3] == ("x", "w", "y") for e in log)


def test_export_records_split_k_grid_and_scratch(tmp_path):
    import re
    import shutil

    from autotune.build.templates import template_hash
    from autotune.results.export import export
    from autotune.results.store import merge

    tuned = tmp_path / "tuned" / "nvidia-h200-sm90"
    split = dict(BM=64, BN=128, BK=64, WM=32, WN=32, STAGES=5, SPLIT_K=3)
    unsplit = {k: v for k, v in split.items() if k != "SPLIT_K"}  # as stored before SPLIT_K existed
    entries = {"n32c512h7w7k512r3s3u1p1": split, "n32c256h14w14k256r3s3u1p1": unsplit}
    for label, params in entries.items():
        merge(tuned / "conv2d.json", {"kernel": "conv2d"}, f"float16/NHWC/{label}",
              {"template": "implicit_mma", "params": params, "verified": True, "median_ms": 0.04,
               "template_hash": template_hash("conv2d", "implicit_mma")})  # fmt: skip
    paths = export(tmp_path / "tuned", tmp_path / "out")
    header = paths[0].read_text()
    p = CONV.problem("n32c512h7w7k512r3s3u1p1", "float16", "NHWC")
    floats, counters = CONV.scratch("implicit_mma", split, p)
    row = next(line for line in header.splitlines() if "n32c512h7w7k512r3s3u1p1" in line)
    assert re.search(r"25u, 4u, 3u, 256u, \d+u, " + f"{floats}ull, {counters}ull", row), row
    row = next(line for line in header.splitlines() if "n32c256h14w14k256r3s3u1p1" in line)
    assert re.search(r"98u, 2u, 1u, 256u, \d+u, 0ull, 0ull", row), row
    assert "(float* partial, unsigned* counters) after Q" in header
    src = next(q for q in paths[1:] if q.stem.endswith("_split_k3"))
    assert "NOTE" not in src.read_text().splitlines()[0]
    assert compile_source(src.read_text(), src.stem, "sm_90").ok
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        subprocess.run([cc, "-fsyntax-only", "-x", "c", str(paths[0])], check=True)


class _Stop(Exception):
    """Raised where measure() would verify the fake launches' output."""


def _stop(*args):
    raise _Stop
