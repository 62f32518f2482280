# ruff: noqa: E501 - the host emulator below is C++ kept in strings
"""The mma.sync GEMM template without a GPU: checks mirrored by static_asserts, launch geometry, NVRTC
compiles for sm_90 without spills, and the kernel's numbers when its CUDA source runs on the host with
lane-exact emulations of mma.sync m16n8k16, ldmatrix (.trans) and cp.async (PTX ISA fragment layouts), the
pack kernel that copies misaligned operands into padded buffers included."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import numpy as np
import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import render
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.kernels import gemm_mma as mm
from autotune.measure.evaluate import Candidate, Settings, render_candidate, static_check
from autotune.tune.spec import load_spec
from tests.host_cuda import HEADER, MMA_PTX, build, gxx
from tests.sweep import covering, full_sweep, product

GEMM = FAMILIES["gemm"]
SETTINGS = Settings(arch="sm_90", tolerance=1e-3, max_shared_bytes=227 * 1024)
LAYOUTS = ("NN", "NT", "TN", "TT")
P = dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=4, SWIZZLE=True, RASTER=8)
# Configurations the GPU probes first, and smaller ones that exercise the other code paths.
GOOD = {
    "128x256x32s4": P,
    "256x128x32s4": dict(P, BM=256, BN=128),
    "128x128x32s4": dict(P, BN=128),
    "128x128x64s3_w64x32": dict(P, BN=128, BK=64, WN=32, STAGES=3, RASTER=1),
    "128x256x64s3_pad": dict(P, BK=64, STAGES=3, SWIZZLE=False),
    "64x64x16s2": dict(BM=64, BN=64, BK=16, WM=32, WN=32, STAGES=2, SWIZZLE=True, RASTER=1),
}


def test_checks_name_the_broken_rule():
    assert mm.check(P) is None
    cases = [
        (dict(P, WM=48), "must divide the block tile"),
        (dict(P, BM=48, WM=24), "multiples of 16"),
        (dict(P, BK=24), "BK must be a multiple of 16"),
        (dict(P, BM=256, BN=512, WM=32, WN=32), "threads per block exceeds 1024"),
        (dict(P, WM=128, BM=128), "accumulators per thread"),
        (dict(P, STAGES=1), "STAGES must be 2 to 5"),
        (dict(P, STAGES=6), "STAGES must be 2 to 5"),
        (dict(P, BK=48), "power of two or a multiple of 64"),
        (dict(P, RASTER=0), "RASTER must be at least 1"),
    ]
    for params, fragment in cases:
        reason = mm.check(params)
        assert reason is not None and fragment in reason, (params, reason)
    assert mm.check(dict(P, BK=48, SWIZZLE=False)) is None  # padding takes any multiple of 16


@pytest.mark.parametrize(
    ("shape", "layout", "packed"),
    [
        ("256x256x260", "NN", (("A", 256, 260),)),  # lda = K
        ("256x258x256", "NN", (("B", 256, 258),)),  # ldb = N
        ("250x256x256", "TN", (("A", 256, 250),)),  # lda = M
        ("256x256x250", "NT", (("A", 256, 250), ("B", 256, 250))),  # lda = ldb = K
        ("4095x4097x4093", "NN", (("A", 4095, 4093), ("B", 4093, 4097))),
        ("255x257x256", "NT", ()),  # the extents that are not leading dimensions are free
        ("256x256x255", "TN", ()),
    ],
)
def test_operands_whose_rows_are_not_16_bytes_are_packed(shape, layout, packed):
    problem = GEMM.problem(shape, "bfloat16", layout)
    assert GEMM.check_problem("mma", P, problem) is None and mm.packed(problem) == packed
    name = GEMM.kernel_name("mma", P, problem)
    tag = "".join(op.lower() for op, _, _ in packed)
    assert (f"_{layout.lower()}_u{tag}_bm128" in name) if packed else ("_u" not in name)
    launch = GEMM.launch("mma", P, problem)
    assert launch.grid == (-(-problem.N // 256), -(-problem.M // 128), 1)  # the true M and N, packed or not
    assert [s.kernel_name for s in launch.before] == [name + "_pack"] * len(packed)
    for step, (_, rows, cols) in zip(launch.before, packed, strict=True):
        chunks = -(-cols // 8)  # one thread per 16-byte chunk of a packed row, a block row per matrix row
        assert step.grid == (-(-chunks // mm.PACK_THREADS), rows, 1) and step.block == (mm.PACK_THREADS, 1, 1)
    assert GEMM.extra_bytes("mma", P, problem) == sum(r * -(-c // 8) * 8 * 2 for _, r, c in packed)
    assert GEMM.scratch("mma", P, problem) == (0, 0)  # the split-K arguments the kernel ignores, as before
    source = render("gemm", "mma", P, problem).source
    assert (name + "_pack(") in source if packed else "_pack" not in source
    assert "mma computes float16, bfloat16, not float32" in GEMM.check_problem(
        "mma", P, GEMM.problem("256x256x260", "float32")
    )


def test_the_4095x4097x4093_packs_move_what_the_readme_promises():
    p = GEMM.problem("4095x4097x4093", "float16")
    assert GEMM.extra_bytes("mma", P, p) == (4095 * 4096 + 4093 * 4104) * 2  # 67 MB written, the same read
    assert GEMM.extra_bytes("wmma", {}, p) == 0 and GEMM.extra_bytes("mma", P, GEMM.problem("64x64x64", "float16")) == 0
    tall = GEMM.problem([2**17, 8, 9], "float16")  # more rows than grid.y takes: the pack kernel loops over them
    assert GEMM.launch("mma", P, tall).before[0].grid == (1, mm.LAUNCH_LIMITS.max_grid_y, 1)
    wide = GEMM.problem([8, 8, 2**20 - 1], "float16")
    assert GEMM.launch("mma", P, wide).before[0].grid == (2**17 // mm.PACK_THREADS, 8, 1)
    with pytest.raises(ValueError, match="needs the kernel name"):
        mm.launch(P, p)


def test_pack_args_scratch_and_main_args(monkeypatch):
    import numpy as np

    p = GEMM.problem("37x45x29", "float16", "TN")  # A stored 29 x 37 (lda 37), B 29 x 45 (ldb 45)
    scratch = ("partial", "counters", "packed A", "packed B")
    (sa, sb) = GEMM.before_args("mma", P, p, ("a", "b"), scratch)
    assert sa == ("a", "packed A", 29, 37, 40) and sb == ("b", "packed B", 29, 45, 48)
    assert all(isinstance(x, np.int32) for x in (*sa[2:], *sb[2:]))
    args = GEMM.kernel_args(p, ("a", "b"), "c", 2.0, 0.5, scratch)
    assert args[:6] == ("packed A", "packed B", "c", 37, 45, 29) and args[6:] == (2.0, 0.5, "partial", "counters")
    only_b = GEMM.problem("40x45x29", "float16", "TN")
    assert GEMM.kernel_args(only_b, ("a", "b"), "c", scratch=scratch[:3])[:2] == ("a", "packed A")
    with pytest.raises(ValueError):  # a scratch tuple that does not match the problem's packs
        GEMM.kernel_args(only_b, ("a", "b"), "c", scratch=scratch)
    assert GEMM.before_args("wmma", {}, p, ("a", "b"), scratch[:2]) == ()

    class FakeCupy:  # new_scratch's buffers: split-K pair, then the packed copies (rows x padded row)
        @staticmethod
        def zeros(n, dtype):
            return ("zeros", n)

        @staticmethod
        def empty(shape, dtype):
            return ("empty", shape, dtype)

        float32, uint32 = "float32", "uint32"

    monkeypatch.setitem(__import__("sys").modules, "cupy", FakeCupy)
    assert GEMM.new_scratch("mma", P, p) == (("zeros", 1), ("zeros", 1), ("empty", (29, 40), "float16"),
                                              ("empty", (29, 48), "float16"))  # fmt: skip
    assert GEMM.new_scratch("mma", P, GEMM.problem("40x48x29", "bfloat16", "TN")) == (("zeros", 1), ("zeros", 1))


def test_geometry_and_shared_memory():
    p = GEMM.problem("8192x8192x8192", "float16")
    launch = GEMM.launch("mma", P, p)
    assert launch.grid == (32, 64, 1) and launch.block == (256, 1, 1)
    assert launch.shared_bytes == 4 * (128 * 32 + 32 * 256) * 2
    padded = dict(P, SWIZZLE=False)
    # rows padded by 8 elements, stage buffers rounded up to 128 bytes
    assert mm.shared_bytes(padded, "NN") == 4 * (128 * 40 + 32 * 264) * 2
    assert mm.shared_bytes(padded, "TT") == 4 * (32 * 136 + 256 * 40) * 2
    # tiny pipelines: the epilogue's staging (16 rows of WN + 8 floats per warp) sets the size
    small = GOOD["64x64x16s2"]
    assert mm.shared_bytes(small, "NN") == max(2 * (64 * 16 + 16 * 64) * 2, 4 * 16 * 40 * 4)
    assert GEMM.scratch("mma", P, p) == (0, 0)
    assert GEMM.launch("mma", P, GEMM.problem("8x8x8", "float16")).grid == (1, 1, 1)
    name = GEMM.kernel_name("mma", P, GEMM.problem("136x264x72", "bfloat16", "TN"))
    assert name == "gemm_mma_bf16_tn_bm128_bn256_bk32_wm64_wn64_stages4_swizzle1_raster8"
    assert "mma" in GEMM.templates and "mma" in GEMM.templates["auto"].kind("TEMPLATE")
    assert GEMM.check("auto", {"TEMPLATE": "mma", **P}) is None


# Each configuration in one dtype and layout, in turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: in all of them.
@pytest.mark.parametrize(("label", "dtype", "layout"), covering(GOOD, product(["float16", "bfloat16"], LAYOUTS)))
def test_compiles_for_sm90_without_spills(label, dtype, layout):
    problem = GEMM.problem("4096x4104x4088", dtype, layout)
    c = render_candidate(Candidate("gemm", "mma", problem, Config.of(GOOD[label])), SETTINGS)
    assert c.status is None, f"{label}: {c.reason}"
    r = compile_source(c.source, c.kernel_name, "sm_90")
    assert r.ok, f"{label}: {r.error}"
    assert r.spills == 0 and r.stack_bytes == 0, f"{label} spills {r.spills} bytes ({r.registers} registers)"
    assert "mma.sync" not in c.source or "ldmatrix" in c.source


# The first four combinations (every dtype and every layout: tests/sweep.product), each with one of the two
# configurations in turn; AUTOTUNE_FULL_SWEEP=1: every dtype and layout, with both configurations in each.
PACKED_COMBOS = product(["float16", "bfloat16"], LAYOUTS)[: None if full_sweep() else 4]


@pytest.mark.parametrize(
    ("dtype", "layout", "label"),
    [(*combo, label) for combo, label in covering(PACKED_COMBOS, [("128x256x32s4",), ("64x64x16s2",)])],
)
def test_packed_variants_compile_for_sm90_without_spills_in_either_kernel(dtype, layout, label):
    from autotune.measure.evaluate import kernel_resources

    problem = GEMM.problem("4095x4097x4093", dtype, layout)  # every leading dimension odd: A and B packed
    c = render_candidate(Candidate("gemm", "mma", problem, Config.of(GOOD[label])), SETTINGS)
    assert c.status is None and c.kernel_name.endswith("_uab_" + c.kernel_name.split("_uab_")[1]), c.reason
    r = compile_source(c.source, c.kernel_name, "sm_90")
    assert r.ok, f"{label}: {r.error}"
    assert r.spills == 0 and r.stack_bytes == 0, f"{label} spills {r.spills} bytes ({r.registers} registers)"
    registers, spills = kernel_resources(r, c.kernel_name + "_pack")
    assert registers and spills == 0 and registers * mm.PACK_THREADS <= 65536, (registers, spills)
    aligned = render("gemm", "mma", GOOD[label], GEMM.problem("4096x4104x4088", dtype, layout))
    # the same GEMM: only the padded leading dimensions differ (register allocation may move a little)
    assert abs(compile_source(aligned.source, aligned.kernel_name, "sm_90").registers - r.registers) <= 8


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (dict(P, BK=48), "with SWIZZLE, BM, BN and BK must each be a power of two or a multiple of 64"),
        (dict(P, STAGES=6), "STAGES must be 2 to 5"),
        (dict(P, WM=128, BM=256), "at most 128 accumulators per thread"),
        (dict(P, WN=24, BN=240), "WM and WN must be multiples of 16"),
    ],
)
def test_a_config_the_checks_reject_trips_a_static_assert_when_compiled_anyway(params, message):
    assert mm.check(params) is not None
    r = render("gemm", "mma", params, GEMM.problem("256x256x256", "float16"))
    result = compile_source(r.source, r.kernel_name, "sm_90")
    assert not result.ok and message in result.log, result.log[-500:]


# --- the kernel's arithmetic, run on the host ---------------------------------------------------------
# One fiber per CUDA thread, a host_barrier per block and one per warp. The PTX wrappers are replaced
# by lane-exact emulations: every lane publishes its operands (fragment registers or row addresses) to its
# warp, the warp meets at the barrier, and each lane takes what the PTX ISA's fragment layouts give it.
# cp.async copies land only when cp.async.wait_group lets them (the latest the hardware may), so a missing
# wait reads stale shared memory (NaN-poisoned); ldmatrix checks alignment and counts bank conflicts.

EMU_PTX = MMA_PTX

EMU_MAIN = r"""// argv: dir M N K alpha beta gx gy threads smem_bytes, then per pack step: operand rows cols ld gx gy
int main(int argc, char** argv) {
  std::string dir = argv[1];
  int M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]);
  float alpha = atof(argv[5]), beta = atof(argv[6]);
  gridDim = {(unsigned)atoi(argv[7]), (unsigned)atoi(argv[8]), 1u};
  int threads = atoi(argv[9]); size_t smem_bytes = atol(argv[10]);
  blockDim = {(unsigned)threads, 1, 1};
  auto a = slurp(dir + "/a.bin"); auto b = slurp(dir + "/b.bin"); auto c = slurp(dir + "/c.bin");
  const char* operand[2] = {a.data(), b.data()};  // what the GEMM reads: as stored, or the packed copy
