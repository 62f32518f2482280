"""How tests/data/recorded.journal was made: a faithful subset of a real H200 run, nothing invented.

    python3 tests/data/record.py /path/to/nvidia-h200-sm90.journal tests/data/recorded.journal

Copies, with Optuna's own API, from two studies: every non-duplicate trial that was timed or failed
(complete, pruned, compile/verify/launch-failed, ...) and, to keep the file small, every
``INVALID_EVERY``-th invalid one (rejected by a constraint, a device limit or register spills).
Params, state, value, user_attrs and start/end times are unchanged; trials are renumbered from 0 in
their original order and keep their original number in the user attr ``recorded_from_trial``.
``--first N`` keeps only the first N of the copied trials per study (a shorter run, for compare tests).
"""

from __future__ import annotations

import argparse
import copy
import shutil
import tempfile
from pathlib import Path

INVALID_EVERY = 8
STUDIES = ("gemm.simt.float32.4096x4096x4096.34107aaa", "gemm.simt.float32.16x4096x4096.34107aaa")


def record(source: Path, dest: Path, first: int | None = None, studies: tuple[str, ...] = STUDIES) -> None:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    with tempfile.TemporaryDirectory() as tmp:  # the backend wants a lock file beside the journal
        copy_of = Path(tmp) / source.name
        shutil.copyfile(source, copy_of)
        src = JournalStorage(JournalFileBackend(str(copy_of)))
        dest.unlink(missing_ok=True)
        out = JournalStorage(JournalFileBackend(str(dest)))
        for name in studies:
            old = optuna.load_study(study_name=name, storage=src)
            new = optuna.create_study(study_name=name, storage=out, directions=old.directions)
            kept, rejected = [], 0
            for t in old.get_trials(deepcopy=False):
                if "duplicate_of" in t.user_attrs:
                    continue
                if t.user_attrs.get("status") == "invalid":
                    rejected += 1
                    if rejected % INVALID_EVERY != 1:
                        continue
                kept.append(t)
            for t in kept[:first]:
                t = copy.deepcopy(t)
                t.set_user_attr("recorded_from_trial", t.user_attrs.get("recorded_from_trial", t.number))
                new.add_trial(t)
    Path(f"{dest}.lock").unlink(missing_ok=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--first", type=int)
    args = ap.parse_args()
    record(args.source, args.dest, args.first)
