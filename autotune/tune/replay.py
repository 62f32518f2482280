"""Replay a recorded space: the real search loop (:func:`autotune.tune.search.tune_shape`) with recorded measurements.

The loop keeps everything it does in a tuning run (the space, duplicates answered from the study, infeasible
proposals recorded and repaired to their nearest feasible neighbour, the early abort) and only candidates
change: a configuration absent from the record is infeasible; a present one "compiles" in its recorded compile
time and "runs" in its recorded times, with its recorded fate (compile failure, runtime failure, invalid).

For each strategy and seed it reports the evaluations, and the simulated wall time (the sum of the recorded
compile, validation, benchmark and framework times of every candidate tried), needed to come within 1% and 5%
of the record's optimum; over seeds, the median and quartiles. The loop's final re-timing of its finalists is
not counted: it comes after the search found them.

    autotune replay tests/data/records/convolution_A100.subset400.json.gz --sampler tpe --runs 50 --budget 300
"""

from __future__ import annotations

import csv
import hashlib
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..build.compile_pool import CompilePool
from ..build.compiler import CompileResult
from ..core.errors import AutotuneError
from ..core.space import Param, Value
from ..measure.bench import Timing
from ..measure.evaluate import Candidate, Compiled, Settings, Status, TrialResult
from .search import SEARCH_PLAN, TPE_STARTUP, Preparation, Strategy, suggest_choice, tune_shape
from .spec import Budget, Spec
from .t4 import Entry, Record, Validity, timing_of

THRESHOLDS = (0.01, 0.05)
SAMPLERS = ("tpe", "random", "tpe-independent", "tpe-ordered", "tpe-independent-ordered", "brute", "ga")


@dataclass(frozen=True)
class RecordProblem:
    """The one problem of a record, as far as the loop needs one."""

    label: str
    layout: str = "NN"
    dtype: str = "record"


@dataclass(frozen=True)
class Variant:
    """A search strategy to replay: a sampler name of the loop, and for TPE its settings and the encoding of
    ordered numeric parameters ("choice": unordered categories; "log": an integer on a log scale snapped to the
    nearest value, i.e. tile sizes as exponents)."""

    sampler: str = "tpe"
    multivariate: bool = True
    startup: int = TPE_STARTUP
    encoding: str = "choice"
    default: bool = False  # the loop's own make_sampler(sampler), exactly as `autotune run` uses it

    @property
    def name(self) -> str:
        if self.default or self.sampler != "tpe":
            return self.sampler + (" (default)" if self.default and self.sampler == "tpe" else "")
        mode = "multivariate" if self.multivariate else "independent"
        return f"tpe {mode} startup={self.startup} {self.encoding}"

    @classmethod
    def named(cls, name: str, startup: int = TPE_STARTUP) -> Variant:
        """The variants behind ``--sampler``: tpe (the loop's default), random, brute, and TPE variants."""
        if name in ("random", "brute", "ga") or (name == "tpe" and startup == TPE_STARTUP):
            return cls(name, default=True)
        if name not in SAMPLERS:
            raise AutotuneError(f"--sampler: expected one of {', '.join(SAMPLERS)}, got {name!r}")
        return cls("tpe", "independent" not in name, startup, "log" if name.endswith("ordered") else "choice")


def _ordered(p: Param) -> bool:
    return len(p.values) >= 3 and all(type(v) is int and v > 0 for v in p.values)


def suggest_log(trial: Any, p: Param) -> Value:
    """Positive integer parameters with 3 or more values as an integer on a log scale, snapped to the nearest value
    in log space (a model-based sampler then knows 64 lies between 32 and 128); other parameters as choices."""
    if not _ordered(p):
        return suggest_choice(trial, p)
    x = trial.suggest_int(p.name, min(p.values), max(p.values), log=True)  # type: ignore[type-var]
    return min(p.values, key=lambda v: abs(math.log(v) - math.log(x)))  # type: ignore[arg-type]


def make_strategy(v: Variant, seed: int) -> Strategy | None:
    """The Optuna sampler of a variant; None where the loop's own (``make_sampler``) is the one to replay."""
    if v.default or v.sampler != "tpe":
        return None
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=seed, multivariate=v.multivariate, group=v.multivariate, n_startup_trials=v.startup
        )
    return Strategy(sampler, suggest_log if v.encoding == "log" else suggest_choice)


