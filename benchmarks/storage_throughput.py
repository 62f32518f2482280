"""Configurations evaluated per minute: the journal default against a PostgreSQL-backed shared study, same spec.

    python3 benchmarks/storage_throughput.py --pg-url postgresql://USER@/DB?host=/SOCKET/DIR \\
        [--spec configs/gemm.yaml] [--shape 4096x4096x4096] [--trials 150] [--rounds 2] [--out benchmarks/results]
    python3 benchmarks/storage_throughput.py --fake --pg-url ... [--measure-ms 150] [--prefetch 32]   # no GPU

Each run tunes one shape of the spec from a fresh study with a fixed trial budget, in this process, on this GPU:
the GPU worker and the compile pool that ``autotune run`` uses, and the same settings. The journal run is the
default (``runs/<spec>/<gpu-key>.journal``, no claims); the PostgreSQL run is what ``--storage URL`` does (claims
in the storage, heartbeats, the GPU key in the study name). Runs alternate journal, PostgreSQL, PostgreSQL,
journal, ... so a drift of the GPU or a warming cache favours neither.

The rate of a run is its evaluated configurations per minute of search, from its first evaluation to its last
(the start-up, the vendor's timing and the final re-timing are the same for both and left out); the wall time of
the whole run is recorded beside it. Goal (issue 27): PostgreSQL at least 0.9 times the journal's rate.
Writes <out>/storage_throughput_<gpu-key>.json and .csv with the GPU, versions and date.

``--fake`` needs no GPU: the same search loop, with compiles that return at once and a GPU stand-in that takes
``--measure-ms`` per candidate (overlapped with the loop's asks, as the GPU worker is), on sm_90's limits. It
measures what the storage costs the loop; it writes nothing unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import functools
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.build.compiler import CompileResult  # noqa: E402
from autotune.core.device import GPUInfo  # noqa: E402
from autotune.core.limits import SM90  # noqa: E402
from autotune.measure.bench import Timing  # noqa: E402
from autotune.measure.evaluate import Compiled, Settings, Status, TrialResult  # noqa: E402

GOAL = 0.9


def run_once(spec, problem, storage_kind: str, url: str, trials: int, gpu, workdir: Path, tools) -> dict:
    """Tune ``problem`` from a fresh study on the journal or on PostgreSQL; the run's counts and times.
    ``tools()`` is a context manager that yields (evaluator, compile pool, prefetch)."""
    from autotune.tune.search import SEARCH_PLAN, default_storage, open_storage, tune_shape

    if storage_kind == "journal":
        storage_url, shared, gpu_key = default_storage(spec, gpu.key, workdir / uuid.uuid4().hex), False, ""
    else:
        storage_url, shared, gpu_key = url, True, f"{gpu.key}.bench-{uuid.uuid4().hex[:8]}"  # a fresh study
    storage = open_storage(storage_url)
    settings = replace(_settings(spec, gpu), timing=SEARCH_PLAN)
    stamps: list[tuple[float, int]] = []
    SQL.clear()
    t0 = time.perf_counter()
    with tools() as (evaluator, compiler, prefetch):
        out = tune_shape(
            spec, problem, settings, storage, trials=trials, minutes=None, evaluator=evaluator, compiler=compiler,
            prefetch=prefetch, progress=lambda done, note: stamps.append((time.perf_counter(), done)),
            shared=shared, gpu_key=gpu_key,
        )  # fmt: skip
    wall = time.perf_counter() - t0
    (first_t, first_n), (last_t, last_n) = stamps[0], stamps[-1]
    search_s = last_t - first_t
    rate = (last_n - first_n) / search_s * 60 if search_s > 0 else float("nan")
    return {
        "storage": storage_kind, "shape": problem.label, "evaluated": out.new, "search_s": round(search_s, 3),
        "configs_per_min": round(rate, 2), "wall_s": round(wall, 2), "statuses": out.statuses,
        "best_ms": out.best.median_ms if out.best else None, "best": out.best.kernel_name if out.best else None,
        "study": out.study_name, "sql_per_eval": round(SQL["statements"] / max(out.new, 1), 1) if SQL else None,
        "commits_per_eval": round(SQL["commits"] / max(out.new, 1), 1) if SQL else None,
    }  # fmt: skip


SQL: dict[str, int] = {}  # with --count-sql: statements and commits of every database engine in this process


def count_sql() -> None:
    """Count the SQL statements and commits of every SQLAlchemy engine (the PostgreSQL run's round trips)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def statement(*_: object) -> None:
        SQL["statements"] = SQL.get("statements", 0) + 1

    def commit(*_: object) -> None:
        SQL["commits"] = SQL.get("commits", 0) + 1

    event.listen(Engine, "after_cursor_execute", statement)
    event.listen(Engine, "commit", commit)


@contextlib.contextmanager
def gpu_tools(gpu, jobs: int):
    """The GPU worker and the compile pool of ``autotune run``, warmed up."""
    from autotune.build.compile_pool import CompilePool
    from autotune.measure.worker import GPUWorker

    with GPUWorker() as worker, CompilePool(gpu.arch, jobs=jobs, timeout_s=120.0) as compiler:
        worker.warm()
        compiler.warm()
        yield worker, compiler, max(4, 2 * jobs)


def _settings(spec, gpu):
    """What ``autotune run`` tunes with on this GPU (autotune.cli.tune)."""
    from autotune.measure.evaluate import Settings
    from autotune.measure.verify import tolerance_for

    return Settings(
        arch=gpu.arch, tolerance=tolerance_for(spec.dtype, spec.tolerance), max_shared_bytes=gpu.max_shared_per_block,
        registers_per_block=gpu.registers_per_block, registers_per_sm=gpu.registers_per_sm,
        shared_per_sm=gpu.shared_per_sm, threads_per_sm=gpu.threads_per_sm, seed=spec.seed, timeout_s=30.0,
    )  # fmt: skip


def versions(url: str, fake: bool) -> dict:
    import optuna
    import sqlalchemy

    from autotune.studies.study_database import rdb_storage

    v = {"python": sys.version.split()[0], "optuna": optuna.__version__, "sqlalchemy": sqlalchemy.__version__}
    if not fake:
        import cupy

        v["cupy"] = cupy.__version__
    try:
        import psycopg2

        v["psycopg2"] = psycopg2.__version__.split()[0]
    except ImportError:
        pass
    engine = rdb_storage(url).engine
    with engine.connect() as conn:
        v["postgresql"] = conn.execute(sqlalchemy.text("select version()")).scalar().split(",")[0]
    return v


def write_results(out: Path, gpu, meta: dict, summary: dict, rows: list[dict]) -> Path:
    """<out>/storage_throughput_<gpu-key>.json (everything) and .csv (one row per run); the common stem."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"storage_throughput_{gpu.key}"
    stem.with_suffix(".json").write_text(json.dumps({**meta, "summary": summary, "runs": rows}, indent=1) + "\n")
    with stem.with_suffix(".csv").open("w", newline="") as f:
        fields = ["gpu", "date", "storage", "shape", "evaluated", "search_s", "configs_per_min", "wall_s", "best_ms"]
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "gpu": gpu.name, "date": meta["date"]})
    return stem


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pg-url", default=os.environ.get("AUTOTUNE_BENCH_PG_URL"), help="a PostgreSQL storage URL")
    ap.add_argument("--spec", default=str(ROOT / "configs" / "gemm.yaml"))
    ap.add_argument("--shape", default="4096x4096x4096", help="one shape of the spec")
    ap.add_argument("--trials", type=int, default=150, help="evaluated configurations per run")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of runs (journal and PostgreSQL, order alternating)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles (default: cores)")
    ap.add_argument("--sampler", help="override the spec's sampler")
    ap.add_argument("--out", type=Path, help="where results go (default benchmarks/results; none with --fake)")
    ap.add_argument("--quick", action="store_true", help="a short form: 40 trials, one pair of runs")
    ap.add_argument("--fake", action="store_true", help="no GPU: instant compiles, a fixed time per candidate")
    ap.add_argument("--measure-ms", type=float, default=150.0, help="--fake: time per candidate on the fake GPU")
    ap.add_argument("--prefetch", type=int, default=32, help="--fake: candidates in flight (a real run: 2 x jobs)")
    ap.add_argument("--count-sql", action="store_true", help="count SQL statements and commits per evaluation")
    args = ap.parse_args()
    if args.quick:
        args.trials, args.rounds = min(args.trials, 40), 1
    if args.out is None and not args.fake:
        args.out = ROOT / "benchmarks" / "results"
    return args


# ---- --fake: a GPU stand-in (what the storage costs the search loop, without a GPU). Compiles return at once, each
# candidate "runs" for a fixed time that overlaps the loop's asks (as the GPU worker's start/collect do), the measured
# time is a fixed function of the configuration (a landscape for the sampler); sm_90's device limits.


def fake_gpu() -> GPUInfo:
    """sm_90's limits under a name of its own (its studies and result files never mix with a real GPU's)."""
    return GPUInfo(
        name="fake sm90", arch="sm_90", multiprocessors=132, max_shared_per_block=SM90.max_shared_per_block,
        registers_per_block=SM90.registers_per_block, registers_per_sm=SM90.registers_per_sm,
        shared_per_sm=SM90.shared_per_sm, threads_per_sm=SM90.threads_per_sm, l2_bytes=50 << 20, driver="none",
        runtime="none",
    )  # fmt: skip


def instant_compile(source: str, kernel_name: str, arch: str) -> CompileResult:
    return CompileResult(kernel_name, b"fake", "", 0.0, registers=64, static_smem=0, spill_stores=0, spill_loads=0)


def fake_ms(c: Compiled) -> float:
    """A landscape: larger tiles are faster, plus a fixed per-configuration scatter."""
    params = c.candidate.config.as_dict()
    tile = float(params.get("BM", 64)) * float(params.get("BN", 64))
    scatter = int(hashlib.sha256(c.candidate.config.key.encode()).hexdigest()[:6], 16) / 0xFFFFFF
    return 3.0 + 4096.0 / tile + scatter


class FakeGPU:
    """Takes ``measure_s`` per candidate; ``start`` returns at once and ``collect`` waits for the rest."""

    def __init__(self, measure_s: float) -> None:
        self.measure_s = measure_s
        self._pending: tuple[Compiled, Settings, float] | None = None

    def vendor(self, kernel, problem, plan):
        return "fake-BLAS", Timing(4.0, 4.0, 4.0, 0.0, 5)

    def start(self, c: Compiled, settings: Settings) -> None:
        self._pending = (c, settings, time.perf_counter())

    def collect(self) -> TrialResult:
        assert self._pending is not None
        c, _, t0 = self._pending
        if c.status is None:
            time.sleep(max(0.0, t0 + self.measure_s - time.perf_counter()))
        return self._result(c)

    def measure(self, c: Compiled, settings: Settings) -> TrialResult:
        self.start(c, settings)
        return self.collect()

    def _result(self, c: Compiled) -> TrialResult:
        if c.status is not None:
            return TrialResult(c.status, c.reason, c.kernel_name, c.candidate.config)
        ms = fake_ms(c)
        return TrialResult(Status.COMPLETE, None, c.kernel_name, c.candidate.config, Timing(ms, ms, ms, 0.0, 5), 1e-7)


@contextlib.contextmanager
def fake_tools(measure_s: float, prefetch: int):
    """(evaluator, compile pool, prefetch) for ``storage_throughput.run_once``."""
    from autotune.build.compile_pool import CompilePool

    with CompilePool("sm_90", 1, instant_compile) as compiler:
        yield FakeGPU(measure_s), compiler, prefetch


def setup(args: argparse.Namespace) -> tuple:
    """(spec, problem, gpu, tools, meta); AutotuneError or ValueError in one sentence."""
    from autotune.tune.spec import load_spec

    spec = load_spec(args.spec)
    if args.sampler:
        spec = replace(spec, sampler=args.sampler)
    problem = next((p for p in spec.problems if p.label == args.shape), None)
    if problem is None:
        raise ValueError(f"{args.spec} has no shape {args.shape}")
    if args.fake:
        gpu = fake_gpu()
        tools = functools.partial(fake_tools, args.measure_ms / 1000, args.prefetch)
    else:
        from autotune.core.device import current_gpu

        gpu = current_gpu()
        tools = functools.partial(gpu_tools, gpu, args.jobs)
    meta = {"gpu": gpu.name, "gpu_key": gpu.key, "versions": {"driver": gpu.driver, **versions(args.pg_url, args.fake)},
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "spec": args.spec,
            "sampler": spec.sampler, "trials": args.trials, "jobs": args.jobs, "goal": GOAL}  # fmt: skip
    if args.fake:
        meta.update(fake=True, measure_ms=args.measure_ms, prefetch=args.prefetch, jobs=None)
    return spec, problem, gpu, tools, meta


def main() -> int:
    args = parse_args()
    if not args.pg_url:
        print("storage_throughput: no PostgreSQL URL; pass --pg-url or set AUTOTUNE_BENCH_PG_URL", file=sys.stderr)
        return 2
    from autotune.core.errors import AutotuneError

    try:
        spec, problem, gpu, tools, meta = setup(args)
    except (AutotuneError, ValueError) as exc:
        print(f"storage_throughput: {exc}", file=sys.stderr)
        return 2
    if args.count_sql:
        count_sql()
    order = []
    for i in range(args.rounds):
        order += ["journal", "postgresql"] if i % 2 == 0 else ["postgresql", "journal"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in order:
            row = run_once(spec, problem, kind, args.pg_url, args.trials, gpu, Path(tmp), tools)
            rows.append(row)
            sql = f"; {row['sql_per_eval']} SQL statements, {row['commits_per_eval']} commits each" if SQL else ""
            print(f"{kind:10s} {row['evaluated']:4d} evaluated in {row['search_s']:7.1f} s of search: "
                  f"{row['configs_per_min']:7.1f} configurations/min (run {row['wall_s']:.0f} s{sql})")  # fmt: skip
    rate = {k: statistics.mean(r["configs_per_min"] for r in rows if r["storage"] == k) for k in set(order)}
    ratio = rate["postgresql"] / rate["journal"]
    verdict = "meets" if ratio >= GOAL else "MISSES"
    summary = {"journal_per_min": round(rate["journal"], 2), "postgresql_per_min": round(rate["postgresql"], 2),
               "ratio": round(ratio, 3), "meets_goal": ratio >= GOAL}  # fmt: skip
    print(f"{gpu.name}, {problem.label}, {spec.sampler}: journal {rate['journal']:.1f}/min, PostgreSQL "
          f"{rate['postgresql']:.1f}/min, ratio {ratio:.3f} ({verdict} the goal of {GOAL})")  # fmt: skip
    if args.out is not None:
        stem = write_results(args.out, gpu, meta, summary, rows)
        print(f"wrote {stem}.json and .csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
