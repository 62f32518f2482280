"""Replays of recorded spaces through the real search loop: arithmetic, determinism, the loop's rules. No GPU."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.core.space import Config, Param
from autotune.measure.evaluate import Status
from autotune.tune.replay import Run, Summary, Variant, quantiles, replay, replay_once, trace
from autotune.tune.t4 import Entry, Record, Validity, load_record
from tests.fakes import replayed_evaluations
from tests.sweep import full_only, full_sweep

RECORD = Path(__file__).parents[1] / "data" / "records" / "convolution_A100.subset400.json.gz"


def entry(x: int, y: int, ms: float | None, validity: Validity = Validity.CORRECT, compile_ms: float = 100.0) -> Entry:
    runtimes = (ms,) * 10 if ms is not None else ()
    return Entry(Config((("x", x), ("y", y))), validity, True, ms, runtimes, compile_ms, 30.0, 10.0, 5.0)


def synthetic() -> Record:
    """In enumeration order: a compile failure, an invalid one, 3 ms, 1.04 ms (within 5%), 2 ms, 1.0 ms (the
    optimum), then slow ones. (1, 3) and (2, 2) are absent: infeasible."""
    entries = [
        entry(1, 1, None, Validity.COMPILE, compile_ms=50.0),
        entry(1, 2, None, Validity.CONSTRAINTS, compile_ms=70.0),
        entry(2, 1, 3.0),
        entry(2, 3, 1.04),
        entry(3, 1, 2.0),
        entry(3, 2, 1.0),
        entry(3, 3, 9.0),
        entry(4, 1, 8.0),
    ]
    return Record("synthetic", (Param("x", (1, 2, 3, 4)), Param("y", (1, 2, 3))), tuple(entries))


def test_brute_force_replay_needs_exactly_the_evaluations_and_seconds_before_the_optimum():
    record = synthetic()
    run = replay_once(record, Variant.named("brute"), seed=0, budget=100, abort_ratio=None, stop=False)
    # Evaluations: the compile failure counts (it cost a compile), the invalid one does not.
    assert len(run.best_ms) == 7
    assert run.reach(1.05 * record.optimum_ms)[0] == 3  # compile failure, 3 ms, 1.04 ms
    assert run.reach(1.01 * record.optimum_ms)[0] == 5
    per = (30.0 + 10.0 + 5.0) / 1e3  # benchmark + validation + framework of a candidate that ran
    at_5 = (50.0 + 70.0 + 100.0 + 100.0) / 1e3 + 2 * per
    assert run.reach(1.05)[1] == pytest.approx(at_5)
    assert run.reach(1.01)[1] == pytest.approx(at_5 + 2 * (100.0 / 1e3 + per))
    assert run.best_ms[-1] == 1.0 and math.isinf(run.best_ms[0])
    stopped = replay_once(record, Variant.named("brute"), seed=0, budget=100, abort_ratio=None)
    assert stopped.best_ms == run.best_ms[:5] and stopped.elapsed_s == run.elapsed_s[:5]  # ends at the optimum


def test_early_abort_stops_slow_candidates_and_saves_their_timing():
    record = synthetic()
    full = replay_once(record, Variant.named("brute"), 0, 100, abort_ratio=None, stop=False)
    aborted = replay_once(record, Variant.named("brute"), 0, 100, abort_ratio=2.0, stop=False)
    assert aborted.best_ms == full.best_ms  # the aborted ones are the slow ones
    assert aborted.elapsed_s[-1] < full.elapsed_s[-1]


def test_the_threshold_arithmetic_over_runs():
    runs = (Run(0, (5.0, 1.04, 1.0), (1.0, 2.0, 3.0)), Run(1, (1.0,), (0.5,)), Run(2, (2.0, 2.0), (1.0, 2.0)))
    s = Summary("r", "v", 3, runs, 1.0)
    evals, secs, reached = s.needed(0.05)
    assert reached == 2 and evals[1] == 2.0 and secs[1] == 2.0
    assert math.isinf(evals[2])
    assert quantiles([1.0, 2.0, 3.0, 4.0, 5.0]) == [2.0, 3.0, 4.0]
    assert quantiles([1.0, 3.0]) == [1.5, 2.0, 2.5]
    assert quantiles([1.0, math.inf]) == [math.inf, math.inf, math.inf]
    rows = s.rows()
    assert [r["within"] for r in rows] == ["1%", "5%"] and rows[0]["reached"] == 2


def test_trace_counts_evaluations_as_the_loop_does():
    events = [(Status.INVALID, math.inf, 0.5), (Status.COMPILE_FAILED, math.inf, 1.0), (Status.COMPLETE, 2.0, 1.0),
              (Status.PRUNED, 9.0, 0.1), (Status.COMPLETE, 1.0, 1.0)]  # fmt: skip
    run = trace(events, seed=0)
    assert run.best_ms == (math.inf, 2.0, 2.0, 1.0)
    assert run.elapsed_s == pytest.approx((1.5, 2.5, 2.6, 3.6))


@pytest.mark.parametrize("sampler", ["tpe", "random", "tpe-ordered"])
def test_a_replay_of_the_committed_record_is_deterministic_for_a_seed(sampler):
    record = load_record(RECORD)
    a = replay_once(record, Variant.named(sampler), seed=7, budget=40, stop=False)
    b = replay_once(record, Variant.named(sampler), seed=7, budget=40, stop=False)
    c = replay_once(record, Variant.named(sampler), seed=8, budget=40, stop=False)
    assert a == b
    assert len(a.best_ms) == 40 and a.best_ms != c.best_ms
    assert all(x >= record.optimum_ms for x in a.best_ms)


def test_model_based_replays_evaluate_only_recorded_configurations_and_none_twice():
    """The loop's rules hold on a record: proposals absent from it are infeasible (repaired), duplicates are
    answered from the study, so every evaluation is a distinct recorded configuration."""
    record = load_record(RECORD)
    run, seen = replayed_evaluations(record, "tpe", seed=1, budget=120)
    assert len(run.best_ms) == 120
    assert set(seen) <= set(record.by_key) and len(seen) == len(set(seen))


def test_replay_summary_over_seeds_and_the_cli(tmp_path, capsys):
    record = load_record(RECORD)
    s = replay(record, Variant.named("random"), runs=3, budget=30)
    assert [r.seed for r in s.runs] == [0, 1, 2] and s.optimum_ms == record.optimum_ms
    out = tmp_path / "out"
    assert main(["replay", str(RECORD), "--sampler", "random", "--runs", "2", "--budget", "20", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| convolution_A100.subset400 | random | 5% |" in printed
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"replay_convolution_A100.subset400_random.{x}" for x in ("csv", "md", "png")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", "missing.json", "--runs", "2"], "record file not found"),
        (["replay", str(RECORD), "--runs", "0"], "--runs must be an integer of at least 1"),
        (["replay", str(RECORD), "--abort-ratio", "0.5"], "--abort-ratio must be 0"),
    ],
)
def test_bad_replay_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.gpu
def test_a_brute_force_gpu_run_exports_a_complete_record_that_replays(tmp_path, capsys):
    """GPU: a small fp16 mma space at 512^3 measured to the end, exported to T4, replayed: brute force in the record's
    order reaches the optimum exactly where the run measured it."""
    import yaml

    spec = yaml.safe_load((Path(__file__).parents[2] / "configs" / "record_gemm_fp16.yaml").read_text())
    spec.update(shapes=[[512, 512, 512]], params={**spec["params"], "BM": [64, 128], "BN": [64, 128], "BK": [32],
                                                  "STAGES": [3], "RASTER": [1]})  # fmt: skip
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(spec))
    journal, out = tmp_path / "rec.journal", tmp_path / "rec.json.gz"
    argv = ["run", str(path), "--sampler", "brute", "--abort-ratio", "0", "--storage", str(journal)]
    assert main([*argv, "--tuned-dir", str(tmp_path / "tuned")]) == 0
    assert main(["export-t4", str(journal), "--out", str(out)]) == 0
    record = load_record(out)
    assert record.entries and all(e.ok for e in record.entries)
    assert record.provenance["gpu"]["arch"].startswith("sm_") and record.provenance["template_hash"]
    run = replay_once(record, Variant.named("brute"), 0, len(record.entries), abort_ratio=None, stop=False)
    position = next(i for i, e in enumerate(record.entries) if e.time_ms == record.optimum_ms) + 1
    assert run.reach(record.optimum_ms)[0] == position


H200_RECORD = Path(__file__).parents[1] / "data" / "records" / "record_gemm_fp16_h200.json.gz"


def test_our_h200_record_is_complete_and_the_default_finds_its_optimum_region():
    """The brute-force record of configs/record_gemm_fp16.yaml measured on the H200 (2026-12-01): every
    configuration of the space is in it, and the default strategy comes within 5% of its optimum in the budget."""
    record = load_record(H200_RECORD)
    assert len(record.by_key) == 856 and record.optimum_ms > 0
    # seed 0 in the CPU tier; AUTOTUNE_FULL_SWEEP=1 (tests/sweep.py) adds seed 1 and a second replay of seed 0 (a
    # replay's determinism for a seed is test_a_replay_of_the_committed_record_is_deterministic_for_a_seed's)
    runs = [replay_once(record, Variant.named("tpe"), seed=s, budget=120, stop=False) for s in (0, *full_only([1]))]
    for run in runs:
        assert run.best_ms[-1] <= 1.05 * record.optimum_ms
    if full_sweep():
        assert runs[0] == replay_once(record, Variant.named("tpe"), seed=0, budget=120, stop=False)


def _benchmark():
    """benchmarks/replay_vs_kernel_tuner.py as a module (the script that puts ours beside Kernel Tuner)."""
    import importlib.util

    path = Path(__file__).parents[2] / "benchmarks" / "replay_vs_kernel_tuner.py"
    spec = importlib.util.spec_from_file_location("replay_vs_kernel_tuner", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runs_reaching(at: list[int | None], n: int = 200) -> tuple[Run, ...]:
    """Runs whose best first comes within 5% of an optimum of 1.0 at the given evaluation (None: never)."""
    return tuple(
        Run(i, tuple(1.0 if k is not None and j + 1 >= k else 2.0 for j in range(n)), tuple(map(float, range(n))))
        for i, k in enumerate(at)
    )


def test_the_benchmark_states_the_goal_of_issue_28_for_the_default_per_record():
    """Each record is judged by its family's default: TPE for a GEMM record, the genetic algorithm for a conv one."""
    bench = _benchmark()
    assert bench.default_strategy("gemm.mma.float16.4096x4096x4096.x.nvidia-h200-sm90") == "tpe (default)"
    assert bench.default_strategy("convolution_A100") == "ga" == bench.default_strategy("conv2d.direct.x")
    summaries = [
        Summary("a", "random", 200, _runs_reaching([60, 90, 120]), 1.0),
        Summary("a", "tpe (default)", 200, _runs_reaching([10, 20, 30]), 1.0),
        Summary("a", "ga", 200, _runs_reaching([100, 100, 100]), 1.0),
        Summary("a", "Kernel Tuner genetic_algorithm", 200, _runs_reaching([40, 50, None]), 1.0),
        Summary("a", "Kernel Tuner pso", 200, _runs_reaching([5, 15, None]), 1.0),
    ]
    goal = [line for line in bench._verdict(summaries) if "goal" in line]
    assert goal == [
        "- **a: goal a third of random (gemm's default, tpe (default)): 20 <= 30.0: met**",
        "- **a: goal no worse than Kernel Tuner's best (Kernel Tuner pso, 15): 20: NOT met**",
    ]
    conv = [Summary("conv_x", s.variant, s.budget, s.runs, 1.0) for s in summaries]
    assert [line for line in bench._verdict(conv) if "goal" in line] == [
        "- **conv_x: goal a third of random (conv2d's default, ga): 100 <= 30.0: NOT met**",
        "- **conv_x: goal no worse than Kernel Tuner's best (Kernel Tuner pso, 15): 100: NOT met**",
    ]


def test_kernel_tuner_simulates_its_genetic_algorithm_on_our_h200_record():
    """Kernel Tuner 1.5 crashed in its neighbour cache on this record; the benchmark's workaround lets it run."""
    kernel_tuner = pytest.importorskip("kernel_tuner")
    import json

    from autotune.tune.t4 import to_kt_cache

    bench = _benchmark()
    bench._kt_neighbour_lists(kernel_tuner)
    record = load_record(H200_RECORD)
    data = to_kt_cache(record)
    keys = data["tune_params_keys"]
    present = {",".join(str(c[k]) for k in keys) for c in data["cache"].values()}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache.json"
        cache.write_text(json.dumps(data))
        seed, best, spent = bench._kt_run(kernel_tuner, data, cache, "genetic_algorithm", 0, 300, keys, present)
    assert seed == 0 and 0 < len(best) <= 300 and len(spent) == len(best)
    assert min(best) >= record.optimum_ms and spent == sorted(spent)
