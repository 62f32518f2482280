"""Workload files, the scheduler's allocation and the final table, with fake tuning slices."""

from __future__ import annotations

import random

import pytest

from autotune.core.errors import SpecError
from autotune.kernels import FAMILIES
from autotune.tune.workload import (
    SliceResult,
    Task,
    final_rows,
    is_workload,
    load_workload,
    nearest_entries,
    parse_workload,
    schedule,
    warm_starts,
)

CONV = {"N": 1, "C": 64, "H": 56, "W": 56, "K": 256, "R": 1, "S": 1, "stride": 1, "pad": 0}


def _doc(**extra):
    return {
        "workload": "toy",
        "problems": [
            {"kernel": "gemm", "dtype": "float16", "layout": "NT", "shape": "16x4096x4096", "calls": 32,
             "time_share": 3.0},
            {"kernel": "conv2d", "dtype": "float32", "layout": "NCHW", "shape": CONV, "calls": 3, "time_share": 1.0},
        ],
        **extra,
    }  # fmt: skip


def test_parse_normalises_shares_and_groups():
    w = parse_workload(_doc())
    assert [t.time_share for t in w.tasks] == [0.75, 0.25]
    assert w.tasks[1].problem.dims[-1] == 0  # padding 0 is a valid problem
    assert sorted(w.groups()) == [("conv2d", "float32", "NCHW"), ("gemm", "float16", "NT")]
    assert is_workload(_doc()) and not is_workload({"kernel": "gemm", "problems": []})


def test_load_from_file(tmp_path):
    import yaml

    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(_doc(spaces={"gemm/float16": "configs/gemm_fp16.yaml"})))
    w = load_workload(path)
    assert w.name == "toy" and w.spaces == {"gemm/float16": "configs/gemm_fp16.yaml"}


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d["problems"][0].update(kernel="fft"), "problems[0].kernel"),
        (lambda d: d["problems"][0].update(shape="0x4x4"), "problems[0].shape"),
        (lambda d: d["problems"][1].update(calls=0), "problems[1].calls"),
        (lambda d: d["problems"][1].update(time_share=float("nan")), "problems[1].time_share"),
        (lambda d: d["problems"][1].update(colour="red"), "problems[1].colour"),
        (lambda d: d["problems"].append(dict(d["problems"][0])), "problems[2]"),
        (lambda d: d.update(problems=[]), "problems"),
        (lambda d: d.update(spaces=["x"]), "spaces"),
    ],
)
def test_bad_workloads_name_the_key(mutate, key):
    doc = _doc()
    mutate(doc)
    with pytest.raises(SpecError) as err:
        parse_workload(doc, "w.yaml")
    assert f"w.yaml: {key}:" in str(err.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        load_workload(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("problems: [\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_workload(bad)


def _tasks(shares):
    family = FAMILIES["gemm"]
    return [Task("gemm", family.problem(f"{16 * (i + 1)}x4096x4096", "float16", "NN"), 1, s, None)
            for i, s in enumerate(shares)]  # fmt: skip


def test_every_task_gets_a_slice_first_then_the_largest_expected_saving():
    tasks = _tasks([0.6, 0.3, 0.1])
    # task 0 starts 2x slower than the vendor and improves; the others already beat the vendor
    curves = {0: iter([2.0, 1.6, 1.3, 1.1, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]), 1: iter([0.9] * 10), 2: iter([0.8] * 10)}
    order = []

    def tune(task, minutes):
        i = tasks.index(task)
        order.append(i)
        return SliceResult(next(curves[i]), 1.0)

    states = schedule(tasks, minutes=8.0, tune=tune, slice_minutes=1.0)
    assert order[:3] == [0, 1, 2]  # warm-up round, largest share first
    assert sum(s.minutes for s in states) == pytest.approx(8.0)
    assert states[0].slices > states[1].slices >= states[2].slices
    assert states[0].best_ms == 1.0 and states[0].history[0] == 2.0


def test_budget_smaller_than_one_slice_each_leaves_the_smallest_share_untuned():
    tasks = _tasks([0.5, 0.4, 0.1])
    states = schedule(tasks, minutes=2.0, tune=lambda t, m: SliceResult(1.0, 1.0), slice_minutes=1.0)
    assert [s.slices for s in states] == [1, 1, 0]


def test_schedule_property_spends_exactly_the_budget_and_favours_share():
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(1, 6)
        shares = [rng.random() + 0.01 for _ in range(n)]
        tasks = _tasks(shares)
        gaps = {id(t): rng.uniform(0.5, 3.0) for t in tasks}
        minutes = rng.uniform(0.5, 10.0)
        states = schedule(tasks, minutes, lambda t, m, g=gaps: SliceResult(g[id(t)], 1.0), slice_minutes=0.25)
        assert sum(s.minutes for s in states) == pytest.approx(minutes, abs=0.13)
        assert all(s.minutes >= 0 for s in states)


def test_nothing_verified_counts_as_a_full_gap():
    tasks = _tasks([0.5, 0.5])
    results = {0: SliceResult(None, 1.0), 1: SliceResult(0.5, 1.0)}
    states = schedule(tasks, 6.0, lambda t, m: results[tasks.index(t)], slice_minutes=1.0)
    assert states[0].slices > states[1].slices


def test_nearest_entries_and_warm_starts():
    task = _tasks([1.0])[0]
    entries = {
        "float16/NN/4096x4096x4096": {"verified": True, "template": "mma", "params": {"BM": 128}},
        "float16/NN/32x4096x4096": {"verified": True, "template": "skinny", "params": {"VEC": 8}},
        "float16/NN/16x4096x4096x": {"verified": True},  # bad key: skipped
        "float32/NN/16x4096x4096": {"verified": True, "template": "simt", "params": {}},  # other dtype
        "float16/NN/64x4096x4096": {"verified": False, "template": "mma", "params": {}},  # not verified
    }
    near = nearest_entries(task, entries, k=2)
    assert [e["template"] for e in near] == ["skinny", "mma"]
    assert warm_starts("auto", near) == [{"TEMPLATE": "skinny", "VEC": 8}, {"TEMPLATE": "mma", "BM": 128}]
    assert warm_starts("mma", near) == [{"BM": 128}]


def test_final_rows_weight_by_calls():
    tasks = _tasks([0.5, 0.5])
    tasks = [Task(t.kernel, t.problem, c, t.time_share, None) for t, c in zip(tasks, (10, 1), strict=True)]
    results = {0: SliceResult(0.5, 1.0), 1: SliceResult(4.0, 2.0)}
    states = schedule(tasks, 2.0, lambda t, m: results[tasks.index(t)], slice_minutes=1.0)
    rows = final_rows(states)
    assert rows[0]["gain"] == pytest.approx(2.0) and rows[1]["gain"] == pytest.approx(1.0)  # vendor kept
    model = rows[-1]
    assert model["vendor_ms"] == pytest.approx(12.0) and model["served_ms"] == pytest.approx(7.0)
    assert model["gain"] == pytest.approx(12.0 / 7.0)


def test_the_budget_pays_each_slices_real_wall_time():
    """A slice that overran (its space, the vendor and the final re-timing take time too) costs what it took."""
    tasks = _tasks([0.5, 0.5])
    states = schedule(tasks, 4.0, lambda t, m: SliceResult(1.0, 1.0, minutes=2 * m), slice_minutes=1.0)
    assert sum(s.slices for s in states) == 2 and sum(s.minutes for s in states) == pytest.approx(4.0)
