"""Rendering CUDA templates with Jinja2: parameters in, source + hashes + kernel name out."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta

from ..core.errors import AutotuneError
from ..kernels import FAMILIES


@functools.cache
def template_root() -> Path:
    """templates/ beside the package in a checkout or editable install, else the installed copy."""
    here = Path(__file__).resolve().parents[2] / "templates"
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
    return FAMILIES[kernel].template_dir


def template_path(kernel: str, template: str) -> Path:
    return template_root() / template_dir(kernel) / f"{template}.cu.j2"


@functools.cache
def template_hash(kernel: str, template: str) -> str:
    """Content hash of the template file (for "auto", of every template it chooses from): provenance."""
    family = FAMILIES[kernel]
    if template == "auto":
        names = family.auto_choices()
        return hashlib.sha256("".join(template_hash(kernel, t) for t in names).encode()).hexdigest()[:16]
    return hashlib.sha256(_with_shared(f"{template_dir(kernel)}/{template}.cu.j2")).hexdigest()[:16]


def _with_shared(name: str) -> bytes:
    """A template file's bytes, followed by those of the files it includes or imports by a literal name
    (``common/cp_async.cuh.j2``), recursively: a change to a shared PTX helper changes the hash of every template
    that uses it. A file that names none hashes as its bytes alone; a name built while rendering (im2col_gemm's
    GEMM template) is covered by the rendered source's hash instead."""
    data = (template_root() / name).read_bytes()
    for shared in jinja2.meta.find_referenced_templates(jinja2.Environment().parse(data.decode())):
        if shared is not None:
            data += _with_shared(shared)
    return data


class TemplateRenderError(AutotuneError):
    """A template cannot be rendered: ``file:line: what Jinja says`` (syntax, undefined name, missing include)."""


def render_file(name: str, context: dict[str, Any]) -> str:
    """Render the template ``name`` (relative to :func:`template_root`) with ``context``.

    A Jinja error becomes a :class:`TemplateRenderError` of one line naming the template file and line, e.g.
    ``templates/gemm/simt.cu.j2:42: 'BM' is undefined``.
    """
    try:
        return _environment().get_template(name).render(context)
    except jinja2.TemplateSyntaxError as exc:  # the file (or a file it includes) does not parse
        raise TemplateRenderError(f"{_where(exc.filename or exc.name or name, exc.lineno)}: {exc.message}") from None
    except jinja2.TemplateNotFound as exc:
        file, line = _template_frame(exc.__traceback__)
        what = f"{exc.name} is not a template under {_shown(str(template_root()))}"
        if file is None:  # the top-level template itself
            raise TemplateRenderError(what) from None
        raise TemplateRenderError(f"{_where(file, line)}: includes {what}") from None
    except jinja2.TemplateError as exc:  # UndefinedError and the rest: raised while rendering, at a template line
        file, line = _template_frame(exc.__traceback__)
        raise TemplateRenderError(f"{_where(file or name, line)}: {exc.message or type(exc).__name__}") from None


def _template_frame(tb: Any) -> tuple[str | None, int | None]:
    """The innermost traceback frame in a template file: Jinja rewrites its frames to the template's lines."""
    found: tuple[str | None, int | None] = (None, None)
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            found = (filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _shown(path: str) -> str:
    """A template path as people read it: relative to the checkout (``templates/gemm/simt.cu.j2``) when inside."""
    p = Path(path)
    for base in (Path.cwd(), template_root().parent):
        try:
            return str(p.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return path


def _where(path: str, line: int | None) -> str:
    return f"{_shown(path)}:{line}" if line else _shown(path)


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
    source = render_file(f"{template_dir(kernel)}/{concrete}.cu.j2", context)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return Rendered(name, source, digest, template_hash(kernel, concrete), concrete)


def fits_installed(kernel: str, template: str, params: dict[str, Any]) -> bool:
    """Whether stored parameters pass the installed template's checks. An entry stored by another version of
    the template can lack a parameter it has since gained: that is a misfit, not an error."""
    family = FAMILIES[kernel]
    if template not in family.templates:
        return False
    info = family.templates[template]
    if set(info.params) - set(info.optional) - set(params):  # a parameter the template has gained since
        return False
    try:
        return family.check(template, params) is None
    except (KeyError, TypeError):  # a parameter the installed template needs is missing or of another kind
        return False


def installed_renders(kernel: str, entry: dict[str, Any], problem: Any) -> bool:
    """Whether a stored entry's kernel is what the installed templates render for its own problem: tuned with
    this template file (same template hash), or the file changed since in ways that leave this entry's source
    byte-identical (same source hash, e.g. a variant added for other problems). False when the installed
    template's checks refuse the stored parameters or one it needs is missing; a stored parameter it no longer
    reads (e.g. one since removed) does not matter while the source it renders is unchanged."""
    template = str(entry.get("template"))
    if not fits_installed(kernel, template, dict(entry.get("params", {}))):
        return False
    if entry.get("template_hash") == template_hash(kernel, template):
        return True
    stored = entry.get("source_hash")
    if not stored:
        return False
    params = tuple(sorted(dict(entry.get("params", {})).items()))
    return _source_hash(kernel, template, params, problem) == stored


@functools.lru_cache(maxsize=1024)
def _source_hash(kernel: str, template: str, params: tuple[tuple[str, Any], ...], problem: Any) -> str:
    return render(kernel, template, dict(params), problem).source_hash
