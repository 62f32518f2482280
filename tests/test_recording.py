"""autotune.record(): calls counted and timed per problem, written as a workload YAML, read back (no GPU:
a fake observer hook and a fake timer driven by a fake GPU clock)."""

from __future__ import annotations

import random

import pytest
import yaml

import autotune
from autotune import recording, runtime
from autotune.errors import SpecError
from autotune.kernels import FAMILIES

GEMM = FAMILIES["gemm"]
CONV = FAMILIES["conv2d"]


class FakeGPU:
    """A GPU clock: each fake kernel advances it by its duration; the timer reads it around the call."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.capturing = False

    def kernel(self, ms: float, result: object = None):
        def run():
            self.now_ms += ms
            return result

        return run


class FakeTimer:
    def __init__(self, gpu: FakeGPU) -> None:
        self.gpu = gpu
        self.resolved = 0

    def begin(self):
        return None if self.gpu.capturing else self.gpu.now_ms

    def end(self, token):
        return token, self.gpu.now_ms

    def elapsed_ms(self, pending):
        self.resolved += 1
        start, stop = pending
        return stop - start


@pytest.fixture
def hook(monkeypatch):
    """The runtime's observer slot, as the runtime exposes it: set_call_observer(fn | None)."""
    slot: dict[str, object] = {"fn": None, "history": []}

    def set_call_observer(fn):
        previous, slot["fn"] = slot["fn"], fn
        slot["history"].append(fn)
        return previous

    monkeypatch.setattr(recording, "_observer_setter", lambda: set_call_observer)
    return slot


def served(slot, kernel, problem, run):
    """What the runtime does for a served call: hand it to the observer if one is set."""
    fn = slot["fn"]
    return fn(kernel, problem, run) if fn is not None else run()


DECODE = GEMM.problem([1, 14336, 4096], "float16", "NT")
PREFILL = GEMM.problem([512, 4096, 4096], "bfloat16", "NT")
STEM = CONV.problem({"N": 1, "C": 3, "H": 224, "W": 224, "K": 64, "R": 7, "S": 7, "stride": 2, "pad": 3}, "float32")


def test_record_writes_counts_times_and_shares_in_first_call_order(hook, tmp_path):
    gpu = FakeGPU()
    path = tmp_path / "w.yaml"
    with autotune.record(path, timer=FakeTimer(gpu), device="fake GPU") as rec:
        assert hook["fn"] is not None
        for _ in range(3):
            assert served(hook, "conv2d", STEM, gpu.kernel(0.010, "y")) == "y"  # the call's result comes back
            served(hook, "gemm", DECODE, gpu.kernel(0.030))
        served(hook, "gemm", PREFILL, gpu.kernel(0.200))
    assert hook["fn"] is None  # the observer is removed on exit
    w = recording.read_workload(path)
    assert w == rec.workload
    assert [(p.kernel, p.dtype, p.layout, p.shape, p.calls) for p in w.problems] == [
        ("conv2d", "float32", "NCHW", "n1c3h224w224k64r7s7u2p3", 3),
        ("gemm", "float16", "NT", "1x14336x4096", 3),
        ("gemm", "bfloat16", "NT", "512x4096x4096", 1),
    ]
    assert [p.gpu_us for p in w.problems] == pytest.approx([10.0, 30.0, 200.0])
    total = 0.030 + 0.090 + 0.200
    assert [p.time_share for p in w.problems] == pytest.approx([0.030 / total, 0.090 / total, 0.200 / total], abs=1e-6)
    assert w.total_gpu_ms == pytest.approx(total)
    assert w.device == "fake GPU" and w.recorded.endswith("Z")
    for p in w.problems:  # each entry is a problem of its family in the spec's shape syntax
        assert FAMILIES[p.kernel].problem(p.shape, p.dtype, p.layout).label == p.shape


def test_the_same_calls_record_the_same_workload(hook):
    def run_model():
        gpu = FakeGPU()
        with autotune.record(timer=FakeTimer(gpu), device="x") as rec:
            for ms, problem in ((0.5, PREFILL), (0.01, DECODE), (0.02, STEM), (0.01, DECODE)):
                served(hook, "gemm" if problem is not STEM else "conv2d", problem, gpu.kernel(ms))
        return rec.workload

    a, b = run_model(), run_model()
    assert a.problems == b.problems
    assert a.to_yaml().split("problems:")[1] == b.to_yaml().split("problems:")[1]


def test_calls_during_graph_capture_are_counted_not_timed(hook):
    gpu = FakeGPU()
    with autotune.record(timer=FakeTimer(gpu), device=None) as rec:
        served(hook, "gemm", DECODE, gpu.kernel(0.04))
        gpu.capturing = True
        served(hook, "gemm", DECODE, gpu.kernel(0.04))
        served(hook, "conv2d", STEM, gpu.kernel(0.04))
    decode, stem = rec.workload.problems
    assert (decode.calls, decode.gpu_us, decode.time_share) == (2, pytest.approx(40.0), 1.0)
    assert (stem.calls, stem.gpu_us, stem.time_share) == (1, None, 0.0)


def test_nothing_timed_leaves_shares_null(hook, tmp_path):
    gpu = FakeGPU()
    gpu.capturing = True
    with autotune.record(tmp_path / "w.yaml", timer=FakeTimer(gpu), device=None) as rec:
        served(hook, "gemm", DECODE, gpu.kernel(0.04))
    assert rec.workload.problems[0].time_share is None
    assert recording.read_workload(tmp_path / "w.yaml").problems[0].gpu_us is None


