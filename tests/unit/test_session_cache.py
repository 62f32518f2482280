"""A workload run through a real TuningSession with a fake GPU worker and compiler: each slice spends its time on
trials. The space is enumerated and the vendor timed once per problem per session; the finalists are re-timed
once per problem, at the end of the run, and only then is a winner stored."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.build.compile_pool import CompilePool
from autotune.results.store import read, tuned_file
from autotune.tune.search import FINAL_PLAN
from autotune.tune.session import RunOptions, SessionCache, TuningSession
from autotune.tune.tune_workload import FINAL_MINUTES, run_workload
from autotune.tune.workload import parse_workload
from tests.fakes import NAIVE_SPEC, FakeEvaluator, fake_compile

GPU = SimpleNamespace(key="test-gpu-sm90", arch="sm_90", name="Test GPU", multiprocessors=132, driver="0", runtime="0",
                      max_shared_per_block=227 * 1024, registers_per_block=65536, registers_per_sm=65536,
                      shared_per_sm=228 * 1024, threads_per_sm=2048, memory_bytes=0)  # fmt: skip


class Worker(FakeEvaluator):
    """The fake GPU worker, recording each vendor timing's plan and whether each measurement is a final one."""

    def __init__(self):
        super().__init__(delay=0.08)  # a slice of 0.6 s evaluates a handful of the 19 configurations, never all
        self.vendor_plans, self.measures, self.searched, self.final = [], [], [], None

    def vendor(self, kernel, problem, plan):
        self.vendor_plans.append((problem.label, plan == FINAL_PLAN))
        return super().vendor(kernel, problem, plan)

    def measure(self, c, settings):
        self.measures.append((self.final, settings.timing == FINAL_PLAN))
        if not self.final:
            self.searched.append((c.candidate.problem.label, c.candidate.config.key))
        return super().measure(c, settings)


class CpuSession(TuningSession):
    def __init__(self, options, worker, compiler):  # no GPU, no NVRTC: the fakes stand in
        self.options, self.gpu, self._nvrtc, self._storages = options, GPU, lambda: "0", {}
        self.cache, self.worker, self.compiler = SessionCache(), worker, compiler

    def tune(self, spec, problem, trials, minutes, progress, final=True):
        self.worker.final = final
        return super().tune(spec, problem, trials, minutes, progress, final)


@pytest.fixture
def workload(tmp_path):
    spec = tmp_path / "naive.yaml"
    spec.write_text(NAIVE_SPEC)
    doc = {"workload": "two-gemms", "spaces": {"gemm/float32": str(spec)}, "problems": [
        {"kernel": "gemm", "dtype": "float32", "layout": "NN", "shape": "64x64x64", "time_share": 0.7},
        {"kernel": "gemm", "dtype": "float32", "layout": "NN", "shape": "96x80x72", "time_share": 0.3}]}  # fmt: skip
    return parse_workload(doc, str(tmp_path / "workload.yaml"))


def run(tmp_path: Path, workload, slices: int) -> tuple[CpuSession, Worker]:
    options = RunOptions(tuned_dir=tmp_path / "tuned", runs_dir=tmp_path / "runs", jobs=1)
    worker = Worker()
    with CompilePool("sm_90", 1, fake_compile) as pool:
        session = CpuSession(options, worker, pool)
        size = 0.01  # 0.6 s per slice
        run_workload(workload, 2 * FINAL_MINUTES + slices * size, session, slice_minutes=size)
    return session, worker


def test_slices_enumerate_the_space_and_time_the_vendor_once_per_problem(tmp_path, workload, capsys):
    session, worker = run(tmp_path, workload, slices=6)
    err = capsys.readouterr().err
    sliced = err.count("  slice ")
    assert sliced >= 3  # both problems, and at least one got a second slice
    assert session.cache.counts == {"feasible": 2, "vendor": 4}  # per problem: the search's plan, the final one
    assert sorted(worker.vendor_plans) == [("64x64x64", False), ("64x64x64", True), ("96x80x72", False),
                                           ("96x80x72", True)]  # fmt: skip
    in_slices = [timing for final, timing in worker.measures if final is False]
    assert in_slices and not any(in_slices)  # slices only search: no finalist is re-timed there
    assert any(timing for final, timing in worker.measures if final)  # the finalize re-times them
    entries = read(tuned_file(tmp_path / "tuned", GPU.key, "gemm"))["entries"]
    assert set(entries) == {"float32/NN/64x64x64", "float32/NN/96x80x72"}
    assert all(e["vendor_median_ms"] == 2.0 and e["verified"] for e in entries.values())
    assert err.count("final: ") == 2


