"""DirectML's ARGMIN and ARGMAX (DML_ARGMIN_OPERATOR_DESC, DML_ARGMAX_OPERATOR_DESC { InputTensor,
OutputTensor, AxisCount, Axes, AxisDirection }): the index, row-major over the reduced axes, of the
smallest / greatest input element of each output element's subset; DML_AXIS_DIRECTION_INCREASING the
first such index, DECREASING the last (the pages: argmin({1,2,3,2,1}) = 0 and 4).

Thin forms of REDUCE's ARGMIN / ARGMAX (ops/reduce.py, which the pages name as the INCREASING
equivalent): the REDUCE plan of the same tensors and axes (`compile_reduce`: shaders/reduce.comp, one
invocation per output element, the reduced elements read in row-major order), with DECREASING as bit 8
of the plan's `fn` word, which makes reduce.comp keep the last of equal extremes. Exact. A NaN counts as
the extreme (numpy's argmax / argmin; REDUCE's rule): the first NaN (INCREASING) or the last
(DECREASING); -0 and +0 are equal. Output UINT32 / INT32 / UINT64 / INT64 (64-bit: the index in the
low word, 0 in the high).

Tensor support as the pages give it: from 3_0, 1 to 8 dimensions, the input FLOAT32, FLOAT16 or an 8- to
32-bit integer, the output INT64, INT32, UINT64, UINT32. Validation, in order: DML_BUFFER_TENSOR_DESC
rules and the table (InvalidArgumentError / UnsupportedError naming the field), axis_direction
(InvalidArgumentError), then REDUCE's rules: the same DimensionCount (output_tensor.sizes), axes in
[0, DimensionCount) (axes[i]), the output's sizes the input's with 1 on the reduced axes; where the
pages are silent, REDUCE's choices: at least one axis, no axis twice (axes). A non-overlapping output,
32-bit element addressing. ONNX ArgMax / ArgMin stay on REDUCE (onnx_backend/handlers_reduce.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.registry import FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import run_into
from ..functional.elementwise import _operands
from ..functional.reduce import normalize_axes
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, validate_tensors
from .cumulative import AxisDirection, _direction
from .reduce import INDEX_TYPES, ReduceDesc, ReduceFunction, compile_reduce
from .spec import OperatorSpec

DECREASING_BIT = 0x100  # reduce.comp: fn's bit 8 keeps the last of equal extremes


def _table(name: str, op_type: int) -> OperatorSupport:
    return OperatorSupport(name, op_type, (row(FL.FL_3_0, ("input_tensor", "input", (1, 8), FLOATS | INTS_8_32),
                                               ("output_tensor", "output", (1, 8), INDEX_TYPES)),))


ARGMIN = _table("ARGMIN", 137)
ARGMAX = _table("ARGMAX", 138)


class _Axes:
    """`axes` given as a list, range or 1-D array kept as a tuple (the descriptor is hashable)."""

    axes: Any

    def __post_init__(self) -> None:
        if isinstance(self.axes, (list, range)) or (isinstance(self.axes, np.ndarray) and self.axes.ndim == 1):
            object.__setattr__(self, "axes", tuple(self.axes))

    @property
    def axis_count(self) -> int:
        return len(self.axes)


@dataclass(frozen=True)
class ArgminDesc(_Axes):
    """DML_ARGMIN_OPERATOR_DESC { InputTensor, OutputTensor, AxisCount, Axes, AxisDirection } (AxisCount =
    len(axes)): the output has the input's DimensionCount and sizes, 1 on each reduced axis, an index type."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axes: tuple[int, ...]
    axis_direction: AxisDirection = AxisDirection.INCREASING


@dataclass(frozen=True)
class ArgmaxDesc(_Axes):
    """DML_ARGMAX_OPERATOR_DESC: as ArgminDesc, the greatest element's index."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axes: tuple[int, ...]
    axis_direction: AxisDirection = AxisDirection.INCREASING


def _compile(device: Device, desc: Any, support: OperatorSupport, fn: ReduceFunction) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    last = _direction(desc.axis_direction) == AxisDirection.DECREASING
    inner = compile_reduce(device, ReduceDesc(desc.input_tensor, desc.output_tensor, fn, desc.axes))
    word = contract.REDUCE_PUSH.offset("fn")
    plans: list[Any] = []
    for p in inner.plans:
        assert isinstance(p, DispatchPlan)
        push = list(p.push)
        push[word] |= DECREASING_BIT if last else 0
        plans.append(dataclasses.replace(p, push=tuple(push)))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans)


def compile_argmin(device: Device, desc: ArgminDesc) -> CompiledOperator:
    return _compile(device, desc, ARGMIN, ReduceFunction.ARGMIN)


def compile_argmax(device: Device, desc: ArgmaxDesc) -> CompiledOperator:
    return _compile(device, desc, ARGMAX, ReduceFunction.ARGMAX)


def _helper(cls: type, x: Any, axes: Any, axis_direction: Any, index_type: Any, out: Tensor | None,
            device: Device | None) -> Tensor:
    if device is None and isinstance(out, Tensor):
        device = out.device
    dev, (t,) = _operands((x,), ("x",), device)
    d = t.desc
    red = normalize_axes(axes, d.dimension_count)
    shape = tuple(1 if i in red else s for i, s in enumerate(d.sizes))
    dt = DataType.coerce(index_type, "index_type")
    return run_into(dev, lambda od: cls(d, od, red, axis_direction), [t], shape, dt, out)


def arg_min(x: Any, axes: Any = None, *, axis_direction: Any = AxisDirection.INCREASING, index_type: Any = DataType.INT64,
            out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """The index of the smallest element over `axes` (None: all; negative from the end), kept as size 1
    (DML_ARGMIN): the first (INCREASING) or the last (DECREASING) of equal ones; `index_type` INT64
    (default), UINT64, INT32 or UINT32."""
    return _helper(ArgminDesc, x, axes, axis_direction, index_type, out, device)


def arg_max(x: Any, axes: Any = None, *, axis_direction: Any = AxisDirection.INCREASING, index_type: Any = DataType.INT64,
            out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """The index of the greatest element over `axes` (DML_ARGMAX); as arg_min."""
    return _helper(ArgmaxDesc, x, axes, axis_direction, index_type, out, device)


_X = TensorDesc(DataType.FLOAT32, (2, 3, 4, 5))
_Y = TensorDesc(DataType.UINT32, (2, 1, 4, 1))
SPECS = (
    OperatorSpec(ArgminDesc, ARGMIN, compile_argmin, (contract.REDUCE,), helpers=("arg_min",),
                 example=lambda: ArgminDesc(_X, _Y, (1, 3), AxisDirection.DECREASING)),
    OperatorSpec(ArgmaxDesc, ARGMAX, compile_argmax, (contract.REDUCE,), helpers=("arg_max",),
                 example=lambda: ArgmaxDesc(_X, _Y, (1, 3))),
)
