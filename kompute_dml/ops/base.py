"""What every compiled operator shares: binding checks, encoding, eager execution."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import invalid
from ..layout import element_offsets
from ..memory import Tensor, calc_span_bytes, check_binding_range
from ..registry import OperatorSupport
from ..runtime import DispatchPlan, TransferPlan, encode
from ..tensor_desc import TensorDesc, validate_desc

if TYPE_CHECKING:
    from ..device import Device

_op_serials = itertools.count(1)
# Above this many elements, interleaved (range-overlapping) bindings are refused rather
# than proven disjoint element by element.
_EXACT_ALIAS_LIMIT = 1 << 20


def validate_tensors(
    support: OperatorSupport, level: Any, desc: Any, fields: Sequence[str], outputs: Sequence[str]
) -> None:
    """Rules of DML_BUFFER_TENSOR_DESC, then the feature-level table, for every present field."""
    support.require(level)
    for f in fields:
        t = getattr(desc, f)
        if t is None:
            kind = support.require(level).tensor(f).kind
            if kind != "optional input":
                raise invalid(f, "is required")
            continue
        validate_desc(t, f, output=f in outputs)
    for f in fields:
        t = getattr(desc, f)
        if t is not None:
            support.check_tensor(level, f, t)


class CompiledOperator:
    """An operator descriptor validated for one device, with its dispatch plans."""

    allows_inplace = False

    def __init__(
        self,
        device: Device,
        desc: Any,
        support: OperatorSupport,
        input_fields: tuple[str, ...],
        output_fields: tuple[str, ...],
        plans: list[DispatchPlan | TransferPlan],
    ) -> None:
        self.device = device
        self.desc = desc
        self.support = support
        self.input_fields = input_fields
        self.output_fields = output_fields
        self.plans = plans
        self.serial = next(_op_serials)
        self._descs: list[TensorDesc | None] = [getattr(desc, f) for f in (*input_fields, *output_fields)]

    def __repr__(self) -> str:
        return f"<compiled {self.support.name} ({len(self.plans)} dispatch(es)) on {self.device.name}>"

    @property
    def variants(self) -> list[str]:
        return [p.variant for p in self.plans]

    # ---- bindings ----------------------------------------------------------------
    def _check_list(self, values: Any, fields: tuple[str, ...], what: str) -> list[Any]:
        if not isinstance(values, (list, tuple)):
            raise invalid(what, f"must be a list of tensors ({', '.join(fields) or 'none'}), got {type(values).__name__}")
        if len(values) != len(fields):
            raise invalid(what, f"{self.support.name} takes {len(fields)} ({', '.join(fields) or 'none'}), got {len(values)}")
        return list(values)

    def _check_bindings(self, inputs: Any, outputs: Any) -> list[Tensor | None]:
        bound = self._check_list(inputs, self.input_fields, "inputs") + self._check_list(
            outputs, self.output_fields, "outputs"
        )
        names = (*self.input_fields, *self.output_fields)
        for name, desc, t in zip(names, self._descs, bound):
            if desc is None:
                if t is not None:
                    raise invalid(name, "was absent (None) when the operator was compiled; bind None")
                continue
            if t is None:
                raise invalid(name, "is required: got None")
            if not isinstance(t, Tensor):
                raise invalid(name, f"must be a kompute_dml Tensor, got {type(t).__name__}")
            if t.device is not self.device:
                raise invalid(name, "belongs to another Device")
            if not t.desc.same_layout(desc):
                raise invalid(
                    name,
                    f"bound tensor ({t.desc.data_type.name}, sizes {t.desc.sizes}, strides {t.desc.effective_strides}) "
                    f"differs from the compiled one ({desc.data_type.name}, sizes {desc.sizes}, "
                    f"strides {desc.effective_strides})",
                )
            check_binding_range(t.buffer, desc, t.offset, name)
        n_in = len(self.input_fields)
        for oi in range(n_in, len(bound)):
            out = bound[oi]
            for j, other in enumerate(bound):
                if j == oi or other is None or out is None or (j > oi and j >= n_in):
                    continue
                self._check_alias(names[oi], out, names[j], other, is_input=j < n_in)
        return bound

    def _check_alias(self, out_name: str, out: Tensor, other_name: str, other: Tensor, is_input: bool) -> None:
        if out.buffer is not other.buffer:
            return
        a0, a1 = out.offset, out.offset + calc_span_bytes(out.desc)
        b0, b1 = other.offset, other.offset + calc_span_bytes(other.desc)
        if a1 <= b0 or b1 <= a0:
            return
        if (
            is_input
            and self.allows_inplace
            and out.offset == other.offset
            and out.desc.same_layout(other.desc)
        ):
            return  # exact in-place execution, which DirectML allows for this operator
        small = out.desc.element_count <= _EXACT_ALIAS_LIMIT and other.desc.element_count <= _EXACT_ALIAS_LIMIT
        if small and not np.isin(_byte_positions(out), _byte_positions(other)).any():
            return  # interleaved in one buffer, but no byte in common
        rule = "may alias an input only for exact in-place execution" if self.allows_inplace else "may not alias"
        raise invalid(out_name, f"overlaps {other_name} in the same buffer: {self.support.name}'s output {rule}")

    def is_inplace_noop(self, bound: list[Tensor | None]) -> bool:
        """An exact in-place execution of an operator that copies its input (identity):
        every output element would be rewritten with its own bytes, so nothing runs. (A
        shader reading and writing one word through two bindings is also where drivers
        differ: NVIDIA's lost sub-word in-place values.)"""
        if not self.allows_inplace:
            return False
        n_in = len(self.input_fields)
        return all(
            out is not None and any(
                x is not None and x.buffer is out.buffer and x.offset == out.offset and x.desc.same_layout(out.desc)
                for x in bound[:n_in]
            )
            for out in bound[n_in:]
        )

    # ---- execution ---------------------------------------------------------------
    def execute(self, inputs: Any, outputs: Any) -> None:
        """Run the operator on the bound tensors; returns when the device is done."""
        bound = self._check_bindings(inputs, outputs)
        if not self.plans or self.is_inplace_noop(bound):
            return
        key = (
            self.serial,
            tuple(t.buffer.serial for t in bound if t is not None),
            tuple(t.offset if t is not None else -1 for t in bound),
        )
        dev = self.device
        with dev._lock:
            dev._check_open()
            if key in dev._replays:
                dev._replays.move_to_end(key)
                dev._run(dev._replays[key])
                dev._mark_written(self.plans, bound)
                return
            dispatches = [encode(dev, plan, bound) for plan in self.plans]
            dev._submit(dispatches, replay_key=key)


def _byte_positions(t: Tensor) -> np.ndarray:
    offs = element_offsets(t.desc.sizes, t.desc.effective_strides) * t.desc.data_type.size + t.offset
    size = t.desc.data_type.size
    return (offs[:, None] + np.arange(size)[None, :]).reshape(-1)

