"""GPU tier for the dtype/layout templates: every dtype and layout on fresh random inputs, odd shapes,
split-K launched repeatedly, alpha/beta, the runtime's dtype and layout handling, a short real run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.measure.bench import TimingPlan
from autotune.measure.evaluate import Candidate, Settings, Status, evaluate, load_kernel, prepare
from autotune.measure.verify import tolerance_for


@pytest.fixture(autouse=True)
def _our_kernels_through_the_runtime(monkeypatch):
    """These tests exercise our kernels through the runtime: no vendor substitution (see autotune.serve.dispatch)."""
    monkeypatch.setenv("AUTOTUNE_VENDOR", "0")


pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
GEMM = FAMILIES["gemm"]
QUICK = TimingPlan(warmup=1, min_repeats=2, max_repeats=3, target_ms=1.0, probe=2)

SHAPES = [(256, 256, 256), (37, 91, 13), (1, 1, 1), (129, 257, 65), (4095, 4097, 4093), (16, 1000, 3000)]
LAYOUTS = ("NN", "NT", "TN", "TT")
W16 = dict(FRAG="m16n16k16", WARPS_M=2, WARPS_N=2, FRAGS_M=4, FRAGS_N=4, BK=32, PAD=8, STAGES=3, SPLIT_K=1,
           RASTER=1)  # fmt: skip
WMMA = {
    "float16": [W16, dict(W16, FRAG="m8n32k16", FRAGS_M=2, FRAGS_N=2, BK=64, PAD=0, STAGES=4, SPLIT_K=3, RASTER=8),
                dict(W16, WARPS_M=4, WARPS_N=1, FRAGS_M=1, FRAGS_N=2, BK=16, STAGES=2, SPLIT_K=5),
                # exactly 48 KB of dynamic shared memory plus split-K's static flag: the launch must raise the limit
                dict(W16, WARPS_M=2, WARPS_N=1, FRAGS_M=2, FRAGS_N=1, BK=64, STAGES=4, SPLIT_K=2)],
    "bfloat16": [dict(W16, WARPS_N=4, FRAGS_N=2, BK=16, PAD=16, STAGES=4, SPLIT_K=2)],
    "tfloat32": [dict(W16, FRAG="m16n16k8", FRAGS_M=2, PAD=4),
                 dict(W16, FRAG="m16n16k8", FRAGS_M=2, FRAGS_N=2, BK=16, PAD=0, STAGES=2, SPLIT_K=4, RASTER=8)],
}  # fmt: skip
M32N8 = dict(W16, FRAG="m32n8k16", FRAGS_M=2, FRAGS_N=4)  # B fragments need the NT/TT layouts
SK = dict(VEC=4, TX=32, TY=8, MT=8, KR=4, SPLIT_K=1, PREFETCH=True, MINB=2)
SKINNY = [SK, dict(SK, MT=1, SPLIT_K=8, MINB=4), dict(SK, VEC=2, TX=64, TY=4, MT=16, KR=2, SPLIT_K=3, PREFETCH=False),
          dict(SK, VEC=1, TY=16, MT=3, KR=1)]  # fmt: skip
SKINNY_SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (35, 8457, 2561), (3, 5, 7), (64, 1000, 999), (1, 1, 1)]


@pytest.fixture(scope="module")
def settings():
    from autotune.core.device import current_gpu

    gpu = current_gpu()
    # Correctness, not tuning policy: a kernel that spills on this NVRTC still has to compute the right thing.
    return Settings(arch=gpu.arch, tolerance=1e-5, max_shared_bytes=gpu.max_shared_per_block, timing=QUICK,
                    allow_spills=True)  # fmt: skip


def _cases():
    """Every dtype x layout with the runtime's default config and the configs above that fit the layout."""
    for dtype, configs in WMMA.items():
        for layout in LAYOUTS:
            default = GEMM.default_config(dtype, layout)[1]
            yield pytest.param(dtype, layout, default, id=f"{dtype}-{layout}-default")
            for i, params in enumerate(configs):
                if GEMM.check_problem("wmma", params, GEMM.problem("256x256x256", dtype, layout)) is None:
                    yield pytest.param(dtype, layout, params, id=f"{dtype}-{layout}-{i}")
    for layout in ("NT", "TT"):
        yield pytest.param("float16", layout, M32N8, id=f"float16-{layout}-m32n8k16")


