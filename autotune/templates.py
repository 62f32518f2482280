"""Rendering CUDA templates with Jinja2: parameters in, source + hashes + kernel name out."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from .kernels import FAMILIES


@functools.cache
def template_root() -> Path:
    """templates/ beside the package in a checkout or editable install, else the installed copy."""
    here = Path(__file__).resolve().parent.parent / "templates"
    if here.is_dir():
        return here
    return Path(str(resources.files("autotune") / "_templates"))


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_root())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def template_path(kernel: str, template: str) -> Path:
    return template_root() / kernel / f"{template}.cu.j2"


@functools.cache
def template_hash(kernel: str, template: str) -> str:
    """Content hash of the template file: part of every stored result's provenance."""
    return hashlib.sha256(template_path(kernel, template).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class Rendered:
    kernel_name: str
    source: str
    source_hash: str
    template_hash: str


def render(kernel: str, template: str, params: dict[str, Any]) -> Rendered:
    """Render one candidate; parameters and the family's derived values form the context."""
    family = FAMILIES[kernel]
    name = family.kernel_name(template, params)
    context = {**params, **family.derived(template, params), "kernel_name": name}
    source = _environment().get_template(f"{kernel}/{template}.cu.j2").render(context)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return Rendered(name, source, digest, template_hash(kernel, template))
