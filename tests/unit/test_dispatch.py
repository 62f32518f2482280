"""Dispatch decisions and fallbacks with fake timings, the online-choice cache, the switch, and the call
observer: all on the CPU (fake runners, fake launchers, an injected clock)."""

from __future__ import annotations

import json
import logging
import warnings
from types import SimpleNamespace

import pytest

from autotune.core import hooks
from autotune.core.errors import AutotuneError
from autotune.kernels import FAMILIES
from autotune.kernels.base import Launch
from autotune.measure.vendor import VendorLauncher
from autotune.serve import choices, dispatch, online, runtime, serving

GEMM, CONV = FAMILIES["gemm"], FAMILIES["conv2d"]
P = GEMM.problem("264x4096x4096", "float16")
SIMT = dict(BM=64, BN=64, BK=16, WM=16, WN=64, WNITER=1, TM=4, TN=4, VEC=4, PAD=4, DBUF=True)
WMMA = GEMM.default_config("float16")[1]


def exact(ours_ms, vendor_ms=None):
    e = {"median_ms": ours_ms, "vendor": "cuBLAS"}
    if vendor_ms is not None:
        e["vendor_median_ms"] = vendor_ms
    return runtime.Choice("wmma", WMMA, "exact", "h200 float16/NN/264x4096x4096", e)


def no_measure():
    pytest.fail("nothing may be measured here")


def decide(lookup, **kw):
    args = dict(vendor="cuBLAS (CuPy)", vendor_missing="", online=True, capturing=False, cached=None,
                measure=no_measure)  # fmt: skip
    return dispatch.decide(lookup, **{**args, **kw})


def record(served, winner, rows, **extra):
    return {"served": served, "winner": winner, "candidates": rows, **extra}


VENDOR_ROW = {"name": "cuBLAS (CuPy)", "source": "vendor", "status": "ok", "median_ms": 0.2, "error": None}
OURS_ROW = {"name": "gemm_wmma_x", "source": "nearest k", "status": "ok", "median_ms": 0.1, "error": 1e-4}


def test_an_exact_entry_that_beat_its_vendor_is_served():
    d = decide(exact(0.1, 0.2))
    assert (d.step, d.template, d.params) == ("exact", "wmma", WMMA) and "0.1 ms stored against cuBLAS 0.2" in d.why


def test_an_exact_entry_slower_than_its_vendor_gives_way_to_the_vendor():
    d = decide(exact(0.3, 0.2))
    assert d.vendor and d.step == "vendor" and "slower than the vendor" in d.why


def test_a_slower_exact_entry_stays_with_one_warning_when_no_vendor_is_reachable():
    with pytest.warns(UserWarning, match="torch is not importable"):
        d = decide(exact(0.3, 0.2), vendor=None, vendor_missing="cuDNN is unavailable (torch is not importable)")
    assert d.step == "exact" and d.template == "wmma"


def test_an_exact_entry_without_a_vendor_time_is_measured_like_an_untuned_problem():
    measured = record("ours", 1, [VENDOR_ROW, OURS_ROW], template="wmma", params=WMMA)
    d = decide(exact(0.1), measure=lambda: measured)
    assert d.step == "online" and d.template == "wmma" and d.record is measured


def test_untuned_problems_are_measured_and_the_fastest_verified_serves():
    ours = decide(None, measure=lambda: record("ours", 1, [VENDOR_ROW, OURS_ROW], template="simt", params=SIMT))
    assert (ours.step, ours.template, ours.params, ours.source) == ("online", "simt", SIMT, "online nearest k")
    theirs = decide(None, measure=lambda: record("vendor", 0, [VENDOR_ROW, {**OURS_ROW, "median_ms": 0.5}]))
    assert theirs.step == "online" and theirs.vendor and theirs.source == "cuBLAS (CuPy)"
    assert "cuBLAS (CuPy) 0.2 ms" in theirs.why


def test_nothing_verified_and_no_vendor_is_one_clear_error():
    rows = [{**OURS_ROW, "status": "rejected", "median_ms": None, "reason": "relative error 1 exceeds 0.002"}]
    with pytest.raises(AutotuneError, match="no candidate verified.*exceeds"):
        decide(None, vendor=None, measure=lambda: record("none", None, rows))


def test_nothing_measured_falls_back_to_the_vendor_and_decides_again_later():
    d = decide(None, measure=lambda: {"served": "none", "winner": None, "candidates": [], "reason": "out of memory"})
    assert d.vendor and not d.final and "out of memory" in d.why