@pytest.mark.parametrize(("dtype", "layout", "params"), list(_cases()))
def test_wmma_is_correct_for_every_dtype_and_layout(settings, dtype, layout, params):
    failures = _wrong_on(settings, "wmma", dtype, layout, params, SHAPES)
    assert not failures, "\n".join(failures)


def _wrong_on(settings, template, dtype, layout, params, shapes):
    """Every shape where the configuration does not verify on fresh random inputs, as text."""
    s = replace(settings, tolerance=tolerance_for(dtype))
    failures = []
    for shape in shapes:
        problem = GEMM.problem(list(shape), dtype, layout)
        r = evaluate(Candidate("gemm", template, problem, Config.of(params)), s)
        if r.status is Status.INVALID and "SPLIT_K" in (r.reason or ""):
            continue  # split-K wider than a tiny K: rejected before compiling, by design
        if r.status is not Status.COMPLETE or r.error is None or r.error >= s.tolerance:
            failures.append(f"{shape} {r.kernel_name}: {r.status} {r.reason} error={r.error}")
    return failures


MMA_P = dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=4, SWIZZLE=True, RASTER=8)
MMA = [MMA_P, dict(MMA_P, BM=256, BN=128), dict(MMA_P, BN=128, BK=64, WN=32, STAGES=3, RASTER=1),
       dict(MMA_P, BK=64, STAGES=3, SWIZZLE=False), dict(BM=64, BN=64, BK=16, WM=32, WN=32, STAGES=2, SWIZZLE=True,
                                                         RASTER=3)]  # fmt: skip
# dims multiples of 8 but not of the tiles; then per layout the extents that are no leading dimension made odd
MMA_SHAPES = [(8, 8, 8), (136, 264, 72), (4096, 4104, 4088)]
MMA_ODD = {"NN": (129, 264, 72), "NT": (129, 263, 72), "TN": (136, 264, 77), "TT": (136, 263, 72)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "params", MMA, ids=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']}s{p['STAGES']}sw{int(p['SWIZZLE'])}"
)
def test_mma_is_correct_for_every_dtype_and_layout(settings, dtype, layout, params):
    failures = _wrong_on(settings, "mma", dtype, layout, params, [*MMA_SHAPES, MMA_ODD[layout]])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_relaunches_with_alpha_beta(settings, dtype):
    for layout in LAYOUTS:
        problem = GEMM.problem(list(MMA_ODD[layout]), dtype, layout)
        errors = _launch_twice(settings, "mma", MMA_P, problem, alpha=0.75, beta=-1.5)
        assert all(e < tolerance_for(dtype) for e in errors), (layout, errors)


