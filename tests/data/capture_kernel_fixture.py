"""Capture what the kernel families produce for every stored tuned entry (and each family's default
configurations): kernel name, rendered source hash, launch, scratch, extra bytes and check results.

Run from a checkout whose ``autotune`` is the one to capture (``PYTHONPATH`` at its root)::

    PYTHONPATH=/path/to/checkout python tests/data/capture_kernel_fixture.py > tests/data/kernel_fixture.json

tests/unit/test_kernel_fixture.py recomputes the same record with the checkout under test and compares.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from autotune.build.templates import render
from autotune.kernels import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
TUNED = ("tuned", "tests/data/tuned")
DEFAULTS = {"gemm": [(d, lay) for d in ("float32", "float16", "bfloat16", "tfloat32") for lay in ("NN", "TN")],
            "conv2d": [(d, lay) for d in ("float32", "float16") for lay in ("NCHW", "NHWC")]}  # fmt: skip
DEFAULT_SHAPES = {"gemm": "129x257x65", "conv2d": "n2c16h15w17k24r3s3u1p1"}
# templates no stored entry uses (and "auto"), each on odd shapes in every variant it computes
MMA = dict(BM=128, BN=128, BK=32, WM=64, WN=64, STAGES=3, SWIZZLE=True, RASTER=1)
EXTRA = [
    ("gemm", "naive", dict(BX=16, BY=16), "100x70x33", "float32", "NN"),
    (
        "gemm",
        "skinny_tc",
        dict(WARPS=8, CW=1, MB=64, KC=16, STAGES=4, SPLIT_K=8, MINB=1),
        "64x4096x4096",
        "float32",
        "TN",
    ),
    ("gemm", "auto", dict(TEMPLATE="mma", **MMA), "4095x4097x4093", "float16", "TT"),
    ("gemm", "mma", MMA, "4095x4097x4093", "float16", "NT"),
    ("conv2d", "direct", dict(TP=4, TQ=8, KB=32, QT=2, KT=4, CB=4, PAD=0), "n3c5h17w19k7r5s3u2p2", "float16", "NHWC"),
    (
        "conv2d",
        "implicit_simt",
        dict(BM=128, BN=128, BK=8, TM=8, TN=8, PAD=4),
        "n2c12h15w17k24r3s3u1p1",
        "float32",
        "NHWC",
    ),
    (
        "conv2d",
        "implicit_simt",
        dict(BM=64, BN=64, BK=8, TM=4, TN=4, PAD=4),
        "n2c3h15w17k24r3s3u2p1",
        "float16",
        "NCHW",
    ),
    (
        "conv2d",
        "implicit_wmma",
        dict(WARPS_M=2, WARPS_N=4, FRAGS_M=4, FRAGS_N=2, BK=32, PAD=8, STAGES=3),
        "n2c16h15w17k24r3s3u1p1",
        "float16",
        "NHWC",
    ),
    (
        "conv2d",
        "implicit_wmma",
        dict(WARPS_M=2, WARPS_N=4, FRAGS_M=4, FRAGS_N=2, BK=32, PAD=8, STAGES=3),
        "n2c5h15w17k24r3s3u1p1",
        "float16",
        "NCHW",
    ),
    (
        "conv2d",
        "im2col_gemm",
        dict(GEMM="mma", IM_THREADS=256, **{"G_" + k: v for k, v in MMA.items()}),
        "n2c16h15w17k24r3s3u1p1",
        "float16",
        "NHWC",
    ),
    (
        "conv2d",
        "auto",
        dict(TEMPLATE="implicit_mma", BM=128, BN=128, BK=32, WM=64, WN=64, STAGES=3, SPLIT_K=4),
        "n1c64h14w14k128r3s3u1p1",
        "float16",
        "NHWC",
    ),
]


def record(kernel: str, template: str, params: dict[str, Any], problem: Any) -> dict[str, Any]:
    """What the family makes of one configuration on one problem."""
    family = FAMILIES[kernel]
    r = render(kernel, template, params, problem)
    launch = family.launch(template, params, problem)
    extra = getattr(family, "extra_bytes", None)
    return {
        "kernel_name": r.kernel_name,
        "source_hash": r.source_hash,
        "source_sha256": hashlib.sha256(r.source.encode()).hexdigest(),
        "template": r.template,
        "grid": list(launch.grid),
        "block": list(launch.block),
        "shared_bytes": launch.shared_bytes,
        "before": [[s.kernel_name, list(s.grid), list(s.block), s.shared_bytes] for s in launch.before],
        "scratch": list(s) if (s := family.scratch(template, params, problem)) is not None else None,
        "extra_bytes": extra(template, params, problem) if extra else 0,
        "check": family.check(template, params),
        "check_problem": family.check_problem(template, params, problem),
    }


def cases(root: Path = ROOT) -> list[tuple[str, str, str, dict[str, Any], Any]]:
    """(case id, kernel, template, params, problem) for every stored entry and every default configuration."""
    out = []
    for folder in TUNED:
        for path in sorted((root / folder).glob("*/*.json")):
            kernel = path.stem
            for key, e in json.loads(path.read_text())["entries"].items():
                dtype, layout, label = key.split("/")
                problem = FAMILIES[kernel].problem(label, dtype, layout)
                out.append((f"{path.relative_to(root)}:{key}", kernel, e["template"], e["params"], problem))
    for kernel, variants in DEFAULTS.items():
        for dtype, layout in variants:
            try:
                template, params = FAMILIES[kernel].default_config(dtype, layout)
            except ValueError:
                continue
            problem = FAMILIES[kernel].problem(DEFAULT_SHAPES[kernel], dtype, layout)
            out.append((f"default:{kernel}/{dtype}/{layout}", kernel, template, params, problem))
    for kernel, template, params, label, dtype, layout in EXTRA:
        problem = FAMILIES[kernel].problem(label, dtype, layout)
        out.append((f"extra:{kernel}/{template}/{label}/{dtype}/{layout}", kernel, template, params, problem))
    return out


def main() -> None:
    fixture = {case: record(kernel, t, p, problem) for case, kernel, t, p, problem in cases()}
    json.dump(fixture, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
