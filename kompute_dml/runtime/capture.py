"""Per thread, the Recording this thread's executions go into (Device.capture,
Engine.capture_into): captured, not run."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class CaptureSlot(threading.local):
    """A class attribute gives threads that never captured None without the AttributeError
    getattr(local, name, default) raises and catches on every execution."""

    rec: Any = None

    @contextlib.contextmanager
    def into(self, rec: Any) -> Iterator[Any]:
        """Executions go into `rec` inside; `rec` None: they run, also inside an open capture, which
        goes on after (Device.uncaptured)."""
        if rec is not None and self.rec is not None:
            raise RuntimeError("a capture is already open on this thread")
        before, self.rec = self.rec, rec
        try:
            yield rec
        finally:
            self.rec = before if rec is None else None
