"""Kernel families: one module each, describing problems, templates, launches and references."""

from __future__ import annotations

from .base import Family, TemplateInfo
from .conv import CONV
from .gemm import GEMM

FAMILIES: dict[str, Family] = {GEMM.name: GEMM, CONV.name: CONV}

__all__ = ["FAMILIES", "Family", "TemplateInfo"]
