"""Device time per dispatch: `with dev.profile() as p:` (Device.profile).

While a profile is open, every submission runs in a kp sequence of its own with a timestamp
after each command (the cached submissions are left as they are), and the host waits for it;
each dispatch or transfer becomes a row: the scope (`p.scope(name)`: the ONNX backend names
the node), the operator, the shader variant (or transfer kind), the grid and the device
time in microseconds (the timestamps before and after it, in the device's timestamp period).
Profiling serialises the work it measures: use it to see where time goes, not to time a
pipeline of asynchronous work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .encode import Order, levels, record_dispatches
from .plans import DispatchPlan


@dataclass(frozen=True)
class ProfileRow:
    scope: str
    operator: str
    variant: str  # the shader variant, or "copy" / "fill" for transfer commands
    grid: tuple[int, int, int] | None
    microseconds: float


class Profile:
    """The rows collected while a profile is open."""

    def __init__(self, manager: Any, period_ns: float, guarded: Callable[[Callable[[], object]], None],
                 order: Order = levels) -> None:
        self._manager = manager
        self.order = order  # the engine's (encode.levels or program_order)
        self._period_us = period_ns / 1000.0
        self._guarded = guarded
        self.rows: list[ProfileRow] = []
        self._scope = ""

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Rows collected inside the block carry `name` (nested scopes join with '/')."""
        outer = self._scope
        self._scope = f"{outer}/{name}" if outer else name
        try:
            yield
        finally:
            self._scope = outer

    def run(self, replay: Any) -> None:
        """Run a cached submission's commands once, timed (called under the engine's lock)."""
        dispatches = replay.dispatches
        seq = self._manager.sequence(0, 2 * len(dispatches) + 2)
        positions: list[int | None] = []
        record_dispatches(seq, [d for d, _ in dispatches], positions, self.order)
        self._guarded(seq.kdml_run)
        ts = seq.get_timestamps()
        for (_d, (label, plan)), pos in zip(dispatches, positions):
            if pos is None:
                continue
            # a recording's label is the operator's name, or (scope, operator) where the
            # recording named its executions (the ONNX backend's whole-graph programs: nodes)
            scope, operator = label if isinstance(label, tuple) else (self._scope, label)
            grid = plan.groups if isinstance(plan, DispatchPlan) else None
            variant = plan.variant if isinstance(plan, DispatchPlan) else plan.kind
            us = max(0, int(ts[pos]) - int(ts[pos - 1])) * self._period_us
            self.rows.append(ProfileRow(scope, operator, variant, grid, us))

    def total_us(self) -> float:
        return sum(r.microseconds for r in self.rows)

    def table(self, by: str = "row") -> list[dict[str, Any]]:
        """The rows as dicts (`by="row"`), or summed per scope (`by="scope"`) or per operator
        and variant (`by="variant"`), largest first."""
        if by == "row":
            return [vars(r).copy() for r in self.rows]
        sums: dict[tuple[str, ...], list[float]] = {}
        for r in self.rows:
            k = (r.scope,) if by == "scope" else (r.operator, r.variant)
            acc = sums.setdefault(k, [0.0, 0])
            acc[0] += r.microseconds
            acc[1] += 1
        names = ("scope",) if by == "scope" else ("operator", "variant")
        out = [dict(zip(names, k), microseconds=v[0], dispatches=int(v[1])) for k, v in sums.items()]
        return sorted(out, key=lambda d: -d["microseconds"])

    def __str__(self) -> str:
        lines = [f"{'scope':<28} {'operator':<34} {'variant':<30} {'grid':<16} {'us':>10}"]
        for r in self.rows:
            grid = "x".join(map(str, r.grid)) if r.grid else ""
            lines.append(f"{r.scope[:28]:<28} {r.operator[:34]:<34} {r.variant[:30]:<30} {grid:<16} {r.microseconds:>10.2f}")
        lines.append(f"{'total':<28} {'':<34} {'':<30} {'':<16} {self.total_us():>10.2f}")
        return "\n".join(lines)
