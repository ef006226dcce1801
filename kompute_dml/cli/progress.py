"""What a command is doing while the user waits: each stage named as it starts, on standard error
so the results on standard output stay clean. On a terminal a rich spinner with the elapsed time
(or a bar where the stage counts steps); piped, one line when a stage starts, one every
HEARTBEAT_S seconds while it lasts, and one with its time when it ends. `quiet` silences it."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

HEARTBEAT_S = 5.0


class Stages:
    def __init__(self, command: str, quiet: bool = False, stream: Any = None) -> None:
        self.command = command
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    @contextlib.contextmanager
    def stage(self, text: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        """A stage of `total` steps (None: one piece of work); yields advance(n)."""
        if self.quiet:
            yield lambda n=1: None
            return
        if self.tty:
            with self._rich(text, total) as advance:
                yield advance
            return
        with self._lines(text, total) as advance:
            yield advance

    @contextlib.contextmanager
    def _rich(self, text: str, total: int | None) -> Iterator[Callable[[int], None]]:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if total:
            columns += [BarColumn(), TextColumn("{task.completed}/{task.total}")]
        with Progress(*columns, TimeElapsedColumn(), console=Console(file=self.stream), transient=True) as bar:
            task = bar.add_task(text, total=total)
            yield lambda n=1: bar.advance(task, n)

    @contextlib.contextmanager
    def _lines(self, text: str, total: int | None) -> Iterator[Callable[[int], None]]:
        done = [0]
        t0 = time.perf_counter()
        stop = threading.Event()

        def say(msg: str) -> None:
            print(f"{self.command}: {msg}", file=self.stream, flush=True)

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                count = f", {done[0]}/{total}" if total else ""
                say(f"{text}: still working ({time.perf_counter() - t0:.0f} s{count})")

        say(f"{text} ...")
        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield lambda n=1: done.__setitem__(0, done[0] + n)
        finally:
            stop.set()
            thread.join()
        say(f"{text}: done in {time.perf_counter() - t0:.1f} s")
