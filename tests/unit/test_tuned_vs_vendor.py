"""benchmarks/tuned_vs_vendor.py without a GPU: --only picks the entries to time by their key."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tuned_vs_vendor_only_selects_entries_by_their_key():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("tuned_vs_vendor", ROOT / "benchmarks" / "tuned_vs_vendor.py")
        tvv = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tvv)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    entries = {"float16/NN/4096x4096x4096": 1, "bfloat16/NN/4096x4096x4096": 2, "float16/NT/1x4096x4096": 3}
    assert [k for k, _ in tvv.selected(entries, None)] == list(entries)
    assert [e for _, e in tvv.selected(entries, ["*/NN/4096x4096x4096"])] == [1, 2]
    assert [e for _, e in tvv.selected(entries, ["float16/*", "bfloat16/NN/*"])] == [1, 2, 3]
    assert tvv.selected(entries, ["float32/*"]) == []
