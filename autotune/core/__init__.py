"""Leaves every stage may use: errors, versions, device limits, the safe expression evaluator, safe YAML, search
spaces, typed records (tuned entries, trials, study keys), hooks, progress and TMA tensor maps."""
