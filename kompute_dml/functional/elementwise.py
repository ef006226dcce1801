"""Functional helpers of the element-wise operators (ops/elementwise.py, docs/elementwise.md).

Each takes kompute_dml Tensors or anything kompute_dml/core/inputs.py takes (numpy arrays, Python
numbers and lists, CPU `__array__` / `__dlpack__` objects), broadcasts the operands to one
shape with numpy's rules (as stride-0 views: nothing is copied), and returns a new packed
Tensor of that shape from the device's buffer pool, or writes `out=` (a Tensor of that shape
and the result's data type, any strides). A 0-d result has shape (1,) (DirectML tensors have
at least one dimension).

Operands must share one data type (DirectML's constraint: no promotion; InvalidArgumentError
naming the types and numpy's promoted type otherwise: the Tensor operators `a + b` promote, see
docs/tensor.md); Python numbers and lists take the data type of the other operand when it has
one (Tensor or array), if their values survive the conversion (InvalidArgumentError otherwise),
and are float32 (floats, as CuPy's and PyTorch's defaults; numpy's float64 has no arithmetic
operator) or int64 (integers) where nothing else types them. Boolean arrays are uploaded as
UINT8 (0 / 1).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..core.dtypes import DataType, FeatureLevel
from ..core.errors import invalid
from ..core.inputs import as_host_array, conform, is_python_data
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..ops.elementwise import (
    ElementWiseAdd1Desc,
    ElementWiseAddDesc,
    ElementWiseDivideDesc,
    ElementWiseIfDesc,
    ElementWiseIsNanDesc,
    ElementWiseLogicalAndDesc,
    ElementWiseLogicalEqualsDesc,
    ElementWiseLogicalGreaterThanOrEqualDesc,
    ElementWiseMultiplyDesc,
    ElementWiseSubtractDesc,
)
from . import _packed, as_tensor, check_out, compile_cached, device_of, pooled_empty

_NAMES = ("a", "b")


def _host(x: Any, field: str, like: np.dtype | None) -> Any:
    """A Tensor as it is; Python data in `like`'s type where there is one; boolean arrays as UINT8."""
    if isinstance(x, Tensor):
        return x
    if is_python_data(x) and like is not None:
        return conform(as_host_array(x, field, dml=False), like, field, python=True)
    arr = as_host_array(x, field, dml=False)
    if is_python_data(x) and arr.dtype == np.float64:  # Python floats with nothing to type them: float32
        return conform(arr, np.dtype(np.float32), field, python=True)
    return as_host_array(arr.astype(np.uint8) if arr.dtype == bool else arr, field)


def _operands(values: tuple[Any, ...], fields: tuple[str, ...], device: Device | None,
              typed: slice = slice(None)) -> tuple[Device, list[Tensor]]:
    """The operands as tensors on one device; `typed`: the operands whose type Python data takes."""
    dev = device_of(*values, device=device)
    like = None
    for x in values[typed]:
        if like is None and isinstance(x, Tensor):
            like = x.desc.data_type.numpy_dtype
        elif like is None and isinstance(x, (np.ndarray, np.generic)) and x.dtype != bool:
            like = x.dtype
    tensors = [as_tensor(_host(x, f, like), dev, f) for x, f in zip(values, fields)]
    _check_one_type(tensors[typed], fields[typed])
    return dev, tensors


def _check_one_type(tensors: list[Tensor], fields: tuple[str, ...]) -> None:
    """InvalidArgumentError naming the rule where operands that must share a type do not."""
    types = [t.desc.data_type for t in tensors]
    for t, f in zip(tensors[1:], fields[1:]):
        if t.desc.data_type != types[0]:
            promoted = np.result_type(*(d.numpy_dtype for d in types))
            raise invalid(f, f"data type {t.desc.data_type.name} differs from {fields[0]}'s {types[0].name}: "
                             "DirectML's operators take operands of one type and do not promote (numpy would give "
                             f"{promoted}); convert one first (kdml.cast, Tensor.astype) or use the Tensor "
                             "operators (a + b), which apply numpy's promotion (docs/tensor.md)")


def broadcast_view(t: Tensor, shape: tuple[int, ...], field: str) -> Tensor:
    """`t` seen with `shape` (numpy's broadcasting rules) through stride-0 dimensions."""
    d = t.desc
    if d.sizes == shape:
        return t
    desc = _broadcast_desc(d, shape)
    if desc is None:
        raise invalid(field, f"sizes {d.sizes} do not broadcast to {shape}")
    # the view addresses the same elements as t (stride-0 repeats), so t's binding checks hold
    return Tensor.trusted(t.buffer, desc, t.offset)


@functools.lru_cache(maxsize=4096)
def _broadcast_desc(d: TensorDesc, shape: tuple[int, ...]) -> TensorDesc | None:
    """The view's desc, None where d's sizes do not broadcast to `shape`; cached: a plan asks for
    the same views again and again (every layer's scale, bias and skip), and a new desc costs its
    checks."""
    k = len(shape) - d.dimension_count
    if k < 0:
        return None
    strides = []
    for i, s in enumerate(shape):
        j = i - k
        if j < 0 or (d.sizes[j] == 1 and s != 1):
            strides.append(0)
        elif d.sizes[j] == s:
            strides.append(d.effective_strides[j])
        else:
            return None
    return TensorDesc(d.data_type, shape, tuple(strides), guaranteed_base_offset_alignment=d.guaranteed_base_offset_alignment)


