"""User errors at the command line: one line on stderr, a non-zero exit, no traceback; bugs still raise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from autotune import cli
from autotune.build import templates
from autotune.build.templates import TemplateRenderError, render_file
from autotune.core import device
from autotune.core.errors import AutotuneError, NoGPUError
from autotune.studies import storage_checks
from autotune.studies.storage_checks import check_url, redact
from autotune.tune.search import open_storage
from tests.fakes import NAIVE_SPEC

ROOT = Path(__file__).resolve().parents[2]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("autotune: error: "), err
    assert "Traceback" not in err[0]
    return err[0]


# --- storage URLs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://tuner:secret@db.example/autotune", "psycopg2 is not installed: pip install psycopg2-binary"),
        ("postgresql+psycopg://tuner@db/autotune", "psycopg is not installed: pip install psycopg[binary]"),
        ("mysql+pymysql://tuner@db/autotune", "pymysql is not installed: pip install pymysql"),
        ("mongodb://db/autotune", "unknown storage scheme 'mongodb'"),
        ("postgres://tuner@db/autotune", "spells this scheme postgresql://"),
        ("sqlite:///no/such/folder/runs.db", "the folder no/such/folder does not exist"),
        ("sqlite://relative.db", "three slashes"),
        ("://nothing", "is not a storage URL"),
    ],
    ids=[
        "postgres",
        "psycopg3",
        "pymysql",
        "unknown-scheme",
        "postgres-spelling",
        "sqlite-folder",
        "sqlite-slashes",
        "no-scheme",
    ],
)
def test_a_bad_storage_url_is_one_sentence_naming_the_fix(tmp_path, monkeypatch, capsys, url, says):
    monkeypatch.chdir(tmp_path)
    _without_db_drivers(monkeypatch)
    with pytest.raises(AutotuneError) as info:
        check_url(url)
    assert says in str(info.value) and "secret" not in str(info.value)
    with pytest.raises(AutotuneError, match=says.replace("[", r"\[").replace("]", r"\]")):
        open_storage(url)
    code = cli.main(["report", url, "--out", str(tmp_path / "rep")])
    reading = "no such SQLite file" if url.startswith("sqlite:///") else says  # report reads; it creates nothing
    assert code == 2 and reading in _one_error_line(capsys)


def test_the_run_command_checks_the_storage_url_before_tuning(tmp_path, monkeypatch, capsys):
    """``run --storage`` with PostgreSQL and no driver, on a machine with a (fake) GPU: one line, exit 2."""
    _without_db_drivers(monkeypatch)
    monkeypatch.setattr(cli, "_current_gpu", lambda hint: _FakeGPU())
    monkeypatch.setattr("autotune.build.compiler.require_nvrtc", lambda: None)
    spec = tmp_path / "naive.yaml"
    spec.write_text(NAIVE_SPEC)
    argv = ["run", str(spec), "--storage", "postgresql://u@h/db", "--tuned-dir", str(tmp_path / "tuned")]
    assert cli.main(argv) == 2
    assert "psycopg2 is not installed: pip install psycopg2-binary" in _one_error_line(capsys)


def _without_db_drivers(monkeypatch) -> None:
    """This machine, as if no database driver were installed (the venv may have some)."""
    real = storage_checks._installed
    drivers = {"psycopg2", "psycopg", "pg8000", "asyncpg", "MySQLdb", "pymysql", "mysql.connector", "pyodbc"}
    monkeypatch.setattr(storage_checks, "_installed", lambda m: m not in drivers and real(m))


class _FakeGPU:
    name, arch, key, max_shared_per_block = "Fake GPU", "sm_90", "fake-gpu-sm90", 227 * 1024


def test_a_valid_sqlite_url_opens(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    check_url(url)
    assert open_storage(url).get_all_studies() == []
    assert redact("postgresql://u:p%40ss@h/db") == "postgresql://u:***@h/db"


# --- templates -------------------------------------------------------------------------------------------------


@pytest.fixture
def template_dir(tmp_path, monkeypatch):
    """A template root of our own, with a broken template per Jinja error kind."""
    files = {
        "ok.cu.j2": "// {{ kernel_name }}\n",
        "syntax.cu.j2": "// line 1\n// line 2\n{% if BM %}\n{{ BM }\n",
        "undefined.cu.j2": "// line 1\n\nint x = {{ BM }};\nint y = {{ NOT_A_PARAM }};\n",
        "include.cu.j2": "// line 1\n{% include 'ptx/missing.j2' %}\n",
        "bad_include.cu.j2": "{% include 'syntax.cu.j2' %}\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(tmp_path)), undefined=jinja2.StrictUndefined, keep_trailing_newline=True
    )
    monkeypatch.setattr(templates, "_environment", lambda: env)
    return tmp_path


@pytest.mark.parametrize(
    ("name", "where", "says"),
    [
        ("syntax.cu.j2", "syntax.cu.j2:4", "unexpected '}'"),
        ("undefined.cu.j2", "undefined.cu.j2:4", "'NOT_A_PARAM' is undefined"),
        ("include.cu.j2", "include.cu.j2:2", "includes ptx/missing.j2 is not a template"),
        ("bad_include.cu.j2", "syntax.cu.j2:4", "unexpected '}'"),
        ("nothere.cu.j2", "nothere.cu.j2 is not a template", ""),
    ],
    ids=["syntax", "undefined", "missing-include", "syntax-in-include", "missing-template"],
)
def test_template_errors_are_file_line_and_the_jinja_message(template_dir, name, where, says):
    with pytest.raises(TemplateRenderError) as info:
        render_file(name, {"BM": 64, "kernel_name": "k"})
    message = str(info.value)
    assert where in message and says in message and "\n" not in message
    assert render_file("ok.cu.j2", {"kernel_name": "k"}) == "// k\n"


def test_a_template_error_during_compile_only_is_one_line(template_dir, tmp_path, capsys):
    (template_dir / "gemm").mkdir()
    (template_dir / "gemm" / "naive.cu.j2").write_text("{{ kernel_name }}\n{{ UNDEFINED_THING }}\n")
    spec = tmp_path / "naive.yaml"
    spec.write_text(NAIVE_SPEC)
    code = cli.main(["run", str(spec), "--compile-only", "--arch", "sm_90", "--limit", "1", "--jobs", "1"])
    line = _one_error_line(capsys)
    assert code == 2 and "naive.cu.j2:2: 'UNDEFINED_THING' is undefined" in line


# --- GPU messages and hints ----------------------------------------------------------------------------------


class _NoDriver(Exception):
    status = 35  # cudaErrorInsufficientDriver: what the CUDA runtime says when there is no driver at all


def test_no_driver_is_not_called_an_old_driver(monkeypatch):
    monkeypatch.setattr(device, "driver_loads", lambda: False)
    reason = device.no_gpu_reason(_NoDriver("cudaErrorInsufficientDriver: CUDA driver version is insufficient"))
    assert "no NVIDIA driver" in reason and "insufficient" not in reason
    monkeypatch.setattr(device, "driver_loads", lambda: True)
    assert "older than the CUDA runtime" in device.no_gpu_reason(_NoDriver("insufficient"))


def test_ladder_does_not_suggest_an_option_it_lacks(monkeypatch, capsys):
    def no_gpu(device_id=None):
        raise NoGPUError("there is no NVIDIA driver on this machine")

    monkeypatch.setattr(device, "current_gpu", no_gpu)
    assert cli.main(["ladder", "4096x4096x4096"]) == 2
    line = _one_error_line(capsys)
    assert "--compile-only" not in line and "no NVIDIA driver" in line
    assert cli.main(["run", str(ROOT / "configs" / "gemm.yaml")]) == 2
    assert "--compile-only --arch sm_90" in _one_error_line(capsys)
    argv = ["run", str(ROOT / "configs" / "gemm.yaml"), "--compile-only", "--limit", "1"]
    assert cli.main(argv) == 2
    line = _one_error_line(capsys)
    assert "--arch sm_90" in line and "use --compile-only" not in line


# --- --version, compile-only, top-level handling -------------------------------------------------------------


def test_version(capsys):
    from autotune import __version__

    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"autotune {__version__} (") and "optuna" in out


def test_compile_only_without_limit_says_what_it_plans_then_shows_progress(tmp_path, capsys):
    spec = tmp_path / "naive.yaml"
    spec.write_text(NAIVE_SPEC)
    assert cli.main(["run", str(spec), "--compile-only", "--arch", "sm_90", "--jobs", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    # 25 configurations before constraints; 19 pass BX * BY >= 32, and both shapes share each source
    assert "no --limit" in err[0] and "25 before constraints" in err[0] and "--limit N" in err[0]
    assert err[1].startswith("rendering [") and err[2].startswith("rendering [")  # the first step, then the end
    assert err[2].split("] ")[1].startswith("19 configurations") and "19 distinct sources" in err[2]
    assert "compiling 19 for sm_90" in err[3]
    bars = [ln for ln in err[4:] if ln.startswith("compiling [")]
    assert bars and bars[-1].split("] ")[1].startswith("19/19 kernels"), err
    assert err[-1] == "19 compiled, 0 failed, 0 kernels spill registers"


def test_spill_wording_counts_kernels():
    from autotune.compile_only import _spill_note

    assert _spill_note(1) == "1 kernel spills registers"
    assert _spill_note(5) == "5 kernels spill registers"


def test_an_oserror_about_a_users_path_is_one_line_but_a_bug_raises(tmp_path, monkeypatch, capsys):
    def unwritable(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "out"))

    monkeypatch.setattr(cli, "cmd_export", unwritable)
    assert cli.main(["export", "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'out'}: Permission denied" in _one_error_line(capsys)

    def bug(*args, **kwargs):
        raise KeyError("a bug in autotune")

    monkeypatch.setattr(cli, "cmd_export", bug)
    with pytest.raises(KeyError):
        cli.main(["export"])


def test_no_traceback_from_the_installed_entry_point(tmp_path):
    """The real process: a bad URL is one line on stderr and exit 2."""
    out = subprocess.run(
        [sys.executable, "-m", "autotune", "report", "mongodb://h/db"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unknown storage scheme" in out.stderr


def test_a_problem_larger_than_the_gpus_memory_is_one_sentence_before_tuning(tmp_path, monkeypatch, capsys):
    class SmallGPU(_FakeGPU):
        memory_bytes = 1 << 30

    monkeypatch.setattr(cli, "_current_gpu", lambda hint: SmallGPU())
    monkeypatch.setattr("autotune.build.compiler.require_nvrtc", lambda: None)
    spec = tmp_path / "naive.yaml"
    spec.write_text(NAIVE_SPEC.replace('shapes: [[64, 64, 64], "96x80x72"]', "shapes: [[16384, 16384, 16384]]"))
    assert cli.main(["run", str(spec), "--tuned-dir", str(tmp_path / "tuned")]) == 2
    line = _one_error_line(capsys)
    assert "16384x16384x16384 float32 needs" in line and "Fake GPU has 1.0 GiB" in line
