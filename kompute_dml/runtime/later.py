"""Memory made on kp's thread (Engine.allocate's `later`): what may still be being made, and the
small spare buffers made ahead for small allocations asked for at once.

A plan's large buffers are made later, one after another on kp's thread (kp patch level 11). A
small buffer made at once meanwhile waits for the driver until the one being made is done (a
compile's device constant: a normalization's geometry), so such requests take one of SPARES buffers
of SPARE_WORDS words made ahead, and another is asked for in its place. With the plans' small host
values placed among their other host values (onnx_backend/plan_context.py), the allocation part of
MiniLM's 64 x 256 first run went from 3.5 to 0.3 ms on an H100 host (benchmarks/first_runs.py)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable

from ..core.errors import DMLError
from .memory import DeviceMemory

SPARES = 4
SPARE_WORDS = 256


class MadeLater:
    """One engine's memory made later (callers hold the engine's lock)."""

    def __init__(self) -> None:
        self._making: list[weakref.ref[DeviceMemory]] = []  # maybe still being made
        self.spares: list[DeviceMemory] = []

    def started(self, memory: DeviceMemory) -> None:
        self.pending()  # drops what is made or gone: the list holds only what may be pending
        self._making.append(weakref.ref(memory))

    def pending(self) -> bool:
        """Whether memory made later is still being made (the driver holds submissions up meanwhile)."""
        self._making = [r for r in self._making if (m := r()) is not None and not m.ready]
        return bool(self._making)

    def spare(self, make: Callable[[], DeviceMemory]) -> DeviceMemory | None:
        """A spare that exists (no longer a spare), or None; then spares are asked for (`make`: one
        of SPARE_WORDS words, made later) until there are SPARES again."""
        taken = None
        for m in [m for m in self.spares if m.ready]:
            self.spares.remove(m)
            try:
                m.tensor  # noqa: B018  (made: at once; one whose making failed is dropped)
            except DMLError:
                continue
            taken = m
            break
        with contextlib.suppress(DMLError):  # (no spare beyond the budget: the caller allocates)
            while len(self.spares) < SPARES:
                self.spares.append(make())
        return taken