def _run(make: Any, tensors: list[Tensor], fields: tuple[str, ...], out_type: DataType | None, out: Tensor | None,
         dev: Device) -> Tensor:
    """Broadcast, allocate or check the output, compile (cached) `make(*descs, out_desc)`, run."""
    try:
        shape = tuple(np.broadcast_shapes(*(t.desc.sizes for t in tensors))) or (1,)
    except ValueError:
        raise invalid(fields[-1], "operand sizes " + ", ".join(str(t.desc.sizes) for t in tensors)
                      + " do not broadcast together") from None
    views = [broadcast_view(t, shape, f) for t, f in zip(tensors, fields)]
    dt = out_type if out_type is not None else views[-1].desc.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
    out_desc = out.desc if out is not None else _packed(dt, shape)
    op = compile_cached(dev, make(*(v.desc for v in views), out_desc))
    if out is None:
        out = pooled_empty(dev, out_desc)
    op.execute(views, [out])
    return out


def _binary(desc_type: Any, a: Any, b: Any, out: Tensor | None, device: Device | None,
            out_type: DataType | None = None) -> Tensor:
    dev, (ta, tb) = _operands((a, b), _NAMES, device)
    return _run(desc_type, [ta, tb], _NAMES, out_type, out, dev)


def _bool_type(data_type: Any) -> DataType:
    return DataType.coerce(data_type, "data_type")


def add(a: Any, b: Any, *, activation: Any = None, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """a + b: DML_ELEMENT_WISE_ADD1 for FLOAT32/FLOAT16 from feature level 2_0, DML_ELEMENT_WISE_ADD
    otherwise (integers wrap in their type). `activation`: ADD1's FusedActivation, an activation
    descriptor whose tensors are None (``kdml.ActivationReluDesc(None, None)``; CONVOLUTION's
    list, ops/conv_fused.py), applied to the sum in one dispatch: the bits of the sum then the
    standalone activation."""
    dev, (ta, tb) = _operands((a, b), _NAMES, device)
    use_add1 = ta.desc.data_type.is_float and dev.feature_level >= FeatureLevel.FL_2_0
    if activation is None:
        return _run(ElementWiseAdd1Desc if use_add1 else ElementWiseAddDesc, [ta, tb], _NAMES, None, out, dev)
    if not use_add1:
        raise invalid("activation", f"a fused activation needs ELEMENT_WISE_ADD1: FLOAT32 or FLOAT16 operands at "
                                    f"feature level 2_0 or later, got {ta.desc.data_type.name} at {dev.feature_level.name}")
    return _run(lambda da, db, do: ElementWiseAdd1Desc(da, db, do, fused_activation=activation), [ta, tb], _NAMES,
                None, out, dev)


def sub(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """a - b (DML_ELEMENT_WISE_SUBTRACT; integers wrap)."""
    return _binary(ElementWiseSubtractDesc, a, b, out, device)


def mul(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """a * b (DML_ELEMENT_WISE_MULTIPLY; integers: the low bits of the product)."""
    return _binary(ElementWiseMultiplyDesc, a, b, out, device)


def div(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """a / b (DML_ELEMENT_WISE_DIVIDE): integers truncate toward zero, x / 0 has every bit set."""
    return _binary(ElementWiseDivideDesc, a, b, out, device)


def equal(a: Any, b: Any, *, data_type: Any = DataType.UINT8, out: Tensor | None = None,
          device: Device | None = None) -> Tensor:
    """a == b as 1 / 0 of `data_type` (UINT8 or UINT32; DML_ELEMENT_WISE_LOGICAL_EQUALS)."""
    return _binary(ElementWiseLogicalEqualsDesc, a, b, out, device, _bool_type(data_type))


def greater_equal(a: Any, b: Any, *, data_type: Any = DataType.UINT8, out: Tensor | None = None,
                  device: Device | None = None) -> Tensor:
    """a >= b as 1 / 0 of `data_type` (DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL)."""
    return _binary(ElementWiseLogicalGreaterThanOrEqualDesc, a, b, out, device, _bool_type(data_type))


def logical_and(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """(a != 0) and (b != 0) as 1 / 0 of the operands' type, UINT8 or UINT32
    (DML_ELEMENT_WISE_LOGICAL_AND); boolean arrays are UINT8."""
    return _binary(ElementWiseLogicalAndDesc, a, b, out, device)


def isnan(x: Any, *, data_type: Any = DataType.UINT8, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """1 where x (FLOAT32 / FLOAT16) is a NaN, else 0, as `data_type` (DML_ELEMENT_WISE_IS_NAN)."""
    dev, (t,) = _operands((x,), ("x",), device)
    return _run(ElementWiseIsNanDesc, [t], ("x",), _bool_type(data_type), out, dev)


def where(condition: Any, a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """a where condition != 0, else b (DML_ELEMENT_WISE_IF). The condition is UINT8 (boolean
    arrays become 0 / 1); a and b share one data type, which the result has."""
    fields = ("condition", "a", "b")
    dev, tensors = _operands((condition, a, b), fields, device, slice(1, None))
    if tensors[0].desc.data_type != DataType.UINT8:
        raise invalid("condition", f"must be UINT8 (or boolean), got {tensors[0].desc.data_type.name}")
    return _run(ElementWiseIfDesc, tensors, fields, tensors[1].desc.data_type, out, dev)


__all__ = ["add", "broadcast_view", "div", "equal", "greater_equal", "isnan", "logical_and", "mul", "sub", "where"]
