"""The GPU worker's plumbing on a machine without a GPU: a clear error, no dead process left behind."""

from __future__ import annotations

import pytest

from autotune.build.compiler import compile_source
from autotune.core.errors import AutotuneError
from autotune.core.space import Config
from autotune.kernels import FAMILIES
from autotune.measure.evaluate import Candidate, Settings, finish, render_candidate
from autotune.measure.worker import GPUWorker
from tests.conftest import gpu_reason


@pytest.mark.skipif(gpu_reason() is None, reason="checks the behaviour without a usable GPU")
def test_without_a_gpu_the_worker_says_why_and_the_run_stops():
    settings = Settings(arch="sm_90", tolerance=1e-5)
    problem = FAMILIES["gemm"].problem([64, 64, 64], "float32")
    c = render_candidate(Candidate("gemm", "naive", problem, Config.of({"BX": 16, "BY": 16})), settings)
    c = finish(c, compile_source(c.source, c.kernel_name, "sm_90"), settings)
    with GPUWorker() as worker:
        assert worker.vendor("gemm", problem, settings.timing) is None
        with pytest.raises(AutotuneError, match="cannot prepare gemm 64x64x64 on the GPU"):
            worker.measure(c, settings)
        assert worker._proc is not None and worker._proc.is_alive()  # it answered; it did not crash
