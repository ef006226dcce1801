"""DirectML's recurrent operators: RNN (DML_RNN_OPERATOR_DESC) here, LSTM (ops/lstm.py) and GRU
(ops/gru.py) on the same machinery: one composite CompiledOperator whose dispatch plans are other
operators' plans, recorded in order (ops/plan_chain.rebind moves each onto this operator's binding list).

    RNN, per direction, t = 0 .. seq_length - 1 (backward: seq_length - 1 .. 0):
        H_t = f(X_t W_i^T + H_{t-1} R_i^T + W_bi + R_bi)

The plans, per direction and gate: one GEMM for every step's X_t W_g^T + (W_bg + R_bg) (the bias sum by
ELEMENT_WISE_ADD), then per step GEMM H_{t-1} R_g^T + that step's rows (GEMM's C), the activations
(the ActivationDescs' own operators, in place), the cell's element-wise operators. States and per-step
rows live in the operator's scratch (Tensor.scratch) with rows padded to 16 bytes, so every window a
plan writes starts on DirectML's 16-byte alignment (the planners' word-wide and vector stores assume
it); a window is bound through the scratch tensor's binding with its start added to the plan's offset
words (`_move`). OutputSequenceTensor is one strided COPY of the padded states at the end,
OutputSingleTensor (LSTM's OutputCellSingleTensor) one JOIN of each direction's last state.

SequenceLengthsTensor (UINT32 {1, 1, 1, batch_size}): the pages say only that each batch entry has its
own length. kompute_dml follows ONNX, whose operators DirectML's were made to run: steps t >= length
are not run for that entry, so OutputSequenceTensor holds 0 there and the state is held (its last
valid state is OutputSingleTensor's; a backward direction starts at t = length - 1 from HiddenInitTensor;
a length of 0 leaves the initial state, a length > seq_length runs seq_length steps). On the device:
mask[t, b] = (length[b] > t) by ELEMENT_WISE_LOGICAL_GREATER_THAN, then per step ELEMENT_WISE_IF
picks the new state or the held one (and the new state or 0 for the output), bit-exact selections.

ActivationDescs (ActivationDescCount = len(activation_descs)): DirectML's activation operator
descriptors whose tensors are None (as a fused activation's), per direction in the page's order;
kompute_dml takes every element-wise ACTIVATION_* operator it has (the softmax / hardmax families,
PARAMETERIZED_RELU and the gradients refused: UnsupportedError naming activation_descs[i]); each is
validated as its own operator at the device's feature level.

Pages' inconsistencies: RNN's RecurrenceTensor is called "optional" in its field text but is an Input
in the table (required here). The tensor-support tables (feature level 1_0: every tensor 4-D, FLOAT32 /
FLOAT16, SequenceLengthsTensor UINT32) are the same for the three. Error: each step is the sum of
float32 GEMM products (fma over k) and one rounding per element-wise operator (FLOAT16: values rounded
to float16 between operators); docs/recurrent.md gives the bound the tests use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import InvalidArgumentError, UnsupportedError, invalid
from ..core.ints import as_int, cdiv
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, TransferPlan
from . import contract
from .base import validate_tensors
from .elementwise_plan import device_limits, plan_elementwise
from .gemm import GemmDesc, MatrixTransform
from .identity import plan_copy
from .join import JoinDesc
from .plan_chain import rebind

if TYPE_CHECKING:
    from ..device.device import Device

U32 = frozenset({DataType.UINT32})


class RecurrentNetworkDirection(IntEnum):
    """DML_RECURRENT_NETWORK_DIRECTION (DirectML.h)."""

    FORWARD = 0
    BACKWARD = 1
    BIDIRECTIONAL = 2


def recurrent_support(name: str, op_type: int, inputs: Sequence[str], outputs: Sequence[str]) -> OperatorSupport:
    """The pages' one table (feature level 1_0): every tensor 4-D, FLOAT32 / FLOAT16, sequence lengths UINT32;
    the first three inputs required."""
    return OperatorSupport(name, op_type, (row(FL.FL_1_0, *(
        (f, "input" if i < 3 else "optional input", (4, 4), U32 if f == "sequence_lengths_tensor" else FLOATS)
        for i, f in enumerate(inputs)), *((f, "optional output", (4, 4), FLOATS) for f in outputs)),))


@dataclass(frozen=True)
class View:
    """A window of binding-list entry `index`: `desc` (sizes, strides) from element `delta` of the bound tensor."""

    index: int
    desc: TensorDesc
    delta: int = 0


def _move(p: DispatchPlan | TransferPlan, where: dict[int, Any], deltas: dict[int, int]) -> DispatchPlan | TransferPlan:
    """A sub-operator's plan on this operator's binding list, each window's start (bytes) added where the
    plan reads its bound tensor's offset."""
    if isinstance(p, TransferPlan):
        regions = np.array(p.regions, dtype=np.int64)
        for col, b in enumerate(p.bindings):
            regions[:, col] += deltas.get(b, 0)
        return TransferPlan(p.kind, tuple(where[b] for b in p.bindings), regions,
                            tuple(where[w] for w in p.writes), p.value)
    if p.windows:
        raise UnsupportedError(f"input_tensor.sizes: {p.variant} splits a value beyond one binding; recurrent operators "
                               "take every tensor whole")
    push = list(p.push)
    for word, i, unit in p.offset_slots:
        d = deltas.get(i, 0)
        if d % unit:  # (a kompute_dml bug: every window a vector plan touches is kept on its grid)
            raise AssertionError(f"{p.variant}: a window start of {d} bytes is off the plan's {unit}-byte unit")
        push[word] = (push[word] + d // unit) & 0xFFFFFFFF
    return rebind(dataclasses.replace(p, push=tuple(push)), where)


class Chain:
    """The composite operator's plans and constants: the descriptor's fields first, then the constants
    (scratch, zeros, the sub-operators' own constants), in binding-list order."""

    def __init__(self, device: Device, fields: Sequence[str], dt: DataType) -> None:
        self.device, self.n, self.dt = device, len(fields), dt
        self.constants: list[Tensor | None] = []
        self.plans: list[DispatchPlan | TransferPlan] = []
        self.per = 16 // dt.size  # elements per 16 bytes

    def pad(self, n: int) -> int:
        return cdiv(n, self.per) * self.per

    def _add(self, t: Tensor | None) -> int:
        self.constants.append(t)
        return self.n + len(self.constants) - 1

    def scratch(self, count: int, dt: DataType | None = None) -> int:
        return self._add(Tensor.scratch(self.device, TensorDesc(dt or self.dt, (max(1, count),))))

    def const(self, values: np.ndarray) -> int:
        return self._add(self.device.tensor(np.ascontiguousarray(values)))

    def add_plans(self, plans: Sequence[DispatchPlan | TransferPlan], views: Sequence[View | None],
                  extra: Sequence[Any] = ()) -> None:
        """Plans made for a binding list of `views` (None: an absent tensor), then the sub-operator's constants `extra`."""
        base = self.n + len(self.constants)
        self.constants += list(extra)
        where: dict[int, Any] = {i: v.index if v else None for i, v in enumerate(views)}
        where |= {len(views) + j: base + j for j in range(len(extra))}
        deltas = {i: v.delta * v.desc.data_type.size for i, v in enumerate(views) if v}
        self.plans += [_move(p, where, deltas) for p in plans]

    def op(self, desc: Any, views: Sequence[View | None]) -> None:
        """Another operator, compiled for the views' descriptors at the device's feature level."""
        from . import compile_operator  # (the operator table: imported when first compiled)

        sub = compile_operator(self.device, desc)
        self.add_plans(sub.plans, views, sub.constants)

    def ew(self, fam: contract.ShaderFamily, views: Sequence[View], t: str | None = None, **names: Any) -> None:
        """An element-wise operator's plans (ADD, SUBTRACT, MULTIPLY, IF, LOGICAL_GREATER_THAN): its planner at
        any feature level (they are kompute_dml's steps, not the caller's operators)."""
        variant = fam.name(t=t or ("f16" if self.dt == DataType.FLOAT16 else "f32"), **names)
        self.add_plans(plan_elementwise(fam, variant, [v.desc for v in views], **device_limits(self.device)), views)

    def add(self, a: View, b: View, out: View) -> None:
        self.ew(contract.EW_ADD, (a, b, out))

    def sub(self, a: View, b: View, out: View) -> None:
        self.ew(contract.EW_SUB, (a, b, out))

    def mul(self, a: View, b: View, out: View) -> None:
        self.ew(contract.EW_MUL, (a, b, out))

    def select(self, cond: View, a: View, b: View, out: View) -> None:
        self.ew(contract.EW_IF, (cond, a, b, out), t=f"b{8 * self.dt.size}")

    def gemm(self, a: View, b: View, c: View | None, out: View) -> None:
        """out = a x b^T (+ c): b is a weight window {.., N, K} read transposed."""
        self.op(GemmDesc(a.desc, b.desc, c.desc if c is not None else None, out.desc, trans_b=MatrixTransform.TRANSPOSE),
                (a, b, c, out))

    def act(self, act: Any, v: View, out: View | None = None) -> None:
        out = out or v
        self.op(dataclasses.replace(act, input_tensor=v.desc, output_tensor=out.desc), (v, out))

    def copy(self, src: View, dst: View) -> None:
        pol = self.device.policy
        plans = plan_copy(src.desc, dst.desc, self.device.limits["max_compute_work_group_count"][0],
                          lambda regions: pol.copies_by_transfer(dst.desc.byte_size, regions), pol.memory_kernel)
        self.add_plans(plans, (src, dst))

    def join(self, parts: Sequence[View], out: View) -> None:
        self.op(JoinDesc(tuple(v.desc for v in parts), out.desc, 1), (*parts, out))


def mat(dt: DataType, rows: int, cols: int, row_stride: int, col_stride: int = 1) -> TensorDesc:
    """A {1, 1, rows, cols} matrix (GEMM at feature level 1_0 takes 4-D tensors only)."""
    return TensorDesc(dt, (1, 1, rows, cols), (0, 0, row_stride if rows > 1 else 0, col_stride if cols > 1 else 0))


def check_activations(device: Device, acts: Any, per: int, dirs: int, dt: DataType, batch: int, hid: int) -> None:
    """ActivationDescs: per * dirs element-wise activation descriptors, tensors None, each valid as its own operator."""
    from . import compile_operator, operators

    if not isinstance(acts, tuple):
        raise invalid("activation_descs", f"must be a tuple of activation descriptors, got {type(acts).__name__}")
    if len(acts) != per * dirs:
        raise invalid("activation_descs", f"ActivationDescCount must be {per * dirs} ({per} per direction, "
                                          f"{dirs} direction(s)), got {len(acts)}")
    probe = TensorDesc(dt, (1, 1, batch, hid))
    for i, a in enumerate(acts):
        spec = operators().by_desc.get(type(a))
        if (spec is None or not spec.name.startswith("ACTIVATION_") or spec.fields != ("input_tensor", "output_tensor")
                or "MAX" in spec.name):
            raise UnsupportedError(f"activation_descs[{i}]: kompute_dml's recurrent operators take its element-wise "
                                   f"ACTIVATION_* descriptors, got {type(a).__name__}")
        if a.input_tensor is not None or a.output_tensor is not None:
            raise invalid(f"activation_descs[{i}]", "an activation's tensors must be None (the operator binds them)")
        try:
            compile_operator(device, dataclasses.replace(a, input_tensor=probe, output_tensor=probe))
        except (InvalidArgumentError, UnsupportedError) as e:
            raise type(e)(f"activation_descs[{i}].{e}") from None


def check_common(device: Device, support: OperatorSupport, desc: Any, gates: int, per_act: int,
                 sizes: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """The table, the direction, the same DataType, every tensor's Sizes from the page (`sizes`: field -> a
    function of (T, B, I, H, D) giving them), the activations; (T, B, I, H, D)."""
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    direction = as_int(desc.direction, "direction")
    if direction not in set(RecurrentNetworkDirection):
        raise invalid("direction", f"must be a DML_RECURRENT_NETWORK_DIRECTION (0, 1 or 2), got {direction}")
    dirs = 2 if direction == RecurrentNetworkDirection.BIDIRECTIONAL else 1
    x = desc.input_tensor
    for f in support.fields:
        t = getattr(desc, f)
        if t is not None and f != "sequence_lengths_tensor" and t.data_type != x.data_type:
            raise invalid(f"{f}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {t.data_type.name}")
    if x.sizes[0] != 1:
        raise invalid("input_tensor.sizes", f"must be {{1, seq_length, batch_size, input_size}}, got {x.sizes}")
    _, steps, batch, inp = x.sizes
    hid = desc.recurrence_tensor.sizes[3]
    shape = (steps, batch, inp, hid, dirs)
    for f in support.fields:
        t = getattr(desc, f)
        want = tuple(sizes[f](*shape)) if f in sizes else None
        if t is not None and want is not None and tuple(t.sizes) != want:
            raise invalid(f"{f}.sizes", f"must be {want} (seq_length {steps}, batch_size {batch}, input_size {inp}, "
                                        f"hidden_size {hid}, {dirs} direction(s)), got {t.sizes}")
    for f in support.outputs:
        t = getattr(desc, f)
        if t is not None:
            check_no_overlap(t.sizes, t.effective_strides, f)
    check_activations(device, desc.activation_descs, per_act, dirs, x.data_type, batch, hid)
    return shape


def page_sizes(gates: int, peephole: bool = False) -> dict[str, Any]:
    """The pages' Sizes of each tensor, as functions of (T, B, I, H, D)."""
    state = lambda t, b, i, h, d: (1, d, b, h)  # noqa: E731
    out = {"weight_tensor": lambda t, b, i, h, d: (1, d, gates * h, i),
           "recurrence_tensor": lambda t, b, i, h, d: (1, d, gates * h, h),
           "bias_tensor": lambda t, b, i, h, d: (1, 1, d, 2 * gates * h),
           "hidden_init_tensor": state, "cell_mem_init_tensor": state, "output_single_tensor": state,
           "output_cell_single_tensor": state, "sequence_lengths_tensor": lambda t, b, i, h, d: (1, 1, 1, b),
           "output_sequence_tensor": lambda t, b, i, h, d: (t, d, b, h)}
    if peephole:
        out["peephole_tensor"] = lambda t, b, i, h, d: (1, 1, d, 3 * h)
    return out


def as_bool(value: Any, field: str) -> bool:
    """A BOOL field: a bool or an integer (nonzero is TRUE, as C's BOOL)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return as_int(value, field) != 0


def recurrent_families() -> tuple[contract.ShaderFamily, ...]:
    """Every family a recurrent operator's plans may dispatch: GEMM's, the element-wise and copy families, every
    activation operator's."""
    from . import activation, activation_params, activation_relu, elementwise_unary, gemm, identity, join

    fams = [contract.EW_ADD, contract.EW_SUB, contract.EW_MUL, contract.EW_IF, contract.EW_GT]
    for mod in (gemm, identity, join, activation, activation_params, activation_relu, elementwise_unary):
        fams += [f for s in mod.SPECS for f in s.shaders]
    return tuple({f.key: f for f in fams}.values())


def example_sizes(gates: int) -> dict[str, TensorDesc]:
    """The specs' example tensors: seq_length 2, batch_size 2, input_size 3, hidden_size 2, bidirectional."""
    f = DataType.FLOAT32
    sizes = page_sizes(gates, peephole=True)
    out = {k: TensorDesc(DataType.UINT32 if k == "sequence_lengths_tensor" else f, fn(2, 2, 3, 2, 2)) for k, fn in sizes.items()}
    out["input_tensor"] = TensorDesc(f, (1, 2, 2, 3))
    return out
