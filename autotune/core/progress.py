"""A small progress bar on stderr: redrawn in place on a terminal, a line per step elsewhere."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self,
        label: str,
        total: int | None,
        deadline_s: float | None,
        stream: TextIO | None = None,
        unit: str = "trials",
    ) -> None:
        self.label, self.total, self.deadline_s, self.unit = label, total, deadline_s, unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.done = 0
        self.note = ""
        self._last_line = 0.0

    def fraction(self) -> float:
        parts = []
        if self.total:
            parts.append(self.done / self.total)
        if self.deadline_s:
            parts.append((time.monotonic() - self.start) / self.deadline_s)
        return min(1.0, max(parts)) if parts else 0.0

    def update(self, done: int, note: str = "") -> None:
        self.done, self.note = done, note or self.note
        now = time.monotonic()
        if now - self._last_line < (0.1 if self.tty else 5.0):  # a terminal redraws 10 times a second at most
            return
        self._last_line = now
        self._draw(end="" if self.tty else "\n")

    def remaining_s(self) -> float | None:
        """Seconds left at the pace so far, when a total is known and something is done."""
        if not self.total or not self.done:
            return None
        return (time.monotonic() - self.start) / self.done * (self.total - self.done)

    def close(self, note: str = "") -> None:
        self.note = note or self.note
        self._draw(end="\n")

    def _draw(self, end: str) -> None:
        width = 24
        filled = int(self.fraction() * width)
        bar = "#" * filled + "-" * (width - filled)
        total = f"/{self.total}" if self.total else ""
        elapsed = time.monotonic() - self.start
        line = f"{self.label} [{bar}] {self.done}{total} {self.unit} {elapsed:5.0f}s  {self.note}"
        prefix = "\r\x1b[2K" if self.tty else ""
        self.stream.write(prefix + line + end)
        self.stream.flush()
