"""CPU tier for the im2col + GEMM conv2d template: checks mirrored by static_asserts, refusals (NCHW, fp32,
unaligned rows), the geometry of both launches, sm_90 compiles of the combined source without spills in either
kernel, the im2col kernel under the host emulator against a NumPy im2col, and the two-launch plumbing of
``evaluate.measure`` and ``runtime.StagedLauncher`` with fake kernels."""

from __future__ import annotations

import contextlib
import importlib
import subprocess

import numpy as np
import pytest

from autotune.build.compiler import compile_source, kernel_resources
from autotune.build.templates import render
from autotune.core.space import Config
from autotune.kernels import conv_im2col
from autotune.measure.evaluate import Candidate, Fixture, Settings, Status, finish, render_candidate, static_check
from autotune.serve import launcher as launcher_module
from autotune.serve import runtime
from tests.emulation.test_conv import CONV
from tests.host_cuda import HEADER, build, gxx

evaluate = importlib.import_module("autotune.measure.evaluate")  # the package exports a function of that name

P = dict(GEMM="mma", IM_THREADS=256, G_BM=128, G_BN=64, G_BK=32, G_WM=64, G_WN=32, G_STAGES=3, G_SWIZZLE=True,
         G_RASTER=1)  # fmt: skip
SMALL = dict(P, IM_THREADS=128, G_BM=64, G_BN=64, G_WM=32, G_WN=32, G_SWIZZLE=False, G_RASTER=4)
SETTINGS = Settings(arch="sm_90", tolerance=1e-2, max_shared_bytes=227 * 1024)


def prob(shape, dtype="float16", layout="NHWC"):
    return CONV.problem(shape, dtype, layout)


def test_registered_and_auto_offers_it():
    info = CONV.templates["im2col_gemm"]
    assert info.params[:2] == ("GEMM", "IM_THREADS") and "G_STAGES" in info.params
    assert info.dtypes == ("float16",) and info.layouts == ("NHWC",) and info.kind("GEMM") == "choice:mma"
    assert "im2col_gemm" in CONV.templates["auto"].kind("TEMPLATE")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (dict(IM_THREADS=100), "IM_THREADS must be a whole number of warps"),
        (dict(IM_THREADS=2048), "IM_THREADS must be a whole number of warps"),
        (dict(G_WM=48), "warp tile"),  # the GEMM's own check, from the gemm family
        (dict(GEMM="simt"), "GEMM must be one of mma"),
    ],
)
def test_checks_mirror_static_asserts(change, reason):
    assert reason in CONV.check("im2col_gemm", dict(P, **change))


def test_im_threads_static_assert_fires_in_the_source():
    bad = dict(P, IM_THREADS=96 + 1)
    r = render("conv2d", "im2col_gemm", bad, prob("n1c8h8w8k8r3s3u1p1"))
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and "IM_THREADS must be a whole number of warps" in result.log


def test_refusals_name_the_reason():
    assert "NHWC only" in CONV.check_problem("im2col_gemm", P, prob("n1c8h8w8k8r3s3u1p1", layout="NCHW"))
    assert "float16" in CONV.check_problem("im2col_gemm", P, prob("n1c8h8w8k8r3s3u1p1", "float32"))
    # Kg = 3*3*3 = 27 is not a whole number of 16-byte rows, and the included GEMM is the aligned variant (no
    # pack steps); K = 12 is fine (the GEMM's epilogue stores scalars when N % 8 != 0)
    assert "R*S*C = 27 must be a multiple of 8" in CONV.check_problem("im2col_gemm", P, prob("n1c3h8w8k8r3s3u1p1"))
    assert CONV.check_problem("im2col_gemm", P, prob("n1c8h8w8k12r3s3u1p1")) is None
    assert CONV.check_problem("im2col_gemm", P, prob("n2c8h9w7k16r3s3u2p1")) is None