# leading dimensions that are not multiples of 8: the misaligned operands are packed first (Launch.before)
PACKED_SHAPES = [(37, 45, 29), (129, 257, 65), (1, 1, 1), (4095, 4097, 4093)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("params", [MMA_P, MMA[-1]], ids=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']}s{p['STAGES']}")
def test_packed_mma_is_correct_on_odd_shapes(settings, dtype, layout, params):
    for shape in PACKED_SHAPES:  # every extent odd: both operands packed in every layout
        assert len(GEMM.launch("mma", params, GEMM.problem(list(shape), dtype, layout)).before) == 2
    failures = _wrong_on(settings, "mma", dtype, layout, params, PACKED_SHAPES)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("dtype", "layout", "shape"), [("float16", "NN", (4095, 4097, 4093)),
                                                        ("bfloat16", "TN", (1001, 517, 2999)),
                                                        ("float16", "TT", (300, 40, 77))])  # fmt: skip
def test_packed_mma_relaunches_with_alpha_beta(settings, dtype, layout, shape):
    problem = GEMM.problem(list(shape), dtype, layout)
    assert GEMM.launch("mma", MMA_P, problem).before  # TT (300, 40, 77): only A (lda = M = 300) is packed
    errors = _launch_twice(settings, "mma", MMA_P, problem, alpha=0.75, beta=-1.5)
    assert all(e < tolerance_for(dtype) for e in errors), errors


def test_runtime_serves_a_packed_mma_entry(tmp_path, monkeypatch):
    """An mma entry for the odd shape (as a tuning run stores it): autotune.gemm packs A and B first."""
    import cupy as cp

    import autotune
    from autotune.build.templates import render, template_hash
    from autotune.core.device import current_gpu
    from autotune.results.store import merge
    from autotune.serve import runtime

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    tuned = tmp_path / "tuned"
    key = current_gpu().key
    for dtype, layout, (m, n, k) in [("float16", "NN", (4095, 4097, 4093)), ("bfloat16", "TN", (1001, 517, 2999))]:
        p = GEMM.problem([m, n, k], dtype, layout)
        merge(tuned / key / "gemm.json", {}, f"{dtype}/{layout}/{p.label}",
              {"template": "mma", "params": MMA_P, "verified": True, "median_ms": 1.0,
               "template_hash": template_hash("gemm", "mma"),
               "source_hash": render("gemm", "mma", MMA_P, p).source_hash})  # fmt: skip
    rng = cp.random.default_rng(12)
    m, n, k = 4095, 4097, 4093
    a = rng.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
    b = rng.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
    c = rng.standard_normal((m, n), dtype=cp.float32).astype(cp.float16)
    ref = 0.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) + 2.0 * c.astype(cp.float64)
    for _ in range(2):  # the second call reuses the packed buffers of this stream
        out = autotune.gemm(a, b, out=c.copy(), alpha=0.5, beta=2.0, tuned_dir=tuned)
        assert _rel(out, ref) < tolerance_for("float16")
    launcher = autotune.load("gemm", M=m, N=n, K=k, dtype="float16", tuned_dir=tuned)
    assert launcher.provenance["step"] == "exact" and launcher.choice.template == "mma"
    assert isinstance(launcher, runtime.StagedLauncher) and "_uab_" in launcher.kernel_name
    torch = pytest.importorskip("torch")
    ta = torch.randn(2999, 1001, device="cuda", dtype=torch.bfloat16).t()  # TN: A read transposed in place
    tb = torch.randn(2999, 517, device="cuda", dtype=torch.bfloat16)
    tc = torch.randn(1001, 517, device="cuda", dtype=torch.bfloat16)
    tref = 2.0 * (ta.double() @ tb.double()) - 0.5 * tc.double()
    tout = autotune.gemm(ta, tb, out=tc, alpha=2.0, beta=-0.5, tuned_dir=tuned)
    assert float(torch.linalg.norm(tout.double() - tref) / torch.linalg.norm(tref)) < tolerance_for("bfloat16")
    bl = autotune.load("gemm", M=1001, N=517, K=2999, dtype="bfloat16", layout="TN", tuned_dir=tuned)
    assert bl.choice.template == "mma" and bl.provenance["step"] == "exact" and isinstance(bl, runtime.StagedLauncher)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NN", "TN"])
@pytest.mark.parametrize("params", SKINNY, ids=lambda p: f"vec{p['VEC']}-mt{p['MT']}-sk{p['SPLIT_K']}")
def test_skinny_is_correct_for_every_dtype_and_layout(settings, dtype, layout, params):
    failures = _wrong_on(settings, "skinny", dtype, layout, params, SKINNY_SHAPES)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_skinny_split_k_relaunches_with_alpha_beta(settings, dtype):
    params = SKINNY[2]
    for layout in ("NN", "TN"):
        problem = GEMM.problem([37, 1001, 2999], dtype, layout)
        errors = _launch_twice(settings, "skinny", params, problem, alpha=0.75, beta=-1.5)
        assert all(e < tolerance_for(dtype) for e in errors), errors


SKINNY_TC = [
    dict(WARPS=4, CW=1, MB=64, KC=16, STAGES=4, SPLIT_K=8, MINB=2),
    dict(WARPS=4, CW=1, MB=32, KC=32, STAGES=3, SPLIT_K=8, MINB=2),
    dict(WARPS=4, CW=2, MB=16, KC=16, STAGES=2, SPLIT_K=1, MINB=2),
    dict(WARPS=2, CW=1, MB=8, KC=8, STAGES=6, SPLIT_K=16, MINB=4),
]


@pytest.mark.parametrize("layout", ["NN", "TN"])
@pytest.mark.parametrize("params", SKINNY_TC, ids=lambda p: f"mb{p['MB']}-cw{p['CW']}-sk{p['SPLIT_K']}")
def test_skinny_tc_meets_the_float32_tolerance(settings, layout, params):
    """3xTF32 on tensor cores is judged as float32 (1e-5), not as tfloat32."""
    failures = _wrong_on(settings, "skinny_tc", "float32", layout, params, SKINNY_SHAPES + [(64, 4096, 4096)])
    assert not failures, "\n".join(failures)


