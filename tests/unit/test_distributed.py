"""Several worker processes on one study, with fake evaluations: no configuration evaluated twice, none lost,
a worker killed with SIGKILL in mid-trial, one final re-timing per shape.

The PostgreSQL tests need a server: ``AUTOTUNE_TEST_PG_URL`` (``.ci/run`` starts one and sets it). Without it
they skip, except under CI (``CI=true``), where they fail. The journal tests need nothing.

Run as a script, this file is one worker: ``python tests/unit/test_distributed.py SPEC STORAGE GPU_KEY LOG TRIALS DELAY
[--remote]``; ``--remote`` makes it look like a worker of another machine (so only its heartbeat tells that it
died, not its process id).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from autotune.core.space import Config  # noqa: E402
from autotune.tune.search import FINAL_PLAN, open_storage, study_name  # noqa: E402
from autotune.tune.spec import load_spec  # noqa: E402
from tests.fakes import NAIVE_SPEC, FakeEvaluator  # noqa: E402

# Short, so that a killed worker's trial is failed within seconds; the grace is four beats, so that a live worker
# on a loaded 2-core CI machine (three workers and the server) is not taken for dead when one beat comes late.
HEARTBEAT_S, GRACE_S = 1, 4


@pytest.fixture(scope="module")
def pg_url() -> str:
    url = os.environ.get("AUTOTUNE_TEST_PG_URL")
    if url:
        return url
    reason = "no PostgreSQL server: set AUTOTUNE_TEST_PG_URL (.ci/run starts one and sets it)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must test a real PostgreSQL, but {reason}")
    pytest.skip(reason)


class LoggingEvaluator(FakeEvaluator):
    """Logs ``<shape> begin|search|final <config key>`` lines: ``begin`` before the (slow) evaluation, then
    ``search`` or ``final`` (the re-timing of the finalists) once it has ended."""

    def __init__(self, path: Path, delay: float) -> None:
        super().__init__(delay=delay)
        self.path = path

    def measure(self, c, settings):
        if c.status is not None:
            return super().measure(c, settings)
        shape, key = c.candidate.problem.label, c.candidate.config.key
        phase = "final" if settings.timing == FINAL_PLAN else "search"
        self._write(f"{shape} begin {key}")
        r = super().measure(c, settings)
        self._write(f"{shape} {phase} {key}")
        return r

    def _write(self, line: str) -> None:
        with self.path.open("a") as f:
            f.write(line + "\n")


def worker_main(argv: list[str]) -> None:
    """One worker: every shape of the spec, in a study shared with the other workers."""
    from autotune.build.compile_pool import CompilePool
    from autotune.measure.evaluate import Settings
    from autotune.studies.study_database import rdb_storage
    from autotune.tune.search import tune_shape
    from tests.fakes import fake_compile

    spec_path, storage_url, gpu_key, log, trials, delay = argv[:6]
    if "--remote" in argv:  # a worker of another machine: its process id says nothing here
        import autotune.studies.shared_study
        import autotune.tune.search

        autotune.tune.search._owner = autotune.studies.shared_study._owner = lambda: "another-host:1"
    spec = load_spec(spec_path)
    is_url = "://" in storage_url
    storage = rdb_storage(storage_url, HEARTBEAT_S, GRACE_S) if is_url else open_storage(storage_url)
    evaluator = LoggingEvaluator(Path(log), delay=float(delay))
    with CompilePool("sm_90", 1, fake_compile) as pool:
        for problem in spec.problems:
            out = tune_shape(
                spec, problem, Settings(arch="sm_90", tolerance=1e-5), storage, trials=int(trials), minutes=None,
                evaluator=evaluator, compiler=pool, prefetch=2, shared=True, gpu_key=gpu_key,
            )  # fmt: skip
            best = out.best.config.key if out.best else "-"
            evaluator._write(f"{problem.label} outcome {best} {out.final_by or 'self'}")


def _spec(tmp_path: Path, sampler: str, shapes: int) -> Path:
    """The fakes' spec with ``sampler`` and its first ``shapes`` shapes (19 feasible configurations each)."""
    p = tmp_path / f"naive_{sampler}.yaml"
    text = NAIVE_SPEC.replace("sampler: tpe", f"sampler: {sampler}")
    p.write_text(text if shapes == 2 else text.replace('[[64, 64, 64], "96x80x72"]', "[[64, 64, 64]]"))
    return p


def _start(spec: Path, storage: str, key: str, log: Path, trials: int, delay: float, *extra: str):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, __file__, str(spec), storage, key, str(log), str(trials), str(delay), *extra]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)


