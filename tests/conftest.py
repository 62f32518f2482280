"""The GPU tier (``pytest -m gpu``) skips cleanly when no CUDA GPU is usable."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_reason() -> str | None:
    try:
        from autotune.device import current_gpu

        current_gpu()
    except Exception as exc:  # noqa: BLE001 - any failure means the tier cannot run here
        return f"no usable GPU: {exc}"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("gpu") and gpu_reason():
            item.add_marker(pytest.mark.skip(reason=gpu_reason()))