#ifdef PACK  // the pack kernel (no barriers: one thread at a time) into NaN-poisoned buffers
  std::vector<char> packs[2];
  const dim3 gemm_grid = gridDim, gemm_block = blockDim;
  for (int i = 11; i + 6 <= argc; i += 6) {
    const int op = argv[i][0] == 'B', rows = atoi(argv[i + 1]), cols = atoi(argv[i + 2]), ld = atoi(argv[i + 3]);
    packs[op].assign((size_t)rows * ld * sizeof(T) + 16, (char)0xff);
    T* dst = (T*)(packs[op].data() + (16 - (uintptr_t)packs[op].data() % 16) % 16);
    gridDim = {(unsigned)atoi(argv[i + 4]), (unsigned)atoi(argv[i + 5]), 1u};
    blockDim = {(unsigned)PACK_THREADS, 1u, 1u};
    for (unsigned y = 0; y < gridDim.y; ++y)
      for (unsigned x = 0; x < gridDim.x; ++x)
        for (int t = 0; t < PACK_THREADS; ++t) {
          blockIdx = {x, y, 0}; threadIdx = {(unsigned)t, 0, 0};
          PACK((const T*)operand[op], dst, rows, cols, ld);
        }
    operand[op] = (const char*)dst;
  }
  gridDim = gemm_grid, blockDim = gemm_block;