def test_skinny_tc_split_k_relaunches_with_alpha_beta(settings):
    for layout in ("NN", "TN"):
        problem = GEMM.problem([37, 1001, 2999], "float32", layout)
        errors = _launch_twice(settings, "skinny_tc", SKINNY_TC[1], problem, alpha=0.75, beta=-1.5)
        assert all(e < tolerance_for("float32") for e in errors), errors


SKINNY_WGMMA = [
    dict(WG=2, MB=64, KC=32, STAGES=4, ROUND=128, SPLIT_K=4, CLUSTER=True, MINB=1),
    dict(WG=2, MB=64, KC=32, STAGES=4, ROUND=128, SPLIT_K=4, CLUSTER=False, MINB=1),
    dict(WG=1, MB=32, KC=16, STAGES=3, ROUND=32, SPLIT_K=2, CLUSTER=True, MINB=2),
    dict(WG=4, MB=16, KC=16, STAGES=3, ROUND=64, SPLIT_K=1, CLUSTER=False, MINB=1),
    dict(WG=1, MB=8, KC=32, STAGES=3, ROUND=256, SPLIT_K=8, CLUSTER=True, MINB=2),
    dict(WG=1, MB=16, KC=32, STAGES=5, ROUND=64, SPLIT_K=3, CLUSTER=False, MINB=2),
    dict(WG=2, MB=64, KC=16, STAGES=6, ROUND=256, SPLIT_K=1, CLUSTER=False, MINB=1),
]


def _needs_sm90(settings):
    if settings.arch != "sm_90":
        pytest.skip(f"skinny_wgmma is sm_90a code (wgmma); this GPU is {settings.arch}")


@pytest.mark.parametrize("tma", [True, False], ids=["tma", "cp_async"])
@pytest.mark.parametrize("layout", ["NN", "TN"])
@pytest.mark.parametrize(
    "params", SKINNY_WGMMA, ids=lambda p: "wg{WG}-mb{MB}-kc{KC}-r{ROUND}-sk{SPLIT_K}-cl{CLUSTER:d}".format(**p)
)
def test_skinny_wgmma_meets_the_float32_tolerance(settings, layout, params, tma):
    """3xTF32 on the warpgroup tensor cores is judged as float32 (1e-5), on shapes no tile divides; B by the
    tensor memory accelerator where N % 4 == 0 (TMA), else and without TMA by cp.async."""
    _needs_sm90(settings)
    shapes = SKINNY_SHAPES + [(64, 4096, 4096), (61, 333, 4097)]
    failures = _wrong_on(settings, "skinny_wgmma", "float32", layout, {**params, "TMA": tma}, shapes)
    assert not failures, "\n".join(failures)


def test_skinny_wgmma_split_k_relaunches_with_alpha_beta(settings):
    _needs_sm90(settings)
    for layout, n in (("NN", 1001), ("TN", 1001), ("NN", 1000)):  # N % 4 == 0: B by TMA where TMA is on
        problem = GEMM.problem([37, n, 2999], "float32", layout)
        for tma in (True, False):
            p = {**SKINNY_WGMMA[0], "TMA": tma}
            errors = _launch_twice(settings, "skinny_wgmma", p, problem, alpha=0.75, beta=-1.5)
            assert all(e < tolerance_for("float32") for e in errors), (layout, n, tma, errors)


def _launch_twice(settings, template, params, problem, alpha, beta):
    """Launch the same compiled kernel (and the same scratch buffers) twice with alpha/beta, each time after
    its ``before`` steps (mma's packs); errors of both."""
    import cupy as cp

    from autotune.kernels.gemm import decode

    c = prepare(Candidate("gemm", template, problem, Config.of(params)), settings)
    assert c.status is None, c.reason
    launch = GEMM.launch(template, params, problem)
    fn = load_kernel(c.compiled, launch.shared_bytes)
    inputs = GEMM.make_inputs(problem, seed=5)
    scratch = GEMM.new_scratch(template, params, problem)
    step_args = GEMM.before_args(template, params, problem, inputs, scratch)
    steps = [(load_kernel(c.compiled, s.shared_bytes, s.kernel_name), s, a)
             for s, a in zip(launch.before, step_args, strict=True)]  # fmt: skip
    from autotune.kernels.gemm import bf16_bits

    c32 = cp.random.default_rng(6).standard_normal((problem.M, problem.N), dtype=cp.float32)
    c0 = bf16_bits(c32) if problem.dtype == "bfloat16" else c32.astype(problem.storage)
    ref = alpha * GEMM.reference(problem, inputs) + beta * decode(c0, problem.dtype).astype(cp.float64)
    errors = []
    for _ in range(2):
        out = c0.copy()
        for f, step, a in steps:
            f(step.grid, step.block, a, shared_mem=step.shared_bytes)
        fn(launch.grid, launch.block, GEMM.kernel_args(problem, inputs, out, alpha, beta, scratch),
           shared_mem=launch.shared_bytes)  # fmt: skip
        cp.cuda.Device().synchronize()
        got = decode(out, problem.dtype).astype(cp.float64)
        errors.append(float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref)))
    if scratch:
        assert int(scratch[1].max()) == 0, "split-K tile counters must be reset for the next launch"
    return errors


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "tfloat32"])
def test_split_k_relaunches_with_alpha_beta(settings, dtype):
    params = WMMA[dtype][-1]
    assert params["SPLIT_K"] > 1
    for layout in ("NN", "TN"):
        problem = GEMM.problem([301, 517, 1999], dtype, layout)
        errors = _launch_twice(settings, "wmma", params, problem, alpha=0.75, beta=-1.5)
        assert all(e < tolerance_for(dtype) for e in errors), errors


