"""The optimization ladder's rungs, derived without a GPU."""

from __future__ import annotations

import pytest

from autotune.kernels import FAMILIES
from autotune.tune.ladder import rungs

TUNED = dict(BM=128, BN=256, BK=16, WM=64, WN=64, WNITER=4, TM=8, TN=4, VEC=4, PAD=4, DBUF=True)


def test_each_rung_switches_off_one_technique():
    rs = rungs("gemm", "simt", TUNED)
    assert [r.label for r in rs][0] == "as tuned" and rs[0].params == TUNED
    by_label = {r.label: r for r in rs}
    assert by_label["without double buffering"].params == {**TUNED, "DBUF": False}
    assert by_label["without shared-memory padding"].params == {**TUNED, "PAD": 0}
    assert by_label["without vector loads (VEC=1)"].params == {**TUNED, "VEC": 1}
    assert rs[-1].template == "naive"
    for r in rs:
        if r.problem is None:
            assert FAMILIES["gemm"].check(r.template, r.params) is None, r.label


def test_a_technique_already_off_is_reported_not_measured_twice():
    rs = rungs("gemm", "simt", {**TUNED, "PAD": 0})
    pad = next(r for r in rs if r.label == "without shared-memory padding")
    assert pad.problem == "already off in the tuned configuration"


def test_the_smallest_register_tile_rung_and_other_templates():
    small = next(r for r in rungs("gemm", "simt", TUNED) if r.label.startswith("4x4 register fragments"))
    assert small.problem is None and small.params["TM"] == small.params["TN"] == 4
    assert (
        FAMILIES["gemm"].derived("simt", small.params)["THREADS"] == FAMILIES["gemm"].derived("simt", TUNED)["THREADS"]
    )
    already = rungs("gemm", "simt", {**TUNED, "TN": 4, "TM": 4, "WNITER": 1})
    fragment = next(r for r in already if r.label.startswith("4x4 register"))
    assert fragment.problem == "already off in the tuned configuration"
    with pytest.raises(ValueError):
        rungs("gemm", "naive", {"BX": 16, "BY": 16})


def test_the_ladder_is_the_templates_own_and_most_templates_have_none():
    simt = FAMILIES["gemm"].template("simt")
    assert simt.ladder(TUNED)[0] == ("as tuned", "simt", TUNED)
    assert [t.name for t in FAMILIES["gemm"].implementations() if t.ladder(TUNED)] == ["simt"]


def test_the_ladder_command_names_an_unknown_family_in_one_sentence(capsys):
    from autotune.cli import main

    assert main(["ladder", "64x64x64", "--kernel", "gemmm"]) == 2
    err = capsys.readouterr().err
    assert "'gemmm' is not a kernel family" in err and "gemm, conv2d" in err and "Traceback" not in err