def preparation(record: Record) -> Preparation:
    """Candidates from the record: absent configurations are infeasible, present ones render to their key."""
    feasible = [e.config for e in record.entries]
    by_key = record.by_key
    digest = hashlib.sha256(record.name.encode()).hexdigest()[:8]

    def check(c: Candidate, settings: Settings) -> str | None:
        return None if c.config.key in by_key else "not in the record"

    def render(c: Candidate, settings: Settings) -> Compiled:
        key = c.config.key
        if key not in by_key:
            return Compiled(c, key, status=Status.INVALID, reason="not in the record")
        return Compiled(c, key, source_hash=key, template_hash=digest, source=key)

    def finish(c: Compiled, result: CompileResult, settings: Settings) -> Compiled:
        base = replace(c, compiled=result)
        if not result.ok:
            return replace(base, status=Status.COMPILE_FAILED, reason=result.error)
        if by_key[c.candidate.config.key].validity is Validity.CONSTRAINTS:
            return replace(base, status=Status.INVALID, reason="recorded as invalid after compiling")
        return base

    return Preparation(
        feasible=lambda spec, problem, settings: feasible,
        check=check,
        render=render,
        finish=finish,
        study_name=lambda spec, problem: f"replay.{record.name}.{spec.sampler}.{spec.seed}",
    )


def recorded_compile(record: Record) -> Any:
    """A compile function for :class:`CompilePool` that answers with the recorded compile outcome and time."""
    by_key = record.by_key

    def compile_fn(source: str, kernel_name: str, arch: str) -> CompileResult:
        e = by_key[source]
        seconds = e.compile_ms / 1e3
        if e.validity is Validity.COMPILE:
            return CompileResult(kernel_name, None, "", seconds, error="recorded as a failed compile")
        return CompileResult(kernel_name, b"recorded", "", seconds, registers=0, static_smem=0)

    return compile_fn


class TargetReached(Exception):
    """The search came as close to the optimum as any threshold asks: nothing after can change the table."""


class RecordedEvaluator:
    """Answers for the GPU worker from the record, and keeps the search's events: (status, ms, simulated s).
    ``stop_at_ms``: raise :class:`TargetReached` after the first verified candidate at least that fast."""

    def __init__(self, record: Record, stop_at_ms: float | None = None) -> None:
        self.record, self.stop_at_ms = record, stop_at_ms
        self.events: list[tuple[Status, float, float]] = []

    def vendor(self, kernel: str, problem: Any, plan: Any) -> None:
        return None

    def measure(self, c: Compiled, settings: Settings) -> TrialResult:
        config = c.candidate.config
        e = self.record.by_key.get(config.key)
        compile_s = c.compiled.seconds if c.compiled is not None else 0.0
        if e is None or c.status is not None:
            r = TrialResult(c.status or Status.INVALID, c.reason or "not in the record", c.kernel_name, config)
            return self._log(settings, r, compile_s)
        r, run_s = _recorded_result(e, c, settings)
        return self._log(settings, r, compile_s + run_s)

    def _log(self, settings: Settings, r: TrialResult, cost_s: float) -> TrialResult:
        if settings.timing == SEARCH_PLAN:  # the final re-timing of finalists is not part of the search
            self.events.append((r.status, r.median_ms, cost_s))
            if self.stop_at_ms is not None and r.ok and r.median_ms <= self.stop_at_ms:
                raise TargetReached
        return r


def _recorded_result(e: Entry, c: Compiled, settings: Settings) -> tuple[TrialResult, float]:
    """The recorded outcome of a compiled candidate and the seconds its validation and timing took."""
    config, name = c.candidate.config, c.kernel_name
    run_s = (e.validation_ms + e.benchmark_ms + e.framework_ms) / 1e3
    if e.validity is Validity.RUNTIME:
        return TrialResult(Status.LAUNCH_FAILED, "recorded as failing at run time", name, config), run_s
    if not e.correct:
        return TrialResult(Status.VERIFY_FAILED, "recorded as incorrect", name, config), run_s
    median, lo, hi, iqr, repeats = timing_of(e)
    line = settings.abort_above_ms
    if line is not None and median > line:  # stopped after the probe launches, as the GPU worker would
        probe = settings.timing.probe
        t = Timing(median, lo, hi, iqr, min(probe, repeats), aborted=True)
        cost = (e.validation_ms + e.framework_ms + e.benchmark_ms * min(1.0, probe / max(repeats, 1))) / 1e3
        return TrialResult(Status.PRUNED, f"{median:.3g} ms, above the abort line {line:.3g}", name, config, t), cost
    t = Timing(median, lo, hi, iqr, repeats)
    return TrialResult(Status.COMPLETE, None, name, config, t), run_s


