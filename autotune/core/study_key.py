"""The name of an Optuna study, built and parsed in one place.

A study holds one (kernel, template, dtype, problem, layout) under one template text and one search space::

    gemm.simt.float32.4096x4096x4096.34107aaa                 # made before layouts and space digests
    gemm.auto.float16.255x257x253.TN.aab5e728.4b4eb4          # a transposed-A GEMM
    conv2d.auto.float32.n32c64h56w56k64r3s3u1p1.NCHW.b8b56748.38522f
    gemm.auto.float16.4096x4096x4096.aab5e728.4b4eb4.nvidia-h200-sm90   # in a storage shared by GPU models

Names are the keys of existing journals, so they stay byte-identical: the layout is left out when it is
``NN`` (names from before layouts existed leave it out), and the space digest is absent in the oldest names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The layout old names leave out: GEMM's NN, from before layouts were part of the name.
UNNAMED_LAYOUT = "NN"

_NAME = re.compile(
    r"(?P<kernel>[^.]+)\.(?P<template>[^.]+)\.(?P<dtype>[^.]+)\.(?P<shape>[^.]+)"
    r"(?:\.(?P<layout>[A-Z]+))?\.(?P<hash>[0-9a-f]+)(?:\.(?P<digest>[0-9a-f]+))?(?:\.(?P<gpu>[a-z][a-z0-9-]*))?"
)


@dataclass(frozen=True)
class StudyKey:
    """What a study name says. ``template_hash8``: the template file's hash (8 hex digits); ``space_digest``:
    the search space's (6 hex digits), or None in names made before spaces were hashed.

    Example::

        >>> StudyKey.parse("gemm.simt.float32.16x4096x4096.34107aaa").shape_label
        '16x4096x4096'
    """

    kernel: str
    template: str
    dtype: str
    shape_label: str
    layout: str
    template_hash8: str
    space_digest: str | None = None
    gpu_key: str = ""  # in a storage shared by several GPU models (--storage): the GPU the timings belong to

    @property
    def name(self) -> str:
        """The study name: ``kernel.template.dtype.shape[.layout].template_hash8[.space_digest]``."""
        parts = [self.kernel, self.template, self.dtype, self.shape_label]
        if self.layout != UNNAMED_LAYOUT:
            parts.append(self.layout)
        parts.append(self.template_hash8)
        if self.space_digest is not None:
            parts.append(self.space_digest)
        if self.gpu_key:
            parts.append(self.gpu_key)
        return ".".join(parts)

    @classmethod
    def parse(cls, name: str) -> StudyKey | None:
        """The key a name was built from; None for a name this module does not build (another tool's study)."""
        m = _NAME.fullmatch(name)
        if m is None:
            return None
        key = cls(
            m["kernel"],
            m["template"],
            m["dtype"],
            m["shape"],
            m["layout"] or UNNAMED_LAYOUT,
            m["hash"],
            m["digest"],
            m["gpu"] or "",
        )
        return key if key.name == name else None  # e.g. an explicit ".NN." is not a name we build
