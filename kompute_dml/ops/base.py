"""What every compiled operator shares: binding checks and eager execution.

`bind` is the hot path of every execution (eager or recorded): it runs every binding rule
once per call, in one pass over the tensors, and builds the replay key on the way.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import UnsupportedError, invalid
from ..core.layout import element_offsets
from ..core.registry import OperatorSupport
from ..core.tensor_desc import MINIMUM_BUFFER_TENSOR_ALIGNMENT, TensorDesc, validate_desc
from ..device.memory import Tensor, calc_span_bytes, check_binding_range
from ..runtime import DispatchPlan, Submission, TransferPlan, binding_window, finished
from .device_check import DeviceCheck, settle

if TYPE_CHECKING:
    from ..device.device import Device

_op_serials = itertools.count(1)
# Bindings per compiled operator whose checks are remembered (CompiledOperator.bind): enough for
# a recording that runs one operator on a hundred different outputs (kompute-dml bench's
# "distinct outputs" latency row) to skip the checks the next time.
BIND_CACHE = 256
# Above this many elements, interleaved (range-overlapping) bindings are refused rather
# than proven disjoint element by element.
_EXACT_ALIAS_LIMIT = 1 << 20


def validate_tensors(
    support: OperatorSupport, level: Any, desc: Any, fields: Sequence[str], outputs: Sequence[str]
) -> None:
    """Rules of DML_BUFFER_TENSOR_DESC, then the feature-level table, for every present field.
    A field holding a tuple is an array of tensors (DML_JOIN's InputTensors): at least one, each
    checked under the name `field[i]`."""
    support.require(level)
    for f in fields:
        t = getattr(desc, f)
        if t is None:
            kind = support.require(level).tensor(f).kind
            if not kind.startswith("optional"):
                raise invalid(f, "is required")
            continue
        if isinstance(t, tuple):
            if not t:
                raise invalid(f, "must hold at least one tensor (the array's count must be greater than 0)")
            for i, x in enumerate(t):
                validate_desc(x, f"{f}[{i}]", output=f in outputs)
            continue
        validate_desc(t, f, output=f in outputs)
    for f in fields:
        t = getattr(desc, f)
        if isinstance(t, tuple):
            for i, x in enumerate(t):
                support.check_tensor(level, f, x, name=f"{f}[{i}]")
        elif t is not None:
            support.check_tensor(level, f, t)


def check_like(x: TensorDesc, t: TensorDesc, name: str = "output_tensor", ref: str = "input_tensor") -> None:
    """The pages' common constraint: tensor `name` has the DataType and DimensionCount of `ref`
    (InvalidArgumentError naming the field otherwise)."""
    if t.data_type != x.data_type:
        raise invalid(f"{name}.data_type", f"must equal {ref}'s ({x.data_type.name}), got {t.data_type.name}")
    if t.dimension_count != x.dimension_count:
        raise invalid(f"{name}.sizes", f"dimension count must equal {ref}'s ({x.dimension_count}), "
                                       f"got {t.dimension_count}")


def field_desc(desc: Any, name: str) -> TensorDesc | None:
    """The tensor a binding name names: a descriptor field, or `field[i]`, element i of an
    array field (validate_tensors)."""
    field, bracket, index = name.partition("[")
    value = getattr(desc, field)
    return value[int(index[:-1])] if bracket else value


def array_fields(desc: Any, fields: Sequence[str]) -> tuple[str, ...]:
    """The binding names of `fields`: an array field expands to `field[0]`, `field[1]`, ..."""
    out: list[str] = []
    for f in fields:
        value = getattr(desc, f)
        out += [f"{f}[{i}]" for i in range(len(value))] if isinstance(value, tuple) else [f]
    return tuple(out)


def _offset_unit(desc: TensorDesc) -> int:
    """The offset every binding of `desc` must be a multiple of (16 and the guaranteed
    alignment, both powers of two)."""
    return max(MINIMUM_BUFFER_TENSOR_ALIGNMENT, desc.guaranteed_base_offset_alignment)


class CompiledOperator:
    """An operator descriptor validated for one device, with its dispatch plans."""

    allows_inplace = False
    # A check of input values made on the device (ops/device_check.py: GATHER's indices), whose
    # word every submission of an execution copies to the host and reads after it completed.
    check: DeviceCheck | None = None

    def __init__(
        self,
        device: Device,
        desc: Any,
        support: OperatorSupport,
        input_fields: tuple[str, ...],
        output_fields: tuple[str, ...],
        plans: list[DispatchPlan | TransferPlan],
        constants: list[Tensor] | tuple[Tensor, ...] = (),
    ) -> None:
        self.device = device
        self.engine = device.engine
        self.desc = desc
        self.support = support
        self.input_fields = input_fields
        self.output_fields = output_fields
        self.plans = plans
        # Device tensors the operator owns and its plans read (ops/diagonal_constant.py): bound
        # after the inputs and outputs in every binding, and alive as long as the operator.
        self._constants: list[Tensor | None] = list(constants)
        self.serial = next(_op_serials)
        names = (*input_fields, *output_fields)
        descs: list[TensorDesc | None] = [field_desc(desc, f) for f in names]
        # per binding: (field, compiled desc, offset unit, bytes the binding covers)
        self._slots = tuple(
            (name, d, _offset_unit(d) if d is not None else 0, d.byte_size if d is not None else 0)
            for name, d in zip(names, descs)
        )
        self._check_windows(names)
        self._n_in = len(input_fields)
        self._pairs = tuple((oi, j) for oi in range(self._n_in, len(names)) for j in range(oi))
        # The last BIND_CACHE bindings that passed every check, oldest first, by their tensors'
        # binding keys (memory.Tensor.binding_key: buffer serial, offset, tag of desc; None for
        # an absent tensor), each with its descs and bind()'s key. The checks depend on nothing
        # else: a buffer's device and size never change and serials are never reused, and the
        # entry holds its descs so that no other desc can take their ids while it exists. A
        # repeated execution on the same bindings skips the checks, through new Tensor objects
        # too (a functional helper's pooled output), also when a recording bound others in
        # between; the cache keeps no buffer alive.
        self._recent: dict[tuple[Any, ...], tuple[tuple[TensorDesc | None, ...], Hashable | None]] = {}
        # The key of the last eager execution and the engine's cached submission for it: the
        # next call with the same key (bind returns the cached key object) reruns it directly.
        self._last: tuple[Hashable, Any] | None = None

    def _check_windows(self, names: tuple[str, ...]) -> None:
        """UnsupportedError, before anything runs, where a dispatch would bind more of a tensor than
        one storage-buffer binding covers (maxStorageBufferRange, less the start's alignment):
        an operator whose planner splits larger values declares each dispatch's part of them
        (DispatchPlan.windows, ops/split_range.py); the others take each tensor whole."""
        rng, align = binding_window(self.device.limits)
        sizes = [slot[3] for slot in self._slots] + [c.desc.byte_size if c is not None else 0 for c in self._constants]
        if max(sizes, default=0) + align + 16 <= rng:
            return
        for plan in self.plans:
            if not isinstance(plan, DispatchPlan):
                continue  # transfer commands copy any range
            parts = {idx: span for idx, _, span in plan.windows}
            for idx in plan.bindings:
                if idx is None:
                    continue
                need = parts.get(idx, sizes[idx]) + align + 16
                if need > rng:
                    field = names[idx] if idx < len(names) else f"the operator's constant {idx - len(names)}"
                    raise UnsupportedError(
                        f"{field}: {sizes[idx]} bytes are beyond one storage-buffer binding of this device "
                        f"(maxStorageBufferRange {rng} bytes) and {self.support.name}'s dispatches take it whole "
                        f"(docs/large_values.md lists the operators that split larger values)")

    def __repr__(self) -> str:
        return f"<compiled {self.support.name} ({len(self.plans)} dispatch(es)) on {self.device.name}>"

    @property
    def constants(self) -> tuple[Tensor | None, ...]:
        """The device tensors the operator owns and its plans read (ops/diagonal_constant.py)."""
        return tuple(self._constants)

    @property
    def variants(self) -> list[str]:
        return [p.variant for p in self.plans]

    # ---- bindings ----------------------------------------------------------------
    def _check_list(self, values: Any, fields: tuple[str, ...], what: str) -> None:
        if not isinstance(values, (list, tuple)):
            raise invalid(what, f"must be a list of tensors ({', '.join(fields) or 'none'}), got {type(values).__name__}")
        if len(values) != len(fields):
            raise invalid(what, f"{self.support.name} takes {len(fields)} ({', '.join(fields) or 'none'}), got {len(values)}")

    def bind(self, inputs: Any, outputs: Any) -> tuple[list[Tensor | None], Hashable | None]:
        """Check every binding rule; returns the bound tensors (inputs, outputs, then the
        operator's own constants) and the key naming this execution (operator, buffers,
        offsets) for the replay cache, None where the execution is an exact in-place no-op
        (`is_inplace_noop`: nothing to run)."""
        if not (type(inputs) in (list, tuple) and type(outputs) in (list, tuple)
                and len(inputs) == self._n_in and len(outputs) == len(self._slots) - self._n_in):
            bound, key = self._bind(inputs, outputs)  # raises unless lists (or subclasses) of this arity
        else:
            bound = [*inputs, *outputs]
            keys: tuple[Any, ...] | None
            try:
                keys = tuple([None if t is None else t.binding_key for t in bound])
                entry = self._recent.get(keys)
            except (AttributeError, TypeError):  # not Tensors: _bind says which rule they break
                keys = entry = None
            if entry is not None:
                key = entry[1]
            else:
                bound, key = self._bind(inputs, outputs)
                if keys is not None:
                    self._remember(bound, key, keys)
        return (bound + self._constants if self._constants else bound), key

    def _remember(self, bound: list[Tensor | None], key: Hashable | None, keys: tuple[Any, ...]) -> None:
        """Cache a checked binding under its tensors' binding keys, evicting the oldest entry
        when the cache is full."""
        recent = self._recent
        while len(recent) >= BIND_CACHE:
            try:
                del recent[next(iter(recent))]
            except (KeyError, RuntimeError, StopIteration):  # another thread changed it meanwhile
                break
        recent[keys] = (tuple([None if t is None else t.desc for t in bound]), key)

    def _bind(self, inputs: Any, outputs: Any) -> tuple[list[Tensor | None], Hashable | None]:
        if (type(inputs) is not list and type(inputs) is not tuple) or len(inputs) != self._n_in:
            self._check_list(inputs, self.input_fields, "inputs")
        if (type(outputs) is not list and type(outputs) is not tuple) or len(outputs) != len(self.output_fields):
            self._check_list(outputs, self.output_fields, "outputs")
        bound: list[Tensor | None] = [*inputs, *outputs]
        key: list[Any] = [self.serial]
        device = self.device
        for (name, desc, unit, size), t in zip(self._slots, bound):
            if desc is None:
                if t is not None:
                    raise invalid(name, "was absent (None) when the operator was compiled; bind None")
                key += (None, None)
                continue
            if type(t) is not Tensor:
                self._refuse(name, t)
            buf = t.buffer  # type: ignore[union-attr]
            off = t.offset  # type: ignore[union-attr]
            if buf.device is not device:
                raise invalid(name, "belongs to another Device")
            tdesc = t.desc  # type: ignore[union-attr]
            # the same layout: the same desc, or the same type, sizes and strides as written
            # (no strides computed for a new packed desc), else the same effective strides
            if tdesc is not desc and (tdesc.sizes != desc.sizes or tdesc.data_type != desc.data_type
                                      or (tdesc.strides != desc.strides and tdesc.layout != desc.layout)):
                raise invalid(
                    name,
                    f"bound tensor ({tdesc.data_type.name}, sizes {tdesc.sizes}, strides {tdesc.effective_strides}) "
                    f"differs from the compiled one ({desc.data_type.name}, sizes {desc.sizes}, "
                    f"strides {desc.effective_strides})",
                )
            if off < 0 or off % unit or off + size > buf.nbytes:
                check_binding_range(buf, desc, off, name)  # raises with the rule broken
            key += (buf.serial, off)
        shared = False  # an output and an input in one buffer
        for oi, j in self._pairs:  # each output against every input and the outputs before it
            out, other = bound[oi], bound[j]
            if out is not None and other is not None and other.buffer is out.buffer:
                self._check_alias(self._slots[oi][0], out, self._slots[j][0], other, is_input=j < self._n_in)
                shared = shared or j < self._n_in
        if shared and self.allows_inplace and self.is_inplace_noop(bound):
            return bound, None
        return bound, tuple(key)

    @staticmethod
    def _refuse(name: str, t: object) -> None:
        if t is None:
            raise invalid(name, "is required: got None")
        if not isinstance(t, Tensor):
            raise invalid(name, f"must be a kompute_dml Tensor, got {type(t).__name__}")

    def _check_alias(self, out_name: str, out: Tensor, other_name: str, other: Tensor, is_input: bool) -> None:
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
        n_in = self._n_in
        inputs = bound[:n_in]
        for out in bound[n_in:]:
            if out is None:
                return False
            buf, off = out.buffer, out.offset
            for x in inputs:
                if x is not None and x.buffer is buf and x.offset == off and x.desc.same_layout(out.desc):
                    break
            else:
                return False
        return True

    # ---- execution ---------------------------------------------------------------
    def execute(self, inputs: Any, outputs: Any, wait: bool = True) -> Submission | None:
        """Run the operator on the bound tensors; returns when the device is done, or with
        `wait=False` at once, with a Submission (`wait()`, `done()`; reading or writing a
        bound buffer from the host waits for it, runtime/inflight.py). Inside
        `Device.capture()` the execution is recorded, not run."""
        rec = self.engine.capturing
        if rec is not None:
            rec.execute(self, inputs, outputs)
            return None if wait else finished(self.engine.lock)
        bound, key = self.bind(inputs, outputs)
        if key is None or not self.plans:
            return None if wait else finished(self.engine.lock)
        check = self.check
        last = self._last
        if last is not None and last[0] is key:
            ran = self.engine.rerun(last[1], wait)
            if ran is not False:
                return ran if check is None else settle(ran, ((check, 0, bound, self.support.name, None),))  # type: ignore[return-value]
        # the key of a one-execution submission: an eager execution and a recording of
        # just this execution replay the same kp sequence (with the check word's copy, the
        # recording's first occurrence of the operator: ops/device_check.py)
        if check is None:
            replay, submission = self.engine.submit((key,), ((self.plans, bound),), wait, (self.support.name,))
            self._last = (key, replay)
            return submission
        copy_key, copy_work = check.copy(0)
        replay, submission = self.engine.submit((key, copy_key), ((self.plans, bound), copy_work), wait,
                                                (self.support.name, "check"))
        self._last = (key, replay)
        return settle(submission, ((check, 0, bound, self.support.name, None),))  # type: ignore[no-any-return]


def _byte_positions(t: Tensor) -> np.ndarray:
    offs = element_offsets(t.desc.sizes, t.desc.effective_strides) * t.desc.data_type.size + t.offset
    size = t.desc.data_type.size
    return (offs[:, None] + np.arange(size)[None, :]).reshape(-1)
