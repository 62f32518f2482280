"""Search strategies on recorded spaces: ours replayed through autotune's real search loop, and Kernel Tuner's in
its own simulation mode, on the same Kernel Tuner cache files. No GPU.

    python3 -m pip install kernel_tuner==1.5.0            # Kernel Tuner from its wheel (the `kt` part only)
    PYTHONPATH=$PWD python3 benchmarks/replay_vs_kernel_tuner.py --part ours --runs 30
    PYTHONPATH=$PWD python3 benchmarks/replay_vs_kernel_tuner.py --part kt --runs 30
    # the two genetic algorithms on the A100 convolution, 300 seeds (30 leave their medians to chance, see METHOD)
    CONV=../shared/data/kernel_tuner/convolution_A100.json.gz
    PYTHONPATH=$PWD python3 benchmarks/replay_vs_kernel_tuner.py --part ours --strategy ga --record $CONV --runs 300
    PYTHONPATH=$PWD python3 benchmarks/replay_vs_kernel_tuner.py --part kt --strategy genetic_algorithm \
        --record $CONV --runs 300
    PYTHONPATH=$PWD python3 benchmarks/replay_vs_kernel_tuner.py --part table

Records (default: all three; --record picks others): the two cache files in ../shared/data/kernel_tuner/ (CLBlast
Xgemm on an RTX 3090, 2-D convolution on an A100) and our H200 brute-force record (tests/data/records/, T4), which
Kernel Tuner reads converted to its cache format.
  ours  every strategy of STRATEGIES, `runs` seeds each, through autotune.tune.replay (the loop of `autotune run`,
        early abort at 2x); the evaluations and simulated seconds to come within 1% and 5% of the optimum.
  kt    Kernel Tuner's tune_kernel(simulation_mode=True, cache=FILE) with each strategy of KT_STRATEGIES, the
        same seeds, max_fevals = the budget; the space is restricted to the cache's configurations (what is
        absent is infeasible for both tools). Its evaluations are counted as Kernel Tuner counts unique
        configurations tried, in its own order (results list), invalid ones included.
  table both side by side: <out>/replay_vs_kernel_tuner.{json,csv,md}, plots
        replay_<record>.png, and per record the goal of issue 28 for the default strategy (met or NOT met).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.kernels import FAMILIES  # noqa: E402
from autotune.tune.replay import Run, Summary, Variant, markdown, plot, quantiles, replay  # noqa: E402
from autotune.tune.samplers import default_sampler  # noqa: E402
from autotune.tune.t4 import load_record, to_kt_cache  # noqa: E402

KT_DIR = next(
    (d for d in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if d.is_dir()), ROOT.parent / "shared"
)
KT_DIR = KT_DIR / "data" / "kernel_tuner"  # beside the checkout (a worktree sits one level deeper)
RECORDS = ("gemm_clblast_xgemm_RTX_3090.json.gz", "convolution_A100.json.gz")
OUR_RECORD = ROOT / "tests" / "data" / "records" / "record_gemm_fp16_h200.json.gz"  # brute force on the H200
# (variant, budget per record or None for the default budget); random gets enough to reach 5% in most runs
STRATEGIES = {
    "random": Variant("random", default=True),
    "tpe (default)": Variant("tpe", default=True),
    "tpe startup=30": Variant("tpe", True, 30),
    "tpe ordered": Variant("tpe", True, 10, "log"),
    "tpe ordered startup=30": Variant("tpe", True, 30, "log"),
    "nsga2": Variant("nsga2", default=True),  # Optuna's genetic algorithm (population 16), single objective here
    "ga": Variant("ga", default=True),  # ours after Kernel Tuner's genetic algorithm (autotune/tune/samplers_ga.py)
}
KT_STRATEGIES = ("random_sample", "genetic_algorithm", "simulated_annealing", "greedy_ils", "pso", "diff_evo")
RANDOM_BUDGET = 4000
LABELS = {"tpe": "tpe (default)", "ga": "ga"}  # the strategies of STRATEGIES that are make_sampler(name) as is


def family(record: str) -> str:
    """A record's kernel family: our studies are named after it, a Kernel Tuner file after its kernel."""
    head = record.split(".")[0]
    return head if head in FAMILIES else ("conv2d" if "conv" in record.lower() else "gemm")


def default_strategy(record: str) -> str:
    """The strategy `autotune run` uses by default for the record's family (time objective)."""
    return LABELS[default_sampler(family(record))]


