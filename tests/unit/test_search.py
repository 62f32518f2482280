"""Search, dedupe, budgets and resume with a fake evaluator: no GPU, no compiler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from autotune.build.compile_pool import CompilePool
from autotune.core.space import Config
from autotune.measure.evaluate import Settings, Status
from autotune.tune.search import open_storage, study_name, tune_shape
from autotune.tune.spec import load_spec
from tests.fakes import NAIVE_SPEC, FakeEvaluator, fake_compile, fake_time

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(arch="sm_90", tolerance=1e-5)


@pytest.fixture
def spec_file(tmp_path: Path):
    def write(sampler: str = "tpe") -> Path:
        p = tmp_path / "naive.yaml"
        p.write_text(NAIVE_SPEC.replace("sampler: tpe", f"sampler: {sampler}"))
        return p

    return write


def run(spec, storage, evaluator, trials=8, minutes=None, problem=0, abort_ratio=None, prefetch=3):
    return tune_shape(
        spec, spec.problems[problem], SETTINGS, storage, trials=trials, minutes=minutes, evaluator=evaluator,
        compiler=CompilePool("sm_90", 1, fake_compile), prefetch=prefetch, abort_ratio=abort_ratio,
    )  # fmt: skip


def feasible(spec):
    return [c for c in spec.space.enumerate()]


def test_budget_counts_evaluated_candidates_and_best_is_the_fastest_seen(spec_file, tmp_path):
    spec = load_spec(spec_file())
    ev = FakeEvaluator()
    out = run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=8)
    # 8 candidates plus the final re-timing of the top 3 in 3 interleaved rounds
    assert out.evaluated == 8 and out.new == 8
    assert len(ev.calls) == 8 + 3 * 3
    finalists = ev.calls[8:11]
    assert ev.calls[8:] == finalists * 3, "the final rounds are not interleaved"
    assert len(set(ev.calls[:8])) == 8, "a configuration was evaluated twice"
    assert out.best is not None and out.best.ok
    best_seen = min(fake_time({k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}) for key in ev.calls)
    assert out.best.median_ms == pytest.approx(best_seen)
    assert out.vendor_ratio == pytest.approx(2.0 / best_seen)
    assert out.stopped.startswith("trial budget")


class _SlowStretch(FakeEvaluator):
    """Times one final re-timing of the truly fastest configuration 3x slow and one of the runner-up 3x fast: a
    stretch of GPU noise in one round."""

    def __init__(self, searched: int) -> None:
        super().__init__()
        self.searched = searched

    def measure(self, c, settings):
        r = super().measure(c, settings)
        final = len(self.calls) - self.searched  # 1-based index among the final re-timings
        if final in (1, 2) and r.timing is not None:
            scale = 3.0 if final == 1 else 1 / 3
            t = r.timing
            r = replace(r, timing=replace(t, median_ms=t.median_ms * scale, min_ms=t.min_ms * scale))
        return r


def test_the_winner_is_the_best_median_of_interleaved_final_rounds(spec_file, tmp_path):
    """One noisy round (the best finalist slow, the second fast) does not decide: each finalist's verdict is its
    median round, so the truly fastest configuration wins with one of its own measurements."""
    spec = load_spec(spec_file())
    ev = _SlowStretch(searched=8)
    out = run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=8)
    assert ev.calls[8:11] == ev.calls[11:14] == ev.calls[14:17]
    times = {key: fake_time({k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}) for key in ev.calls[8:11]}
    assert sorted(times.values()) == [times[k] for k in ev.calls[8:11]], "finalists are not fastest first"
    assert out.best.config.key == ev.calls[8] and out.best.median_ms == pytest.approx(times[ev.calls[8]])


def test_invalid_configurations_cost_no_evaluation(spec_file, tmp_path):
    spec = load_spec(spec_file("random"))
    ev = FakeEvaluator()
    run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=10)
    for key in ev.calls:
        params = {k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}
        assert params["BX"] * params["BY"] >= 32, f"{key} breaks a constraint but was evaluated"


def test_brute_force_evaluates_every_feasible_configuration_once(spec_file, tmp_path):
    spec = load_spec(spec_file("brute"))
    ev = FakeEvaluator()
    out = run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=1000)
    expected = {c.key for c in feasible(spec)}
    searched = ev.calls[: len(expected)]
    assert set(searched) == expected and len(searched) == len(set(searched))
    assert out.stopped == "search space exhausted"
    assert out.best.config.as_dict() == {"BX": 32, "BY": 8}


def test_random_sampler_stops_when_the_space_is_exhausted(spec_file, tmp_path):
    spec = load_spec(spec_file("random"))
    ev = FakeEvaluator()
    out = run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=1000)
    n = len(feasible(spec))
    assert out.evaluated == n
    assert len(set(ev.calls)) == n and len(ev.calls) == n + 3 * 3
    assert out.stopped == "search space exhausted"


def test_rerun_resumes_and_answers_known_configs_from_the_study(spec_file, tmp_path):
    spec = load_spec(spec_file())
    storage_path = str(tmp_path / "s.journal")
    first = FakeEvaluator()
    run(spec, open_storage(storage_path), first, trials=6)
    second = FakeEvaluator()
    out = run(spec, open_storage(storage_path), second, trials=10)
    assert out.evaluated == 10 and out.new == 4
    assert not set(first.calls[:6]) & set(second.calls[:4]), "a stored configuration was evaluated again"


def test_failed_candidates_are_recorded_with_reason_and_never_best(spec_file, tmp_path):
    spec = load_spec(spec_file("brute"))
    best_key = "BX=32,BY=8"
    ev = FakeEvaluator(fail_keys=frozenset({best_key}))
    storage = open_storage(str(tmp_path / "s.journal"))
    out = run(spec, storage, ev, trials=1000)
    assert out.best.config.key != best_key
    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=storage)
    failed = [t for t in study.trials if t.user_attrs.get("result", {}).get("config_key") == best_key]
    assert failed and failed[0].state == optuna.trial.TrialState.FAIL
    assert failed[0].user_attrs["status"] == Status.VERIFY_FAILED.value
    assert "tolerance" in failed[0].user_attrs["result"]["reason"]


def test_each_shape_has_its_own_study(spec_file, tmp_path):
    spec = load_spec(spec_file())
    storage = open_storage(str(tmp_path / "s.journal"))
    a = run(spec, storage, FakeEvaluator(), trials=3, problem=0)
    b = run(spec, storage, FakeEvaluator(), trials=3, problem=1)
    assert a.study_name != b.study_name and b.new == 3


def test_time_budget_stops_the_search(spec_file, tmp_path):
    spec = load_spec(spec_file("random"))
    ev = FakeEvaluator(delay=0.05)
    t0 = time.monotonic()
    out = run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=None, minutes=0.3 / 60)
    assert out.stopped.startswith("time budget")
    assert time.monotonic() - t0 < 5
    assert 1 <= out.evaluated < len(feasible(spec))


def _cold_compile(source: str, kernel_name: str, arch: str):
    time.sleep(0.4)  # a first compile (NVRTC's cold start) longer than the whole time budget below
    return fake_compile(source, kernel_name, arch)


def test_a_time_budget_shorter_than_the_first_compile_still_measures_one_candidate(spec_file, tmp_path):
    """The budget ends the search only once a candidate is verified (within four times the budget, at least a
    minute): a shape tuned for 0.1 s whose compiles take 0.4 s ends with a measured best, not with none."""
    spec = load_spec(spec_file("random"))
    t0 = time.monotonic()
    out = tune_shape(
        spec, spec.problems[0], SETTINGS, open_storage(str(tmp_path / "s.journal")), trials=None, minutes=0.1 / 60,
        evaluator=FakeEvaluator(), compiler=CompilePool("sm_90", 1, _cold_compile), prefetch=1,
    )  # fmt: skip
    assert out.stopped.startswith("time budget")
    assert out.best is not None and out.best.ok and out.evaluated >= 1
    assert time.monotonic() - t0 < 30


def test_killed_run_loses_no_completed_trial(spec_file, tmp_path):
    spec_path = spec_file("random")
    storage_path = tmp_path / "s.journal"
    log = tmp_path / "evaluated.log"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fakes.py"), str(spec_path), str(storage_path), str(log), "12"],
        env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not log.exists() or len(log.read_text().split()) < 4):
            assert proc.poll() is None, "the fake run ended before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before_kill = log.read_text().split()
    assert len(before_kill) >= 4

    spec = load_spec(spec_path)
    storage = open_storage(str(storage_path))
    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=storage)
    done = optuna.trial.TrialState.COMPLETE
    completed = {t.user_attrs["result"]["config_key"] for t in study.trials if t.state == done}
    # Every evaluation but the one in flight when the process died was told to the study.
    assert len(completed) >= len(before_kill) - 1

    ev = FakeEvaluator()
    out = run(spec, storage, ev, trials=12)
    assert out.evaluated == 12
    assert not completed & set(ev.calls[: out.new]), "a completed trial was evaluated again after the kill"
    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=storage)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    interrupted = [t for t in study.trials if t.user_attrs.get("status") == "interrupted"]
    assert len(interrupted) <= 2  # the candidate on the GPU and the one prefetched (prefetch=1)


def test_slow_candidates_are_pruned_early_and_never_best(spec_file, tmp_path):
    spec = load_spec(spec_file("brute"))
    ev = FakeEvaluator()
    out = run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=1000, abort_ratio=1.2)
    assert out.statuses.get("pruned", 0) > 0
    assert out.best.config.as_dict() == {"BX": 32, "BY": 8}


def test_prefetched_candidates_left_at_the_end_are_freed_for_the_next_run(spec_file, tmp_path):
    spec = load_spec(spec_file("random"))
    storage = open_storage(str(tmp_path / "s.journal"))
    ev = FakeEvaluator(delay=0.05)
    run(spec, storage, ev, trials=None, minutes=0.2 / 60, prefetch=6)
    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=storage)
    left = [t for t in study.trials if t.user_attrs.get("status") == "unevaluated"]
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    ev2 = FakeEvaluator()
    out = run(spec, storage, ev2, trials=1000)
    assert out.stopped == "search space exhausted"
    # a configuration asked for but never run is evaluated by the next run
    for t in left:
        assert Config.of(t.params).key in ev2.calls


class _BlockingEvaluator(FakeEvaluator):
    """Only the blocking interface: the search must fall back to measure()."""

    start = None  # type: ignore[assignment]
    collect = None  # type: ignore[assignment]

    def __getattribute__(self, name):
        if name in ("start", "collect"):
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_overlapped_and_blocking_evaluators_find_the_same(spec_file, tmp_path):
    spec = load_spec(spec_file("brute"))
    a = run(spec, open_storage(str(tmp_path / "a.journal")), FakeEvaluator(), trials=1000)
    b = run(spec, open_storage(str(tmp_path / "b.journal")), _BlockingEvaluator(), trials=1000)
    assert a.best.config == b.best.config and a.evaluated == b.evaluated and a.statuses == b.statuses


@pytest.mark.parametrize("sampler", ["tpe", "random", "brute", "gp", "cmaes"])
def test_every_sampler_searches_without_repeating_itself(sampler, spec_file, tmp_path):
    from autotune.core.errors import AutotuneError
    from autotune.tune.search import make_sampler

    try:
        make_sampler(sampler, 0)
    except AutotuneError as exc:  # an optional dependency is missing: the message says what to install
        assert "pip install" in str(exc)
        pytest.skip(str(exc))
    spec = load_spec(spec_file(sampler))
    ev = FakeEvaluator()
    out = run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=12)
    searched = ev.calls[: out.new]
    assert out.evaluated == 12 and len(set(searched)) == len(searched)
    seen = [fake_time({k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}) for key in searched]
    assert out.best is not None and out.best.median_ms == pytest.approx(min(seen))


def test_any_optuna_storage_url_works(spec_file, tmp_path):
    spec = load_spec(spec_file())
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    first = run(spec, open_storage(url), FakeEvaluator(), trials=4)
    again = run(spec, open_storage(url), FakeEvaluator(), trials=6)
    assert first.new == 4 and again.evaluated == 6 and again.new == 2


def test_the_candidate_on_the_gpu_is_never_proposed_again(tmp_path):
    # Regression: with the GPU measuring while the sampler asks, the running configuration was not in
    # the set of those in flight, and a small space saw one configuration evaluated twice.
    text = NAIVE_SPEC.replace("BX: [4, 8, 16, 32, 64]", "BX: [32, 64]").replace("BY: [1, 2, 4, 8, 16]", "BY: [1, 2, 4]")
    path = tmp_path / "small.yaml"
    path.write_text(text)
    spec = load_spec(path)
    for seed in range(5):
        ev = FakeEvaluator()
        s = spec.__class__(**{**spec.__dict__, "seed": seed})
        out = run(s, open_storage(str(tmp_path / f"s{seed}.journal")), ev, trials=100, prefetch=1)
        searched = ev.calls[: out.new]
        assert len(searched) == len(set(searched)) == out.evaluated == 6


def test_editing_the_space_starts_a_new_study_instead_of_crashing(spec_file, tmp_path):
    path = spec_file()
    storage = open_storage(str(tmp_path / "s.journal"))
    before = run(load_spec(path), storage, FakeEvaluator(), trials=4)
    path.write_text(path.read_text().replace("BX: [4, 8, 16, 32, 64]", "BX: [4, 8, 16, 32, 64, 128]"))
    after = run(load_spec(path), storage, FakeEvaluator(), trials=4)
    assert after.study_name != before.study_name and after.new == 4


def test_an_infeasible_tpe_proposal_is_repaired_to_its_nearest_feasible_neighbour(spec_file, tmp_path):
    """Each sampled configuration that breaks a constraint is followed by its nearest feasible, unseen
    neighbour (enqueued, so the sampler is not asked again): every ask of the sampler yields a candidate."""
    spec = load_spec(spec_file("tpe"))
    storage = open_storage(str(tmp_path / "s.journal"))
    out = run(spec, storage, FakeEvaluator(), trials=20)
    assert out.statuses.get("invalid", 0) > 0, "the naive space has infeasible corners TPE proposes"
    assert out.repaired >= out.statuses["invalid"]  # a repeated infeasible proposal is repaired too
    trials = optuna.load_study(study_name=out.study_name, storage=storage).get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    for t in trials:
        if t.user_attrs.get("status") == "invalid":
            follower = by_number[t.number + 1]
            assert "fixed_params" in follower.system_attrs, "the repair is enqueued, not sampled"
            assert follower.user_attrs["status"] != "invalid"
    sampled = [t for t in trials if "fixed_params" not in t.system_attrs and "duplicate_of" not in t.user_attrs]
    assert len(sampled) <= out.evaluated  # without the repair: evaluated + invalid


def test_random_and_brute_never_need_a_repair(spec_file, tmp_path):
    for sampler in ("random", "brute"):
        spec = load_spec(spec_file(sampler))
        out = run(spec, open_storage(str(tmp_path / f"{sampler}.journal")), FakeEvaluator(), trials=10)
        assert out.repaired == 0 and out.statuses.get("invalid", 0) == 0
