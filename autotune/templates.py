"""Rendering CUDA templates with Jinja2: parameters in, source + hashes + kernel name out."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
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


def template_dir(kernel: str) -> str:
    """The folder of a family's templates: its ``template_dir`` when it has one (conv2d: conv), else its name."""
    return getattr(FAMILIES[kernel], "template_dir", kernel)


def template_path(kernel: str, template: str) -> Path:
    return template_root() / template_dir(kernel) / f"{template}.cu.j2"


@functools.cache
def template_hash(kernel: str, template: str) -> str:
    """Content hash of the template file (for "auto", of every template it chooses from): provenance."""
    family = FAMILIES[kernel]
    if template == "auto":
        names = [t for t in family.templates if t not in ("auto", "naive")]
        return hashlib.sha256("".join(template_hash(kernel, t) for t in names).encode()).hexdigest()[:16]
    return hashlib.sha256(template_path(kernel, template).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class Rendered:
    kernel_name: str
    source: str
    source_hash: str
    template_hash: str
    template: str  # the concrete template rendered ("auto" resolved)


def render(kernel: str, template: str, params: dict[str, Any], problem: Any) -> Rendered:
    """Render one candidate: its parameters, the family's derived values and the problem's variant
    (dtype, layout; never the shape: one source serves every shape) form the context."""
    family = FAMILIES[kernel]
    concrete = family.resolve(template, params)
    name = family.kernel_name(concrete, params, problem)
    context = {**params, **family.context(concrete, params, problem), "kernel_name": name}
    source = _environment().get_template(f"{template_dir(kernel)}/{concrete}.cu.j2").render(context)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return Rendered(name, source, digest, template_hash(kernel, concrete), concrete)


def renders_as_stored(kernel: str, entry: Mapping[str, Any], problem: Any) -> bool:
    """Whether the installed template gives a stored entry the source it was verified with: the same template
    file (``template_hash``), or, after the file changed, the same rendered source for the entry's own problem
    (``source_hash``), as when a parameter added later renders at its default exactly as before."""
    template = str(entry.get("template"))
    if entry.get("template_hash") == template_hash(kernel, template):
        return True
    stored = entry.get("source_hash")
    if not stored or FAMILIES[kernel].check(template, entry.get("params", {})) is not None:
        return False
    return render(kernel, template, dict(entry["params"]), problem).source_hash == stored
