"""The GPU tier (``pytest -m gpu``) skips cleanly when no CUDA GPU is usable. The session keeps its NVRTC compiles
and its host-emulation builds in one temporary folder, shared by the xdist workers and removed at the end."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest

from autotune.build.compiler import COMPILE_CACHE_ENV
from tests.host_cuda import BUILD_CACHE_ENV


@functools.cache
def gpu_reason() -> str | None:
    try:
        from autotune.core.device import current_gpu

        current_gpu()
    except Exception as exc:  # noqa: BLE001 - any failure means the tier cannot run here
        return f"no usable GPU: {exc}"
    return None


def pytest_configure(config):
    # The controller (or a run without xdist) makes the folder; xdist workers, started after this, inherit the
    # environment. A folder already named in the environment is used as it is, and kept.
    if hasattr(config, "workerinput") or (COMPILE_CACHE_ENV in os.environ and BUILD_CACHE_ENV in os.environ):
        return
    folder = tempfile.mkdtemp(prefix="autotune-test-cache-")
    config.stash[_CACHE] = folder
    os.environ.setdefault(COMPILE_CACHE_ENV, os.path.join(folder, "nvrtc"))
    os.environ.setdefault(BUILD_CACHE_ENV, os.path.join(folder, "emulation"))


def pytest_unconfigure(config):
    folder = config.stash.get(_CACHE, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        for name in (COMPILE_CACHE_ENV, BUILD_CACHE_ENV):
            if os.environ.get(name, "").startswith(folder):
                del os.environ[name]


_CACHE = pytest.StashKey[str]()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("gpu") and gpu_reason():
            item.add_marker(pytest.mark.skip(reason=gpu_reason()))