@dataclass(frozen=True)
class Run:
    """One replayed search: the best time after each evaluation, and the simulated seconds spent by then."""

    seed: int
    best_ms: tuple[float, ...]
    elapsed_s: tuple[float, ...]

    def reach(self, target_ms: float) -> tuple[int, float] | None:
        """(evaluations, simulated seconds) when the best first came within ``target_ms``; None if never."""
        for i, b in enumerate(self.best_ms):
            if b <= target_ms:
                return i + 1, self.elapsed_s[i]
        return None


def trace(events: Sequence[tuple[Status, float, float]], seed: int) -> Run:
    """Events of a search as a :class:`Run`: evaluations are candidates that were not invalid, as the loop counts
    them; time spent on invalid ones is carried into the next evaluation."""
    best, spent, bests, times = math.inf, 0.0, [], []
    for status, ms, cost in events:
        spent += cost
        if status is Status.INVALID:
            continue
        if status is Status.COMPLETE:
            best = min(best, ms)
        bests.append(best)
        times.append(spent)
    return Run(seed, tuple(bests), tuple(times))


def record_spec(record: Record, sampler: str, seed: int, budget: int) -> Spec:
    """A spec over the record's space (no template: the record answers for it)."""
    problem = RecordProblem(record.name)
    return Spec(
        f"{record.name}.yaml", "record", record.name, "record", (problem,), record.space, "time",
        Budget(budget, None), sampler, seed, None, (),
    )  # fmt: skip


def replay_once(
    record: Record, variant: Variant, seed: int, budget: int, abort_ratio: float | None = 2.0,
    evaluator: RecordedEvaluator | None = None, stop: bool = True,
) -> Run:  # fmt: skip
    """One search of at most ``budget`` evaluations over the record, through the real loop, in memory; with
    ``stop``, it ends as soon as it is within the tightest threshold of the optimum."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = record_spec(record, variant.sampler, seed, budget)
    stop_at = record.optimum_ms * (1 + min(THRESHOLDS)) if stop else None
    evaluator = evaluator or RecordedEvaluator(record, stop_at)
    settings = Settings(arch="record", tolerance=0.0, timing=SEARCH_PLAN, seed=seed)
    compiler = CompilePool("record", 1, recorded_compile(record))
    try:
        tune_shape(
            spec, spec.problems[0], settings, optuna.storages.InMemoryStorage(), trials=budget, minutes=None,
            evaluator=evaluator, compiler=compiler, prefetch=1, abort_ratio=abort_ratio, prep=preparation(record),
            strategy=make_strategy(variant, seed),
        )  # fmt: skip
    except TargetReached:
        pass
    return trace(evaluator.events, seed)


def quantiles(values: Sequence[float], qs: Sequence[float] = (0.25, 0.5, 0.75)) -> list[float]:
    """Linear quantiles where ``inf`` stands for "not reached": a quantile that leans on one is inf."""
    xs = sorted(values)
    out = []
    for q in qs:
        pos = q * (len(xs) - 1)
        i, f = int(pos), pos - int(pos)
        a, b = xs[i], xs[min(i + 1, len(xs) - 1)]
        out.append(a if f == 0 else (math.inf if math.inf in (a, b) else a + (b - a) * f))
    return out


@dataclass(frozen=True)
class Summary:
    """A strategy's runs on a record and, per threshold, the quartiles of evaluations and simulated seconds."""

    record: str
    variant: str
    budget: int
    runs: tuple[Run, ...]
    optimum_ms: float

    def needed(self, within: float) -> tuple[list[float], list[float], int]:
        """Quartiles of evaluations and of simulated seconds to come within ``within`` of the optimum, and how
        many runs got there within the budget."""
        hits = [r.reach(self.optimum_ms * (1 + within)) for r in self.runs]
        evals = [h[0] if h else math.inf for h in hits]
        secs = [h[1] if h else math.inf for h in hits]
        return quantiles(evals), quantiles(secs), sum(h is not None for h in hits)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for within in THRESHOLDS:
            (e25, e50, e75), (s25, s50, s75), reached = self.needed(within)
            out.append({
                "record": self.record, "strategy": self.variant, "within": f"{within:.0%}", "runs": len(self.runs),
                "reached": reached, "budget": self.budget, "evals_q1": e25, "evals_median": e50, "evals_q3": e75,
                "sim_s_q1": s25, "sim_s_median": s50, "sim_s_q3": s75,
            })  # fmt: skip
        return out


