"""DirectML's REDUCE (DML_REDUCE_OPERATOR_DESC): each output element is a reduction (sum, product,
minimum, ...) of the input elements that share its coordinates outside `axes`; the output keeps the
input's DimensionCount, size 1 on the reduced axes. Functions: `ReduceFunction`, DML_REDUCE_FUNCTION's
values. ONNX ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare, ReduceL1,
ReduceL2, ReduceLogSum, ReduceLogSumExp, ArgMax and ArgMin run on it (onnx_backend/handlers_reduce.py).

shaders/reduce.comp: one invocation per output element, the reduced elements read in row-major
order of the reduced axes (k = 0 .. n-1), so results are deterministic. Arithmetic and its bounds
(measured by tests/test_reduce.py against float64 and enforced there; docs/reduce.md), with
S = sum |x_k| (|x_k|^2 for L2 / SUM_SQUARE), u = 2^-24 and n the reduced count:

- SUM, AVERAGE, L1, SUM_SQUARE: a sequential float32 sum from x_0 (`precise`, no contraction):
  |error| <= (n - 1) u S (+ one rounding of the square per term, + one of the division for
  AVERAGE: (n + 1) u S in all); FLOAT16: the float32 result rounded once more (2^-11 relative).
- L2 = sqrt(SUM_SQUARE), LOG_SUM = log(SUM), LOG_SUM_EXP = m + log(sum exp(x_k - m)) with m the
  maximum (no overflow); exp, log, sqrt are the device's (Vulkan's precision: exp 3 + 2|x| ulp,
  log 3 ulp / 2^-21 absolute near 1, sqrt 3 ulp).
- MAX, MIN: exact; a NaN anywhere gives NaN; ties keep the earlier element (max(-0, +0) is the
  first of them). MULTIPLY: sequential, relative error <= (n - 1) u.
- ARGMAX, ARGMIN: the first index (row-major over the reduced axes) of the extreme value; a NaN
  counts as the extreme (numpy's argmax / argmin). Output UINT32 / INT32 / UINT64 / INT64.
- Integers (INT32 / UINT32 sums, products, L1, SUM_SQUARE): exact modulo 2^32 (wrapping); MIN /
  MAX / ARGMAX / ARGMIN on 8- to 32-bit integers exact.

Measured worst error / bound on lavapipe (rows of 7, 300, 5000; docs/reduce.md has the per-function
table): at most 0.43 for float32 (MULTIPLY), 0.88 for float16. The reduced loop runs 32 elements per
iteration: lavapipe ends an invocation's loops after 65535 iterations (rows up to ~2M elements).

Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table (UnsupportedError
naming the field), the function (InvalidArgumentError naming `function`), the function's data types
(UnsupportedError naming the tensor), then the page's constraints (InvalidArgumentError whose
message starts with the field), non-overlapping output and 32-bit addressing. kompute_dml's rules
where the page is silent: at least one axis, axes distinct. Left out: 64-bit integer inputs.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType, FeatureLevel
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int_tuple
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_32, INTS_64, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device


class ReduceFunction(enum.IntEnum):
    """DML_REDUCE_FUNCTION (exported as kdml.ReduceFunction)."""

    ARGMAX = 0
    ARGMIN = 1
    AVERAGE = 2
    L1 = 3
    L2 = 4
    LOG_SUM = 5
    LOG_SUM_EXP = 6
    MAX = 7
    MIN = 8
    MULTIPLY = 9
    SUM = 10
    SUM_SQUARE = 11


RF = ReduceFunction
ARG = frozenset({RF.ARGMAX, RF.ARGMIN})
INDEX_TYPES = INTS_32 | INTS_64  # ARGMAX / ARGMIN outputs (3_0 on; 1_0: UINT32)

# From the page's "Tensor support according to function" tables (MicrosoftDocs sdk-api,
# ns-directml-dml_reduce_operator_desc.md): the union over the functions per level here, each
# function's input types in function_types. 1_0: 4 dimensions, FLOAT32 / FLOAT16 (ARGMAX / ARGMIN
# output UINT32); 2_1: 4 dimensions, 8- to 32-bit integer inputs for ARGMAX / ARGMIN, INT32 / UINT32
# for MIN, MAX, SUM, MULTIPLY; 3_0: 1 to 8 dimensions, 8- to 32-bit integers for MIN / MAX too,
# index outputs INT64 / INT32 / UINT64 / UINT32. AVERAGE, L1, L2, LOG_SUM, LOG_SUM_EXP and
# SUM_SQUARE take floats only.
_ROWS = ((FL.FL_1_0, (4, 4), FLOATS, FLOATS | {DataType.UINT32}),
         (FL.FL_2_1, (4, 4), FLOATS | INTS_8_32, FLOATS | INTS_32),
         (FL.FL_3_0, (1, 8), FLOATS | INTS_8_32, FLOATS | INTS_8_32 | INDEX_TYPES))
REDUCE = OperatorSupport("REDUCE", 55, tuple(
    row(level, ("input_tensor", "input", dims, ins), ("output_tensor", "output", dims, outs))
    for level, dims, ins, outs in _ROWS))

_FLOAT_ONLY = frozenset({RF.AVERAGE, RF.L1, RF.L2, RF.LOG_SUM, RF.LOG_SUM_EXP, RF.SUM_SQUARE})


def function_types(level: FeatureLevel, fn: ReduceFunction) -> frozenset[DataType]:
    """The input types the page allows `fn` at `level`."""
    if level < FL.FL_2_1 or fn in _FLOAT_ONLY:
        return FLOATS
    if fn in ARG or (fn in (RF.MAX, RF.MIN) and level >= FL.FL_3_0):
        return FLOATS | INTS_8_32
    return FLOATS | INTS_32  # MIN / MAX at 2_1; SUM, MULTIPLY


@dataclass(frozen=True)
class ReduceDesc:
    """DML_REDUCE_OPERATOR_DESC { Function, InputTensor, OutputTensor, AxisCount, Axes }
    (AxisCount = len(axes)). The output has the input's DimensionCount and sizes, 1 on each
    reduced axis; its data type is the input's, or an index type for ARGMAX / ARGMIN."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    function: ReduceFunction
    axes: tuple[int, ...]

    def __post_init__(self) -> None:
        # a list of axes is kept as a tuple (the descriptor is hashable); values are checked at compile
        if isinstance(self.axes, (list, range)) or (isinstance(self.axes, np.ndarray) and self.axes.ndim == 1):
            object.__setattr__(self, "axes", tuple(self.axes))

    @property
    def axis_count(self) -> int:
        return len(self.axes)


