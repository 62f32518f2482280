"""Optuna samplers by name, with the settings the replays chose (see benchmarks/results/replay_vs_kernel_tuner.md)."""

from __future__ import annotations

import warnings
from typing import Any

from ..core.errors import AutotuneError

NSGA_POPULATION = 16  # NSGA-II's generation size: small, since energy costs 1-2 s per candidate
# Random trials before TPE models the space, chosen by replaying the three recorded spaces (benchmarks/results/
# replay_vs_kernel_tuner.md; evaluations to within 5% of the optimum, median of 30 seeds, with 10 | with 30 startup
# trials | random sampling): our H200 fp16 GEMM 21 | 29 | 86, CLBlast Xgemm 76 | 64 | 2000, A100 convolution 679 | 475
# | 2542. Only 10 keeps every record within a third of random's evaluations (30 gives 0.34 on the H200 record).
TPE_STARTUP = 10
# The default sampler of a kernel family for the time objective, where it is not TPE: chosen by the same replays
# (evaluations to within 5% of the optimum, median over seeds): on the A100 convolution record the genetic algorithm
# (autotune/tune/samplers_ga.py) needs 162.5 (300 seeds) against TPE's 679 and Kernel Tuner's genetic algorithm's
# 188; on the GEMM records TPE needs fewer (CLBlast 75.5 against 169, our H200 record 21 against 68). Two
# objectives: NSGA-II for every family.
FAMILY_DEFAULT = {"conv2d": "ga"}


def default_sampler(kernel: str, objective: str | tuple[str, ...] = "time") -> str:
    """The sampler a spec of kernel family ``kernel`` gets when it names none."""
    if isinstance(objective, tuple):
        return "nsga2"
    return FAMILY_DEFAULT.get(kernel, "tpe")


def make_sampler(name: str, seed: int) -> Any:
    import optuna

    if name == "tpe":
        with warnings.catch_warnings():  # multivariate/group are "experimental" but what conditional spaces need
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=TPE_STARTUP)
    if name in ("random", "brute"):  # brute enqueues every configuration itself, see _proposals
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        _need("torch", "gp")
        return optuna.samplers.GPSampler(seed=seed)
    if name == "cmaes":
        _need("cmaes", "cmaes")
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "ga":
        from .samplers_ga import GeneticSampler

        return GeneticSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=NSGA_POPULATION)
    raise AutotuneError(f"unknown sampler {name!r}")


def _need(module: str, sampler: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise AutotuneError(f"sampler {sampler!r} needs the package {module!r}; install it with pip install {module}")
