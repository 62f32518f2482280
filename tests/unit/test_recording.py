"""autotune.record(): calls counted and timed per problem, written as a workload YAML, read back (no GPU:
a fake observer hook and a fake timer driven by a fake GPU clock)."""

from __future__ import annotations

import random

import pytest
import yaml

import autotune
from autotune.kernels import FAMILIES
from autotune.serve import recording, runtime

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


def reread(path):
    """The written file as data, each problem checked with its family's parser (what a tuning spec uses)."""
    doc = yaml.safe_load(path.read_text())
    assert set(doc) == {"workload", "gpu", "recorded", "versions", "problems"}
    for p in doc["problems"]:
        assert FAMILIES[p["kernel"]].problem(p["shape"], p["dtype"], p["layout"]).label == p["shape"]
    return doc


def served(slot, kernel, problem, run):
    """What the runtime does for a served call: hand it to the observer if one is set."""
    fn = slot["fn"]
    return fn(kernel, problem, run) if fn is not None else run()


DECODE = GEMM.problem([1, 14336, 4096], "float16", "NT")
PREFILL = GEMM.problem([512, 4096, 4096], "bfloat16", "NT")
STEM = CONV.problem({"N": 1, "C": 3, "H": 224, "W": 224, "K": 64, "R": 7, "S": 7, "stride": 2, "pad": 3}, "float32")


def test_record_writes_counts_times_and_shares_in_first_call_order(hook, tmp_path):
    gpu = FakeGPU()
    path = tmp_path / "resnet-b1.yaml"
    with autotune.record(path, timer=FakeTimer(gpu), gpu="fake GPU") as rec:
        assert hook["fn"] is not None
        for _ in range(3):
            assert served(hook, "conv2d", STEM, gpu.kernel(0.010, "y")) == "y"  # the call's result comes back
            served(hook, "gemm", DECODE, gpu.kernel(0.030))
        served(hook, "gemm", PREFILL, gpu.kernel(0.200))
    assert hook["fn"] is None  # the observer is removed on exit
    doc = reread(path)
    assert doc["workload"] == "resnet-b1" and doc["gpu"] == "fake GPU" and doc["recorded"].endswith("Z")
    assert doc["problems"] == [p.as_dict() for p in rec.workload.problems]
    assert [(p["kernel"], p["dtype"], p["layout"], p["shape"], p["calls"]) for p in doc["problems"]] == [
        ("conv2d", "float32", "NCHW", "n1c3h224w224k64r7s7u2p3", 3),
        ("gemm", "float16", "NT", "1x14336x4096", 3),
        ("gemm", "bfloat16", "NT", "512x4096x4096", 1),
    ]
    assert [p["ms_per_call"] for p in doc["problems"]] == pytest.approx([0.010, 0.030, 0.200])
    total = 0.030 + 0.090 + 0.200
    shares = [p["time_share"] for p in doc["problems"]]
    assert shares == pytest.approx([0.030 / total, 0.090 / total, 0.200 / total], abs=1e-6)


def test_autotune_run_reads_what_record_writes(hook, tmp_path):
    workload = pytest.importorskip("autotune.tune.workload")  # the consumer: autotune run workload.yaml
    gpu = FakeGPU()
    path = tmp_path / "w.yaml"
    with autotune.record(path, name="llama", timer=FakeTimer(gpu), gpu=None):
        served(hook, "gemm", DECODE, gpu.kernel(0.03))
        served(hook, "conv2d", STEM, gpu.kernel(0.01))
    w = workload.load_workload(path)
    assert w.name == "llama" and [t.problem for t in w.tasks] == [DECODE, STEM]
    assert [t.calls for t in w.tasks] == [1, 1] and [t.time_share for t in w.tasks] == pytest.approx([0.75, 0.25])


