"""A tuning session: one GPU worker and one compile pool, reused for every spec and problem of a run.

``autotune run spec.yaml`` tunes a spec's problems in one session; ``autotune run workload.yaml`` tunes a model's
problems in slices, several specs (one per kernel, dtype and layout) sharing the session. Each problem's study
resumes across slices and runs, and each verified winner is merged into ``tuned/`` at once.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.errors import AutotuneError


@dataclass(frozen=True)
class RunOptions:
    """What a run takes from the command line besides the spec."""

    tuned_dir: Path
    runs_dir: Path
    storage: str | None = None
    jobs: int = 8
    timeout: float = 30.0
    abort_ratio: float = 2.0
    force: bool = False
    energy: bool = False
    verbose: int = 0
    shared: bool = False  # the storage is shared with other workers: claim configurations, GPU key in study names


@dataclass(frozen=True)
class ProblemResult:
    outcome: Any  # search.ShapeOutcome
    stored: str  # "yes", "no (kept faster)" or "no (nothing verified)"

    @property
    def best_ms(self) -> float | None:
        b = self.outcome.best
        return b.timing.median_ms if b is not None and b.timing is not None else None

    @property
    def vendor_ms(self) -> float | None:
        v = self.outcome.vendor
        return v.median_ms if v is not None else None


class SessionCache:
    """What a session measures or enumerates once per (spec, problem), not once per slice: the feasible
    configurations (``search.feasible_configs``) and the vendor library's timing per timing plan. The vendor
    library and the space do not change within a session; trials, which do, live in the study."""

    def __init__(self) -> None:
        self.parallel: tuple[Callable[..., Any], int] | None = None  # (a process pool's map, its processes)
        self._feasible: dict[tuple, tuple[Any, list[Any]]] = {}
        self._vendor: dict[tuple, Any] = {}
        self.counts = {"feasible": 0, "vendor": 0}  # enumerations and vendor timings actually made

    def preparation(self, base: Any = None) -> Any:
        """``base`` (the templates' Preparation by default) with the feasible list enumerated once."""
        from .search import TEMPLATES
        from .search_state import feasible_configs, feasible_in_parallel

        base = base or TEMPLATES
        enumerate_ = base.feasible
        if enumerate_ is feasible_configs and self.parallel is not None:
            map_, jobs = self.parallel

            def enumerate_(spec: Any, problem: Any, settings: Any) -> list[Any]:
                return feasible_in_parallel(spec, problem, settings, map_, jobs)

        def feasible(spec: Any, problem: Any, settings: Any) -> list[Any]:
            key = (id(spec), problem, settings.arch, settings.max_shared_bytes, settings.registers_per_block)
            got = self._feasible.get(key)
            if got is None:  # the spec is kept beside its list, so its id is not reused while cached
                self.counts["feasible"] += 1
                got = self._feasible[key] = (spec, enumerate_(spec, problem, settings))
            return list(got[1])

        return replace(base, feasible=feasible)

    def evaluator(self, worker: Any) -> Any:
        """``worker`` with its ``vendor(kernel, problem, plan)`` timings remembered."""
        return _VendorOnce(worker, self)

    def vendor(self, worker: Any, kernel: str, problem: Any, plan: Any) -> Any:
        key = (kernel, problem, plan)
        if key not in self._vendor:
            self.counts["vendor"] += 1
            self._vendor[key] = worker.vendor(kernel, problem, plan)
        return self._vendor[key]


class _VendorOnce:
    """An evaluator whose vendor timings come from a ``SessionCache``; everything else is the worker's."""

    def __init__(self, worker: Any, cache: SessionCache) -> None:
        self._worker, self._cache = worker, cache

    def vendor(self, kernel: str, problem: Any, plan: Any) -> Any:
        return self._cache.vendor(self._worker, kernel, problem, plan)

    def __getattr__(self, name: str) -> Any:  # measure, start, collect: the worker's own
        return getattr(self._worker, name)


class TuningSession:
    """Open with ``with TuningSession(options) as s:``; then ``s.tune(spec, problem, trials, minutes)``."""

    def __init__(self, options: RunOptions, gpu: Any = None) -> None:
        from ..build.compiler import nvrtc_version, require_nvrtc
        from ..core.device import current_gpu

        self.options = options
        self.gpu = gpu or current_gpu()
        require_nvrtc()
        self._nvrtc = nvrtc_version
        self._storages: dict[str, Any] = {}
        self._stack: Any = None
        self.cache = SessionCache()

    def __enter__(self) -> TuningSession:
        import contextlib

        import optuna

        from ..build.compile_pool import CompilePool
        from ..measure.worker import GPUWorker

        level = optuna.logging.WARNING if self.options.verbose < 2 else optuna.logging.INFO
        optuna.logging.set_verbosity(level)
        self._stack = contextlib.ExitStack()
        self.worker = self._stack.enter_context(GPUWorker())
        jobs, timeout = self.options.jobs, self.options.timeout
        self.compiler = self._stack.enter_context(CompilePool(self.gpu.arch, jobs=jobs, timeout_s=timeout * 4))
        self.cache.parallel = (self.compiler.map, jobs)
        self.worker.warm()
        self.compiler.warm()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def fit_problem(self, problem: Any) -> str | None:
        """Why ``problem`` cannot be tuned on this GPU (its inputs, outputs and float64 reference exceed the
        GPU's memory), or None."""
        need, have = getattr(problem, "device_bytes", 0), getattr(self.gpu, "memory_bytes", 0)
        if have and need > have:
            return (f"{problem.label} {problem.dtype} needs {need / 2**30:.1f} GiB on the GPU (inputs, outputs and "
                    f"the float64 reference); {self.gpu.name} has {have / 2**30:.1f} GiB")  # fmt: skip
        return None

    def storage_url(self, spec: Any) -> str:
        from .search import default_storage

        return self.options.storage or default_storage(spec, self.gpu.key, self.options.runs_dir)

    def tuned_path(self, kernel: str) -> Path:
        from ..results.store import read, tuned_file

        path = tuned_file(self.options.tuned_dir, self.gpu.key, kernel)
        read(path)  # a corrupt results file is reported now, before any tuning time is spent
        return path

    def settings(self, spec: Any, dtype: str) -> Any:
        from ..measure.evaluate import Settings
        from ..measure.verify import tolerance_for
        from .search import SEARCH_PLAN

        g = self.gpu
        return Settings(
            arch=g.arch, tolerance=tolerance_for(dtype, spec.tolerance), max_shared_bytes=g.max_shared_per_block,
            registers_per_block=g.registers_per_block, registers_per_sm=g.registers_per_sm,
            shared_per_sm=g.shared_per_sm, threads_per_sm=g.threads_per_sm, timing=SEARCH_PLAN, seed=spec.seed,
            timeout_s=self.options.timeout, energy=spec.measures_energy or self.options.energy,
        )  # fmt: skip

    def storage(self, spec: Any) -> Any:
        """The spec's Optuna storage, opened once (a bad URL is one sentence before any GPU work)."""
        from .search import open_storage

        url = self.storage_url(spec)
        if url not in self._storages:
            self._storages[url] = open_storage(url)
        return self._storages[url]

    def tune(self, spec: Any, problem: Any, trials: int | None, minutes: float | None, progress: Any,
             final: bool = True) -> ProblemResult:  # fmt: skip
        """Tune one problem of ``spec`` (resuming its study) and merge a verified winner into tuned/.

        ``final=False``: a slice of a longer run; the finalists are not re-timed and nothing is stored (every
        trial is in the study); the run calls ``tune(spec, problem, 0, None, progress)`` once at its end, which
        runs no new trial, re-times the finalists and stores the winner."""
        from .search import tune_shape

        settings = self.settings(spec, problem.dtype)
        if settings.energy:
            check_energy(spec)
        outcome = tune_shape(
            spec, problem, settings, self.storage(spec), trials=trials, minutes=minutes,
            evaluator=self.cache.evaluator(self.worker), compiler=self.compiler, prefetch=max(4, 2 * self.options.jobs),
            abort_ratio=self.options.abort_ratio, progress=progress, shared=self.options.shared,
            gpu_key=self.gpu.key if self.options.storage else "", prep=self.cache.preparation(), final=final,
        )  # fmt: skip
        if not final and not self.options.shared:  # a shared study re-times in tune_shape, by one worker
            return ProblemResult(outcome, "not yet (re-timed and stored at the end of the run)")
        if outcome.final_by:  # another worker re-timed the finalists and stores the winner
            return ProblemResult(outcome, f"by {outcome.final_by}")
        if outcome.best is None:
            return ProblemResult(outcome, "no (nothing verified)")
        return ProblemResult(outcome, self._store(spec, problem, outcome, settings))

    def _store(self, spec: Any, problem: Any, outcome: Any, settings: Any) -> str:
        from ..build.templates import installed_renders, template_hash
        from ..kernels import FAMILIES
        from ..results.store import entry_key, merge

        templates = FAMILIES[spec.kernel].templates

        def installed(template: str) -> str | None:
            return template_hash(spec.kernel, template) if template in templates else None

        g = self.gpu
        header = {"kernel": spec.kernel, "gpu": {"name": g.name, "arch": g.arch, "key": g.key,
                                                 "multiprocessors": g.multiprocessors}}  # fmt: skip
        entry = tuned_entry(spec, outcome, settings, _versions(g, self._nvrtc()))
        key = entry_key(problem.dtype, problem.layout, problem.label)
        unchanged = functools.partial(installed_renders, spec.kernel, problem=problem)
        rival = self._beside_stored(spec, problem, outcome, settings)
        result = merge(self.tuned_path(spec.kernel), header, key, entry, force=self.options.force,
                       pareto=pareto_points(outcome, spec), installed=installed, unchanged=unchanged,
                       rival=rival)  # fmt: skip
        return "yes" if result.stored else "no (kept faster)"

    def _beside_stored(self, spec: Any, problem: Any, outcome: Any, settings: Any) -> tuple[float, float] | None:
        """The new winner and the kernel stored for its problem, re-verified and re-timed side by side here: (new
        ms, stored ms; inf for one that fails). None when nothing usable is stored (none, another version of its
        template, or the same kernel) or with --force: the merge then goes by the stored time, or replaces."""
        from ..build.templates import installed_renders
        from ..core.space import Config
        from ..kernels import FAMILIES
        from ..results.store import entry_key, read, tuned_file
        from .finalists import side_by_side

        key = entry_key(problem.dtype, problem.layout, problem.label)
        path = tuned_file(self.options.tuned_dir, self.gpu.key, spec.kernel)  # checked once already: tuned_path
        old, best = read(path)["entries"].get(key), outcome.best
        if old is None or best is None or self.options.force or old.get("kernel_name") == best.kernel_name:
            return None
        template, params = old.get("template"), dict(old.get("params", {}))
        if old.get("verified") is not True or not installed_renders(spec.kernel, old, problem):
            return None
        if FAMILIES[spec.kernel].check_problem(template, params, problem) is not None:
            return None
        pair = [(spec.template, best.config), (template, Config.of(params))]
        timed = side_by_side(spec.kernel, problem, replace(settings, energy=False), pair,
                             self.cache.evaluator(self.worker), self.compiler, self.cache.preparation(),
                             alternate=True)  # fmt: skip
        new, stored = (r.median_ms if r is not None else math.inf for r in timed)
        print(f"  {problem.label} {problem.dtype}: beside the stored {old.get('kernel_name')}, {stored:.4g} ms "
              f"against the new {new:.4g}", file=sys.stderr)  # fmt: skip
        return new, stored


def check_energy(spec: Any) -> None:
    """Energy needs NVML: stop before tuning when the objective needs it, else say it will not be measured."""
    from ..measure.energy import EnergyMeter

    meter = EnergyMeter()
    if meter.available:
        print(f"energy per launch: {meter.method} (NVML, read only)", file=sys.stderr)
    elif spec.measures_energy:
        objective = "[" + ", ".join(spec.objectives) + "]" if len(spec.objectives) > 1 else spec.objectives[0]
        raise AutotuneError(f"objective {objective} needs energy readings, but {meter.reason}")
    else:
        print(f"autotune: energy will not be measured: {meter.reason}", file=sys.stderr)
    meter.close()


def pareto_points(o: Any, spec: Any) -> list[dict[str, Any]] | None:
    """The time-energy front of a shape as stored beside its fastest entry (None when energy was not tuned)."""
    from ..kernels import FAMILIES

    if not o.pareto:
        return None
    family = FAMILIES[spec.kernel]
    return [
        {
            "template": family.resolve(spec.template, r.config.as_dict()),
            "params": {k: v for k, v in r.config.as_dict().items() if k != "TEMPLATE"},
            "kernel_name": r.kernel_name, "median_ms": r.median_ms,
            "energy_j": r.energy_j, "gflops_per_j": r.gflops_per_j, "tflops": r.tflops,
            "energy_method": r.energy_method, "verified": True, "error": r.error,
        }
        for r in o.pareto
    ]  # fmt: skip


def _versions(gpu: Any, nvrtc: str) -> dict[str, str]:
    import cupy

    return {"cuda_driver": gpu.driver, "cuda_runtime": gpu.runtime, "nvrtc": nvrtc, "cupy": cupy.__version__}


def tuned_entry(spec: Any, o: Any, settings: Any, versions: dict[str, str]) -> dict[str, Any]:
    """The stored record of a shape's verified winner, with the vendor's time measured beside it."""
    from ..kernels import FAMILIES

    b = o.best
    t = b.timing
    return {
        "template": FAMILIES[spec.kernel].resolve(spec.template, b.config.as_dict()),
        "params": {k: v for k, v in b.config.as_dict().items() if k != "TEMPLATE"},
        "kernel_name": b.kernel_name, "template_hash": b.template_hash, "source_hash": b.source_hash,
        "verified": True, "error": b.error, "tolerance": settings.tolerance,
        "median_ms": t.median_ms, "min_ms": t.min_ms, "max_ms": t.max_ms, "iqr_ms": t.iqr_ms, "repeats": t.repeats,
        "tflops": b.tflops, "gbps": b.gbps, "registers": b.registers,
        "extra_bytes": b.extra_bytes,  # unrolled matrix, packed operands, split partials (0: none)
        "energy_j": b.energy_j, "gflops_per_j": b.gflops_per_j, "energy_method": b.energy_method,
        "objective": list(spec.objectives),
        "vendor": o.vendor_name, "vendor_median_ms": o.vendor.median_ms if o.vendor else None,
        "vendor_ratio": o.vendor_ratio,
        "versions": versions, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "trials": o.evaluated, "spec": spec.path, "study": o.study_name,
    }  # fmt: skip


def with_sampler(spec: Any, sampler: str | None) -> Any:
    """The spec with ``--sampler`` applied, refusing a sampler its objective cannot use."""
    if not sampler:
        return spec
    from .spec import sampler_problem

    problem = sampler_problem(spec.objective, sampler)
    if problem:
        raise AutotuneError(f"--sampler {problem}")
    return replace(spec, sampler=sampler)
