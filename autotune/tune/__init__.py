"""The search: specs and workloads, samplers, the Optuna loop, the finalists' re-timing, sessions across shapes
and GPUs, the SIMT ladder, and replays of recorded spaces (T4 records)."""