def test_nested_recorders_both_see_every_call_and_the_hook_stays_until_the_last_exits(hook):
    gpu = FakeGPU()
    with autotune.record(timer=FakeTimer(gpu), device=None) as outer:
        served(hook, "gemm", DECODE, gpu.kernel(0.01))
        with autotune.record(timer=FakeTimer(gpu), device=None) as inner:
            served(hook, "gemm", DECODE, gpu.kernel(0.01))
        assert hook["fn"] is not None
        served(hook, "gemm", PREFILL, gpu.kernel(0.01))
    assert hook["history"] == [recording._dispatch, None]
    assert [p.calls for p in outer.workload.problems] == [2, 1]
    assert [p.calls for p in inner.workload.problems] == [1]
    assert recording.observer() is None


def test_the_file_is_written_even_when_the_body_raises(hook, tmp_path):
    gpu = FakeGPU()
    with pytest.raises(RuntimeError, match="model broke"):
        with autotune.record(tmp_path / "w.yaml", timer=FakeTimer(gpu), device=None):
            served(hook, "gemm", DECODE, gpu.kernel(0.01))
            raise RuntimeError("model broke")
    assert [p.calls for p in recording.read_workload(tmp_path / "w.yaml").problems] == [1]
    assert hook["fn"] is None


def test_pending_timings_are_resolved_in_batches(hook, monkeypatch):
    monkeypatch.setattr(recording, "RESOLVE_EVERY", 4)
    gpu = FakeGPU()
    timer = FakeTimer(gpu)
    with autotune.record(timer=timer, device=None) as rec:
        for _ in range(10):
            served(hook, "gemm", DECODE, gpu.kernel(0.002))
        assert timer.resolved == 8  # two batches of 4 resolved while recording
    assert rec.workload.problems[0].calls == 10 and rec.workload.problems[0].gpu_us == pytest.approx(2.0)


def test_random_call_sequences_add_up(hook):
    problems = [("gemm", DECODE), ("gemm", PREFILL), ("conv2d", STEM)]
    for seed in range(20):
        rng = random.Random(seed)
        gpu = FakeGPU()
        calls = {p.label: 0 for _, p in problems}
        ms = {p.label: rng.uniform(0.001, 1.0) for _, p in problems}
        with autotune.record(timer=FakeTimer(gpu), device=None) as rec:
            for _ in range(rng.randint(1, 60)):
                kernel, p = rng.choice(problems)
                calls[p.label] += 1
                served(hook, kernel, p, gpu.kernel(ms[p.label]))
        got = {p.shape: p for p in rec.workload.problems}
        assert {k: p.calls for k, p in got.items()} == {k: n for k, n in calls.items() if n}
        total = sum(ms[k] * n for k, n in calls.items())
        for k, p in got.items():
            assert p.time_share == pytest.approx(ms[k] * calls[k] / total, abs=2e-6)
        assert sum(p.time_share for p in got.values()) == pytest.approx(1.0, abs=1e-5)


def test_an_observer_set_before_recording_still_sees_every_call_and_is_put_back(hook):
    seen = []

    def earlier(kernel, problem, run):
        seen.append(problem.label)
        return run()

    hook["fn"] = earlier
    gpu = FakeGPU()
    with autotune.record(timer=FakeTimer(gpu), device=None) as rec:
        assert served(hook, "gemm", DECODE, gpu.kernel(0.01, "c")) == "c"
    assert seen == [DECODE.label] and hook["fn"] is earlier
    assert [p.calls for p in rec.workload.problems] == [1]


def test_the_setter_is_found_in_this_runtime():
    setter = recording._observer_setter()
    assert setter is None or callable(setter)
    if hasattr(runtime, "set_call_observer"):
        assert setter is not None


def test_without_a_runtime_observer_only_reported_calls_are_recorded(monkeypatch, caplog):
    monkeypatch.setattr(recording, "_observer_setter", lambda: None)
    monkeypatch.setattr(recording, "_warned", [])
    gpu = FakeGPU()
    with autotune.record(timer=FakeTimer(gpu), device=None) as rec:
        observe = recording.observer()
        assert observe is not None
        observe("gemm", DECODE, gpu.kernel(0.01))  # as autotune.torch reports a vendor call
    assert [p.calls for p in rec.workload.problems] == [1]
    assert "no set_call_observer" in caplog.text


GOOD = {"kernel": "gemm", "dtype": "float16", "layout": "NT", "shape": "1x4096x4096", "calls": 2, "gpu_us": 15.0,
        "time_share": 1.0}  # fmt: skip


@pytest.mark.parametrize(
    "doc, where, says",
    [
        ({"problems": []}, "workload", "workload: 1"),
        ({"workload": 1, "problems": {"a": 1}}, "problems", "list"),
        ({"workload": 1, "problems": [{**GOOD, "kernel": "fft"}]}, "problems[0].kernel", "unknown kernel family"),
        ({"workload": 1, "problems": [{**GOOD, "shape": "1x0x4096"}]}, "problems[0]", "1x0x4096"),
        ({"workload": 1, "problems": [{**GOOD, "layout": "XY"}]}, "problems[0]", "layout"),
        ({"workload": 1, "problems": [{**GOOD, "calls": 0}]}, "problems[0].calls", "positive integer"),
        ({"workload": 1, "problems": [{**GOOD, "time_share": 1.5}]}, "problems[0].time_share", "from 0 to 1"),
        ({"workload": 1, "problems": [GOOD, {**GOOD, "extra": 1}]}, "problems[1]", "exactly the keys"),
    ],
)
def test_bad_workload_files_name_the_entry(tmp_path, doc, where, says):
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError) as err:
        recording.read_workload(path)
    assert err.value.key == where and says in str(err.value)


def test_unreadable_workload_files(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        recording.read_workload(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("problems: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        recording.read_workload(tmp_path / "bad.yaml")