def ours(records: list[Path], names: list[str], runs: int, budget: int, out: Path, first_seed: int = 0) -> None:
    """Replay every strategy on every record; append each summary to <out>/replay_runs.json as it finishes."""
    store = out / "replay_runs.json"
    done = json.loads(store.read_text()) if store.exists() else []
    for path in records:
        record = load_record(path)
        for name in names:
            if any(d["record"] == record.name and d["strategy"] == name and len(d["runs"]) >= runs for d in done):
                continue
            b = min(len(record.entries), RANDOM_BUDGET) if name == "random" else budget
            t0 = time.monotonic()
            s = replay(record, STRATEGIES[name], runs, b, first_seed=first_seed)
            print(f"{record.name} {name}: {runs} runs in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
            done = [d for d in done if not (d["record"] == record.name and d["strategy"] == name)]
            done.append({"record": record.name, "strategy": name, "budget": b, "optimum_ms": record.optimum_ms,
                         "runs": [[r.seed, list(r.best_ms), list(r.elapsed_s)] for r in s.runs]})  # fmt: skip
            store.write_text(json.dumps(done))


def _stored(folder: Path, name: str) -> list[dict]:
    """The summaries a folder holds: ``name`` as the parts write it, and ``name``.gz packed by the table part (each
    run as its improvements only, [evaluation, best ms, simulated s]: all that the table and plots read)."""
    out = json.loads((folder / name).read_text()) if (folder / name).exists() else []
    packed = folder / f"{name}.gz"
    for d in json.loads(gzip.open(packed, "rt").read()) if packed.exists() else []:
        runs = []
        for seed, n, steps in d["runs"]:
            best, spent = [math.inf] * n, [0.0] * n
            for i, b, t in steps:
                best[i:], spent[i:] = [b] * (n - i), [t] * (n - i)
            runs.append([seed, best, spent])
        out.append({**d, "runs": runs})
    return out


def _pack(summaries: list[Summary]) -> list[dict]:
    rows = []
    for s in summaries:
        runs = []
        for r in s.runs:
            steps = [[i, b, r.elapsed_s[i]] for i, b in enumerate(r.best_ms) if i == 0 or b < r.best_ms[i - 1]]
            runs.append([r.seed, len(r.best_ms), [x for x in steps if math.isfinite(x[1])]])
        rows.append({"record": s.record, "strategy": s.variant, "budget": s.budget, "optimum_ms": s.optimum_ms,
                     "runs": runs})  # fmt: skip
    return rows


def _summaries(dirs: list[Path], name: str = "replay_runs.json") -> list[Summary]:
    """The runs stored in each folder (seeds of one strategy split over several processes are joined)."""
    joined: dict[tuple[str, str], dict] = {}
    for d in (_stored(p, name) for p in dirs):
        for x in d:
            into = joined.setdefault((x["record"], x["strategy"]), {**x, "runs": []})
            if into["budget"] != x["budget"]:
                raise SystemExit(f"{x['record']} {x['strategy']}: runs with budgets {into['budget']} and {x['budget']}")
            into["runs"] += [r for r in x["runs"] if r[0] not in {s[0] for s in into["runs"]}]
    return [
        Summary(d["record"], d["strategy"], d["budget"],
                tuple(Run(seed, tuple(b), tuple(t)) for seed, b, t in sorted(d["runs"])), d["optimum_ms"])
        for d in joined.values()
    ]  # fmt: skip


def kt(records: list[Path], strategies: list[str], runs: int, budget: int, out: Path) -> None:
    """Kernel Tuner's strategies in its simulation mode; every run's trajectory to <out>/replay_kt_runs.json."""
    import kernel_tuner

    _kt_neighbour_lists(kernel_tuner)
    store = out / "replay_kt_runs.json"
    done = json.loads(store.read_text()) if store.exists() else []
    for path in records:
        record = load_record(path)
        data = to_kt_cache(record)  # a Kernel Tuner file comes back as it was; a T4 record (ours) is converted
        keys = data["tune_params_keys"]
        present = {",".join(str(c[k]) for k in keys) for c in data["cache"].values()}
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp) / "cache.json"
            cache.write_text(json.dumps(data))
            for strategy in strategies:
                if any(d["record"] == record.name and d["strategy"] == strategy for d in done):
                    continue
                t0 = time.monotonic()
                traces = []
                for seed in range(runs):
                    traces.append(_kt_run(kernel_tuner, data, cache, strategy, seed, budget, keys, present))
                print(f"{record.name} kt {strategy}: {runs} runs in {time.monotonic() - t0:.0f} s", file=sys.stderr)
                done.append({"record": record.name, "strategy": f"Kernel Tuner {strategy}", "budget": budget,
                             "optimum_ms": record.optimum_ms, "runs": traces})  # fmt: skip
                store.write_text(json.dumps(done))