def _function(value: Any) -> ReduceFunction:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise invalid("function", f"must be a ReduceFunction, got {type(value).__name__} {value!r}")
    try:
        return ReduceFunction(int(value))
    except ValueError:
        raise invalid("function", f"{int(value)} is not a DML_REDUCE_FUNCTION value (0 to 11)") from None


def _validate(device: Device, desc: ReduceDesc) -> tuple[ReduceFunction, tuple[int, ...]]:
    support, level = REDUCE, device.feature_level
    validate_tensors(support, level, desc, support.fields, support.outputs)
    fn = _function(desc.function)
    x, y = desc.input_tensor, desc.output_tensor
    allowed = function_types(level, fn)
    if x.data_type not in allowed:
        names = ", ".join(sorted(d.name for d in allowed))
        raise UnsupportedError(f"input_tensor: REDUCE {fn.name} does not support {x.data_type.name} at feature "
                               f"level {level.label} (supported: {names})")
    if fn in ARG:
        outs = INDEX_TYPES if level >= FL.FL_3_0 else frozenset({DataType.UINT32})
        if y.data_type not in outs:
            names = ", ".join(sorted(d.name for d in outs))
            raise UnsupportedError(f"output_tensor: REDUCE {fn.name} outputs indices ({names}) at feature level "
                                   f"{level.label}, got {y.data_type.name}")
    elif y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}) for {fn.name}, "
                                                 f"got {y.data_type.name}")
    n = x.dimension_count
    if y.dimension_count != n:
        raise invalid("output_tensor.sizes", f"dimension count must equal input_tensor's ({n}), got {y.dimension_count}")
    axes = as_int_tuple(desc.axes, "axes")
    if not axes:
        raise invalid("axes", "AxisCount must be at least 1, got no axes")
    for i, a in enumerate(axes):
        if not 0 <= a < n:
            raise invalid(f"axes[{i}]", f"must be in [0, {n - 1}] (input_tensor's dimension count {n}), got {a}")
    if len(set(axes)) != len(axes):
        raise invalid("axes", f"must be distinct, got {axes}")
    want = tuple(1 if d in axes else s for d, s in enumerate(x.sizes))
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be input_tensor's sizes with 1 on the reduced axes {want}, "
                                             f"got {y.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    return fn, axes


_TYPE_CODE = {DataType.FLOAT32: "f32", DataType.FLOAT16: "f16", DataType.INT32: "i32", DataType.UINT32: "u32",
              DataType.INT16: "i16", DataType.UINT16: "u16", DataType.INT8: "i8", DataType.UINT8: "u8"}