def test_a_second_run_resumes_the_studies(tmp_path, workload, capsys):
    """Nothing measured is lost: the next run's slices go on from the studies, never re-measuring a configuration."""
    _, first = run(tmp_path, workload, slices=2)
    _, second = run(tmp_path, workload, slices=2)
    assert first.searched and second.searched
    assert not set(first.searched) & set(second.searched)
    assert capsys.readouterr().err.count("final: ") == 4


def test_the_feasible_list_checked_in_parts_is_the_same_list():
    """The session checks a space's parts on its compile processes; the list and its order do not change."""
    from autotune.kernels import FAMILIES
    from autotune.measure.evaluate import Settings
    from autotune.tune.search_state import feasible_configs, feasible_in_parallel
    from autotune.tune.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "configs" / "gemm_simt.yaml")  # 21,760 feasible
    problem = FAMILIES["gemm"].problem([1000, 1000, 1000], "float32", "NN")
    settings = Settings(arch="sm_80", tolerance=1e-4, max_shared_bytes=163 * 1024)
    serial = feasible_configs(spec, problem, settings)
    calls = []
    with CompilePool("sm_80", jobs=2) as pool:

        def mapped(fn, parts):  # the parts on the pool's processes, counted: one run checks both
            calls.append(len(parts))
            return pool.map(fn, parts)

        assert feasible_in_parallel(spec, problem, settings, mapped, 4) == serial
    assert calls and calls[0] >= 32


def _tune(tmp_path: Path, spec_text: str, name: str) -> tuple[str, dict, Worker]:
    """One problem (64x64x64) of a naive spec tuned to the end through a CPU session; what it said and stored."""
    from autotune.tune.spec import load_spec

    path = tmp_path / f"{name}.yaml"
    path.write_text(spec_text)
    spec = load_spec(path)
    options = RunOptions(tuned_dir=tmp_path / "tuned", runs_dir=tmp_path / "runs", jobs=1)
    worker = Worker()
    worker.delay = 0.0
    with CompilePool("sm_90", 1, fake_compile) as pool:
        result = CpuSession(options, worker, pool).tune(spec, spec.problems[0], 40, None, lambda done, note: None)
    entry = read(tuned_file(tmp_path / "tuned", GPU.key, "gemm"))["entries"]["float32/NN/64x64x64"]
    return result.stored, entry, worker


def _stale(tmp_path: Path, ms: float) -> None:
    """Give the stored entry a time from another run (as a cooler or hotter card would have measured it), and the
    installed template's hash (the fakes store none), so that it counts as current rather than outdated."""
    import json

    from autotune.build.templates import template_hash

    path = tuned_file(tmp_path / "tuned", GPU.key, "gemm")
    doc = json.loads(path.read_text())
    doc["entries"]["float32/NN/64x64x64"].update(median_ms=ms, template_hash=template_hash("gemm", "naive"))
    path.write_text(json.dumps(doc, indent=1) + "\n")


def test_a_new_winner_is_weighed_against_the_stored_kernel_timed_beside_it(tmp_path, capsys):
    """The stored entry's own time came from another run; the store decides on both kernels re-timed side by side
    in this one (fake times: 1 + |BX - 32| / 32 + |BY - 8| / 8). A stored kernel with a flattering old time is
    replaced when it is slower beside the new winner, and one with an unflattering old time is kept when faster."""
    one = NAIVE_SPEC.replace("BX: [4, 8, 16, 32, 64]", "BX: [32]").replace("BY: [1, 2, 4, 8, 16]", "BY: [4]")
    stored, first, _ = _tune(tmp_path, one, "slow-kernel")
    assert stored == "yes" and first["params"] == {"BX": 32, "BY": 4} and first["median_ms"] == 1.5
    _stale(tmp_path, 0.5)  # its stored time beats anything this space holds
    stored, entry, worker = _tune(tmp_path, NAIVE_SPEC.replace("trials: 8", "trials: 40"), "whole-space")
    assert stored == "yes" and entry["params"] == {"BX": 32, "BY": 8} and entry["median_ms"] == 1.0
    assert "beside the stored gemm_naive" in capsys.readouterr().err
    new, old = "BX=32,BY=8", "BX=32,BY=4"  # after the finalists: three rounds side by side, the order reversed
    assert worker.calls[-6:] == [new, old, old, new, new, old]

    _stale(tmp_path, 9.0)  # now the best kernel's stored time is far worse than it runs
    stored, entry, _ = _tune(tmp_path, NAIVE_SPEC.replace("BY: [1, 2, 4, 8, 16]", "BY: [1, 2]"), "without-by8")
    assert stored == "no (kept faster)" and entry["params"] == {"BX": 32, "BY": 8}