def _rel(out, ref):
    import cupy as cp

    return float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))


def test_runtime_gemm_in_fp16_and_tf32_with_transposed_views(tmp_path, monkeypatch):
    import cupy as cp

    import autotune

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    rng = cp.random.default_rng(3)
    for m, n, k in [(4095, 4097, 4093), (3000, 5000, 700), (1, 7, 5)]:
        a32 = rng.standard_normal((m, k), dtype=cp.float32)
        b32 = rng.standard_normal((n, k), dtype=cp.float32).T  # a transposed view: read in place
        a, b = a32.astype(cp.float16), b32.T.astype(cp.float16).T
        ref = a.astype(cp.float64) @ b.astype(cp.float64)
        out = autotune.gemm(a, b)
        assert out.dtype == cp.float16 and _rel(out, ref) < tolerance_for("float16"), (m, n, k)
        launcher = autotune.load("gemm", M=m, N=n, K=k, dtype="float16", layout="NT")
        assert launcher.provenance["step"] in ("exact", "nearest", "same-arch", "default")
        out32 = autotune.gemm(a32, b32, precision="tf32")
        assert out32.dtype == cp.float32
        assert _rel(out32, a32.astype(cp.float64) @ b32.astype(cp.float64)) < tolerance_for("tfloat32")