def test_a_remembered_choice_is_not_used_while_the_online_choice_is_off():
    remembered = record("ours", 1, [VENDOR_ROW, OURS_ROW], template="simt", params=SIMT)
    assert decide(None, online=False, cached=remembered).step == "vendor"


def test_online_off_sends_untuned_problems_to_the_vendor_or_the_lookup_when_there_is_none():
    nearest = runtime.Choice("simt", SIMT, "nearest", "h200 float32/NN/1x1x1", {})
    assert decide(nearest, online=False).step == "vendor"
    with pytest.warns(UserWarning, match="cuDNN is unavailable"):
        d = decide(nearest, online=False, vendor=None, vendor_missing="cuDNN is unavailable here")
    assert (d.step, d.template) == ("nearest", "simt")


def test_a_problem_first_seen_during_graph_capture_gets_the_vendor_provisionally():
    """Nothing is measured, compiled or loaded during capture: the vendor serves, and the next call decides."""
    remembered = record("ours", 1, [VENDOR_ROW, OURS_ROW], template="simt", params=SIMT)
    for lookup, cached in ((runtime.Choice("simt", SIMT, "nearest", "x", {}), None), (exact(0.1, 0.2), None),
                           (None, remembered)):  # fmt: skip
        d = decide(lookup, capturing=True, cached=cached)
        assert d.vendor and not d.final and "captured" in d.why
    with pytest.warns(UserWarning, match="no vendor"):  # no vendor: ours, as the lookup chain finds it
        d = decide(runtime.Choice("simt", SIMT, "nearest", "x", {}), capturing=True, vendor=None,
                   vendor_missing="no vendor here")  # fmt: skip
    assert d.template == "simt" and not d.final


def test_a_remembered_choice_is_served_without_measuring():
    d = decide(None, cached=record("ours", 1, [VENDOR_ROW, OURS_ROW], template="simt", params=SIMT))
    assert d.template == "simt" and "remembered" in d.why


# --- the measurement, with a fake runner and clock -------------------------------------------------------------


class FakeRunner:
    """Timings and verdicts by launcher name (test data, not measurements)."""

    def __init__(self, times, bad=()):
        self.times, self.bad, self.ran = times, set(bad), []

    def measure(self, launcher, is_vendor):
        self.ran.append(launcher)
        if launcher in self.bad:
            return False, 0.5, None, "relative error 0.5 exceeds tolerance 0.002"
        return True, None if is_vendor else 1e-4, self.times[launcher], None


def opt(name, choice=True, fail=False):
    def build():
        if fail:
            raise AutotuneError(f"{name} does not compile for sm_90: boom")
        return name

    c = runtime.Choice("simt", {"X": name}, "nearest", name) if choice else None
    return online.Option(name, "vendor" if c is None else f"nearest {name}", build, c)


def test_the_fastest_verified_candidate_wins_and_an_unverified_faster_one_never_does():
    runner = FakeRunner({"vendor": 0.2, "fast-wrong": 0.01, "ok": 0.15, "slow": 0.3}, bad={"fast-wrong"})
    r = online.measure_options([opt("vendor", False), opt("fast-wrong"), opt("ok"), opt("slow")], runner, 1.0)
    assert r["served"] == "ours" and r["winner"] == 2
    assert [c["status"] for c in r["candidates"]] == ["ok", "rejected", "ok", "ok"]
    assert r["candidates"][1]["median_ms"] is None and "exceeds" in r["candidates"][1]["reason"]
    runner = FakeRunner({"vendor": 0.1, "ok": 0.15})
    assert online.measure_options([opt("vendor", False), opt("ok")], runner, 1.0)["served"] == "vendor"


def test_a_candidate_that_does_not_build_is_recorded_and_skipped():
    r = online.measure_options([opt("vendor", False), opt("broken", fail=True)], FakeRunner({"vendor": 0.2}), 1.0)
    assert r["served"] == "vendor" and r["candidates"][1]["status"] == "build-failed"
    assert "does not compile" in r["candidates"][1]["reason"]


def test_candidates_past_the_budget_are_skipped_not_measured():
    now = [0.0]

    def clock():
        now[0] += 0.4  # each look at the clock: 0.4 s later (compiles take time)
        return now[0]

    runner = FakeRunner({"vendor": 0.2, "a": 0.1, "b": 0.05})
    r = online.measure_options([opt("vendor", False), opt("a"), opt("b")], runner, 1.0, clock)
    assert [c["status"] for c in r["candidates"]] == ["ok", "ok", "skipped"] and runner.ran == ["vendor", "a"]
    assert r["winner"] == 1 and "budget of 1 s" in r["candidates"][2]["reason"]