def _wait(procs, limit_s: float = 90) -> None:
    deadline = time.monotonic() + limit_s
    for p in procs:
        try:
            p.wait(max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a worker did not finish in time")
        assert p.returncode in (0, -signal.SIGKILL), p.stderr.read()


def _lines(logs: list[Path]) -> list[tuple[str, str, str, str]]:
    """(worker, shape, what, rest) for every line of every worker's log."""
    out = []
    for log in logs:
        for line in log.read_text().splitlines() if log.exists() else []:
            shape, what, rest = line.split(" ", 2)
            out.append((log.stem, shape, what, rest))
    return out


def _feasible(spec, problem) -> set[str]:
    from autotune.measure.evaluate import Settings
    from autotune.tune.search import feasible_configs

    return {c.key for c in feasible_configs(spec, problem, Settings(arch="sm_90", tolerance=1e-5))}


def _check_shared_run(spec, storage, key, logs, killed: dict[str, str] | None = None, dead_status=None) -> None:
    """No configuration evaluated twice in search, none lost, one final re-timing per shape, one verdict."""
    import optuna

    lines = _lines(logs)
    killed = killed or {}
    for problem in spec.problems:
        shape = problem.label
        searched = Counter(rest for _, s, what, rest in lines if s == shape and what == "search")
        twice = {k: n for k, n in searched.items() if n > 1}
        assert not twice, f"{shape}: evaluated more than once: {twice}"
        feasible = _feasible(spec, problem)
        assert set(searched) == feasible, f"{shape}: lost {feasible - set(searched)}"
        if shape in killed:
            assert killed[shape] in searched, "the killed worker's configuration was not evaluated again"
        finals = {w for w, s, what, _ in lines if s == shape and what == "final"}
        assert len(finals) == 1, f"{shape}: finalists re-timed by {sorted(finals) or 'nobody'}"
        outcomes = [(w, rest.split(" ", 1)) for w, s, what, rest in lines if s == shape and what == "outcome"]
        assert len({best for _, (best, _) in outcomes}) == 1, f"{shape}: workers disagree: {outcomes}"
        assert set(finals) <= {w for w, (_, by) in outcomes if by == "self"}  # a late joiner may take an old verdict
        study = optuna.load_study(study_name=study_name(spec, problem, key), storage=storage)
        results = Counter(  # complete or pruned (slow): an evaluation's result
            t.user_attrs["result"]["config_key"]
            for t in study.trials
            if t.user_attrs.get("status") in ("complete", "pruned") and "duplicate_of" not in t.user_attrs
        )
        assert set(results) == feasible and max(results.values()) == 1
        if shape in killed:  # the dead worker's trial failed, its configuration was evaluated later (once, above)
            same = [t for t in study.trials if t.params and Config.of(t.params).key == killed[shape]]
            dead = [t for t in same if t.state == optuna.trial.TrialState.FAIL and "duplicate_of" not in t.user_attrs]
            later = [t for t in same if t.user_attrs.get("status") in ("complete", "pruned")]
            assert dead and later and later[0].number > dead[0].number
            # Failed through its heartbeat (no status), or as an orphan of this host ("interrupted").
            assert dead[0].user_attrs.get("status") == dead_status
        assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]


def _shared_run(tmp_path, storage: str, sampler: str = "random", shapes: int = 2) -> None:
    spec_path = _spec(tmp_path, sampler, shapes)
    key = f"test-gpu-{uuid.uuid4().hex[:8]}"  # a fresh study in a database shared with other tests
    logs = [tmp_path / f"w{i}.log" for i in range(3)]
    _wait([_start(spec_path, storage, key, log, 1000, 0.05) for log in logs])
    _check_shared_run(load_spec(spec_path), open_storage(storage), key, logs)


def _killed_run(tmp_path, storage: str, *extra: str, dead_status: str | None = None) -> None:
    """Three workers; one is killed with SIGKILL in mid-trial and a fresh one joins; all finish the spec."""
    spec_path = _spec(tmp_path, "random", 1)
    key = f"test-gpu-{uuid.uuid4().hex[:8]}"
    logs = [tmp_path / f"w{i}.log" for i in range(3)]
    procs = [_start(spec_path, storage, key, log, 1000, 0.3, *extra) for log in logs]
    victim, shape, killed = procs[0], load_spec(spec_path).problems[0].label, None
    deadline = time.monotonic() + 60
    while killed is None and time.monotonic() < deadline:
        lines = [(s, what, rest) for _, s, what, rest in _lines(logs[:1])]
        if len(lines) >= 3 and lines[-1][:2] == (shape, "begin"):  # in mid-trial (the fake sleeps 0.3 s)
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            if _lines(logs[:1])[-1][2] == "begin":  # it did not finish that trial
                killed = lines[-1][2]
        time.sleep(0.01)
    assert killed is not None, "the victim never was in mid-trial"
    logs.append(tmp_path / "w3.log")
    procs.append(_start(spec_path, storage, key, logs[-1], 1000, 0.05, *extra))  # the run resumes
    _wait(procs)
    _check_shared_run(load_spec(spec_path), open_storage(storage), key, logs, {shape: killed}, dead_status)


