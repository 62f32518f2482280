"""Study journals that were cut, corrupted or left with trials of dead processes: repaired or one sentence."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune import report
from autotune.build.compile_pool import CompilePool
from autotune.cli import main
from autotune.core.errors import AutotuneError
from autotune.measure.evaluate import Settings
from autotune.studies.storage_checks import first_bad_line, set_aside_torn_tail
from autotune.tune.search import fail_orphans, open_storage, orphan_reason, study_name, tune_shape
from autotune.tune.spec import load_spec
from tests.fakes import NAIVE_SPEC, FakeEvaluator, fake_compile

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(arch="sm_90", tolerance=1e-5)


@pytest.fixture
def spec(tmp_path):
    p = tmp_path / "naive.yaml"
    p.write_text(NAIVE_SPEC)
    return load_spec(p)


def run(spec, journal: Path, trials: int):
    return tune_shape(
        spec, spec.problems[0], SETTINGS, open_storage(str(journal)), trials=trials, minutes=None,
        evaluator=FakeEvaluator(), compiler=CompilePool("sm_90", 1, fake_compile), prefetch=2, abort_ratio=None,
    )  # fmt: skip


def _cut(path: Path, n: int) -> bytes:
    data = path.read_bytes()
    path.write_bytes(data[:-n])
    return data[-n:]


def _run_in_child(spec, journal: Path, trials: int) -> None:
    """A run in another process (tests/fakes.py), which then exits: its trials have a dead owner."""
    env = _env()
    cmd = [
        sys.executable,
        str(ROOT / "tests" / "fakes.py"),
        spec.path,
        str(journal),
        str(journal) + ".log",
        str(trials),
    ]
    subprocess.run(cmd, env=env, check=True, timeout=300, capture_output=True)


def test_a_torn_last_record_is_set_aside_and_the_study_resumes(spec, tmp_path, caplog):
    journal = tmp_path / "s.journal"
    _run_in_child(spec, journal, trials=4)
    whole = journal.read_bytes()
    _cut(journal, 37)
    torn = journal.read_bytes()
    last_newline = torn.rfind(b"\n") + 1
    with caplog.at_level(logging.WARNING, logger="autotune.tune.search"):
        out = run(spec, journal, trials=7)
    notes = [r.getMessage() for r in caplog.records if "cut short" in r.getMessage()]
    assert len(notes) == 1 and str(journal) in notes[0]
    sides = list(tmp_path.glob("s.journal.torn-*"))
    assert len(sides) == 1 and sides[0].read_bytes() == torn[last_newline:]
    assert len(sides[0].read_bytes()) == len(whole) - 37 - last_newline
    data = journal.read_bytes()
    assert data[:last_newline] == torn[:last_newline], "records before the torn one changed"
    assert all(json.loads(line)["op_code"] >= 0 for line in data.splitlines())
    # The torn record ended the last trial of the killed run: that trial is failed as interrupted.
    assert out.evaluated == 7 and out.new >= 3
    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=open_storage(str(journal)))
    assert not study.get_trials(states=(TrialState.RUNNING,))
    assert any(t.user_attrs.get("status") == "interrupted" for t in study.trials)


def test_report_reads_a_torn_journal_and_leaves_it_as_it_is(spec, tmp_path, caplog):
    journal = tmp_path / "s.journal"
    run(spec, journal, trials=3)
    _cut(journal, 37)
    before = journal.read_bytes()
    with caplog.at_level(logging.WARNING, logger="autotune.report"):
        df = report.trials(str(journal))
    assert len(df) >= 2 and "cut short" in caplog.text
    assert journal.read_bytes() == before, "the reader changed the journal"


def test_a_last_line_that_is_not_a_record_is_set_aside_too(tmp_path):
    path = tmp_path / "j.journal"
    good = b'{"op_code":0,"worker_id":"w","study_name":"s","directions":[1]}\n'
    path.write_bytes(good + b"\x00\xff garbage\n")
    note = set_aside_torn_tail(path)
    assert note and "11 bytes" in note
    assert path.read_bytes() == good
    assert set_aside_torn_tail(path) is None, "a whole journal was changed"


@pytest.mark.parametrize("cut", [1, 5, 37, 60])
def test_any_cut_leaves_only_whole_records(spec, tmp_path, cut):
    journal = tmp_path / "s.journal"
    run(spec, journal, trials=2)
    lines = journal.read_bytes().splitlines(keepends=True)
    _cut(journal, cut)
    set_aside_torn_tail(journal)
    kept = journal.read_bytes().splitlines(keepends=True)
    assert kept == lines[: len(kept)] and len(kept) >= len(lines) - 1 - cut // 40


def _with_line(path: Path, number: int, line: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(number - 1, line)
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"op_code":99,"worker_id":"x"}\n', "op code 99 is unknown"),
        (b"{not json at all\n", "not JSON"),
        (b"\xff\xfe\x00\x01\n", "not UTF-8"),
        (b"[1, 2]\n", "JSON list"),
    ],
    ids=["unknown-op", "not-json", "binary", "list"],
)
def test_a_bad_line_in_the_middle_is_one_sentence_naming_file_and_line(spec, tmp_path, capsys, line, says):
    journal = tmp_path / "s.journal"
    run(spec, journal, trials=2)
    _with_line(journal, 3, line)
    with pytest.raises(AutotuneError) as info:
        open_storage(str(journal))
    message = str(info.value)
    assert f"{journal}, line 3: " in message and says in message and "\n" not in message
    assert first_bad_line(journal)[0] == 3
    # the CLI: report says the same in one line, exit 2, no traceback
    assert main(["report", str(journal), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("autotune: error:") and "line 3" in err[0]


def _kill_after(tmp_path: Path, journal: Path, name: str, step: str) -> None:
    """A child process that creates a trial the way ``step`` says, then is SIGKILLed before it tells."""
    script = textwrap.dedent(f"""
        import os, signal, optuna
        from autotune.tune.search import _ask_owned, open_storage
        storage = open_storage({str(journal)!r})
        study = optuna.create_study(study_name={name!r}, storage=storage, load_if_exists=True)
        trial = {step}
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = _env()
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        ("_ask_owned(study, None)", "its process ("),  # killed after the ask: the trial names its dead owner
        ("study.ask()", "before it marked the trial"),  # an ask with no owner mark (an older autotune)
    ],
    ids=["owned", "no-owner"],
)
def test_running_trials_of_killed_processes_are_failed_on_the_next_open(tmp_path, step, reason):
    journal = tmp_path / "k.journal"
    _kill_after(tmp_path, journal, "killed", step)
    storage = open_storage(str(journal))
    study = optuna.load_study(study_name="killed", storage=storage)
    assert [t.state for t in study.trials] == [TrialState.RUNNING]
    assert fail_orphans(study, storage) == 1
    t = optuna.load_study(study_name="killed", storage=open_storage(str(journal))).trials[0]
    assert t.state == TrialState.FAIL and t.user_attrs["status"] == "interrupted"
    assert reason in t.user_attrs["result"]["reason"]


