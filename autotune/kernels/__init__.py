"""Kernel families: one module each, describing problems, templates, launches and references.

Every template implements ``Template`` (template.py); every family derives from ``TemplateFamily`` (family.py),
which lists its templates in one registry and does the dispatch once.
"""

from __future__ import annotations

from .base import TemplateInfo
from .conv import CONV
from .family import TemplateFamily
from .gemm import GEMM
from .template import Template

Family = TemplateFamily  # the name the generic layers annotate with
FAMILIES: dict[str, TemplateFamily] = {GEMM.name: GEMM, CONV.name: CONV}

__all__ = ["FAMILIES", "Family", "Template", "TemplateFamily", "TemplateInfo"]