def _kt_neighbour_lists(kernel_tuner) -> None:  # type: ignore[no-untyped-def]
    """Kernel Tuner 1.5 keeps neighbour indices in lists but its Hamming neighbours come back as a numpy array, and
    appending to one later fails (AttributeError: 'numpy.ndarray' object has no attribute 'append', met on our H200
    record by the genetic algorithm). The same indices as a list: what its cache expects; nothing else changes."""
    import kernel_tuner.searchspace

    space = kernel_tuner.searchspace.Searchspace
    if getattr(space.get_neighbors_indices_no_cache, "as_list", False):
        return
    original = space.get_neighbors_indices_no_cache

    def as_list(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        found = original(self, *args, **kwargs)
        return found.tolist() if hasattr(found, "tolist") else found

    as_list.as_list = True  # type: ignore[attr-defined]
    space.get_neighbors_indices_no_cache = as_list


def _kt_run(kernel_tuner, data, cache, strategy, seed, budget, keys, present) -> list:  # type: ignore[no-untyped-def]
    """One Kernel Tuner simulation: [seed, best after each evaluation, simulated seconds by then]."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)

    def restrict(p: dict) -> bool:
        return ",".join(str(p[k]) for k in keys) in present

    results, _ = kernel_tuner.tune_kernel(
        data["kernel_name"], "__global__ void " + data["kernel_name"] + "() {}", data["problem_size"], [],
        {k: data["tune_params"][k] for k in keys}, restrictions=restrict, strategy=strategy,
        strategy_options={"max_fevals": budget}, cache=str(cache), simulation_mode=True, verbose=False, quiet=True,
    )  # fmt: skip
    best, spent, bests, times, seen = math.inf, 0.0, [], [], set()
    for r in results:  # every configuration the strategy asked for; a repeat is served from the cache, free
        key = ",".join(str(r[k]) for k in keys)
        if key in seen:
            continue
        seen.add(key)
        spent += sum(float(r.get(k, 0.0) or 0.0) for k in ("compile_time", "verification_time", "benchmark_time",
                                                            "framework_time")) / 1e3  # fmt: skip
        t = r.get("time")
        if isinstance(t, (int, float)):
            best = min(best, float(t))
        bests.append(best)
        times.append(spent)
    return [seed, bests, times]


def table(out: Path, runs_from: list[Path]) -> None:
    """replay_vs_kernel_tuner.* (ours with Kernel Tuner's), plus the plots; the runs
    are read from ``runs_from`` (default: ``out``)."""
    ours_s = _summaries(runs_from)
    kt_s = _summaries(runs_from, "replay_kt_runs.json")
    for name, summaries in (("replay_runs.json.gz", ours_s), ("replay_kt_runs.json.gz", kt_s)):
        with gzip.open(out / name, "wt") as f:  # every run, packed: the table can be made again from these
            json.dump(_pack(summaries), f)
    for name, summaries in (("replay_vs_kernel_tuner", ours_s + kt_s),):
        rows = [row for s in sorted(summaries, key=lambda s: s.record) for row in s.rows()]
        (out / f"{name}.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
        with open(out / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        verdict = "\n".join(_verdict(summaries))
        (out / f"{name}.md").write_text(f"# {name.replace('_', ' ')}\n\n{METHOD}\n{markdown(rows)}\n{verdict}\n")
    for record in sorted({s.record for s in ours_s}):
        plot([s for s in ours_s + kt_s if s.record == record], out / f"replay_{record}.png")
    print(markdown([row for s in ours_s + kt_s for row in s.rows()]))
    print("\n".join(_verdict(ours_s + kt_s)))


METHOD = """Generated by `benchmarks/replay_vs_kernel_tuner.py` (no GPU). Ours: autotune's search loop
(`autotune.tune.replay`, early abort at 2x) on the recorded measurements; Kernel Tuner 1.5:
`tune_kernel(simulation_mode=True)`
on the same cache file, the space restricted to the recorded configurations. Evaluations: distinct configurations
compiled and run (ours: as the loop counts them; Kernel Tuner: unique configurations in its results). Simulated
seconds: the recorded compile, verification, benchmark and framework times of every configuration tried. "Reached":
runs that came within the threshold of the record's optimum inside the budget; a quartile that needs an unreached run
reads "not reached". "tpe (default)" is `autotune run`'s TPE with its default settings (autotune/tune/samplers.py),
"ga" its genetic algorithm (autotune/tune/samplers_ga.py); rows with fewer than 30 runs were exploratory. The goal
lines at the end check each record family's default sampler (`autotune.tune.samplers.default_sampler`: gemm tpe,
conv2d ga) against issue 28's two conditions. Both genetic algorithms ran 300 seeds on the A100 convolution: with one
configuration within 5% of the optimum, their medians over 30 seeds move by tens of evaluations with the seeds
(Kernel Tuner's: 154.5 on seeds 0-29, 193 on seeds 100-299; ours: 232 on seeds 0-29, 174 on seeds 0-99).
Counting: the genetic algorithms propose only recorded configurations and repeat measured ones for free in both
tools; a recorded failure counts as an evaluation in both.
"""


def _verdict(summaries: list[Summary]) -> list[str]:
    """Per record: each strategy's median evaluations to within 5% against random's, then the goal of issue 28 for
    the family's default (:func:`default_strategy`): at most a third of random's, and no more than Kernel Tuner's
    best strategy."""
    lines = []
    for record in sorted({s.record for s in summaries}):
        by = {s.variant: s for s in summaries if s.record == record}
        if "random" not in by:
            continue
        r = quantiles(_evals(by["random"]))[1]
        for name, s in by.items():
            d = quantiles(_evals(s))[1]
            lines.append(f"- {record}: {name} needs {d:g} evaluations (median, within 5%) against random's {r:g}: "
                         f"{d / r:.2f}x")  # fmt: skip
        lines += _goal(record, by, r)
    return lines


def _goal(record: str, by: dict[str, Summary], random_median: float) -> list[str]:
    """The two checks of the default strategy on one record, as one line each: met or NOT met."""
    default = default_strategy(record)
    if default not in by:
        return []
    d = quantiles(_evals(by[default]))[1]
    out = [f"- **{record}: goal a third of random ({family(record)}'s default, {default}): {d:g} <= "
           f"{random_median / 3:.1f}: "
           f"{'met' if d <= random_median / 3 else 'NOT met'}**"]  # fmt: skip
    kt = {name: quantiles(_evals(s))[1] for name, s in by.items() if name.startswith("Kernel Tuner")}
    if kt:
        best = min(kt, key=lambda n: kt[n])
        out.append(f"- **{record}: goal no worse than Kernel Tuner's best ({best}, {kt[best]:g}): {d:g}: "
                   f"{'met' if d <= kt[best] else 'NOT met'}**")  # fmt: skip
    return out


def _evals(s: Summary) -> list[float]:
    hits = [r.reach(s.optimum_ms * 1.05) for r in s.runs]
    return [h[0] if h else math.inf for h in hits]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("all", "ours", "kt", "table"), default="all",
                    help="one step, or all three (default): ours, Kernel Tuner's, then the table")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="a short form: 3 seeds, a budget of 200")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--budget", type=int, default=700, help="evaluations per search (random: up to 4000)")
    ap.add_argument("--record", type=Path, action="append", help="records (default: the Kernel Tuner files and ours)")
    ap.add_argument("--strategy", action="append", help="strategies of the part (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + runs - 1")
    ap.add_argument("--runs-from", type=Path, action="append", help="table: folders of stored runs (default --out)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.budget = min(args.runs, 3), min(args.budget, 200)
    records = args.record or [*(KT_DIR / r for r in RECORDS), OUR_RECORD]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part in ("all", "ours"):
        ours(records, args.strategy or list(STRATEGIES), args.runs, args.budget, args.out, args.first_seed)
    if args.part in ("all", "kt"):
        kt(records, args.strategy or list(KT_STRATEGIES), args.runs, args.budget, args.out)
    if args.part in ("all", "table"):
        table(args.out, args.runs_from or [args.out])


if __name__ == "__main__":
    main()