#endif
  std::vector<unsigned char> smem(smem_bytes + 128);
  g_smem_base = smem.data() + (128 - (uintptr_t)smem.data() % 128) % 128;
  g_smem_size = smem_bytes;
  g_smem = (float*)g_smem_base;
  for (unsigned y = 0; y < gridDim.y; ++y)
    for (unsigned x = 0; x < gridDim.x; ++x) {
      blockIdx = {x, y, 0};
      host_barrier bar(threads);
      g_bar = &bar;
      const auto warp_bars = host_warp_barriers(threads);
      std::fill(smem.begin(), smem.end(), (unsigned char)0xff);  // NaN in both 16-bit types and in fp32
      host_launch(threads, [&](int t) {
        threadIdx = {(unsigned)t, 0, 0};
        KERNEL((const T*)operand[0], (const T*)operand[1], (T*)c.data(), M, N, K, alpha, beta, nullptr, nullptr);
        if (!t_groups.empty() || !t_open.empty()) { fprintf(stderr, "cp.async groups left pending\n"); abort(); }
      });
    }
  FILE* f = fopen((dir + "/out.bin").c_str(), "wb"); fwrite(c.data(), 1, c.size(), f); fclose(f);
  printf("%ld %ld\n", g_conflicts.load(), g_ldmatrix.load());
  return 0;
}
"""


def _bits(x, dtype):
    if dtype == "bfloat16":
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.ascontiguousarray(x, dtype=np.float16)


def _values(raw, dtype, shape):
    if dtype == "bfloat16":
        u = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape).astype(np.float64)
    return np.frombuffer(raw, np.float16).reshape(shape).astype(np.float64)


def emulate(tmp_path, params, dtype, layout, shape, alpha=1.0, beta=0.0):
    """Run the rendered kernel on the host; (relative error vs float64, ldmatrix bank conflicts, ldmatrix count)."""
    compiler = gxx()
    if compiler is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    problem = GEMM.problem(list(shape), dtype, layout)
    assert GEMM.check("mma", params) is None and GEMM.check_problem("mma", params, problem) is None
    r = render("gemm", "mma", params, problem)
    src = "\n".join(line for line in r.source.splitlines() if not line.startswith("#include"))
    decl = "extern __shared__ __align__(128) unsigned char smem_raw[];"
    assert decl in src
    src = src.replace(decl, "unsigned char* smem_raw = g_smem_base;")
    launch = GEMM.launch("mma", params, problem)
    pack = f"#define PACK {r.kernel_name}_pack\n" if launch.before else ""
    build(
        tmp_path, f"{HEADER}\n#include <memory>\n{EMU_PTX}", f"{src}\n#define KERNEL {r.kernel_name}\n{pack}{EMU_MAIN}"
    )

    M, N, K = shape
    rng = np.random.default_rng(0)
    a = _values(_bits(rng.standard_normal((M, K)), dtype).tobytes(), dtype, (M, K))
    b = _values(_bits(rng.standard_normal((K, N)), dtype).tobytes(), dtype, (K, N))
    c = _values(_bits(rng.standard_normal((M, N)), dtype).tobytes(), dtype, (M, N))
    _bits(a.T if layout[0] == "T" else a, dtype).tofile(tmp_path / "a.bin")
    _bits(b.T if layout[1] == "T" else b, dtype).tofile(tmp_path / "b.bin")
    _bits(c, dtype).tofile(tmp_path / "c.bin")
    args = [tmp_path / "k", tmp_path, M, N, K, alpha, beta, launch.grid[0], launch.grid[1], launch.block[0]]
    args += [launch.shared_bytes, *pack_args(problem, params, launch)]
    run = subprocess.run([str(x) for x in args], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    conflicts, loads = map(int, run.stdout.split())
    out = _values((tmp_path / "out.bin").read_bytes(), dtype, (M, N))
    ref = alpha * (a @ b) + beta * c
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref)), conflicts, loads


def pack_args(problem, params, launch):
    """The emulator's pack arguments (operand rows cols ld blocks, per step) from the family's own
    before_args, with names standing in for the arrays; checks that kernel_args hands the GEMM the copies."""
    scratch = ("partial", "counters", *(f"packed {name}" for name, _, _ in mm.packed(problem)))
    steps = GEMM.before_args("mma", params, problem, ("A", "B"), scratch)
    main = GEMM.kernel_args(problem, ("A", "B"), "C", scratch=scratch)
    packed = {src for src, *_ in steps}
    assert main[:2] == tuple(f"packed {x}" if x in packed else x for x in "AB") and main[-2:] == scratch[:2]
    out = []
    for step, (src, dst, rows, cols, ld) in zip(launch.before, steps, strict=True):
        assert step.block == (mm.PACK_THREADS, 1, 1) and dst == f"packed {src}"
        out += [src, rows, cols, ld, step.grid[0], step.grid[1]]
    return out


TOL = {"float16": 2e-3, "bfloat16": 1.6e-2}
SMALL = dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=3, SWIZZLE=True, RASTER=1)
EMULATED = [
    # params, dtype, shape, alpha, beta
    (SMALL, "float16", (40, 72, 48), 1.0, 0.0),  # every edge of a single block; K tail of 16
    (dict(SMALL, BK=64, WN=64, BN=128, STAGES=2, SWIZZLE=False, RASTER=2), "bfloat16", (129, 136, 264), 0.5, -1.5),
    (dict(SMALL, BM=32, BK=16, WM=16, STAGES=4, RASTER=3), "float16", (129, 136, 264), 2.0, 0.25),  # one k-step a tile
    (dict(SMALL, BN=128, BK=64, WN=64, STAGES=5), "bfloat16", (72, 136, 40), 1.0, 1.0),  # more stages than k tiles
    (dict(SMALL, BK=48, STAGES=3, SWIZZLE=False), "float16", (64, 64, 200), 1.0, 0.0),  # 3 k-steps: paired tiles
]


def _in_layouts(cases, times):
    """Each case in ``times`` layouts, the next ones in turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: in all four."""
    return [(*cases[i], layout) for i, layout in covering(range(len(cases)), [(x,) for x in LAYOUTS], times=times)]


# One layout a case: every layout, each dtype in two (the dtypes share the fragment code; the other pairs of layout
# and dtype run in the full sweep)
@pytest.mark.parametrize(("params", "dtype", "shape", "alpha", "beta", "layout"), _in_layouts(EMULATED, 1))
def test_emulated_kernel_matches_float64(tmp_path, params, dtype, shape, alpha, beta, layout):
    # the extents that are not leading dimensions need not be multiples of 8: make them odd where allowed
    M, N, K = shape
    if layout[0] == "T":
        M = -(-M // 8) * 8
    if layout[1] == "T":
        N -= 1
    if layout == "TN":
        K -= 3
    err, conflicts, loads = emulate(tmp_path, params, dtype, layout, (M, N, K), alpha, beta)
    assert err < TOL[dtype], f"relative error {err:.2e}"
    assert loads > 0 and conflicts == 0, f"{conflicts} bank conflicts in {loads} ldmatrix"


PACKED = [
    # params, dtype, shape, alpha, beta: leading dimensions not multiples of 8 in every layout
    (SMALL, "float16", (37, 45, 29), 1.0, 0.0),  # one block; A and B packed in every layout
    (dict(SMALL, BM=32, BK=16, WM=16, STAGES=4, RASTER=3), "bfloat16", (37, 45, 29), 0.5, -1.5),
    (dict(SMALL, BK=64, WN=64, BN=128, STAGES=2, SWIZZLE=False, RASTER=2), "float16", (75, 131, 71), 2.0, 0.25),
]


# Two layouts a case: every layout packs A and B, three cases reach all four layouts only two at a time
@pytest.mark.parametrize(("params", "dtype", "shape", "alpha", "beta", "layout"), _in_layouts(PACKED, 2))
def test_emulated_packed_kernel_matches_float64(tmp_path, params, dtype, shape, alpha, beta, layout):
    problem = GEMM.problem(list(shape), dtype, layout)
    assert len(mm.packed(problem)) == 2 and len(GEMM.launch("mma", params, problem).before) == 2
    err, conflicts, loads = emulate(tmp_path, params, dtype, layout, shape, alpha, beta)
    assert err < TOL[dtype], f"relative error {err:.2e}"
    assert loads > 0 and conflicts == 0, f"{conflicts} bank conflicts in {loads} ldmatrix"


@pytest.mark.parametrize("layout", ["NN", "TT"])
def test_emulated_kernel_with_one_packed_operand(tmp_path, layout, monkeypatch):
    shape = (40, 45, 32) if layout == "NN" else (37, 48, 32)  # NN: only B (ldb = N); TT: only A (lda = M)
    problem = GEMM.problem(list(shape), "float16", layout)
    assert [name for name, _, _ in mm.packed(problem)] == (["B"] if layout == "NN" else ["A"])
    few_rows = dataclasses.replace(mm.LAUNCH_LIMITS, max_grid=(2**31 - 1, 5, 65535))
    monkeypatch.setattr(mm, "LAUNCH_LIMITS", few_rows)  # the pack kernel's blocks each take several rows
    assert GEMM.launch("mma", SMALL, problem).before[0].grid[1] == 5
    err, _, _ = emulate(tmp_path, SMALL, "float16", layout, shape, 1.5, 0.5)
    assert err < TOL["float16"], f"relative error {err:.2e}"


def _mma_starts(spec_file):
    spec = load_spec(Path(__file__).resolve().parents[2] / "configs" / spec_file)
    return spec, [c for c in spec.start_from if c.as_dict()["TEMPLATE"] == "mma"]


@pytest.mark.parametrize("spec_file", SPECS := ("gemm_fp16.yaml", "gemm_bf16.yaml"))
def test_the_tensor_core_specs_offer_mma_with_start_points_that_compile(spec_file):
    spec, starts = _mma_starts(spec_file)
    assert len(starts) >= 3
    # every shape, the odd ones included (their misaligned operands are packed first)
    assert all(GEMM.check_problem("mma", P, p) is None for p in spec.problems)
    assert spec.problems[0].label == "8192x8192x8192"
    for config in spec.start_from:
        for problem in spec.problems:
            reason = static_check(Candidate("gemm", "auto", problem, config), SETTINGS)
            if config.as_dict()["TEMPLATE"] == "wgmma" and (problem.K % 8 or problem.N % 8):
                assert reason and "whole 16 bytes" in reason, (config, problem)  # mma packs those
            else:
                assert reason is None, (config, problem, reason)
    odd = next(p for p in spec.problems if p.label == "4095x4097x4093")
    # each start point of the two specs (the same configurations in the other 16-bit dtype) in one spec, with the
    # aligned or the odd shape, in turn (tests/sweep.py); AUTOTUNE_FULL_SWEEP=1: in both specs, with both shapes
    keys = {f: [c.key for c in (starts if f == spec_file else _mma_starts(f)[1])] for f in SPECS}
    combos = [(f, problem) for f in SPECS for problem in (spec.problems[0], odd)]
    cases = covering(dict.fromkeys(keys[SPECS[0]] + keys[SPECS[1]]), combos, lambda k, combo: k in keys[combo[0]])
    assert any(f == spec_file for _, f, _ in cases), "this spec compiles none of its start points"
    for config, problem in [(starts[keys[f].index(k)], problem) for k, f, problem in cases if f == spec_file]:
        c = render_candidate(Candidate("gemm", "auto", problem, config), SETTINGS)
        assert ("_uab_" in c.kernel_name) == (problem is odd)
        r = compile_source(c.source, c.kernel_name, "sm_90")
        assert r.ok and r.spills == 0, (config, r.error, r.spills)
