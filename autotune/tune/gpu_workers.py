"""``autotune run SPEC --gpus 0,1,2,3``: one worker process per GPU of this host, all on the same studies.

Each worker is the same ``autotune run`` command with ``CUDA_VISIBLE_DEVICES`` set to its GPU and its share of
``--jobs`` for its own compile pool. They share the storage (the default journal, or ``--storage URL``), claim
configurations in it so none is evaluated twice (:mod:`autotune.studies.shared_study`), and one of them re-times each
shape's finalists. Their output goes to one log per GPU; the parent prints where, waits, and shows the result.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ..core.errors import AutotuneError

WORKER_ENV = "AUTOTUNE_WORKER"  # set in each worker: its studies are shared with the other workers


def parse_gpus(text: str, count: int, visible: str | None = None) -> list[str]:
    """The device ids to give the workers for ``--gpus`` (``all`` or indices such as ``0,1,3``).

    Indices count the GPUs this process sees; where ``CUDA_VISIBLE_DEVICES`` (``visible``) already narrows
    them, index i is its i-th entry, so each worker sees the GPU the user meant.

    >>> parse_gpus("0,2", 4)
    ['0', '2']
    >>> parse_gpus("all", 2, visible="5,7")
    ['5', '7']
    """
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(count)]
    ids = ids[:count]
    if text.strip() == "all":
        if not ids:
            raise AutotuneError("--gpus all: no CUDA GPU is visible on this host")
        return ids
    indices = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise AutotuneError(f"--gpus expects 'all' or GPU indices such as 0,1,2,3; got {text!r}")
        if int(part) >= len(ids):
            have = f"GPUs 0-{len(ids) - 1}" if ids else "no GPU"
            raise AutotuneError(f"--gpus {text}: there is no GPU {part}; this host has {have}")
        if int(part) in indices:
            raise AutotuneError(f"--gpus {text}: GPU {part} is named twice")
        indices.append(int(part))
    return [ids[i] for i in indices]


def visible_gpu_count() -> int:
    """How many CUDA GPUs this process sees (0 without CuPy or a driver)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: all mean none to use
        return 0


def worker_commands(argv: list[str], gpus: list[str], jobs: int) -> list[tuple[list[str], dict[str, str]]]:
    """The command line and environment of each GPU's worker: ``argv`` (the user's ``autotune`` arguments)
    without ``--gpus`` and with ``--jobs`` split between the workers."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--gpus", "--jobs"):
            skip = True
        elif not arg.startswith(("--gpus=", "--jobs=")):
            rest.append(arg)
    share = max(1, jobs // len(gpus))
    commands = []
    for gpu in gpus:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, WORKER_ENV: f"gpu{gpu}"}
        commands.append(([sys.executable, "-m", "autotune", *rest, "--jobs", str(share)], env))
    return commands


def run_workers(argv: list[str], gpus: list[str], jobs: int, log_dir: Path) -> int:
    """Start one worker per GPU, wait for all, print the result; the exit status is the worst worker's."""
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[tuple[str, subprocess.Popen, Path]] = []
    for (cmd, env), gpu in zip(worker_commands(argv, gpus, jobs), gpus, strict=True):
        log = log_dir / f"gpu{gpu}.log"
        with log.open("w") as out:
            procs.append((gpu, subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT), log))
    print(f"autotune: {len(procs)} workers on GPUs {','.join(gpus)}; their logs: {log_dir}/gpu*.log", file=sys.stderr)
    try:
        codes = _wait(procs)
    except KeyboardInterrupt:  # the workers got the same Ctrl-C: let them save and stop
        _stop(procs)
        raise
    for gpu, _, log in procs:
        code = codes[gpu]
        state = "done" if code == 0 else f"exit status {code}" if code > 0 else f"killed by signal {-code}"
        print(f"GPU {gpu}: {state} ({log})", file=sys.stderr)
    shown = next((log for gpu, _, log in procs if codes[gpu] == 0), procs[0][2])
    print(_result_of(shown.read_text(errors="replace")))
    return 0 if all(c == 0 for c in codes.values()) else max([1, *(c for c in codes.values() if c > 0)])


def _wait(procs: list[tuple[str, subprocess.Popen, Path]]) -> dict[str, int]:
    codes: dict[str, int] = {}
    while len(codes) < len(procs):
        for gpu, proc, log in procs:
            if gpu not in codes and proc.poll() is not None:
                codes[gpu] = proc.returncode
                if proc.returncode != 0:
                    print(f"GPU {gpu}: the worker stopped early; see {log}", file=sys.stderr)
        time.sleep(0.2)
    return codes


def _stop(procs: list[tuple[str, subprocess.Popen, Path]], grace_s: float = 60.0) -> None:
    deadline = time.monotonic() + grace_s
    for _, proc, _ in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()


def _result_of(text: str) -> str:
    """The final table and the results line of a worker's output (everything after its progress lines)."""
    parts = text.rstrip().rsplit("\n\n", 2)
    return "\n\n".join(parts[-2:]) if len(parts) >= 3 else "\n".join(text.rstrip().splitlines()[-15:])