def test_the_same_calls_record_the_same_workload(hook):
    def run_model():
        gpu = FakeGPU()
        with autotune.record(timer=FakeTimer(gpu), gpu="x") as rec:
            for ms, problem in ((0.5, PREFILL), (0.01, DECODE), (0.02, STEM), (0.01, DECODE)):
                served(hook, "gemm" if problem is not STEM else "conv2d", problem, gpu.kernel(ms))
        return rec.workload

    a, b = run_model(), run_model()
    assert a.problems == b.problems
    assert a.to_yaml().split("problems:")[1] == b.to_yaml().split("problems:")[1]


def test_calls_during_graph_capture_are_counted_not_timed(hook):
    gpu = FakeGPU()
    with autotune.record(timer=FakeTimer(gpu), gpu=None) as rec:
        served(hook, "gemm", DECODE, gpu.kernel(0.04))
        gpu.capturing = True
        served(hook, "gemm", DECODE, gpu.kernel(0.04))
        served(hook, "conv2d", STEM, gpu.kernel(0.04))
    decode, stem = rec.workload.problems
    assert (decode.calls, decode.ms_per_call, decode.time_share) == (2, pytest.approx(0.04), 1.0)
    assert (stem.calls, stem.ms_per_call, stem.time_share) == (1, None, 0.0)


def test_nothing_timed_leaves_shares_zero_and_times_null(hook, tmp_path):
    gpu = FakeGPU()
    gpu.capturing = True
    with autotune.record(tmp_path / "w.yaml", timer=FakeTimer(gpu), gpu=None):
        served(hook, "gemm", DECODE, gpu.kernel(0.04))
    (p,) = reread(tmp_path / "w.yaml")["problems"]
    assert (p["calls"], p["ms_per_call"], p["time_share"]) == (1, None, 0.0)


def test_an_empty_recording_is_written_and_warned_about(hook, tmp_path, caplog):
    with autotune.record(tmp_path / "w.yaml", timer=FakeTimer(FakeGPU()), gpu=None):
        pass
    assert reread(tmp_path / "w.yaml")["problems"] == [] and "no call was served" in caplog.text


def test_nested_recorders_both_see_every_call_and_the_hook_stays_until_the_last_exits(hook):
    gpu = FakeGPU()
    with autotune.record(timer=FakeTimer(gpu), gpu=None) as outer:
        served(hook, "gemm", DECODE, gpu.kernel(0.01))
        with autotune.record(timer=FakeTimer(gpu), gpu=None) as inner:
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
        with autotune.record(tmp_path / "w.yaml", timer=FakeTimer(gpu), gpu=None):
            served(hook, "gemm", DECODE, gpu.kernel(0.01))
            raise RuntimeError("model broke")
    assert [p["calls"] for p in reread(tmp_path / "w.yaml")["problems"]] == [1]
    assert hook["fn"] is None


def test_pending_timings_are_resolved_in_batches(hook, monkeypatch):
    monkeypatch.setattr(recording, "RESOLVE_EVERY", 4)
    gpu = FakeGPU()
    timer = FakeTimer(gpu)
    with autotune.record(timer=timer, gpu=None) as rec:
        for _ in range(10):
            served(hook, "gemm", DECODE, gpu.kernel(0.002))
        assert timer.resolved == 8  # two batches of 4 resolved while recording
    assert rec.workload.problems[0].calls == 10 and rec.workload.problems[0].ms_per_call == pytest.approx(0.002)


def test_random_call_sequences_add_up(hook):
    problems = [("gemm", DECODE), ("gemm", PREFILL), ("conv2d", STEM)]
    for seed in range(20):
        rng = random.Random(seed)
        gpu = FakeGPU()
        calls = {p.label: 0 for _, p in problems}
        ms = {p.label: rng.uniform(0.001, 1.0) for _, p in problems}
        with autotune.record(timer=FakeTimer(gpu), gpu=None) as rec:
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
    with autotune.record(timer=FakeTimer(gpu), gpu=None) as rec:
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
    with autotune.record(timer=FakeTimer(gpu), gpu=None) as rec:
        observe = recording.observer()
        assert observe is not None
        observe("gemm", DECODE, gpu.kernel(0.01))  # as autotune.torch reports a vendor call
    assert [p.calls for p in rec.workload.problems] == [1]
    assert "no set_call_observer" in caplog.text