def test_three_workers_share_a_journal_without_duplicates_or_losses(tmp_path):
    _shared_run(tmp_path, str(tmp_path / "shared.journal"))


def test_a_rerun_of_a_finished_shared_study_takes_its_verdict_without_evaluating(tmp_path):
    spec_path, storage = _spec(tmp_path, "random", 1), str(tmp_path / "shared.journal")
    first, again = tmp_path / "first.log", tmp_path / "again.log"
    _wait([_start(spec_path, storage, "k", first, 1000, 0.0)])
    _wait([_start(spec_path, storage, "k", again, 1000, 0.0)])
    lines = _lines([first, again])
    assert {(w, what) for w, _, what, _ in lines} >= {("first", "search"), ("first", "final")}
    assert [(what, rest) for w, _, what, rest in lines if w == "again"] == [
        ("outcome", rest) for w, _, what, rest in lines if w == "first" and what == "outcome"
    ]  # nothing evaluated or re-timed again, the same winner, stored by this run ("self")


def test_a_killed_worker_on_this_host_has_its_configuration_retried_journal(tmp_path):
    _killed_run(tmp_path, str(tmp_path / "shared.journal"), dead_status="interrupted")


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_three_workers_share_a_postgresql_study_without_duplicates_or_losses(pg_url, tmp_path, sampler):
    _shared_run(tmp_path, pg_url, sampler, shapes=1)  # one shape: CI has 2 cores for three workers and a server


def test_a_killed_remote_worker_is_failed_by_its_heartbeat_and_retried_postgresql(pg_url, tmp_path):
    _killed_run(tmp_path, pg_url, "--remote")


def _result(status: str):
    from autotune.measure.bench import Timing
    from autotune.measure.evaluate import Status, TrialResult

    config = Config.of({"BM": 64, "BN": 32})
    if status == "complete":
        return TrialResult(Status.COMPLETE, None, "k", config, Timing(1.5, 1.4, 1.6, 0.1, 5), 1e-7, 12.0)
    return TrialResult(Status(status), "why", "k", config)


@pytest.mark.parametrize("status", ["complete", "pruned", "invalid", "verify-failed"])
def test_a_claimed_trial_is_written_whole_and_its_result_reads_back_as_study_tell_writes_it(tmp_path, status):
    """The shared study's Optuna calls (autotune.studies.shared_asks): a trial created in one write with a mirror
    proposal's parameters and its owner; its result written by the trial's id reads back as ``study.tell`` leaves
    it; the mirror learns finished configurations and closed ones end as duplicates, through the public API."""
    import optuna

    from autotune.studies.shared_asks import Mirror, close, new_trial
    from autotune.studies.study_database import rdb_storage
    from autotune.studies.trial_record import _tell, write_result

    storage = rdb_storage(f"sqlite:///{tmp_path / 's.db'}", HEARTBEAT_S, GRACE_S)
    study = optuna.create_study(study_name="s", storage=storage)
    mirror = Mirror(study, [])
    proposal = mirror.ask({"BM": 64, "BN": 32})
    for name, values in (("BM", [32, 64]), ("BN", [32, 64])):
        proposal.suggest_categorical(name, values)
    trial = new_trial(storage, storage.get_study_id_from_name("s"), {"owner": "h:1"}, proposal)
    t = study.trials[trial.number]
    assert (t.state, t.params, t.distributions, t.user_attrs) == (
        optuna.trial.TrialState.RUNNING, proposal.params, proposal.distributions, {"owner": "h:1"}
    )  # fmt: skip
    r = _result(status)
    write_result(storage, trial.trial_id, r)
    study.enqueue_trial(proposal.params)
    told = study.ask(fixed_distributions=proposal.distributions)  # the same configuration, told by study.tell
    _tell(study, told, r)
    mine, ref = study.trials[trial.number], study.trials[told.number]
    assert (mine.state, mine.values, mine.params) == (ref.state, ref.values, ref.params)
    assert {k: v for k, v in mine.user_attrs.items() if k != "owner"} == ref.user_attrs
    mirror.learn(mine)
    assert len(mirror.local.trials) == 1 + (mine.state != optuna.trial.TrialState.FAIL)  # its own ask, and mine
    dup = new_trial(storage, storage.get_study_id_from_name("s"), {"owner": "h:1"}, proposal)
    close(study, dup, trial.number)
    t = study.trials[dup.number]
    assert t.state == optuna.trial.TrialState.PRUNED and t.user_attrs["duplicate_of"] == trial.number
    mirror.learn(t)  # a duplicate is not a configuration of its own
    assert len(mirror.local.trials) == 1 + (mine.state != optuna.trial.TrialState.FAIL)


