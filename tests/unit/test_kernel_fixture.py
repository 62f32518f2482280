"""Every stored tuned entry, and each family's defaults and a configuration of every other template, still
renders the same source (byte for byte, by SHA-256) under the same kernel name, with the same launch, scratch,
extra memory and check results as when tests/data/kernel_fixture.json was captured (by
tests/data/capture_kernel_fixture.py, from main before the template redesign)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.data.capture_kernel_fixture import cases, record

FIXTURE = json.loads((Path(__file__).parents[1] / "data" / "kernel_fixture.json").read_text())
CASES = {case[0]: case[1:] for case in cases()}


def test_every_captured_case_is_still_stored_or_generated():
    """Entries tuned after the capture are new (nothing to compare them with); every captured one must remain."""
    assert set(FIXTURE) <= set(CASES)
    assert sum(c.startswith("tuned/") for c in CASES) >= 30 and any(c.startswith("tests/data/") for c in CASES)


@pytest.mark.parametrize("case", sorted(FIXTURE))
def test_an_entry_renders_and_launches_as_captured(case):
    kernel, template, params, problem = CASES[case]
    assert record(kernel, template, params, problem) == FIXTURE[case]