# --- the cache of online choices ---------------------------------------------------------------------------


VERSIONS = {"autotune": "0.1.0", "cupy": "14.2.0", "nvrtc": "13.0", "cuda_runtime": "13020"}


def test_the_choice_cache_round_trips_and_is_ignored_when_versions_change(tmp_path):
    path = choices.choices_path(tmp_path, "nvidia-h200-sm90")
    rec = {**record("vendor", 0, [VENDOR_ROW]), "versions": VERSIONS}
    assert choices.remember(path, "gemm/float16/NN/1x2x3", rec)
    assert choices.recall(path, "gemm/float16/NN/1x2x3", VERSIONS) == rec
    assert choices.recall(path, "gemm/float16/NN/1x2x3", {**VERSIONS, "cupy": "15.0"}) is None
    assert choices.recall(path, "gemm/float16/NN/9x9x9", VERSIONS) is None
    choices.remember(path, "gemm/float16/NN/9x9x9", rec)
    assert set(json.loads(path.read_text())["choices"]) == {"gemm/float16/NN/1x2x3", "gemm/float16/NN/9x9x9"}


def test_a_corrupt_cache_is_ignored_with_one_warning_and_replaced_by_the_next_write(tmp_path):
    path = choices.choices_path(tmp_path, "gpu")
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, "choices": {"gemm/float16/NN/1x2x3": ')
    with pytest.warns(UserWarning, match="is ignored and measured again"):
        assert choices.recall(path, "gemm/float16/NN/1x2x3", VERSIONS) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per file
        assert choices.read_choices(path) == {}
    assert choices.remember(path, "k", {"served": "vendor", "versions": VERSIONS})
    assert choices.recall(path, "k", VERSIONS)["served"] == "vendor"


# --- the switch --------------------------------------------------------------------------------------------


def test_the_environment_variable_and_the_api_flag_turn_the_online_choice_off(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_ONLINE, raising=False)
    assert dispatch.online_enabled()
    monkeypatch.setenv(dispatch.ENV_ONLINE, "0")
    assert not dispatch.online_enabled() and dispatch.online_enabled(True)
    monkeypatch.setenv(dispatch.ENV_ONLINE, "1")
    try:
        dispatch.set_online(False)
        assert not dispatch.online_enabled() and dispatch.online_enabled(override=True)
    finally:
        dispatch.set_online(None)
    assert dispatch.online_enabled()
    with pytest.raises(TypeError, match="True, False or None"):
        dispatch.set_online("no")


# --- serving: the glue, with the GPU parts faked --------------------------------------------------------------


class FakeLauncher:
    vendor = False
    provisional = False

    def __init__(self, choice):
        self.choice, self.serving = choice, {}


def test_serve_measures_once_remembers_and_then_serves_the_remembered_choice(tmp_path, monkeypatch, caplog):
    problem = GEMM.problem("264x4096x4096", "float16")
    nearest = runtime.Choice("wmma", WMMA, "nearest", "h200 float16/NN/256x4096x4096", {})
    runs = []

    class Runner(FakeRunner):
        def __init__(self, kernel, problem):
            super().__init__({})
            runs.append(problem)

        def measure(self, launcher, is_vendor):
            return True, None, 0.3 if is_vendor else 0.1, None

    monkeypatch.setattr(online, "GpuRunner", Runner)
    monkeypatch.setattr(choices, "versions", lambda: VERSIONS)
    monkeypatch.setattr("autotune.measure.streams.capturing", lambda: False)
    kw = dict(ranked=[nearest], default=runtime.Choice("wmma", WMMA, "default", "default"), gpu_key="gpu",
              cache=tmp_path, build_ours=FakeLauncher, make_choice=runtime.Choice, online_on=True)  # fmt: skip
    with caplog.at_level(logging.DEBUG, logger="autotune"):
        first = serving.serve("gemm", problem, None, **kw)
    assert first.choice.step == "online" and first.choice.params == WMMA and len(runs) == 1
    rows = first.serving["measurement"]["candidates"]
    assert [r["source"] for r in rows] == ["vendor", "nearest h200 float16/NN/256x4096x4096"]  # default = nearest
    assert "264x4096x4096: online" in caplog.text
    stored = json.loads(choices.choices_path(tmp_path, "gpu").read_text())["choices"]["gemm/float16/NN/264x4096x4096"]
    assert stored["served"] == "ours" and stored["source_hash"] and stored["versions"] == VERSIONS
    second = serving.serve("gemm", problem, None, **kw)
    assert len(runs) == 1 and second.choice.params == WMMA and "remembered" in second.serving["why"]


def test_serve_hands_back_a_vendor_launcher_with_its_provenance(tmp_path, monkeypatch):
    monkeypatch.setattr("autotune.measure.streams.capturing", lambda: True)
    launcher = serving.serve("gemm", P, None, ranked=[], default=None, gpu_key="gpu", cache=tmp_path,
                             build_ours=lambda c: pytest.fail("not ours"), make_choice=runtime.Choice,
                             online_on=True)  # fmt: skip
    assert isinstance(launcher, VendorLauncher) and launcher.provisional
    assert launcher.provenance["step"] == "vendor" and "captured" in launcher.provenance["why"]


# --- the call observer -------------------------------------------------------------------------------------


def test_the_call_observer_sees_every_launch_and_returns_what_it_returns(monkeypatch):
    launched, seen = [], []
    choice = runtime.Choice("simt", SIMT, "exact", "test")
    launcher = runtime.Launcher("gemm", GEMM.problem("64x64x64", "float32"), choice,
                                lambda g, b, args, shared_mem: launched.append(args), Launch((1, 1, 1), (128, 1, 1), 0),
                                "k")  # fmt: skip

    def observe(kernel, problem, run):
        seen.append((kernel, problem.label))
        return run()

    assert hooks.set_call_observer(observe) is None
    try:
        assert launcher("a", "b", "c") == "c" and seen == [("gemm", "64x64x64")] and len(launched) == 1
        vendor = VendorLauncher("conv2d", CONV.problem("n1c3h8w8k4r3s3u1p1", "float32"), "cuDNN (torch)", {})
        monkeypatch.setattr(vendor, "_launch", lambda *a: "vendor out")
        assert vendor("x", "w", "y") == "vendor out" and seen[-1] == ("conv2d", "n1c3h8w8k4r3s3u1p1")
    finally:
        assert hooks.set_call_observer(None) is observe
    launcher("a", "b", "c")
    assert len(seen) == 2 and len(launched) == 2
    with pytest.raises(TypeError, match="callable"):
        hooks.set_call_observer(42)


def test_stored_entries_carry_the_vendor_time_measured_with_them():
    for path in sorted(runtime.default_tuned_dir().glob("*/*.json")):
        for key, e in json.loads(path.read_text())["entries"].items():
            assert isinstance(e.get("vendor_median_ms"), float) and e.get("vendor"), f"{path.name} {key}"
            d = decide(runtime.Choice(e["template"], e["params"], "exact", key, e), vendor="v")
            assert d.step == ("exact" if e["median_ms"] <= e["vendor_median_ms"] else "vendor"), key


def test_vendor_launcher_of_a_gemm_reads_transposed_layouts_as_views(monkeypatch):
    import cupy

    seen = {}
    v = VendorLauncher("gemm", GEMM.problem("4x5x6", "float32", "TN"), "cuBLAS (CuPy)", {})
    monkeypatch.setattr(cupy, "matmul", lambda a, b, out: seen.update(a=a, b=b))
    v._launch(SimpleNamespace(T="a transposed"), "b", "out", 1.0, 0.0)
    assert seen == {"a": "a transposed", "b": "b"}


def test_with_vendor_substitution_off_the_lookup_chains_kernel_serves(tmp_path, monkeypatch):
    monkeypatch.setenv(dispatch.ENV_VENDOR, "0")
    nearest = runtime.Choice("simt", SIMT, "nearest", "h200 float32/NN/1x1x1", {})
    kw = dict(ranked=[], default=None, gpu_key="gpu", cache=tmp_path, build_ours=FakeLauncher,
              make_choice=runtime.Choice, online_on=True)  # fmt: skip
    launcher = serving.serve("gemm", GEMM.problem("3x5x7", "float32"), nearest, **kw)
    assert launcher.choice is nearest and "AUTOTUNE_VENDOR=0" in launcher.serving["why"]
    with pytest.raises(AutotuneError, match="rules out the vendor"):
        serving.serve("gemm", GEMM.problem("3x5x7", "float32", "NT"), None, **kw)
    assert not (tmp_path / "choices").exists()  # nothing measured, nothing remembered


def test_load_decides_once_per_setting_and_never_remembers_a_provisional_decision(tmp_path, monkeypatch):
    """runtime.load end to end with the GPU parts faked: a measured choice is memoized, the online switch is
    part of the memo, and a decision made during capture is made again on the next call."""
    import cupy

    measured = []

    class Runner(FakeRunner):
        def __init__(self, kernel, problem):
            super().__init__({})
            measured.append(problem.label)

        def measure(self, launcher, is_vendor):
            return True, None, 0.3 if is_vendor else 0.1, None

    capture = [False]
    monkeypatch.setattr(cupy.cuda, "Device", lambda *a: SimpleNamespace(id=0))
    monkeypatch.setattr(runtime, "_gpu", lambda device_id: ("nvidia-h200-sm90", "sm_90"))
    monkeypatch.setattr(runtime, "build_launcher", lambda kernel, problem, c, arch: FakeLauncher(c))
    monkeypatch.setattr(online, "GpuRunner", Runner)
    monkeypatch.setattr(choices, "versions", lambda: VERSIONS)
    monkeypatch.setattr("autotune.measure.streams.capturing", lambda: capture[0])
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(dispatch.ENV_ONLINE, raising=False)
    runtime.forget_launchers()
    try:
        capture[0] = True
        first = runtime.load("gemm", M=264, N=4096, K=4096, dtype="float16")
        assert first.vendor and first.provisional and measured == []
        capture[0] = False
        ours = runtime.load("gemm", M=264, N=4096, K=4096, dtype="float16")
        assert ours.choice.step == "online" and measured == ["264x4096x4096"]
        assert runtime.load("gemm", M=264, N=4096, K=4096, dtype="float16") is ours and len(measured) == 1
        off = runtime.load("gemm", M=264, N=4096, K=4096, dtype="float16", online=False)
        assert off.vendor and off.provenance["step"] == "vendor" and len(measured) == 1
        fp32_nt = runtime.load("gemm", M=64, N=64, K=64, dtype="float32", layout="NT")  # nn.Linear's layout
        assert not fp32_nt.vendor and fp32_nt.choice.template == "skinny_nt"  # faster than the vendor: served
        sources = [c["source"] for c in fp32_nt.serving["measurement"]["candidates"]]
        assert "vendor" in sources and len(measured) == 2
    finally:
        runtime.forget_launchers()


@pytest.mark.parametrize(
    "bad",
    [{"served": "ours", "winner": 0, "candidates": [{"name": "k"}]},  # no template or params
     {"served": "vendor", "winner": 3, "candidates": [{"name": "v"}]},  # winner out of range
     {"served": "ours", "winner": 0, "candidates": "x", "template": "wmma", "params": {}},
     {"served": "ours", "winner": 0, "candidates": [{"name": "k"}], "template": "wmma", "params": {"FRAG": 1}}],
)  # fmt: skip
def test_a_remembered_record_that_does_not_hold_together_is_measured_again(bad):
    assert serving._valid("gemm", P, bad) is None


def test_a_remembered_record_of_ours_applies_while_the_template_renders_the_same_kernel():
    good = {"served": "ours", "winner": 0, "candidates": [{"name": "k", "source": "default"}], "template": "wmma",
            "params": WMMA, "template_hash": "0ld", "source_hash": render_hash("wmma", WMMA, P)}  # fmt: skip
    assert serving._valid("gemm", P, good) is good
    assert serving._valid("gemm", P, {**good, "source_hash": "another"}) is None


def render_hash(template, params, problem):
    from autotune.build.templates import render

    return render("gemm", template, params, problem).source_hash


def test_torch_operands_are_copied_only_where_the_kernels_cannot_read_them_in_place():
    torch = pytest.importorskip("torch")
    from autotune.measure.streams import is_torch
    from autotune.serve.torch_calls import torch_operand

    w = torch.randn(64, 32)
    assert torch_operand(w, False) is not None and torch_operand(w, False).data_ptr() == w.data_ptr()
    assert torch_operand(w.t(), True).data_ptr() == w.data_ptr()  # a transposed view, read in place
    copied = torch_operand(w.t(), False)  # the fp32 kernels read row-major only
    assert copied.is_contiguous() and copied.data_ptr() != w.data_ptr() and torch.equal(copied, w.t())
    odd = torch.randn(64 * 32 + 1)[1:].view(64, 32)  # contiguous, 4 bytes off a 16-byte boundary
    fixed = torch_operand(odd, True)
    assert fixed.data_ptr() % 16 == 0 and torch.equal(fixed, odd)
    sliced = w[:, :16]  # padded rows
    assert torch_operand(sliced, True).is_contiguous() and torch.equal(torch_operand(sliced, True), sliced)
    assert is_torch(w) and not is_torch(np_array())


def np_array():
    import numpy as np

    return np.ones(3)