def compile_reduce(device: Device, desc: ReduceDesc) -> CompiledOperator:
    fn, axes = _validate(device, desc)
    x, y = desc.input_tensor, desc.output_tensor
    xs, ys = x.effective_strides, y.effective_strides
    outer = [d for d in range(x.dimension_count) if d not in axes]
    red = sorted(axes)
    # the outer dimensions merged over both tensors' strides, the reduced ones over the input's;
    # a merged scalar (size 1) is no dimension at all, so the two together are at most 8
    osz, (oxs, oys) = merge_dims([x.sizes[d] for d in outer], [xs[d] for d in outer], [ys[d] for d in outer])
    rsz, (rxs,) = merge_dims([x.sizes[d] for d in red], [xs[d] for d in red])
    if osz == [1]:
        osz, oxs, oys = [], [], []
    if rsz == [1]:
        rsz, rxs = [], []
    nk, nr = len(osz), len(rsz)
    pad = [0] * (8 - nk - nr)
    nout, rlen = math.prod(osz), math.prod(rsz)
    fam = contract.REDUCE
    o = "v" if fn not in ARG else ("i64" if y.data_type.size == 8 else "i32")
    push = fam.pack(x_off=0, y_off=0, nout=nout, rlen=rlen, nk=nk, nr=nr, fn=int(fn), size=osz + rsz + pad,
                    xs=oxs + rxs + pad, ys=oys + [0] * (8 - nk))
    slots = fam.slots(x_off=(0, x.data_type.size), y_off=(1, y.data_type.size))
    groups = grid_for(nout, 64, device.limits["max_compute_work_group_count"][0])
    plan = DispatchPlan(variant=fam.name(t=_TYPE_CODE[x.data_type], o=o), bindings=(0, 1), push=push, groups=groups,
                        writes=(1,), offset_slots=slots)
    return CompiledOperator(device, desc, REDUCE, REDUCE.inputs, REDUCE.outputs, [plan])


# the helpers (kompute_dml/functional/reduce.py): kdml.<name> -> its function
HELPERS = {"reduce_sum": RF.SUM, "reduce_mean": RF.AVERAGE, "reduce_max": RF.MAX, "reduce_min": RF.MIN,
           "reduce_prod": RF.MULTIPLY, "reduce_sum_square": RF.SUM_SQUARE, "reduce_l1": RF.L1, "reduce_l2": RF.L2,
           "reduce_log_sum": RF.LOG_SUM, "reduce_log_sum_exp": RF.LOG_SUM_EXP, "argmax": RF.ARGMAX,
           "argmin": RF.ARGMIN}
# ONNX node type -> helper
ONNX_REDUCE = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
               "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceSumSquare": "reduce_sum_square",
               "ReduceL1": "reduce_l1", "ReduceL2": "reduce_l2", "ReduceLogSum": "reduce_log_sum",
               "ReduceLogSumExp": "reduce_log_sum_exp", "ArgMax": "argmax", "ArgMin": "argmin"}
EXPORTS = {"ReduceFunction": ReduceFunction}

_F32_4D = TensorDesc(DataType.FLOAT32, (2, 3, 4, 5))


def _node_rule(fn: ReduceFunction) -> Any:
    """The ONNX node's input type is one the function takes from 5_0 (ops/onnx_types.py). An axes
    input is read on the host: a fed one runs the model node by node, read at each run."""
    allowed = frozenset(d.numpy_dtype for d in function_types(FL.FL_3_0, fn))
    if fn == RF.SUM:  # 64-bit integers summed exactly from their 16-bit parts (onnx_backend/int64_sum.py)
        allowed |= {np.dtype(np.int64), np.dtype(np.uint64)}

    def rule(t: Any) -> str:
        dt = t.elem(0) if t.inputs else None
        if dt is not None and dt not in allowed:
            return f"type {dt} is not one REDUCE {fn.name} takes"
        return ""
    return rule


def _onnx_ops() -> tuple[OnnxOp, ...]:
    from .onnx_types import float_input

    # LpNormalization: x / REDUCE L1 or L2 over its axis, 0 where the norm is 0 (onnx_backend/handlers_reduce.py)
    return (*(OnnxOp(t, "", h, check=_node_rule(HELPERS[h])) for t, h in ONNX_REDUCE.items()),
            OnnxOp("LpNormalization", "", "reduce_l2", check=float_input))


SPECS = (OperatorSpec(ReduceDesc, REDUCE, compile_reduce, (contract.REDUCE,), helpers=tuple(HELPERS),
                      onnx=_onnx_ops(),
                      example=lambda: ReduceDesc(_F32_4D, TensorDesc(DataType.FLOAT32, (2, 1, 4, 1)), RF.SUM, (1, 3))),)
