"""autotune.measure.versus without a GPU: the ratio of interleaved rounds, the median round, and a candidate that
never reaches the GPU."""

from __future__ import annotations

import pytest

from autotune.core.space import Config
from autotune.measure.bench import Timing
from autotune.measure.evaluate import Status, TrialResult
from autotune.measure.versus import Versus, _median_round, interleave, summary, versus
from tests.unit.test_evaluate import SETTINGS, compiled


def timing(ms: float) -> Timing:
    return Timing(ms, ms, ms, 0.0, 10)


def result(ms: float) -> TrialResult:
    return TrialResult(Status.COMPLETE, None, "k", Config.of({}), timing=timing(ms))


def test_the_ratio_is_the_median_of_the_rounds_ratios_not_the_ratio_of_medians():
    # ours 1, 2, 3 ms against 1.5, 1.8, 3.3: per round 1.5, 0.9, 1.1 -> 1.1; the medians' ratio would be 0.9
    v = Versus(result(2.0), ("cuBLAS", timing(1.8)), ((1.0, 1.5), (2.0, 1.8), (3.0, 3.3)))
    assert v.ratio == pytest.approx(1.1)
    row = summary(v)
    assert row["ms"] == 2.0 and row["vendor_ms"] == 1.8 and row["x_vendor"] == pytest.approx(1.1)
    assert row["rounds_ms"] == [[1.0, 1.5], [2.0, 1.8], [3.0, 3.3]]


def test_without_rounds_there_is_no_ratio():
    v = Versus(result(1.0), None)
    assert v.ratio is None and summary(v)["vendor"] is None and summary(v)["x_vendor"] is None


@pytest.mark.parametrize(("times", "want"), [([3.0, 1.0, 2.0], 2.0), ([4.0, 1.0, 3.0, 2.0], 2.0), ([5.0], 5.0)])
def test_the_median_round_is_a_measured_round_the_lower_middle_of_an_even_count(times, want):
    assert _median_round([timing(t) for t in times]).median_ms == want


def test_a_candidate_refused_before_the_gpu_is_returned_with_its_reason_and_nothing_timed():
    c = compiled(128, spills=64)  # invalid at compile time: no GPU is touched
    v = versus(c, SETTINGS)
    assert v.result.status is Status.INVALID and "spills" in v.result.reason
    assert v.rounds == () and v.vendor is None and v.ratio is None


def test_rounds_must_be_at_least_one():
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        versus(compiled(64), SETTINGS, rounds=0)


def test_a_warm_round_is_dropped_and_the_first_side_alternates():
    # a card that starts cool: whatever runs first is 8% faster, later turns all take their steady time
    calls: list[str] = []

    def time(side: str) -> float:
        calls.append(side)
        return {"ours": 1.0, "cuBLAS": 1.0}[side] * (0.92 if len(calls) == 1 else 1.0)

    ours, theirs = interleave(["ours", "cuBLAS"], 3, time)
    assert calls == ["ours", "cuBLAS", "ours", "cuBLAS", "cuBLAS", "ours", "ours", "cuBLAS"]
    assert ours == [1.0, 1.0, 1.0] and theirs == [1.0, 1.0, 1.0], "the cool first turn was kept"


@pytest.mark.parametrize("sides", [1, 2, 3])
@pytest.mark.parametrize("rounds", [1, 2, 5])
def test_every_side_is_timed_once_a_round_after_the_warm_round(sides, rounds):
    calls: list[int] = []
    timings = interleave(list(range(sides)), rounds, lambda s: calls.append(s) or len(calls))
    assert calls[:sides] == list(range(sides))
    assert [len(t) for t in timings] == [rounds] * sides
    for r in range(rounds):
        turn = calls[sides * (r + 1) : sides * (r + 2)]
        assert turn == (list(range(sides)) if r % 2 == 0 else list(range(sides))[::-1])
