"""Planning a workload's specs from the installed configs, and a whole workload run with a fake session."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from autotune.core.errors import AutotuneError
from autotune.tune.tune_workload import FINAL_MINUTES, format_table, plan, run_workload
from autotune.tune.workload import parse_workload

CONV = {"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "stride": 1, "pad": 1}


def _workload(*problems, spaces=None):
    return parse_workload({"workload": "toy", "problems": list(problems), **({"spaces": spaces} if spaces else {})},
                          "runs/toy.yaml")  # fmt: skip


def test_plan_picks_a_space_per_problem_and_warm_starts_from_stored_winners():
    w = _workload(
        {"kernel": "gemm", "dtype": "float16", "layout": "NN", "shape": "512x4096x4096", "time_share": 0.7},
        {"kernel": "gemm", "dtype": "float32", "layout": "NT", "shape": "16x4096x4096", "time_share": 0.2},
        {"kernel": "gemm", "dtype": "tfloat32", "layout": "NN", "shape": "64x64x64", "time_share": 0.1},
    )
    stored = {
        "float16/NN/4096x4096x4096": {"verified": True, "template": "nonexistent", "params": {"X": 1}},
    }
    p = plan(w, lambda kernel: stored)
    fp16, fp32, tf32 = w.tasks
    assert p.specs[fp16].template == "auto" and p.specs[fp16].problems[0].label == "512x4096x4096"
    assert p.specs[fp16].start_from == ()  # a winner that is not a configuration of the space is not a start
    assert p.specs[fp16].objectives == ("time",)
    decode = p.specs[fp32]  # nn.Linear's layout: the decode space, W read in place
    templates = [v for param in decode.space.params if param.name == "TEMPLATE" for v in param.values]
    assert "skinny_nt" in templates and decode.problems[0].layout == "NT"
    assert "no default space" in p.skipped[tf32]  # nothing to tune it with: the vendor serves it


def test_plan_uses_a_stored_winner_that_fits_as_a_start_point():
    from autotune.tune.spec import load_spec

    base = load_spec("configs/gemm.yaml")
    start = base.start_from[0].as_dict() if base.start_from else next(iter(base.space.enumerate())).as_dict()
    w = _workload({"kernel": "gemm", "dtype": "float32", "layout": "NN", "shape": "1000x1000x1000", "time_share": 1})
    stored = {"float32/NN/1024x1024x1024": {"verified": True, "template": "simt", "params": start}}
    spec = plan(w, lambda kernel: stored).specs[w.tasks[0]]
    assert [c.as_dict() for c in spec.start_from] == [start]


def test_a_stored_winner_that_predates_a_parameter_starts_with_its_template_default():
    """A wgmma winner stored before SNAKE (and EPI_BOXES, PINGPONG, ...) existed ran with their defaults: it is a
    start point of the fp16 space, those parameters filled in; one with a value the space lacks is not."""
    old = {"BM": 128, "BN": 256, "CONSUMERS": 2, "STAGES": 3, "RASTER": 8, "CLUSTER_M": 1, "TMA_STORE": True}
    w = _workload({"kernel": "gemm", "dtype": "float16", "layout": "NN", "shape": "8000x8000x8000", "time_share": 1})
    stored = {"float16/NN/8192x8192x8192": {"verified": True, "template": "wgmma", "params": old}}
    (start,) = plan(w, lambda kernel: stored).specs[w.tasks[0]].start_from
    assert start.as_dict() == {"TEMPLATE": "wgmma", **old, "SPLIT": 1, "EPI_BOXES": 0, "PINGPONG": False,
                               "L2_PROMOTION": 256, "SWAP_AB": False, "SNAKE": False}  # fmt: skip
    stored["float16/NN/8192x8192x8192"]["params"] = dict(old, RASTER=5)  # not among the space's RASTER values
    assert plan(w, lambda kernel: stored).specs[w.tasks[0]].start_from == ()


def test_named_space_that_does_not_exist_skips_with_its_reason():
    w = _workload({"kernel": "conv2d", "dtype": "float32", "shape": CONV, "time_share": 1},
                  spaces={"conv2d/float32": "configs/nope.yaml"})  # fmt: skip
    p = plan(w, lambda kernel: {})
    assert "nope.yaml" in p.skipped[w.tasks[0]]


@dataclass
class FakeSession:
    """``times``: label -> (best ms of a slice, vendor ms); the final re-timing finds ``final`` (default: the
    same). ``calls``: (label, trials, final) per tune()."""

    times: dict
    final: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)

    def tuned_path(self, kernel):
        from pathlib import Path

        return Path("/nonexistent/tuned.json")

    def tune(self, spec, problem, trials, minutes, progress, final=True):
        progress(1, "")
        self.calls.append((problem.label, trials, final))
        best, vendor = (self.final if final else {}).get(problem.label) or self.times[problem.label]
        outcome = SimpleNamespace(stopped="time budget reached")
        return SimpleNamespace(outcome=outcome, best_ms=best, vendor_ms=vendor, stored="yes" if final else "not yet")


def test_run_workload_spends_the_budget_and_prints_the_model_gain(capsys):
    w = _workload(
        {"kernel": "gemm", "dtype": "float16", "layout": "NN", "shape": "512x4096x4096", "calls": 2, "time_share": 0.8},
        {"kernel": "gemm", "dtype": "float16", "layout": "NN", "shape": "2048x4096x4096", "time_share": 0.2},
    )
    session = FakeSession({"512x4096x4096": (0.1, 0.2), "2048x4096x4096": (0.5, 0.4)})
    minutes, size = 2.0 + 2 * FINAL_MINUTES, 0.5  # four slices, and each problem's final re-timing
    assert run_workload(w, minutes=minutes, session=session, slice_minutes=size) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert lines[0].split()[0] == "problem" and "model (2 of 2 problems measured)" in lines[-1]
    # model: vendor 2*0.2 + 0.4 = 0.8 ms; served 2*0.1 + 0.4 = 0.6 ms
    assert lines[-1].split()[-1] == f"{0.8 / 0.6:.4g}"
    assert "slice 4" in out.err and "slice 5" not in out.err
    slices = [c for c in session.calls if not c[2]]
    assert len(slices) == 4 and all(trials is None for _, trials, _ in slices)
    # each problem re-timed once, at the end, with no new trial
    assert session.calls[4:] == [("512x4096x4096", 0, True), ("2048x4096x4096", 0, True)]


def test_the_final_table_shows_the_re_timed_numbers(capsys):
    w = _workload({"kernel": "gemm", "dtype": "float16", "layout": "NN", "shape": "512x4096x4096", "time_share": 1})
    session = FakeSession({"512x4096x4096": (0.1, 0.2)}, final={"512x4096x4096": (0.15, 0.2)})
    assert run_workload(w, minutes=1.0, session=session, slice_minutes=0.5) == 0
    out = capsys.readouterr()
    assert out.out.strip().splitlines()[-1].split()[-1] == f"{0.2 / 0.15:.4g}"
    assert "re-timed" in out.err


def test_an_interrupted_run_still_re_times_and_stores_what_its_slices_found(capsys):
    class Interrupted(FakeSession):
        def tune(self, spec, problem, trials, minutes, progress, final=True):
            if not final and len(self.calls) == 2:
                raise KeyboardInterrupt
            return super().tune(spec, problem, trials, minutes, progress, final)

    w = _workload(
        {"kernel": "gemm", "dtype": "float16", "layout": "NN", "shape": "512x4096x4096", "time_share": 0.8},
        {"kernel": "gemm", "dtype": "float16", "layout": "NN", "shape": "2048x4096x4096", "time_share": 0.2},
    )
    session = Interrupted({"512x4096x4096": (0.1, 0.2), "2048x4096x4096": (0.5, 0.4)})
    with pytest.raises(KeyboardInterrupt):
        run_workload(w, minutes=5.0, session=session, slice_minutes=0.5)
    assert session.calls[-2:] == [("512x4096x4096", 0, True), ("2048x4096x4096", 0, True)]


def test_run_workload_with_nothing_tunable_is_one_sentence():
    w = _workload({"kernel": "gemm", "dtype": "tfloat32", "layout": "NN", "shape": "64x64x64", "time_share": 1})
    with pytest.raises(AutotuneError, match="no problem of the workload can be tuned"):
        run_workload(w, minutes=1.0, session=FakeSession({}))


def test_format_table_aligns_columns():
    text = format_table([{"problem": "a", "calls": 1, "share": 0.5, "minutes": 1.0, "vendor_ms": 2.0,
                          "ours_ms": None, "served_ms": 2.0, "gain": 1.0}])  # fmt: skip
    head, row = text.splitlines()
    assert len(head) == len(row) and row.split()[5] == "-"


def test_the_run_command_recognises_a_workload_and_refuses_per_shape_flags(tmp_path, capsys):
    from autotune.cli import main

    path = tmp_path / "w.yaml"
    path.write_text("workload: w\nproblems:\n  - {kernel: gemm, dtype: float16, shape: 64x64x64, time_share: 1}\n")
    assert main(["run", str(path), "--trials", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "autotune: error: --trials does not apply to a workload; its budget is --minutes for the whole model"
    ]
    path.write_text("workload: w\nproblems:\n  - {kernel: gemm, dtype: float16, shape: 0x64x64, time_share: 1}\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "problems[0].shape" in err[0] and "Traceback" not in err[0]