def test_a_running_trial_of_a_live_process_is_left_alone(tmp_path):
    storage = open_storage(str(tmp_path / "live.journal"))
    study = optuna.create_study(study_name="live", storage=storage)
    from autotune.tune.search import _ask_owned

    trial = _ask_owned(study, {"x": 1})
    assert trial.user_attrs["owner"].endswith(f":{os.getpid()}")
    assert orphan_reason(study.trials[0]) is None and fail_orphans(study, storage) == 0
    elsewhere = {"owner": "another-host:1"}  # cannot be checked from here
    assert orphan_reason(optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs=elsewhere)) is None


def test_tune_shape_fails_orphans_and_carries_on(spec, tmp_path):
    journal = tmp_path / "s.journal"
    run(spec, journal, trials=2)
    _kill_after(tmp_path, journal, study_name(spec, spec.problems[0]), "_ask_owned(study, None)")
    out = run(spec, journal, trials=4)
    study = optuna.load_study(study_name=study_name(spec, spec.problems[0]), storage=open_storage(str(journal)))
    assert out.evaluated == 4 and not study.get_trials(states=(TrialState.RUNNING,))
    assert [t.user_attrs.get("status") for t in study.trials].count("interrupted") == 1


def test_an_unwritable_journal_path_is_one_sentence(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(AutotuneError, match="cannot be opened"):
        open_storage(str(blocker / "sub" / "s.journal"))


def test_two_processes_failing_the_same_orphan_do_not_collide(tmp_path, monkeypatch):
    journal = tmp_path / "k.journal"
    _kill_after(tmp_path, journal, "killed", "_ask_owned(study, None)")
    first, second = open_storage(str(journal)), open_storage(str(journal))
    a = optuna.load_study(study_name="killed", storage=first)
    b = optuna.load_study(study_name="killed", storage=second)
    stale = b.get_trials(states=(TrialState.RUNNING,))  # b has read the trial as RUNNING ...
    assert fail_orphans(a, first) == 1  # ... when a fails it
    monkeypatch.setattr(b, "get_trials", lambda **kwargs: stale)
    assert fail_orphans(b, second) == 0
    t = optuna.load_study(study_name="killed", storage=open_storage(str(journal))).trials[0]
    assert t.state == TrialState.FAIL and t.user_attrs["status"] == "interrupted"


@pytest.mark.gpu
def test_gpu_run_resumes_a_torn_journal_from_the_command_line(tmp_path):
    """On the GPU: tune 3 trials, cut 37 bytes off the journal, run again to 5; it resumes with one warning."""
    spec = tmp_path / "naive.yaml"
    spec.write_text(NAIVE_SPEC.replace('shapes: [[64, 64, 64], "96x80x72"]', "shapes: [[256, 256, 256]]"))
    journal = tmp_path / "runs" / "naive.journal"
    argv = ["run", str(spec), "--storage", str(journal), "--tuned-dir", str(tmp_path / "tuned"), "--jobs", "2"]
    env = _env()  # the first run in its own process, which then ends
    subprocess.run([sys.executable, "-m", "autotune", *argv, "--trials", "3"], env=env, check=True, timeout=600)
    _cut(journal, 37)
    second = subprocess.run([sys.executable, "-m", "autotune", *argv, "--trials", "5"], env=env, timeout=600,
                            capture_output=True, text=True)  # fmt: skip
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stderr.count("cut short") == 1 and "Traceback" not in second.stderr
    assert len(list(journal.parent.glob("naive.journal.torn-*"))) == 1
    storage = open_storage(str(journal))
    (name,) = optuna.get_all_study_names(storage)  # with --storage, the name carries the GPU key
    assert name.startswith(study_name(load_spec(spec), load_spec(spec).problems[0]))
    study = optuna.load_study(study_name=name, storage=storage)
    assert not study.get_trials(states=(TrialState.RUNNING,))
    evaluated = [
        t for t in study.trials if t.user_attrs.get("status") not in (None, "interrupted", "unevaluated", "invalid")
    ]
    assert len(evaluated) >= 5


def _env() -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH (keeping what was there: the GPU host's site)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
