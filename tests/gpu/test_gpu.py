"""GPU tier: every template verified on fresh random inputs, aligned and odd shapes; a short real run."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.measure.evaluate import Candidate, Settings, Status, evaluate, finish, measure, render_candidate


@pytest.fixture(autouse=True)
def _our_kernels_through_the_runtime(monkeypatch):
    """These tests exercise our kernels through the runtime: no vendor substitution (see autotune.serve.dispatch)."""
    monkeypatch.setenv("AUTOTUNE_VENDOR", "0")


pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]

SHAPES = [(256, 256, 256), (4096, 4096, 4096), (1, 1, 1), (37, 91, 13), (129, 257, 65), (1000, 1003, 997),
          (4095, 4097, 4093), (16, 4096, 4096), (7, 5, 3000)]  # fmt: skip
SIMT = [
    dict(BM=128, BN=128, BK=8, WM=64, WN=32, WNITER=2, TM=8, TN=4, VEC=4, PAD=4, DBUF=True),
    dict(BM=128, BN=256, BK=16, WM=64, WN=64, WNITER=4, TM=8, TN=4, VEC=4, PAD=4, DBUF=True),
    dict(BM=64, BN=64, BK=8, WM=32, WN=32, WNITER=1, TM=4, TN=4, VEC=1, PAD=0, DBUF=False),
    dict(BM=16, BN=64, BK=32, WM=16, WN=32, WNITER=1, TM=4, TN=4, VEC=2, PAD=4, DBUF=True),
    dict(BM=256, BN=32, BK=16, WM=64, WN=32, WNITER=1, TM=8, TN=8, VEC=4, PAD=0, DBUF=False),
]
NAIVE = [dict(BX=16, BY=16), dict(BX=32, BY=1)]


@pytest.fixture(scope="module")
def settings():
    from autotune.core.device import current_gpu

    gpu = current_gpu()
    return Settings(arch=gpu.arch, tolerance=1e-5, max_shared_bytes=gpu.max_shared_per_block)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize(
    ("template", "params"), [("simt", p) for p in SIMT] + [("naive", p) for p in NAIVE], ids=lambda v: str(v)[:40]
)
def test_template_is_correct_on_fresh_random_inputs(settings, template, params, shape):
    if template == "naive" and shape[0] * shape[1] * shape[2] > 1 << 34:
        pytest.skip("the naive kernel is too slow for this size")
    problem = FAMILIES["gemm"].problem(list(shape), "float32")
    r = evaluate(Candidate("gemm", template, problem, Config.of(params)), settings)
    assert r.status is Status.COMPLETE, f"{r.kernel_name}: {r.reason}"
    assert r.error is not None and r.error < 1e-5
    assert r.timing is not None and r.timing.median_ms > 0


def test_a_wrong_kernel_fails_verification(settings):
    # The last row of C is never written: the NaN poison must catch it.
    problem = FAMILIES["gemm"].problem([129, 64, 32], "float32")
    cand = Candidate("gemm", "naive", problem, Config.of(dict(BX=16, BY=16)))
    c = render_candidate(cand, settings)
    broken = c.source.replace("if (row >= M || col >= N) return;", "if (row >= M - 1 || col >= N) return;")
    assert broken != c.source
    from autotune.build.compiler import compile_source

    c = finish(c, compile_source(broken, c.kernel_name, settings.arch))
    r = measure(c, settings)
    assert r.status is Status.VERIFY_FAILED and "NaN" in r.reason


def test_versus_times_a_verified_kernel_and_cublas_in_interleaved_rounds_on_the_same_inputs(settings):
    from autotune.measure.bench import TimingPlan
    from autotune.measure.evaluate import prepare
    from autotune.measure.versus import versus

    problem = FAMILIES["gemm"].problem([384, 320, 200], "float32")
    quick = replace(settings, timing=TimingPlan(warmup=1, min_repeats=5, max_repeats=20, target_ms=5.0))
    v = versus(prepare(Candidate("gemm", "simt", problem, Config.of(SIMT[0])), quick), quick, rounds=3)
    assert v.result.status is Status.COMPLETE and v.result.error < 1e-5
    assert v.vendor is not None and v.vendor[0] == "cuBLAS" and len(v.rounds) == 3
    ours = sorted(o for o, _ in v.rounds)
    assert v.result.timing.median_ms == ours[1] and all(o > 0 and t > 0 for o, t in v.rounds)
    assert v.ratio == sorted(t / o for o, t in v.rounds)[1]


def test_versus_times_nothing_for_a_wrong_kernel(settings):
    from autotune.build.compiler import compile_source
    from autotune.measure.versus import versus

    problem = FAMILIES["gemm"].problem([129, 64, 32], "float32")
    c = render_candidate(Candidate("gemm", "naive", problem, Config.of(dict(BX=16, BY=16))), settings)
    broken = c.source.replace("if (row >= M || col >= N) return;", "if (row >= M - 1 || col >= N) return;")
    v = versus(finish(c, compile_source(broken, c.kernel_name, settings.arch)), settings)
    assert v.result.status is Status.VERIFY_FAILED and v.rounds == () and v.ratio is None and v.vendor is None


def test_a_short_real_run_stores_a_verified_winner(tmp_path, capsys):
    import yaml

    from autotune.cli import main

    raw = yaml.safe_load((ROOT / "configs" / "gemm.yaml").read_text())
    raw["shapes"] = [[512, 512, 512], [300, 200, 100]]
    spec = tmp_path / "small.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))  # TEMPLATE stays before the params that read it
    tuned, runs = str(tmp_path / "tuned"), str(tmp_path / "runs")
    args = ["run", str(spec), "--trials", "6", "--tuned-dir", tuned, "--runs-dir", runs]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "512x512x512" in out and "cuBLAS" in out
    files = list((tmp_path / "tuned").glob("*/gemm.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert set(doc["entries"]) == {"float32/NN/512x512x512", "float32/NN/300x200x100"}
    for e in doc["entries"].values():
        assert e["verified"] is True and e["error"] < 1e-5 and e["vendor"] == "cuBLAS" and e["vendor_ratio"] > 0
        assert e["trials"] == 6 and e["versions"]["nvrtc"]
    # Rerunning resumes the studies: nothing new to do with the same budget.
    assert main(args) == 0
    assert "(0 new)" in capsys.readouterr().out


def test_a_corrupt_tuned_file_stops_before_tuning(tmp_path, capsys):
    from autotune.cli import main
    from autotune.core.device import current_gpu

    bad = tmp_path / "tuned" / current_gpu().key / "gemm.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{oops")
    code = main(["run", str(ROOT / "configs" / "gemm.yaml"), "--trials", "1", "--tuned-dir", str(tmp_path / "tuned"),
                 "--runs-dir", str(tmp_path / "runs")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and str(bad) in err and "Traceback" not in err
    assert bad.read_text() == "{oops"


def test_a_faulting_and_a_hanging_candidate_do_not_take_the_run_down(tmp_path, settings):
    from dataclasses import replace

    from autotune.build.compile_pool import CompilePool
    from autotune.measure.worker import GPUWorker
    from autotune.tune.search import SEARCH_PLAN, open_storage, tune_shape
    from autotune.tune.spec import parse_spec
    from tests.gpu_faults import FAULTING, HANGING, sabotaging_compile

    spec = parse_spec(
        {
            "kernel": "gemm", "template": "naive", "dtype": "float32", "shapes": [[512, 512, 512]],
            "params": {"BX": [4, 8, 16, 32], "BY": [4, 8, 16]}, "sampler": "brute", "budget": {"trials": 100},
        },
        "faults.yaml",
    )  # fmt: skip
    storage = open_storage(str(tmp_path / "faults.journal"))
    s = replace(settings, timing=SEARCH_PLAN, timeout_s=5.0)
    with GPUWorker() as worker, CompilePool(s.arch, jobs=1, compile_fn=sabotaging_compile) as compiler:
        out = tune_shape(spec, spec.problems[0], s, storage, trials=100, minutes=None, evaluator=worker,
                         compiler=compiler, abort_ratio=None)  # fmt: skip
        restarts = worker.restarts
    assert out.stopped == "search space exhausted" and out.evaluated == 12
    assert out.statuses == {"complete": 10, "launch-failed": 1, "timed-out": 1}, out.statuses
    assert restarts >= 2
    assert out.best is not None and out.best.ok and out.best.kernel_name not in (FAULTING, HANGING)
    import optuna

    study = optuna.load_study(study_name=out.study_name, storage=storage)
    reasons = {t.user_attrs["result"]["kernel_name"]: t.user_attrs["result"].get("reason", "") for t in study.trials}
    assert "illegal" in reasons[FAULTING].lower() or "died" in reasons[FAULTING]
    assert "no answer" in reasons[HANGING]


def _reference(a, b, c=None, alpha=1.0, beta=0.0):
    import cupy as cp

    ref = alpha * (a.astype(cp.float64) @ b.astype(cp.float64))
    if beta:
        ref += beta * c.astype(cp.float64)
    return ref


def _rel(out, ref):
    import cupy as cp

    return float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))


def test_runtime_gemm_on_a_never_tuned_shape_is_correct(tmp_path, monkeypatch):
    import cupy as cp

    import autotune

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    rng = cp.random.default_rng(7)
    a = rng.standard_normal((3000, 700), dtype=cp.float32)
    b = rng.standard_normal((700, 5000), dtype=cp.float32)
    out = autotune.gemm(a, b)
    assert out.shape == (3000, 5000) and _rel(out, _reference(a, b)) < 1e-5
    launcher = autotune.load("gemm", M=3000, N=5000, K=700)
    assert launcher.provenance["step"] in ("nearest", "same-arch", "default")


def test_runtime_alpha_beta_and_odd_shapes(tmp_path, monkeypatch):
    import cupy as cp

    import autotune

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    rng = cp.random.default_rng(11)
    for m, n, k in [(1, 1, 1), (37, 91, 13), (4095, 4097, 4093), (16, 4096, 4096)]:
        a = rng.standard_normal((m, k), dtype=cp.float32)
        b = rng.standard_normal((k, n), dtype=cp.float32)
        c = rng.standard_normal((m, n), dtype=cp.float32)
        ref = _reference(a, b, c, alpha=0.5, beta=-2.0)
        out = autotune.gemm(a, b, out=c, alpha=0.5, beta=-2.0)
        assert out is c and _rel(out, ref) < 1e-5, (m, n, k)
        poisoned = cp.full((m, n), cp.nan, dtype=cp.float32)  # beta = 0 never reads C
        assert _rel(autotune.gemm(a, b, out=poisoned), _reference(a, b)) < 1e-5


def test_runtime_takes_torch_tensors_and_transposed_views(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import cupy as cp

    import autotune

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    a = torch.randn(300, 200, device="cuda")
    b = torch.randn(500, 200, device="cuda").t()  # not contiguous: copied first
    out = autotune.gemm(a, b)
    assert isinstance(out, torch.Tensor) and out.shape == (300, 500)
    ref = cp.asarray(a).astype(cp.float64) @ cp.asarray(b.contiguous()).astype(cp.float64)
    assert _rel(cp.asarray(out), ref) < 1e-5


@pytest.mark.gpu
def test_compare_measures_the_relative_error_and_counts_nan_and_inf():
    import cupy as cp

    from autotune.measure import verify

    ref = cp.arange(1, 7, dtype=cp.float64).reshape(2, 3)
    same = verify.compare(ref.astype(cp.float32), ref, 1e-9)
    assert same.ok and same.error == 0.0
    off = ref.astype(cp.float32)
    off[0, 0] += 1.0
    v = verify.compare(off, ref, 1e-3)
    assert not v.ok and v.error == pytest.approx(1 / math.sqrt(91)) and "exceeds tolerance" in v.reason
    bad = ref.astype(cp.float32)
    bad[1, 2], bad[0, 1] = cp.nan, cp.inf
    v = verify.compare(bad, ref, 1e-3)
    assert not v.ok and v.reason.startswith("2 of 6 outputs are NaN or Inf")
    huge = cp.full((2, 3), 1e200, dtype=cp.float64)  # finite, but its squares overflow
    assert not verify.compare(huge, ref, 1e-3).ok
    layout = cp.asfortranarray(ref).T  # a strided reference (a transposed view, as conv's NCHW one is)
    assert verify.compare(cp.ascontiguousarray(layout).astype(cp.float32), layout, 1e-9).ok
