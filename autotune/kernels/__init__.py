"""Kernel families: one module each, describing problems, templates, launches and references."""

from __future__ import annotations

from .base import Family, TemplateInfo
from .gemm import GEMM

FAMILIES: dict[str, Family] = {GEMM.name: GEMM}

__all__ = ["FAMILIES", "Family", "TemplateInfo"]
