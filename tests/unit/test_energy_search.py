"""Energy as an objective, end to end without a GPU: fake evaluations with known time and energy, a
multi-objective study, the Pareto front in tuned/, and the report's energy columns and plot."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from autotune import report
from autotune.build.compile_pool import CompilePool
from autotune.measure.evaluate import Settings
from autotune.results.store import entry_key, merge, read, tuned_file
from autotune.tune import session
from autotune.tune.search import open_storage, study_name, tune_shape
from autotune.tune.spec import load_spec
from tests.fakes import NAIVE_SPEC, FakeEvaluator, fake_compile, fake_energy, fake_time
from tests.unit.test_report import embedded_pngs, png_image

SETTINGS = Settings(arch="sm_90", tolerance=1e-5)
HEADER = {"kernel": "gemm", "gpu": {"name": "NVIDIA H200", "arch": "sm_90", "key": "nvidia-h200-sm90"}}
ENERGY_PLOT = "Time vs energy per launch, Pareto front"


def spec_with(tmp_path: Path, objective: str, sampler: str | None = None):
    text = NAIVE_SPEC.replace("sampler: tpe", f"objective: {objective}" + (f"\nsampler: {sampler}" if sampler else ""))
    path = tmp_path / "naive_energy.yaml"
    path.write_text(text)
    return load_spec(path)


def run(spec, storage, evaluator=None, trials=1000, abort_ratio=None, settings=SETTINGS):
    return tune_shape(
        spec, spec.problems[0], settings, storage, trials=trials, minutes=None, evaluator=evaluator or FakeEvaluator(),
        compiler=CompilePool("sm_90", 1, fake_compile), prefetch=3, abort_ratio=abort_ratio,
    )  # fmt: skip


def true_front(configs) -> set[tuple[float, float]]:
    """The (time, energy) points no configuration beats on both counts, by brute force."""
    pts = {(fake_time(c.as_dict()), fake_energy(c.as_dict())) for c in configs}
    return {(t, e) for t, e in pts if not any(t2 <= t and e2 <= e and (t2, e2) != (t, e) for t2, e2 in pts)}


def points(front) -> list[tuple[float, float]]:
    return [(r.median_ms, r.energy_j) for r in front]


def test_time_energy_search_finds_the_true_front_and_stores_it_beside_the_fastest(tmp_path):
    spec = spec_with(tmp_path, "[time, energy]", "brute")
    assert spec.objectives == ("time", "energy")
    storage = open_storage(str(tmp_path / "s.journal"))
    out = run(spec, storage, abort_ratio=1.2)  # the early abort must not apply to two objectives
    assert out.stopped == "search space exhausted" and "pruned" not in out.statuses
    feasible = list(spec.space.enumerate())
    front = points(out.pareto)
    assert set(front) == true_front(feasible) and len(front) == len(set(front)) > 2  # equal points kept once
    assert [r.median_ms for r in out.pareto] == sorted(r.median_ms for r in out.pareto)
    assert out.best.config.as_dict() == {"BX": 32, "BY": 8} and out.pareto[0].config == out.best.config
    for r in out.pareto:
        assert r.ok and r.energy_j == pytest.approx(fake_energy(r.config.as_dict())) and r.energy_method

    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=storage)
    assert len(study.directions) == 2
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done and all(t.values == [fake_time(t.params), fake_energy(t.params)] for t in done)
    assert all(t.user_attrs["result"]["energy_j"] == t.values[1] for t in done)

    path = tuned_file(tmp_path / "tuned", "nvidia-h200-sm90", "gemm")
    key = entry_key("float32", "NN", spec.problems[0].label)
    merge(path, HEADER, key, session.tuned_entry(spec, out, SETTINGS, {}), pareto=session.pareto_points(out, spec))
    entry = json.loads(path.read_text())["entries"][key]
    assert entry["params"] == {"BX": 32, "BY": 8} and entry["median_ms"] == out.best.median_ms
    assert entry["energy_j"] == pytest.approx(fake_energy({"BX": 32, "BY": 8}))
    assert entry["objective"] == ["time", "energy"]
    front = entry["pareto"]
    assert [p["kernel_name"] for p in front] == [r.kernel_name for r in out.pareto]
    for p in front:
        assert {"params", "kernel_name", "median_ms", "energy_j", "gflops_per_j", "verified", "error"} <= set(p)
        assert p["verified"] is True and p["energy_j"] == pytest.approx(fake_energy(p["params"]))
        assert p["gflops_per_j"] == pytest.approx(spec.problems[0].flops / 1e9 / p["energy_j"])


def test_nsga2_is_the_default_sampler_for_two_objectives_and_does_not_repeat_itself(tmp_path):
    spec = spec_with(tmp_path, "[time, energy]")
    assert spec.sampler == "nsga2"
    ev = FakeEvaluator()
    out = run(spec, open_storage(str(tmp_path / "s.journal")), ev, trials=12)
    searched = ev.calls[: out.new]
    assert out.evaluated == 12 and len(set(searched)) == len(searched)
    seen = [c for c in spec.space.enumerate() if c.key in set(searched)]
    front = points(out.pareto)
    assert set(front) == true_front(seen) and len(front) == len(set(front))


def test_energy_objective_picks_the_lowest_joules_per_launch(tmp_path):
    spec = spec_with(tmp_path, "energy", "brute")
    out = run(spec, open_storage(str(tmp_path / "s.journal")))
    lowest = min(spec.space.enumerate(), key=lambda c: fake_energy(c.as_dict()))
    assert out.best.config == lowest and out.best.energy_j == pytest.approx(fake_energy(lowest.as_dict()))
    assert out.best.config.as_dict() != {"BX": 32, "BY": 8}  # not the fastest


def test_time_objective_with_energy_switched_on_records_energy_but_no_front(tmp_path):
    spec = spec_with(tmp_path, "time", "random")
    storage = open_storage(str(tmp_path / "s.journal"))
    out = run(spec, storage, trials=6, settings=replace(SETTINGS, energy=True))
    assert out.pareto == () and out.best.energy_j is not None
    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=storage)
    assert len(study.directions) == 1


class _NoEnergy(FakeEvaluator):
    """Verified and timed, but NVML gave nothing: the energy fields stay empty."""

    def measure(self, c, settings):
        return super().measure(c, replace(settings, energy=False))


def test_complete_trials_without_energy_are_not_told_to_an_energy_study(tmp_path):
    spec = spec_with(tmp_path, "[time, energy]", "random")
    storage = open_storage(str(tmp_path / "s.journal"))
    out = run(spec, storage, _NoEnergy(), trials=5)
    assert out.pareto == () and out.statuses == {"complete": 5}
    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=storage)
    assert {t.state for t in study.trials if "duplicate_of" not in t.user_attrs} == {optuna.trial.TrialState.FAIL}
    assert session.pareto_points(out, spec) is None


def test_merge_keeps_the_fastest_entry_and_merges_the_fronts(tmp_path):
    path = tuned_file(tmp_path / "tuned", "nvidia-h200-sm90", "gemm")
    key = entry_key("float32", "NN", "64x64x64")

    def point(name, ms, j):
        return {"params": {}, "kernel_name": name, "median_ms": ms, "energy_j": j, "verified": True, "error": 0.0}

    entry = {"template": "naive", "verified": True, "median_ms": 1.0, "template_hash": "h", "params": {"BX": 32}}
    merge(path, HEADER, key, entry, pareto=[point("a", 1.0, 5.0), point("b", 2.0, 3.0)])
    slower = {**entry, "median_ms": 1.5, "params": {"BX": 8}}
    out = merge(path, HEADER, key, slower, pareto=[point("c", 1.5, 2.0), point("a", 1.0, 4.5)])
    assert not out.stored and "front now 2 points" in out.why
    stored = read(path)["entries"][key]
    assert stored["params"] == {"BX": 32}  # the fastest stays the entry that runtime lookups use
    assert [(p["kernel_name"], p["energy_j"]) for p in stored["pareto"]] == [("a", 4.5), ("c", 2.0)]
    faster = {**entry, "median_ms": 0.5, "params": {"BX": 16}}
    assert merge(path, HEADER, key, faster).stored  # a time-only run keeps the stored front
    assert [p["kernel_name"] for p in read(path)["entries"][key]["pareto"]] == ["a", "c"]
    with pytest.raises(ValueError):
        merge(path, HEADER, key, faster, pareto=[{**point("d", 0.1, 0.1), "verified": False}])


@pytest.fixture(scope="module")
def energy_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("energy-run")
    spec = spec_with(tmp, "[time, energy]", "brute")
    journal = tmp / "nvidia-h200-sm90.journal"
    out = run(spec, open_storage(str(journal)))
    path = tuned_file(tmp / "tuned", "nvidia-h200-sm90", "gemm")
    entry = session.tuned_entry(spec, out, SETTINGS, {})
    merge(path, HEADER, entry_key("float32", "NN", spec.problems[0].label), entry,
          pareto=session.pareto_points(out, spec))  # fmt: skip
    return journal, tmp / "tuned", out


def test_report_trials_and_tables_carry_the_energy_columns(energy_run):
    journal, tuned, out = energy_run
    df = report.trials(journal)
    done = df[df["status"] == "complete"]
    assert len(done) and done["energy_j"].notna().all()
    for _, row in done.iterrows():
        params = {"BX": int(row["BX"]), "BY": int(row["BY"])}
        assert row["energy_j"] == pytest.approx(fake_energy(params))
        assert row["gflops_per_j"] == pytest.approx(2 * 64**3 / 1e9 / row["energy_j"])
        assert row["energy_method"] == "nvml-counter"
    best = report.best_per_shape(df)
    assert best["energy_j"].iloc[0] == pytest.approx(fake_energy({"BX": 32, "BY": 8}))
    shown = report._best_display(best)
    assert {"J/launch", "GFLOP/J", "energy by"} <= set(shown.columns)
    tuned_df = report.best(tuned)
    assert tuned_df["pareto_points"].iloc[0] == len(out.pareto)
    assert tuned_df["energy_j"].iloc[0] == pytest.approx(fake_energy({"BX": 32, "BY": 8}))
    table = report.final_table([out], {out.problem.label: "yes"})
    assert "J/launch" in table and "GFLOP/J" in table


def test_reports_without_energy_hide_the_energy_columns():
    from tests.unit.test_report import JOURNAL

    df = report.trials(JOURNAL)
    assert "J/launch" not in report._best_display(report.best_per_shape(df)).columns


def test_report_draws_the_time_energy_plot_with_the_front(energy_run, tmp_path):
    pytest.importorskip("matplotlib")
    journal, tuned, out = energy_run
    rep = report.write_report(journal, tmp_path / "report", tuned_dir=tuned)
    assert ENERGY_PLOT in rep.plots
    page = (tmp_path / "report" / "report.html").read_text()
    assert f'alt="{ENERGY_PLOT}"' in page and "Time vs energy" in page
    pngs = embedded_pngs(page)
    assert len(pngs) == len(rep.plots)
    width, height, _ = png_image(pngs[rep.plots.index(ENERGY_PLOT)])
    assert width > 600 and height > 300
    md = (tmp_path / "report" / "report.md").read_text()
    assert "J/launch" in md and f"plot: {ENERGY_PLOT}" in md
    fig = report.plot_energy(rep.trials)
    ax = fig.axes[0]
    front = [c for c in ax.collections if "Pareto front" in (c.get_label() or "")]
    assert len(front) == 1 and len(front[0].get_offsets()) == len(out.pareto)
