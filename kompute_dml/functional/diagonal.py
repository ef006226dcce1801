"""The helpers of DIAGONAL_MATRIX and DIAGONAL_MATRIX1 (kompute_dml/ops/diagonal.py,
docs/diagonal.md): diagonal_matrix, diagonal_matrix1, eye_like, triu, tril."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.dtypes import DataType, FeatureLevel
from ..core.errors import invalid
from ..core.inputs import as_host_array
from ..core.ints import as_int, as_int_tuple
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..ops.diagonal import INT32_MAX, INT32_MIN, DiagonalMatrix1Desc, DiagonalMatrixDesc
from . import as_tensor, check_out, compile_cached, device_of, pooled_empty


def _compile_diag(dev: Device, desc: Any, value: Any) -> Any:
    # -0.0 == 0.0 and NaN != NaN: such values would alias or miss in compile_cached's
    # descriptor-keyed cache, so those descriptors are compiled directly.
    if isinstance(value, (float, np.floating)) and (math.isnan(value) or (value == 0 and math.copysign(1.0, value) < 0)):
        return dev.compile(desc)
    return compile_cached(dev, desc)


def _clamp_k(k: int, rows: int, cols: int) -> int:
    """ONNX's int64 k clamped to [-rows, cols] (beyond which EyeLike/Trilu no longer change),
    then into [INT32_MIN, INT32_MAX - 1] so that k and k + 1 are DirectML INTs."""
    k = min(max(k, -rows), cols)
    return min(max(k, INT32_MIN), INT32_MAX - 1)


def diagonal_matrix(
    sizes: Any,
    *,
    offset: int = 0,
    value: float = 1.0,
    data_type: Any = DataType.FLOAT32,
    out: Tensor | None = None,
    device: Device | None = None,
) -> Tensor:
    """DML_DIAGONAL_MATRIX: a new tensor of `sizes` (2-4 dims; leading dims are a batch) with
    Output[.., y, x] = value where y + offset == x, else 0.

    `offset` is an int32, `value` a FLOAT converted to `data_type` (floats rounded to nearest
    even, integers truncated toward zero and saturated, NaN -> 0). The output is packed
    unless `out` (a Tensor of those sizes and that data type, any strides) is given."""
    dev = device_of(out, device=device)
    dt = DataType.coerce(data_type, "data_type")
    sizes_t = as_int_tuple(sizes, "sizes")
    if out is not None:
        check_out(out, dev, sizes_t, dt)
    desc = out.desc if out is not None else TensorDesc(dt, sizes_t)
    op = _compile_diag(dev, DiagonalMatrixDesc(desc, offset, value), value)
    if out is None:
        out = pooled_empty(dev, desc)
    op.execute([], [out])
    return out


def diagonal_matrix1(
    x: Any = None,
    *,
    sizes: Any = None,
    data_type: Any = None,
    value: Any = 0,
    diagonal_fill_begin: int,
    diagonal_fill_end: int,
    out: Tensor | None = None,
    device: Device | None = None,
) -> Tensor:
    """DML_DIAGONAL_MATRIX1: topX = x - y; where (End >= Begin) ^ (topX >= Begin) ^ (topX < End)
    the output is `value`, elsewhere the element of `x` (a Tensor or numpy array, any strides
    including broadcast), or 0 when `x` is None.

    With `x`, `sizes` and `data_type` default to x's (and must match them if given); without
    `x` they are required (or taken from `out`). `value` is a Python number read as the data
    type: exact for 64-bit integers; InvalidArgumentError if the type cannot represent it.
    Begin/End are int32. The output is packed unless `out` is given."""
    dev = device_of(x, out, device=device)
    if out is not None and not isinstance(out, Tensor):
        raise invalid("out", f"must be a kompute_dml Tensor, got {type(out).__name__}")
    xt = as_tensor(x, dev) if x is not None else None
    if xt is not None:
        in_desc = xt.desc
        if sizes is not None and as_int_tuple(sizes, "sizes") != in_desc.sizes:
            raise invalid("sizes", f"must equal x's sizes {in_desc.sizes}, got {tuple(sizes)}")
        if data_type is not None and DataType.coerce(data_type, "data_type") != in_desc.data_type:
            raise invalid("data_type", f"must equal x's data type ({in_desc.data_type.name}), got {data_type!r}")
        sizes_t, dt = in_desc.sizes, in_desc.data_type
    else:
        in_desc = None
        if sizes is None and out is not None:
            sizes = out.desc.sizes
        if data_type is None and out is not None:
            data_type = out.desc.data_type
        if sizes is None:
            raise invalid("sizes", "is required when x is None")
        if data_type is None:
            raise invalid("data_type", "is required when x is None")
        sizes_t, dt = as_int_tuple(sizes, "sizes"), DataType.coerce(data_type, "data_type")
    if out is not None:
        check_out(out, dev, sizes_t, dt)
    out_desc = out.desc if out is not None else TensorDesc(dt, sizes_t)
    desc = DiagonalMatrix1Desc(in_desc, out_desc, dt, value, diagonal_fill_begin, diagonal_fill_end)
    op = _compile_diag(dev, desc, value)
    if out is None:
        out = pooled_empty(dev, out_desc)
    op.execute([xt], [out])
    return out


def eye_like(
    x: Any, k: int = 0, *, data_type: Any = None, out: Tensor | None = None, device: Device | None = None
) -> Tensor:
    """ONNX EyeLike through DML_DIAGONAL_MATRIX: a 2-D tensor shaped like `x` (a 2-D Tensor or
    numpy array, whose values are not read, or a shape tuple) with ones where
    column == row + k, zeros elsewhere.

    `data_type` defaults to x's type (FLOAT32 for a shape tuple). `k` is ONNX's int64, clamped
    to [-rows, cols] before it becomes DirectML's int32 Offset, so any k works. Below feature
    level 4_0 (DIAGONAL_MATRIX is 4-D only there) the output is written through a {1,1,rows,cols}
    view of the same memory."""
    if isinstance(x, Tensor):
        shape, src_dt = x.desc.sizes, x.desc.data_type
    elif isinstance(x, (tuple, list)):
        shape, src_dt = as_int_tuple(x, "x"), DataType.FLOAT32
    else:  # an array (numpy, torch CPU, ...): only its shape and type are read
        arr = as_host_array(x, "x")
        shape, src_dt = tuple(arr.shape), DataType.from_numpy(arr.dtype)
    if len(shape) != 2:
        raise invalid("x", f"EyeLike takes a 2-D tensor, got {len(shape)} dimensions")
    dev = device_of(x, out, device=device)
    dt = DataType.coerce(data_type, "data_type") if data_type is not None else src_dt
    rows, cols = shape
    offset = _clamp_k(as_int(k, "k"), rows, cols)
    if out is not None:
        check_out(out, dev, shape, dt)
    desc = out.desc if out is not None else TensorDesc(dt, shape)
    run_desc = desc
    if dev.feature_level < FeatureLevel.FL_4_0:
        s0, s1 = desc.effective_strides
        run_desc = TensorDesc(
            dt, (1, 1, rows, cols), (0, 0, s0, s1), desc.total_tensor_size_in_bytes, desc.guaranteed_base_offset_alignment
        )
    op = compile_cached(dev, DiagonalMatrixDesc(run_desc, offset, 1.0))
    if out is None:
        out = pooled_empty(dev, desc)
    op.execute([], [out if run_desc is desc else Tensor(out.buffer, run_desc, out.offset)])
    return out


def _trilu(x: Any, k: Any, upper: bool, out: Tensor | None, device: Device | None) -> Tensor:
    dev = device_of(x, out, device=device)
    kk = as_int(k, "k")
    xt = as_tensor(x, dev)
    d = xt.desc
    if d.dimension_count < 2:
        raise invalid("x", f"Trilu needs at least 2 dimensions, got {d.dimension_count}")
    rows, cols = d.sizes[-2], d.sizes[-1]
    kc = _clamp_k(kk, rows, cols)
    begin, end = (INT32_MIN, kc) if upper else (kc + 1, INT32_MAX)
    if out is not None:
        check_out(out, dev, d.sizes, d.data_type)
    out_desc = out.desc if out is not None else TensorDesc(d.data_type, d.sizes)
    op = compile_cached(dev, DiagonalMatrix1Desc(d, out_desc, d.data_type, 0, begin, end))
    if out is None:
        out = pooled_empty(dev, out_desc)
    op.execute([xt], [out])
    return out


def triu(x: Any, k: Any = 0, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """ONNX Trilu(upper=1) / numpy.triu on the last two dims of a 2-4-D tensor: keeps the
    elements with column - row >= k, zeros the rest (DIAGONAL_MATRIX1, Begin = INT32_MIN,
    End = k, Value 0). k is int64, clamped to [-rows, cols] first, so |k| >= 2^31 works."""
    return _trilu(x, k, True, out, device)


def tril(x: Any, k: Any = 0, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """ONNX Trilu(upper=0) / numpy.tril on the last two dims of a 2-4-D tensor: keeps the
    elements with column - row <= k, zeros the rest (DIAGONAL_MATRIX1, Begin = k + 1,
    End = INT32_MAX, Value 0). k is int64, clamped to [-rows, cols] first."""
    return _trilu(x, k, False, out, device)
