"""The benchmark suite's runner (benchmarks/run.py): its plan, skip reasons and result checks, with no GPU work."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _load_runner():
    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


run = _load_runner()
NAMES = [b.name for b in run.BENCHMARKS]


def fake_dir(tmp_path: Path, scripts: list[str]) -> Path:
    d = tmp_path / "benchmarks"
    d.mkdir()
    for s in scripts:
        (d / s).write_text("")
    return d


def every_script(tmp_path: Path) -> Path:
    return fake_dir(tmp_path, sorted({b.script for b in run.BENCHMARKS}))


def test_everything_runs_where_every_script_module_and_the_gpu_are_there(tmp_path):
    d = every_script(tmp_path)
    out = tmp_path / "out"
    steps = run.plan(NAMES, quick=False, out=out, bench_dir=d, module_found=lambda m: True, gpu_check=lambda: None)
    assert [s.benchmark.name for s in steps] == NAMES
    for s in steps:
        assert s.skip is None
        assert s.argv[:2] == (sys.executable, str(d / s.benchmark.script))
        assert s.argv[-2:] == ("--out", str(out))
        assert list(s.argv[2:-2]) == list(s.benchmark.args)


def test_quick_replaces_each_benchmarks_arguments_with_its_short_form(tmp_path):
    d = every_script(tmp_path)
    steps = run.plan(NAMES, quick=True, out=tmp_path, bench_dir=d, module_found=lambda m: True, gpu_check=lambda: None)
    for s in steps:
        assert list(s.argv[2:-2]) == list(s.benchmark.quick)
    by_name = {s.benchmark.name: s.argv for s in steps}
    assert (
        "--quick" in by_name["vendor_gemm"]
        and "--quick"
        not in run.plan(
            ["vendor_gemm"], quick=False, out=tmp_path, bench_dir=d, module_found=lambda m: True, gpu_check=lambda: None
        )[0].argv
    )


def test_only_keeps_the_suite_order_and_nothing_else(tmp_path):
    d = every_script(tmp_path)
    steps = run.plan(["energy", "vendor_gemm"], quick=False, out=tmp_path, bench_dir=d,
                     module_found=lambda m: True, gpu_check=lambda: None)  # fmt: skip
    assert [s.benchmark.name for s in steps] == ["vendor_gemm", "energy"]


def test_a_missing_script_is_skipped_with_its_path(tmp_path):
    d = fake_dir(tmp_path, ["tuned_vs_vendor.py"])
    steps = run.plan(NAMES, quick=False, out=tmp_path, bench_dir=d, module_found=lambda m: True, gpu_check=lambda: None)
    skips = {s.benchmark.name: s.skip for s in steps}
    assert skips["vendor_gemm"] is None and skips["vendor_conv2d"] is None
    assert skips["models"] == "benchmarks/models.py is not in this checkout"
    assert skips["runtime_overhead"] == "benchmarks/runtime_overhead.py is not in this checkout"


def test_a_missing_module_is_named_in_the_skip_reason(tmp_path):
    d = every_script(tmp_path)
    absent = {"torch", "kernel_tuner"}
    steps = run.plan(NAMES, quick=False, out=tmp_path, bench_dir=d, module_found=lambda m: m not in absent,
                     gpu_check=lambda: None)  # fmt: skip
    skips = {s.benchmark.name: s.skip for s in steps}
    assert skips["vendor_conv2d"] == "needs torch, not installed"
    assert skips["throughput_vs_kernel_tuner"] == "needs kernel_tuner, not installed"
    assert skips["models"] == "needs torch, not installed"
    assert skips["vendor_gemm"] is None and skips["runtime_overhead"] is None


def test_without_a_gpu_only_the_cpu_benchmark_runs_and_the_gpu_is_asked_once(tmp_path):
    d = every_script(tmp_path)
    asked = []

    def no_gpu():
        asked.append(1)
        return "no usable CUDA GPU (CUDARuntimeError)"

    steps = run.plan(NAMES, quick=False, out=tmp_path, bench_dir=d, module_found=lambda m: True, gpu_check=no_gpu)
    assert len(asked) == 1
    for s in steps:
        if s.benchmark.gpu:
            assert s.skip == "no usable CUDA GPU (CUDARuntimeError)"
        else:
            assert s.skip is None


def test_the_gpu_is_not_probed_when_nothing_would_reach_it(tmp_path):
    d = fake_dir(tmp_path, [])

    def fail():
        raise AssertionError("the GPU was probed")

    steps = run.plan(NAMES, quick=False, out=tmp_path, bench_dir=d, module_found=lambda m: True, gpu_check=fail)
    assert all(s.skip.endswith("is not in this checkout") for s in steps)


def test_the_kept_benchmarks_are_in_the_checkout_and_take_the_runners_arguments():
    present = {b.script for b in run.BENCHMARKS if (BENCH / b.script).is_file()}
    assert {"tuned_vs_vendor.py", "throughput_vs_kernel_tuner.py", "runtime_overhead.py",
            "energy_repeatability.py"} <= present  # fmt: skip
    for b in run.BENCHMARKS:
        if b.script in present:
            source = (BENCH / b.script).read_text()
            for flag in ("--out", *(a for a in b.quick + b.args if a.startswith("--"))):
                assert f'"{flag}"' in source, f"{b.script} has no {flag} option, which the runner passes"


def write_result(out: Path, stem: str, doc: dict, csv: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(doc))
    if csv:
        (out / f"{stem}.csv").write_text("a,b\n1,2\n")


def test_a_result_with_gpu_versions_and_date_passes_the_check(tmp_path):
    since = time.time() - 1
    write_result(tmp_path, "gemm_nvidia-h200-sm90", {"gpu": {"name": "H200"}, "versions": {}, "date": "d", "rows": []})
    assert run.check_outputs(run.BY_NAME["vendor_gemm"], tmp_path, since) is None


@pytest.mark.parametrize(
    ("doc", "csv", "problem"),
    [
        ({"gpu": "H200", "date": "d"}, True, "runtime_overhead.json lacks versions"),
        ({"versions": {}}, True, "runtime_overhead.json lacks gpu, date"),
        ([1, 2], True, "runtime_overhead.json lacks gpu, versions, date"),
        (
            {"gpu": "H200", "versions": {}, "date": "d"},
            False,
            "wrote runtime_overhead.json but no runtime_overhead.csv",
        ),
    ],
)
def test_a_result_without_its_csv_or_its_metadata_is_a_failure(tmp_path, doc, csv, problem):
    since = time.time() - 1
    write_result(tmp_path, "runtime_overhead", doc, csv)
    assert run.check_outputs(run.BY_NAME["runtime_overhead"], tmp_path, since) == problem


def test_a_result_older_than_the_run_does_not_count(tmp_path):
    write_result(tmp_path, "runtime_overhead", {"gpu": "H200", "versions": {}, "date": "d"})
    old = time.time() - 3600
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))
    assert run.check_outputs(run.BY_NAME["runtime_overhead"], tmp_path, time.time() - 1) == (
        f"wrote no runtime_overhead.json in {tmp_path}"
    )


def test_a_cpu_benchmark_needs_no_gpu_key(tmp_path):
    since = time.time() - 1
    write_result(tmp_path, "replay_kt_gemm", {"versions": {"optuna": "5"}, "date": "d"})
    assert run.check_outputs(run.BY_NAME["replay_vs_kernel_tuner"], tmp_path, since) is None


FAKE_BENCHMARK = """
import argparse, json, pathlib, sys
ap = argparse.ArgumentParser()
ap.add_argument("--out", type=pathlib.Path)
ap.add_argument("--fail", action="store_true")
a = ap.parse_args()
a.out.mkdir(parents=True, exist_ok=True)
(a.out / "fake.json").write_text(json.dumps({"versions": {}, "date": "d"}))
(a.out / "fake.csv").write_text("x\\n1\\n")
sys.exit(3 if a.fail else 0)
"""


@pytest.mark.parametrize(("extra", "status"), [((), "ok"), (("--fail",), "failed (exit 3)")])
def test_a_step_runs_as_its_own_process_and_its_status_reads_its_exit_and_files(tmp_path, extra, status):
    script = tmp_path / "fake.py"
    script.write_text(FAKE_BENCHMARK)
    bench = run.Benchmark("fake", "fake.py", "a stand-in", needs=(), gpu=False)
    out = tmp_path / "out"
    step = run.Step(bench, (sys.executable, str(script), *extra, "--out", str(out)))
    got, wall = run.run_step(step, out)
    assert got == status and wall > 0
    assert json.loads((out / "fake.json").read_text())["date"] == "d"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "run.py"), *args], capture_output=True, text=True, timeout=120)


def test_help_names_every_benchmark_and_what_it_needs():
    p = cli("--help")
    assert p.returncode == 0
    for b in run.BENCHMARKS:
        assert b.name in p.stdout and b.script in p.stdout
    assert "kernel_tuner" in p.stdout and "--quick" in p.stdout and "--dry-run" in p.stdout


def test_an_unknown_benchmark_is_one_clear_error():
    p = cli("--only", "nope")
    assert p.returncode == 2
    assert "invalid choice: 'nope'" in p.stderr and "Traceback" not in p.stderr


def test_an_out_that_is_a_file_is_one_clear_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    p = cli("--out", str(f), "--dry-run")
    assert p.returncode == 2 and "is a file, not a folder" in p.stderr and "Traceback" not in p.stderr


def test_dry_run_prints_a_plan_line_per_benchmark_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run, "gpu_problem", lambda: None)
    monkeypatch.setattr(run, "have_module", lambda m: m != "kernel_tuner")
    out = tmp_path / "out"
    assert run.main(["--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert not out.exists()
    lines = {n: next(line for line in text.splitlines() if line.strip().startswith(n + " ")) for n in NAMES}
    assert (
        "would run: " + str(BENCH / "tuned_vs_vendor.py") + " --kernel gemm --out " + str(out) in lines["vendor_gemm"]
    )
    assert "skipped: needs kernel_tuner, not installed" in lines["throughput_vs_kernel_tuner"]


def test_a_quick_run_never_writes_over_the_committed_numbers(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run, "gpu_problem", lambda: None)
    monkeypatch.setattr(run, "have_module", lambda m: True)
    assert run.main(["--dry-run", "--quick", "--only", "runtime_overhead"]) == 0
    text = capsys.readouterr().out
    assert f"--out {run.QUICK_OUT}" in text and str(run.DEFAULT_OUT) not in text


def test_benchmarks_holds_no_log_and_fewer_than_45_files():
    # a benchmark is a script, its JSON and its CSV: 11 benchmarks, three probes, the replays' runs, one README
    try:
        files = subprocess.run(["git", "ls-files", "benchmarks"], cwd=ROOT, capture_output=True, text=True,
                               check=True, timeout=60).stdout.split()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert files, "git lists no file under benchmarks/"
    assert len(files) < 45, f"benchmarks/ has {len(files)} tracked files"
    assert not [f for f in files if f.endswith(".log") or "/logs/" in f]