def replay(record: Record, variant: Variant, runs: int, budget: int, abort_ratio: float | None = 2.0,
           first_seed: int = 0, progress: Any = None) -> Summary:  # fmt: skip
    """``runs`` seeded searches of one strategy over a record."""
    done = []
    for seed in range(first_seed, first_seed + runs):
        done.append(replay_once(record, variant, seed, budget, abort_ratio))
        if progress is not None:
            progress(len(done), f"seed {seed}")
    return Summary(record.name, variant.name, budget, tuple(done), record.optimum_ms)


def _cell(x: float, digits: int = 0) -> str:
    return "not reached" if math.isinf(x) else f"{x:.{digits}f}"


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The evidence table: per record, strategy and threshold, median [quartiles] of evaluations and seconds."""
    lines = [
        "| record | strategy | within | reached | evaluations: median [q1, q3] | simulated s: median [q1, q3] |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ev = f"{_cell(r['evals_median'])} [{_cell(r['evals_q1'])}, {_cell(r['evals_q3'])}]"
        s = f"{_cell(r['sim_s_median'], 1)} [{_cell(r['sim_s_q1'], 1)}, {_cell(r['sim_s_q3'], 1)}]"
        lines.append(f"| {r['record']} | {r['strategy']} | {r['within']} | {r['reached']}/{r['runs']} "
                     f"(budget {r['budget']}) | {ev} | {s} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(summaries: Sequence[Summary], path: Any) -> Any:
    """Median best time over the optimum against evaluations, quartile bands, one line per strategy (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AutotuneError("the replay plot needs matplotlib; install it with pip install matplotlib") from None
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in summaries:
        n = max(len(r.best_ms) for r in s.runs)
        ratio = np.full((len(s.runs), n), np.nan)
        for i, r in enumerate(s.runs):
            ratio[i, : len(r.best_ms)] = np.array(r.best_ms) / s.optimum_ms
            ratio[i, len(r.best_ms) :] = r.best_ms[-1] / s.optimum_ms if r.best_ms else np.nan
        ratio[~np.isfinite(ratio)] = np.nan
        q1, q2, q3 = np.nanpercentile(ratio, [25, 50, 75], axis=0)
        ax.plot(np.arange(1, n + 1), q2, label=s.variant, linestyle="--" if s.variant.startswith("Kernel") else "-")
        ax.fill_between(np.arange(1, n + 1), q1, q3, alpha=0.2)
    for within in THRESHOLDS:
        ax.axhline(1 + within, color="grey", linestyle=":", linewidth=1)
    ax.set(xscale="log", ylim=(0.99, 2.0), xlabel="evaluations", title=summaries[0].record if summaries else "",
           ylabel="best time / record optimum (median, quartiles)")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def replay_command(record_path: str, sampler: str, runs: int, budget: int, abort_ratio: float, out: Any,
                   startup: int = TPE_STARTUP) -> int:  # fmt: skip
    """``autotune replay``: the table on stdout; replay_<record>_<sampler>.{png,csv,md} in ``out``."""
    from ..core.progress import Progress

    for name, v, least in (("--runs", runs, 1), ("--budget", budget, 1), ("--startup", startup, 0)):
        if v < least:
            raise AutotuneError(f"{name} must be an integer of at least {least}, got {v}")
    if not math.isfinite(abort_ratio) or (abort_ratio and abort_ratio < 1):
        raise AutotuneError(f"--abort-ratio must be 0 (never abort) or at least 1, got {abort_ratio}")
    from .t4 import load_record

    record = load_record(record_path)
    variant = Variant.named(sampler, startup)
    bar = Progress(f"replay {record.name} {variant.name}", runs, None)
    s = replay(record, variant, runs, budget, abort_ratio or None, progress=bar.update)
    bar.close(f"optimum {record.optimum_ms:.4g} ms")
    rows = s.rows()
    print(markdown(rows))
    Path(out).mkdir(parents=True, exist_ok=True)
    stem = Path(out) / f"replay_{record.name}_{sampler}"  # record names hold dots: no with_suffix
    with open(f"{stem}.csv", "w", newline="") as f:
        csv.DictWriter(f, fieldnames=list(rows[0])).writeheader()
        csv.DictWriter(f, fieldnames=list(rows[0])).writerows(rows)
    Path(f"{stem}.md").write_text(markdown(rows))
    plot([s], f"{stem}.png")
    print(f"table and plot: {stem}.{{csv,md,png}}")
    return 0