def test_both_launches_and_the_extra_memory():
    p = prob("n2c8h9w7k24r3s3u2p1")  # P = 5, Q = 4: M = 40, Kg = 72, K = 24
    launch = CONV.launch("im2col_gemm", P, p)
    assert launch.grid == (1, 1, 1) and launch.block == (128, 1, 1)  # the mma GEMM: BN 64 over K, BM 128 over M
    (step,) = launch.before
    assert step.kernel_name == CONV.kernel_name("im2col_gemm", P, p) + "_im2col"
    assert step.grid == (-(-40 * 72 // 256), 1, 1) and step.block == (256, 1, 1) and step.shared_bytes == 0
    assert CONV.scratch("im2col_gemm", P, p) == (40 * 72, 0)
    assert CONV.extra_bytes("im2col_gemm", P, p) == 40 * 72 * 2 == conv_im2col.extra_bytes(p)
    assert CONV.extra_bytes("direct", {}, p) == 0 and CONV.scratch("direct", {}, p) is None
    big = prob("n256c64h224w224k64r7s7u1p3")  # the grid-stride loop caps the im2col grid
    assert CONV.launch("im2col_gemm", P, big).before[0].grid[0] == conv_im2col.MAX_IM2COL_BLOCKS


def test_gemm_args_and_step_args():
    p = prob("n2c8h9w7k24r3s3u2p1")
    col, partial, counters = object(), object(), object()
    args = CONV.kernel_args(p, ("x", "w"), "y", scratch=conv_im2col.Im2colScratch((col, partial, counters)))
    assert args[:3] == (col, "w", "y") and [int(v) for v in args[3:6]] == [40, 24, 72]
    assert (float(args[6]), float(args[7])) == (1.0, 0.0) and args[8:] == (partial, counters)
    (step,) = CONV.before_args("im2col_gemm", P, p, ("x", "w"), (col, partial, counters))
    assert step[:2] == ("x", col) and [int(v) for v in step[2:]] == [*p.dims, p.P, p.Q]
    assert CONV.before_args("direct", {}, p, ("x", "w"), ()) == ()
    assert len(CONV.kernel_args(p, ("x", "w"), "y")) == 14  # every other template: unchanged
    # a plain tuple is a split reduction's (partial sums, counters): appended to the conv arguments
    assert CONV.kernel_args(p, ("x", "w"), "y", scratch=(partial, counters))[-2:] == (partial, counters)


@pytest.mark.parametrize("params", [P, SMALL])
def test_compiles_for_sm90_without_spills_in_either_kernel(params):
    p = prob("n2c8h9w7k16r3s3u2p1")
    c = render_candidate(Candidate("conv2d", "im2col_gemm", p, Config.of(params)), SETTINGS)
    assert c.status is None, c.reason
    result = compile_source(c.source, c.kernel_name, "sm_90")
    assert result.ok, result.error
    step = CONV.launch("im2col_gemm", params, p).before[0]
    main_regs, main_spills = kernel_resources(result, c.kernel_name)
    step_regs, step_spills = kernel_resources(result, step.kernel_name)
    assert main_spills == step_spills == 0 and result.spills == 0
    assert result.registers == main_regs and main_regs > step_regs  # the GEMM's report, not the im2col kernel's
    done = finish(c, result, SETTINGS)
    assert done.status is None and done.occupancy


def test_finish_refuses_a_spilling_step(monkeypatch):
    p = prob("n2c8h9w7k16r3s3u2p1")
    c = render_candidate(Candidate("conv2d", "im2col_gemm", p, Config.of(P)), SETTINGS)
    result = compile_source(c.source, c.kernel_name, "sm_90")
    monkeypatch.setattr(evaluate, "kernel_resources", lambda r, name: (32, 8))
    done = finish(c, result, SETTINGS)
    assert done.status is Status.INVALID and "_im2col spills 8 bytes" in done.reason


def test_static_check_covers_the_steps():
    p = prob("n2c8h9w7k16r3s3u2p1")
    cand = Candidate("conv2d", "im2col_gemm", p, Config.of(P))
    assert static_check(cand, SETTINGS) is None
    assert "shared memory" in static_check(cand, Settings(arch="sm_90", tolerance=1e-2, max_shared_bytes=1024))


def numpy_im2col(x, p):
    """col[(n*P + p)*Q + q, (r*S + s)*C + c] for x[N, H, W, C], zeros in the padding."""
    xp = np.pad(x, ((0, 0), (p.pad, p.pad), (p.pad, p.pad), (0, 0)))
    col = np.empty((p.N, p.P, p.Q, p.R, p.S, p.C), dtype=x.dtype)
    for r in range(p.R):
        for s in range(p.S):
            col[:, :, :, r, s, :] = xp[:, r : r + p.stride * (p.P - 1) + 1 : p.stride,
                                       s : s + p.stride * (p.Q - 1) + 1 : p.stride, :]  # fmt: skip
    return col.reshape(p.N * p.P * p.Q, p.R * p.S * p.C)


EMU_MAIN = r"""
int main(int argc, char** argv) {
  std::string dir = argv[1];
  int d[11];
  for (int i = 0; i < 11; ++i) d[i] = std::atoi(argv[2 + i]);
  const unsigned blocks = std::atoi(argv[13]), threads = std::atoi(argv[14]);
  const size_t nx = (size_t)d[0] * d[2] * d[3] * d[1], ncol = (size_t)d[0] * d[9] * d[10] * d[5] * d[6] * d[1];
  std::vector<unsigned short> x(nx), col(ncol, 0xffff);  // poisoned: every element must be written
  FILE* f = std::fopen((dir + "/x.bin").c_str(), "rb");
  if (std::fread(x.data(), 2, nx, f) != nx) return 2;
  std::fclose(f);
  gridDim.x = blocks; gridDim.y = gridDim.z = 1;
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < threads; ++t) {
      blockIdx.x = b; threadIdx.x = t;
      KERNEL(x.data(), col.data(), d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10]);
    }
  f = std::fopen((dir + "/col.bin").c_str(), "wb");
  std::fwrite(col.data(), 2, ncol, f);
  std::fclose(f);
  return 0;
}
"""


@pytest.mark.parametrize(
    ("shape", "threads"),
    [
        ([2, 8, 9, 7, 16, 3, 3, 1, 1], 256),  # padding
        ([1, 16, 11, 13, 8, 3, 3, 2, 1], 128),  # stride 2, odd sizes
        ([3, 24, 5, 7, 8, 1, 1, 1, 0], 64),  # 1x1
        ([1, 8, 13, 11, 8, 7, 7, 2, 3], 32),  # 7x7 stride 2 pad 3
    ],
)
def test_emulated_im2col_matches_numpy(tmp_path, shape, threads, monkeypatch):
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    p = prob(shape)
    params = dict(P, IM_THREADS=threads)
    assert CONV.check_problem("im2col_gemm", params, p) is None
    monkeypatch.setattr(conv_im2col, "MAX_IM2COL_BLOCKS", 3)  # so the grid-stride loop goes round
    step = CONV.launch("im2col_gemm", params, p).before[0]
    r = render("conv2d", "im2col_gemm", params, p)
    im2col_part = r.source.split(f"\n// {r.kernel_name}\n")[0]  # the included GEMM starts with its name
    assert step.kernel_name in im2col_part and "mma.sync" not in im2col_part
    build(
        tmp_path,
        HEADER,
        f"{im2col_part}\n#define KERNEL {step.kernel_name}\n{EMU_MAIN}",
        ("-std=c++17", "-Og", "-pthread", "-w"),
    )
    x = np.random.default_rng(0).standard_normal((p.N, p.H, p.W, p.C)).astype(np.float16)
    x.tofile(tmp_path / "x.bin")
    dims = [*p.dims, p.P, p.Q]
    run = subprocess.run([str(tmp_path / "k"), str(tmp_path), *map(str, dims), str(step.grid[0]), str(threads)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    col = np.fromfile(tmp_path / "col.bin", dtype=np.uint16).reshape(p.N * p.P * p.Q, p.R * p.S * p.C)
    expected = numpy_im2col(x, p).view(np.uint16)
    np.testing.assert_array_equal(col, expected)


class FakeFn:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def __call__(self, grid, block, args, shared_mem=0):
        self.log.append((self.name, grid, block, args, shared_mem))


def test_measure_launches_the_im2col_step_then_the_gemm(monkeypatch):
    p = prob("n2c8h9w7k16r3s3u2p1")
    c = render_candidate(Candidate("conv2d", "im2col_gemm", p, Config.of(P)), SETTINGS)
    c = evaluate.replace(c, compiled=evaluate.CompileResult(c.kernel_name, b"cubin", "", 0.0))
    log = []
    monkeypatch.setattr(evaluate, "load_kernel", lambda r, smem, name=None: FakeFn(name or r.kernel_name, log))
    col, partial, counters = object(), object(), object()
    monkeypatch.setattr(CONV, "new_output", lambda problem: "y")
    scratch = conv_im2col.Im2colScratch((col, partial, counters))
    monkeypatch.setattr(CONV, "new_scratch", lambda t, params, problem: scratch)
    monkeypatch.setattr(evaluate.verify, "poison", lambda out: None)
    fixture = Fixture("conv2d", p, ("x", "w"), None)
    monkeypatch.setattr(evaluate.verify, "compare", _stop)  # with a GPU the launches ran: stop before verifying
    with contextlib.suppress(_Stop):  # without one, the synchronize ends it (a launch failure)
        evaluate.measure(c, SETTINGS, flush=object(), fixture=fixture)
    launch = CONV.launch("im2col_gemm", P, p)
    step = launch.before[0]
    assert [e[0] for e in log] == [step.kernel_name, c.kernel_name]
    assert log[0][1:3] == (step.grid, step.block) and log[0][3][:2] == ("x", col)
    assert log[1][1:3] == (launch.grid, launch.block) and log[1][3][:3] == (col, "w", "y")
    assert log[1][3][-2:] == (partial, counters) and log[1][4] == launch.shared_bytes


def test_staged_launcher_runs_the_steps_first_per_stream_scratch(monkeypatch):
    p = prob("n2c8h9w7k16r3s3u2p1")
    launch = CONV.launch("im2col_gemm", P, p)
    log, made = [], []

    def new_scratch():
        made.append(conv_im2col.Im2colScratch((object(), object(), object())))
        return made[-1]

    steps = tuple((FakeFn(s.kernel_name, log), s) for s in launch.before)
    choice = runtime.Choice("im2col_gemm", P, "exact", "test")
    launcher = runtime.StagedLauncher("conv2d", p, choice, FakeFn("gemm", log), launch, "k", new_scratch, steps)
    monkeypatch.setattr(launcher_module, "_stream_key", lambda: "s")
    launcher("x", "w", "y")
    launcher("x", "w", "y")
    assert [e[0] for e in log] == [launch.before[0].kernel_name, "gemm"] * 2 and len(made) == 1
    assert log[0][3][:2] == ("x", made[0][0]) and log[1][3][:3] == (made[0][0], "w", "y")
    assert runtime.Launcher._launch is not runtime.StagedLauncher._launch  # one-launch path: its own method


class _Stop(Exception):
    """Raised where measure() would verify the fake launches' output."""


def _stop(*args):
    raise _Stop
