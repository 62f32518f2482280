"""Which implementation serves a problem: a stored winner, an online choice, or the vendor library.

The rule, in order (``decide``, pure: the tests drive it with fakes):

1. exact: this GPU's stored entry for the problem, if it beat the vendor time measured with it; an entry
   slower than its vendor is replaced by the vendor (where one exists here);
2. online: the choice remembered for this problem in the user's cache (``autotune.serve.choices``), else, on this
   first call, the fastest verified of a handful of candidates measured now (``autotune.serve.online``);
3. vendor: when the online choice is off (``AUTOTUNE_ONLINE=0`` or ``set_online(False)``), or for a problem
   first seen while a CUDA graph is captured (then nothing is measured, compiled or loaded, and the decision
   is made again on the next call; a problem served before the capture keeps its launcher);
4. where no vendor library is reachable (cuDNN without torch), the lookup chain's own choice, with one warning.

``AUTOTUNE_VENDOR=0`` skips all of this: the lookup chain's kernel serves (for kernel work and its tests).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import AutotuneError

log = logging.getLogger(__name__)

ENV_ONLINE = "AUTOTUNE_ONLINE"
ENV_VENDOR = "AUTOTUNE_VENDOR"  # "0": serve our kernels as the lookup chain finds them (kernel work, tests)
_OFF = ("0", "false", "no", "off")
_flag: bool | None = None
_warned: set[str] = set()
_forgets: list[Callable[[], None]] = []  # memos of decisions (the runtime's launchers), cleared by set_online


def on_setting_change(forget: Callable[[], None]) -> None:
    """Have ``set_online`` call ``forget`` (once registered, however often asked): a layer that memoizes the
    decisions made here (``runtime.forget_launchers``) registers its own clearing, so this module imports none."""
    if forget not in _forgets:
        _forgets.append(forget)


def set_online(enabled: bool | None) -> None:
    """Turn the online choice on or off for this process (None: follow ``$AUTOTUNE_ONLINE``, on by default).
    Off, problems with no exact entry go to the vendor library."""
    global _flag
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_online takes True, False or None, got {enabled!r}")
    _flag = enabled
    for forget in _forgets:  # decisions made under the other setting no longer apply
        forget()


def online_enabled(override: bool | None = None) -> bool:
    """The call's ``online=`` if given, else ``set_online``'s, else ``$AUTOTUNE_ONLINE`` (unset: on)."""
    if override is not None:
        return override
    if _flag is not None:
        return _flag
    return os.environ.get(ENV_ONLINE, "1").strip().lower() not in _OFF


def vendor_enabled() -> bool:
    """False under ``AUTOTUNE_VENDOR=0``: no vendor substitution and no online choice; the lookup chain's
    kernel serves (exact, nearest, same-arch, default), as when developing or testing kernels."""
    return os.environ.get(ENV_VENDOR, "1").strip().lower() not in _OFF


@dataclass(frozen=True)
class Decision:
    """What serves a problem. ``template`` None: the vendor library."""

    step: str  # exact | online | vendor | nearest | same-arch | default
    template: str | None
    params: dict[str, Any] | None
    source: str
    why: str
    record: dict[str, Any] | None = field(default=None, compare=False)  # the online measurement
    final: bool = True  # False: made while capturing; the next call decides again
    entry: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def vendor(self) -> bool:
        return self.template is None


def _ours(lookup: Any, step: str, why: str, final: bool = True) -> Decision:
    return Decision(step, lookup.template, dict(lookup.params), lookup.source, why, final=final, entry=lookup.entry)


def _exact(lookup: Any, vendor: str | None, missing: str) -> Decision | None:
    """The exact entry's decision, or None when it has no vendor time to be judged by."""
    e = lookup.entry or {}
    ours, theirs = e.get("median_ms"), e.get("vendor_median_ms")
    if not isinstance(ours, (int, float)) or not isinstance(theirs, (int, float)):
        return None
    against = f"{ours:.4g} ms stored against {e.get('vendor', 'the vendor')} {theirs:.4g} ms"
    if ours <= theirs:
        return _ours(lookup, "exact", against)
    if vendor is not None:
        return Decision("vendor", None, None, vendor, f"the stored entry is slower than the vendor ({against})")
    _warn(missing)
    return _ours(lookup, "exact", f"{against}, but {missing}")


def from_record(record: dict[str, Any], vendor: str | None, cached: bool) -> Decision:
    """The decision an online measurement record (fresh or from the cache) stands for."""
    how = "remembered" if cached else "measured now"
    i = record["winner"]
    row = record["candidates"][i]
    times = ", ".join(f"{r['name']} {r['median_ms']:.4g} ms" for r in record["candidates"] if r.get("median_ms"))
    why = f"fastest verified candidate ({how}): {times}"
    if record["served"] == "vendor":
        return Decision("online", None, None, vendor or row["name"], why, record)
    return Decision("online", record["template"], dict(record["params"]), f"online {row['source']}", why, record)


def decide(lookup: Any, *, vendor: str | None, vendor_missing: str, online: bool, capturing: bool,
           cached: dict[str, Any] | None, measure: Callable[[], dict[str, Any]]) -> Decision:  # fmt: skip
    """Apply the rule above. ``lookup``: the lookup chain's Choice (None when no template of ours computes the
    problem); ``vendor``: the vendor's name, or None with ``vendor_missing`` saying why; ``cached``: a valid
    remembered record; ``measure()``: the online measurement's record."""
    if vendor is None:
        _warn(vendor_missing)  # once per sentence: ours serves unchecked against a vendor
    elif capturing:  # nothing is measured, compiled or loaded while a graph is captured
        why = "first seen while a CUDA graph was captured: the vendor serves until the next call decides"
        return Decision("vendor", None, None, vendor, why, final=False)
    if lookup is not None and lookup.step == "exact":
        exact = _exact(lookup, vendor, vendor_missing)
        if exact is not None:
            return exact
    if cached is not None and online:
        return from_record(cached, vendor, cached=True)
    if not online or capturing:
        why = "the online choice is off" if not online else "a CUDA graph is being captured: nothing is measured"
        if vendor is not None:
            return Decision("vendor", None, None, vendor, why, final=not capturing)
        if lookup is None:
            raise AutotuneError(f"no kernel of ours computes this problem and {vendor_missing}")
        _warn(vendor_missing)
        return _ours(lookup, lookup.step, f"{why}; {vendor_missing}", final=not capturing)
    record = measure()
    if record["served"] != "none":
        return from_record(record, vendor, cached=False)
    reasons = "; ".join(f"{r['name']}: {r.get('reason')}" for r in record["candidates"]) or record.get("reason")
    if vendor is not None:  # nothing could be measured (out of memory, say): the vendor, unmeasured
        return Decision("vendor", None, None, vendor, f"no candidate was measured ({reasons})", record, final=False)
    raise AutotuneError(f"no candidate verified for this problem ({reasons})")


def _warn(sentence: str) -> None:
    if sentence and sentence not in _warned:
        _warned.add(sentence)
        warnings.warn(sentence, stacklevel=4)
