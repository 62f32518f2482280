"""Every example in README.md and docs/ runs: specs and workloads load, CLI lines parse (and those that need no GPU
run), Python examples run in the GPU tier."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from autotune.cli import build_parser, main
from autotune.core.safe_yaml import load_yaml
from autotune.tune.spec import parse_spec
from autotune.tune.workload import is_workload, parse_workload

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# commands that need a GPU, a network install or a running service: parsed, not run
NOT_RUN = ("pip ", "optuna-dashboard", "python3 -m pytest", "--gpus", "postgresql://")


def blocks(lang: str) -> list[tuple[str, str]]:
    """(file:line, body) of every fenced block in the docs whose info string is ``lang``."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in re.finditer(rf"^```{lang}\n(.*?)^```", text, re.S | re.M):
            found.append((f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}", m.group(1)))
    return found


def autotune_lines() -> list[tuple[str, list[str]]]:
    """Each ``autotune ...`` command of the bash blocks, as argv (comments and ``... &&`` prefixes dropped)."""
    out = []
    for where, body in blocks("bash"):
        for line in body.splitlines():
            line = line.split(" #")[0].strip()
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("autotune "):
                    out.append((f"{where}: {part}", shlex.split(part)[1:]))
    return out


def test_the_docs_have_examples():
    assert len(blocks("yaml")) >= 2 and len(blocks("python")) >= 3 and len(autotune_lines()) >= 10


@pytest.mark.parametrize(("where", "body"), blocks("yaml"), ids=[w for w, _ in blocks("yaml")])
def test_every_yaml_example_loads(where, body):
    raw = load_yaml(body)
    if is_workload(raw):
        assert parse_workload(raw, where).tasks
    else:
        assert parse_spec(raw, where).problems


@pytest.mark.parametrize(("where", "argv"), autotune_lines(), ids=[w for w, _ in autotune_lines()])
def test_every_cli_example_parses(where, argv):
    args = build_parser().parse_args(argv)
    assert args.command == argv[0]


CPU_RUNNABLE = [(w, a) for w, a in autotune_lines() if a[0] in ("report", "compare", "export", "replay")
                or "--compile-only" in a]  # fmt: skip


@pytest.mark.parametrize(("where", "argv"), CPU_RUNNABLE, ids=[w for w, _ in CPU_RUNNABLE])
def test_cli_examples_that_need_no_gpu_run(where, argv, tmp_path, monkeypatch):
    """Run from the repository root (paths in the docs are relative to it), writing into a temporary folder. A
    report is written without its plots (seconds each with matplotlib): tests/unit/test_report.py draws and checks
    them for the same commands, with a tuned dir (the `made` report) and without (`bare`)."""
    monkeypatch.chdir(ROOT)
    argv = list(argv)
    if argv[0] == "report" and "--no-plots" not in argv:
        argv.append("--no-plots")
    if "--out" in argv:
        argv[argv.index("--out") + 1] = str(tmp_path / "out")
    elif argv[0] == "export":
        argv += ["--out", str(tmp_path / "out")]
    if "--compile-only" in argv:
        argv[argv.index("--limit") + 1] = "2"  # the docs say 20; two show the same path
        monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    assert main(argv) == 0, where


@pytest.mark.gpu
@pytest.mark.parametrize(("where", "body"), blocks("python"), ids=[w for w, _ in blocks("python")])
def test_every_python_example_runs_on_the_gpu(where, body, tmp_path, monkeypatch):
    if "torch" in body:
        pytest.importorskip("torchvision")
    monkeypatch.chdir(tmp_path)
    exec(compile(body, where, "exec"), {"__name__": "__doc_example__"})  # noqa: S102 - our own docs