def test_gpus_names_each_workers_device():
    from autotune.tune.gpu_workers import parse_gpus

    assert parse_gpus("all", 4) == ["0", "1", "2", "3"]
    assert parse_gpus("3, 1", 4) == ["3", "1"]
    assert parse_gpus("1", 2, visible="4,6") == ["6"]  # the index counts the GPUs this process sees


@pytest.mark.parametrize(
    ("text", "count", "words"),
    [("x", 4, "indices such as 0,1,2,3"), ("0,4", 4, "no GPU 4; this host has GPUs 0-3"), ("1,1", 4, "named twice"),
     ("0", 0, "no GPU 0; this host has no GPU"), ("all", 0, "no CUDA GPU is visible")],
)  # fmt: skip
def test_a_bad_gpus_list_is_one_clear_error(text, count, words):
    from autotune.core.errors import AutotuneError
    from autotune.tune.gpu_workers import parse_gpus

    with pytest.raises(AutotuneError, match=words):
        parse_gpus(text, count)


def test_each_gpus_worker_gets_its_device_and_a_share_of_the_compile_jobs():
    from autotune.tune.gpu_workers import WORKER_ENV, worker_commands

    argv = ["-v", "run", "spec.yaml", "--gpus", "0,1,2", "--jobs=16", "--trials", "9"]
    commands = worker_commands(argv, ["0", "1", "2"], 16)
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in commands] == ["0", "1", "2"]
    assert all(env[WORKER_ENV] for _, env in commands)
    for cmd, _ in commands:
        assert cmd[1:] == ["-m", "autotune", "-v", "run", "spec.yaml", "--trials", "9", "--jobs", "5"]


def test_gpus_workers_run_side_by_side_and_the_worst_exit_status_counts(tmp_path, monkeypatch, capsys):
    import autotune.tune.gpu_workers as gw

    script = "import os, sys; print('progress'); print(); print('table ' + os.environ['CUDA_VISIBLE_DEVICES']);"
    script += " print(); print('results: x'); sys.exit(int(os.environ['CUDA_VISIBLE_DEVICES']) % 2 * 3)"

    def commands(argv, gpus, jobs):
        return [([sys.executable, "-c", script], {**os.environ, "CUDA_VISIBLE_DEVICES": g}) for g in gpus]

    monkeypatch.setattr(gw, "worker_commands", commands)
    assert gw.run_workers(["run", "spec.yaml"], ["0", "2"], 4, tmp_path) == 0
    assert "table 0" in capsys.readouterr().out and (tmp_path / "gpu2.log").read_text().startswith("progress")
    assert gw.run_workers(["run", "spec.yaml"], ["0", "1"], 4, tmp_path) == 3
    assert "GPU 1: exit status 3" in capsys.readouterr().err


def test_cli_refuses_a_bad_gpus_list_in_one_sentence(tmp_path, capsys):
    from autotune.cli import main

    spec = _spec(tmp_path, "random", 1)
    assert main(["run", str(spec), "--gpus", "zero"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--gpus expects 'all' or GPU indices" in err


@pytest.mark.gpu
def test_gpus_all_tunes_a_shape_with_one_worker_per_gpu(tmp_path):
    """The real thing on this host's GPUs: workers share the journal, one re-times, tuned/ gets the winner."""
    import json

    spec, runs, tuned = ROOT / "configs" / "gemm.yaml", tmp_path / "runs", tmp_path / "tuned"
    cmd = [sys.executable, "-m", "autotune", "run", str(spec), "--shape", "1000x1000x1000", "--trials", "24",
           "--gpus", "all", "--runs-dir", str(runs), "--tuned-dir", str(tuned)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    logs = sorted(runs.glob("*/workers/gpu*.log"))
    assert logs and "1000x1000x1000" in done.stdout and "results:" in done.stdout
    entries = [e for f in tuned.glob("*/gemm.json") for e in json.loads(f.read_text())["entries"]]
    assert len(entries) == 1, "the winner of the one shape is stored once"


if __name__ == "__main__":
    worker_main(sys.argv[1:])
