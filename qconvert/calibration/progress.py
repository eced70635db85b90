"""The progress line of long calibration work (reading calibration files, running the samples)."""

from __future__ import annotations

import sys
import time


class Progress:
    """`LABEL: 37/100` on one \\r-rewritten stderr line, only when stderr is a terminal (a pipe or a
    file gets nothing), redrawn at most every 0.1 s."""

    def __init__(self, enabled: bool, total: int | None, label: str = "calibrating"):
        self.enabled = enabled and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.total = total
        self.label = label
        self.last = 0.0

    def update(self, done: int, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and now - self.last < 0.1:
            return
        self.last = now
        total = f"/{self.total}" if self.total is not None else ""
        sys.stderr.write(f"\r{self.label}: {done}{total}")
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()
