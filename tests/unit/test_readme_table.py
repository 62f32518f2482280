"""benchmarks/readme_table.py: the README's GEMM table is what the committed results and tuned file say."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("readme_table", ROOT / "benchmarks" / "readme_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rt = _module()


def _row(**extra):
    return {"dtype": "float16", "layout": "NN", "shape": "272x4096x4096", "kernel": "k1", "ms": 0.0212,
            "vendor_ms": 0.0228, "x_vendor": 1.076, "stored_x_vendor": 1.064, **extra}  # fmt: skip


def _entry(**params):
    return {"template": "wgmma", "kernel_name": "k1", "params": {"BM": 64, "BN": 144, **params}}


def test_a_row_names_the_options_that_set_its_kernel_apart():
    lines = rt.table({"rows": [_row()]}, {"float16/NN/272x4096x4096": _entry(SWAP_AB=True, L2_PROMOTION=128)})
    assert lines[0] == rt.HEADER and len(lines) == 3
    assert lines[2] == (
        "| float16 | NN | 272x4096x4096 | wgmma (SWAP_AB, BM 64 x BN 144, L2_PROMOTION 128) | 21.2 | 22.8 | **1.08** "
        "| 1.06 | - |"
    )
    assert rt.options("wgmma", {"BN": 256, "L2_PROMOTION": 256, "SPLIT": 1}) == []
    assert rt.options("wgmma_decode", {"KBOXES": 2, "W_PROMOTION": 0}) == ["KBOXES 2", "W_PROMOTION 0"]


def test_rows_without_a_time_or_an_entry_are_left_out_and_a_stale_kernel_is_named():
    entries = {"float16/NN/272x4096x4096": _entry()}
    rows = [_row(ms=None), _row(shape="1x2x3"), _row(kernel="old", pct_floor=97.4, vendor_pct_floor=90.2)]
    lines = rt.table({"rows": rows}, entries)
    assert len(lines) == 3 and "old (stored since: wgmma (BM 64 x BN 144))" in lines[2] and "97% / 90%" in lines[2]


def test_replacing_the_table_keeps_the_rest_of_the_readme():
    readme = f"intro\n\n{rt.HEADER}\n| --- |\n| old |\n\nafter\n"
    assert rt.replace_table(readme, [rt.HEADER, "| new |"]) == f"intro\n\n{rt.HEADER}\n| new |\n\nafter\n"
    with pytest.raises(ValueError, match="no GEMM table"):
        rt.replace_table("nothing here", [])


def test_the_committed_readme_table_is_the_committed_results_and_tuned_file():
    results = json.loads((ROOT / "benchmarks/results/gemm_nvidia-h200-sm90.json").read_text())
    entries = json.loads((ROOT / "tuned/nvidia-h200-sm90/gemm.json").read_text())["entries"]
    readme = (ROOT / "benchmarks/README.md").read_text()
    assert "\n".join(rt.table(results, entries)) in readme, "run: python3 benchmarks/readme_table.py --write"
