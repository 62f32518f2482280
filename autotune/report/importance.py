"""Parameter importance: Optuna's evaluators over each study's complete trials, and its plot."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

from .figures import PlotSkipped, figure, groups
from .studies import Study

MIN_IMPORTANCE_TRIALS = 5  # fewer complete trials than this say nothing about parameter importance


def param_importances(trials_of_study: Sequence[Any], direction: str = "minimize") -> tuple[dict[str, float], str]:
    """Optuna's parameter importances over the complete trials of one study, and the evaluator's name.

    fANOVA (Optuna's default) when scikit-learn is installed, PED-ANOVA otherwise. PlotSkipped when the
    study has too few complete trials or Optuna cannot compute them.
    """
    import importlib.util

    import optuna
    from optuna.trial import TrialState

    done = [t for t in trials_of_study if t.state == TrialState.COMPLETE]
    if len(done) < MIN_IMPORTANCE_TRIALS:
        raise PlotSkipped(f"{len(done)} complete trials (importance needs {MIN_IMPORTANCE_TRIALS})")
    if importlib.util.find_spec("sklearn") is not None:
        evaluator, name = optuna.importance.FanovaImportanceEvaluator(seed=0), "fANOVA"
    else:
        evaluator, name = optuna.importance.PedAnovaImportanceEvaluator(), "PED-ANOVA"
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n = len(done[0].values)  # a time-energy study has two values: rank parameters for the time
            study = optuna.create_study(directions=[direction] * n)
            study.add_trials(done)
            target = (lambda t: t.values[0]) if n > 1 else None
            importances = optuna.importance.get_param_importances(study, evaluator=evaluator, target=target)
    except Exception as exc:  # noqa: BLE001 - any failure of Optuna here costs one plot, not the report
        raise PlotSkipped(f"Optuna could not compute importances ({type(exc).__name__}: {exc})") from None
    finally:
        optuna.logging.set_verbosity(verbosity)
    if not importances:
        raise PlotSkipped("Optuna found no parameter to rank")
    return dict(importances), name


def plot_importance(df: Any, studies: Sequence[Study], notes: list[str]) -> Any:
    """One bar chart of parameter importance per study with enough complete trials; the others go to ``notes``."""
    by_key = {(s.run, s.name): s for s in studies}
    results = []
    for title, g in groups(df):
        st = by_key[(g["run"].iloc[0], g["study"].iloc[0])]
        kept = [t for t in st.trials if "duplicate_of" not in t.user_attrs]
        try:
            imp, evaluator = param_importances(kept)
        except PlotSkipped as exc:
            notes.append(f"parameter importance for {title} skipped: {exc}")
            continue
        results.append((title, imp, evaluator, int((g["status"] == "complete").sum())))
    if not results:
        raise PlotSkipped("no study had enough complete trials for parameter importance")
    ncols = min(2, len(results))
    nrows = math.ceil(len(results) / ncols)
    fig = figure(12, 0.6 + 3.6 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (title, imp, evaluator, n) in zip(axes, results, strict=False):
        names = list(imp)[::-1]
        ax.barh(names, [imp[k] for k in names], color="#1f77b4")
        ax.set_xlabel("importance for the median time")
        ax.set_title(f"{title}\n{evaluator} over {n} complete trials", fontsize="medium")
        ax.grid(axis="x", alpha=0.3)
    for ax in axes[len(results) :]:
        ax.set_visible(False)
    return fig
