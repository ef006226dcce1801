"""Composite operators made of other operators' dispatch plans (MATRIX_MULTIPLY_INTEGER on
CONVOLUTION_INTEGER's, QUANTIZED_LINEAR_MATRIX_MULTIPLY on MATRIX_MULTIPLY_INTEGER_TO_FLOAT's and
ELEMENT_WISE_QUANTIZE_LINEAR's, QUANTIZE on CAST's and QUANTIZE_LINEAR's): a plan made for another
binding list (its operator's fields, then its constants) moved onto the composite's, index by index."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..runtime import DispatchPlan


def rebind(plan: DispatchPlan, where: Mapping[int, int | None]) -> DispatchPlan:
    """`plan` with every binding-list index i (bindings, writes, offset slots, windows) replaced by
    where[i]; None binds the device's dummy buffer (an absent tensor: its offset slot is dropped,
    so the packed word stays). A KeyError names an index the mapping forgot."""
    def at(i: int | None) -> int | None:
        return None if i is None else where[i]

    writes = tuple(at(w) for w in plan.writes)
    if None in writes:
        raise ValueError(f"{plan.variant}: a written binding mapped to nothing")
    return dataclasses.replace(
        plan, bindings=tuple(at(b) for b in plan.bindings), writes=writes,
        offset_slots=tuple((word, at(i), unit) for word, i, unit in plan.offset_slots if at(i) is not None),
        windows=tuple((at(i), delta, span) for i, delta, span in plan.windows if at(i) is not None))