def test_runtime_gemm_takes_bfloat16_torch_tensors(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import autotune

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    a = torch.randn(333, 257, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(129, 257, device="cuda", dtype=torch.bfloat16).t()
    c = torch.randn(333, 129, device="cuda", dtype=torch.bfloat16)
    ref = 2.0 * (a.double() @ b.double()) + 0.5 * c.double()
    out = autotune.gemm(a, b, out=c, alpha=2.0, beta=0.5)
    assert out is c and out.dtype == torch.bfloat16
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err < tolerance_for("bfloat16")


def test_a_short_fp16_run_with_the_template_as_a_search_dimension(tmp_path, capsys):
    import yaml

    from autotune.cli import main

    raw = yaml.safe_load((ROOT / "configs" / "gemm_fp16.yaml").read_text())
    raw["shapes"] = [[512, 512, 512], [300, 200, 1000]]
    raw["layout"] = ["NN", "TN"]
    spec = tmp_path / "small.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    tuned, runs = str(tmp_path / "tuned"), str(tmp_path / "runs")
    assert main(["run", str(spec), "--trials", "6", "--tuned-dir", tuned, "--runs-dir", runs]) == 0
    out = capsys.readouterr().out
    assert "512x512x512 float16" in out and "cuBLAS" in out
    doc = json.loads(next((tmp_path / "tuned").glob("*/gemm.json")).read_text())
    shapes = ("512x512x512", "300x200x1000")
    assert set(doc["entries"]) == {f"float16/{lay}/{s}" for lay in ("NN", "TN") for s in shapes}
    for e in doc["entries"].values():
        assert e["verified"] is True and e["template"] in GEMM.templates and "TEMPLATE" not in e["params"]
        assert e["error"] < tolerance_for("float16") and e["vendor_ratio"] > 0


def test_split_k_launches_on_two_streams_do_not_share_scratch(tmp_path, monkeypatch):
    import threading

    import cupy as cp

    import autotune

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    tuned = ROOT / "tuned"
    launcher = autotune.load("gemm", M=16, N=4096, K=4096, dtype="float16", tuned_dir=tuned)
    if launcher.config.get("SPLIT_K", 1) == 1:
        pytest.skip("the tuned entry for this shape does not split K")
    rng = cp.random.default_rng(9)
    a = rng.standard_normal((16, 4096), dtype=cp.float32).astype(cp.float16)
    b = rng.standard_normal((4096, 4096), dtype=cp.float32).astype(cp.float16)
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    errors: list[float] = []

    def work() -> None:
        with cp.cuda.Stream(non_blocking=True) as stream:
            out = cp.empty((16, 4096), dtype=cp.float16)
            worst = 0.0
            for _ in range(40):
                autotune.gemm(a, b, out=out, tuned_dir=tuned)
                stream.synchronize()
                worst = max(worst, _rel(out, ref))
            errors.append(worst)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 2 and max(errors) < tolerance_for("float16"), errors


def test_runtime_serves_the_stored_tensor_core_winners(tmp_path, monkeypatch):
    """tuned/ holds wgmma winners for fp16 4096^3 and 8192^3 (mma's before 2026-12-02) and an mma one for the odd
    4095x4097x4093: the runtime loads them exactly (with alpha and beta), and a never-tuned aligned shape is
    served too (online choice or nearest)."""
    import cupy as cp

    import autotune

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    rng = cp.random.default_rng(11)
    for m, n, k in [(4096, 4096, 4096), (2048, 3072, 1024), (4095, 4097, 4093)]:
        a = rng.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
        b = rng.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
        c = rng.standard_normal((m, n), dtype=cp.float32).astype(cp.float16)
        ref = 0.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) + 2.0 * c.astype(cp.float64)
        out = autotune.gemm(a, b, out=c.copy(), alpha=0.5, beta=2.0)
        assert _rel(out, ref) < tolerance_for("float16"), (m, n, k)
        launcher = autotune.load("gemm", M=m, N=n, K=k, dtype="float16", layout="NN")
        if (m, n, k) == (4096, 4096, 4096):
            assert launcher.provenance["step"] == "exact" and launcher.choice.template == "wgmma"
        if m % 8:
            assert launcher.provenance["step"] == "exact" and launcher.choice.template == "mma"


@pytest.mark.parametrize("template", ["skinny_tc", "skinny_wgmma"])
def test_runtime_serves_the_stored_3xtf32_winners(tmp_path, monkeypatch, template):
    """Every stored skinny_tc and skinny_wgmma entry (3xTF32) is served exactly by autotune.gemm and meets the
    float32 tolerance, twice in a row on the same split-K scratch, with alpha and beta."""
    import cupy as cp

    import autotune
    from autotune.core.device import current_gpu

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    path = Path(__file__).resolve().parents[2] / "tuned" / current_gpu().key / "gemm.json"
    entries = json.loads(path.read_text())["entries"] if path.exists() else {}
    shapes = [key.split("/")[2] for key, e in entries.items() if e.get("template") == template]
    if not shapes:
        pytest.skip(f"no {template} entry in {path}")
    rng = cp.random.default_rng(13)
    for shape in shapes:
        m, n, k = (int(x) for x in shape.split("x"))
        a = rng.standard_normal((m, k), dtype=cp.float32)
        b = rng.standard_normal((k, n), dtype=cp.float32)
        c = rng.standard_normal((m, n), dtype=cp.float32)
        ref = 1.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) - 0.5 * c.astype(cp.float64)
        launcher = autotune.load("gemm", M=m, N=n, K=k, dtype="float32", layout="NN")
        assert launcher.provenance["step"] == "exact" and launcher.choice.template == template, shape
        for _ in range(2):
            out = autotune.gemm(a, b, out=c.copy(), alpha=1.5, beta=-0.5)
            assert _rel(out, ref) < tolerance_for("float32"), shape
        # other operands (other addresses): skinny_wgmma's launcher makes the tensor maps of each call's A and B
        a2, b2 = rng.standard_normal((m, k), dtype=cp.float32), rng.standard_normal((k, n), dtype=cp.float32)
        ref2 = a2.astype(cp.float64) @ b2.astype(cp.float64)
        assert _rel(autotune.gemm(a2, b2), ref2) < tolerance_for("float32"), shape
        assert _rel(autotune.gemm(a, b), a.astype(cp.float64) @ b.astype(cp.float64)) < tolerance_for("float32"), shape
