"""Write the SASS of one rendered candidate (for reading instruction mixes on a host with cuobjdump):

    python3 benchmarks/probes/dump_sass.py conv2d winograd 1,64,56,56,64,3,3,1,1 float32 NCHW \\
        '{"TILES": 32, ...}' out.sass

Renders with the search's own path, compiles to a cubin with nvcc, then runs `cuobjdump -sass` (or
`nvdisasm -c`) on it and prints a count of each opcode (FFMA, LDS, LDG, STS, BAR...)."""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autotune.compiler import target_arch
from autotune.evaluate import Candidate, Settings, render_candidate
from autotune.kernels import FAMILIES
from autotune.space import Config


def main() -> int:
    family, template, shape, dtype, layout, params, out = sys.argv[1:8]
    fam = FAMILIES[family]
    problem = fam.problem([int(v) for v in shape.split(",")], dtype, layout)
    c = render_candidate(
        Candidate(family, template, problem, Config.of(json.loads(params))),
        Settings(arch="sm_90", tolerance=1e-5, max_shared_bytes=227 * 1024),
    )
    if c.status is not None:
        print(c.reason)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.cu"
        src.write_text(c.source)
        cubin = Path(tmp) / "k.cubin"
        arch = target_arch(c.source, "sm_90")  # sm_90a for wgmma sources; the -gencode form compiles only that target
        gencode = f"-gencode=arch=compute_{arch[3:]},code={arch}"
        subprocess.run(["nvcc", gencode, "-cubin", "-O3", "-o", str(cubin), str(src)], check=True)
        tool = ["cuobjdump", "-sass"] if shutil.which("cuobjdump") else ["nvdisasm", "-c"]  # either prints SASS
        sass = subprocess.run([*tool, str(cubin)], check=True, capture_output=True, text=True).stdout
    Path(out).write_text(sass)
    opcode = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9.]+)")
    ops = collections.Counter(m.group(1).split(".")[0] for m in opcode.finditer(sass))
    for op, n in ops.most_common(25):
        print(f"{op:<10} {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
