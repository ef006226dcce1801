"""Functional helpers: allocate a packed output, compile (cached), execute, return it.

Each accepts kompute_dml Tensors or numpy arrays (uploaded to the tensor's device, or to
`device=`, or to the process-wide default device, `kdml.default_device()`).
"""

from __future__ import annotations

import math
import operator
import sys
import threading
from typing import Any

import numpy as np

from .device import Device
from .dtypes import DataType, FeatureLevel
from .errors import UnsupportedError, invalid
from .memory import Buffer, Tensor, packed_desc_for
from .ops.diagonal import INT32_MAX, INT32_MIN, DiagonalMatrix1Desc, DiagonalMatrixDesc
from .ops.identity import ActivationIdentityDesc, CopyDesc
from .ops.matmul_integer import MatrixMultiplyIntegerToFloatDesc
from .tensor_desc import TensorDesc, validate_desc

_default: Device | None = None
_default_lock = threading.Lock()


def default_device() -> Device:
    """The device functional helpers use when given numpy arrays (device 0, highest level)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = Device()
        return _default


def _device_of(*values: Any, device: Device | None = None) -> Device:
    if device is not None:
        return device
    for v in values:
        if isinstance(v, Tensor):
            return v.device
    return default_device()


# ---- buffer reuse --------------------------------------------------------------------
# kp binds whole buffers into each pipeline, so a fresh buffer costs a pipeline build
# (0.5-60 ms on lavapipe, by shader size). Helpers therefore draw their outputs and
# uploads from a small per-device pool and reuse a buffer once nothing outside the pool
# references it (CPython reference counts); its cached pipelines are then reused too.
POOL_MAX_BYTES = 256 << 20
POOL_MAX_BUFFERS = 64


def _pool_take(device: Device, nbytes: int) -> Buffer:
    pool: list[Buffer] = device.__dict__.setdefault("_helper_pool", [])
    with device._lock:
        for i in range(len(pool)):
            b = pool[i]
            # references: the pool's list, `b`, getrefcount's argument
            if b.nbytes == nbytes and sys.getrefcount(b) == 3:
                pool.append(pool.pop(i))  # most recently used last
                return b
            del b
        buf = Buffer(device, nbytes)
        pool.append(buf)
        total = sum(x.nbytes for x in pool)
        i = 0
        while (total > POOL_MAX_BYTES or len(pool) > POOL_MAX_BUFFERS) and i < len(pool) - 1:
            b = pool[i]
            if sys.getrefcount(b) == 3:  # free: forget it (freed with its last reference)
                total -= b.nbytes
                del pool[i]
            else:
                i += 1
            del b
        return buf


def pooled_empty(device: Device, desc: TensorDesc) -> Tensor:
    """An output tensor for a helper (contents undefined: the operator writes every element)."""
    validate_desc(desc, "out")
    return Tensor(_pool_take(device, desc.byte_size), desc, 0)


def pooled_upload(device: Device, array: np.ndarray) -> Tensor:
    """Upload a numpy array as a packed tensor into a pooled buffer."""
    arr = np.ascontiguousarray(array)
    desc = packed_desc_for(arr)
    buf = _pool_take(device, desc.byte_size)
    buf.write(arr)
    return Tensor(buf, desc, 0)


def as_tensor(x: Any, device: Device, field: str = "x") -> Tensor:
    if isinstance(x, Tensor):
        if x.device is not device:
            raise invalid(field, "belongs to another Device")
        return x
    if isinstance(x, (np.ndarray, np.generic, list, tuple, int, float)):
        return pooled_upload(device, np.asarray(x))
    raise invalid(field, f"must be a Tensor or a numpy array, got {type(x).__name__}")


_compile_cache: dict[tuple[int, Any], Any] = {}


def compile_cached(device: Device, desc: Any) -> Any:
    """dev.compile with a per-device cache keyed by the (hashable) descriptor."""
    key = (id(device), desc)
    op = _compile_cache.get(key)
    if op is None or op.device is not device:
        op = device.compile(desc)
        if len(_compile_cache) > 512:
            _compile_cache.clear()
        _compile_cache[key] = op
    return op


def _packed_like(desc: TensorDesc) -> TensorDesc:
    return TensorDesc(desc.data_type, desc.sizes)


def _unary_copy(x: Any, desc_type: type, out: Tensor | None, device: Device | None) -> Tensor:
    dev = _device_of(x, out, device=device)
    t = as_tensor(x, dev)
    if out is None:
        out = pooled_empty(dev, _packed_like(t.desc))
    op = compile_cached(dev, desc_type(t.desc, out.desc))
    op.execute([t], [out])
    return out


def identity(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_ACTIVATION_IDENTITY: FLOAT32/FLOAT16, 1-8 dimensions; output packed unless `out` is given."""
    return _unary_copy(x, ActivationIdentityDesc, out, device)


def copy(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """Strided element-wise copy of any of the eleven data types (ONNX Identity)."""
    return _unary_copy(x, CopyDesc, out, device)


# ---- DIAGONAL_MATRIX / DIAGONAL_MATRIX1 helpers (docs/diagonal.md) --------------------
def _compile_diag(dev: Device, desc: Any, value: Any) -> Any:
    # -0.0 == 0.0 and NaN != NaN: such values would alias or miss in compile_cached's
    # descriptor-keyed cache, so those descriptors are compiled directly.
    if isinstance(value, (float, np.floating)) and (math.isnan(value) or (value == 0 and math.copysign(1.0, value) < 0)):
        return dev.compile(desc)
    return compile_cached(dev, desc)


def _check_out(out: Any, dev: Device, sizes: tuple[int, ...], dt: DataType) -> None:
    if not isinstance(out, Tensor):
        raise invalid("out", f"must be a kompute_dml Tensor, got {type(out).__name__}")
    if out.device is not dev:
        raise invalid("out", "belongs to another Device")
    if out.desc.sizes != sizes:
        raise invalid("out", f"sizes must be {sizes}, got {out.desc.sizes}")
    if out.desc.data_type != dt:
        raise invalid("out", f"data type must be {dt.name}, got {out.desc.data_type.name}")


def _sizes_tuple(sizes: Any, field: str = "sizes") -> tuple[int, ...]:
    try:
        return tuple(operator.index(s) for s in sizes)
    except TypeError:
        raise invalid(field, f"must be a sequence of integers, got {sizes!r}") from None


def _int_k(k: Any) -> int:
    if isinstance(k, (bool, np.bool_)):
        raise invalid("k", f"must be an integer, got {k!r}")
    try:
        return operator.index(k)
    except TypeError:
        raise invalid("k", f"must be an integer, got {k!r}") from None


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
    dev = _device_of(out, device=device)
    dt = DataType.coerce(data_type, "data_type")
    sizes_t = _sizes_tuple(sizes)
    if out is not None:
        _check_out(out, dev, sizes_t, dt)
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
    dev = _device_of(x, out, device=device)
    if out is not None and not isinstance(out, Tensor):
        raise invalid("out", f"must be a kompute_dml Tensor, got {type(out).__name__}")
    xt = as_tensor(x, dev) if x is not None else None
    if xt is not None:
        in_desc = xt.desc
        if sizes is not None and _sizes_tuple(sizes) != in_desc.sizes:
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
        sizes_t, dt = _sizes_tuple(sizes), DataType.coerce(data_type, "data_type")
    if out is not None:
        _check_out(out, dev, sizes_t, dt)
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
    elif isinstance(x, np.ndarray):
        shape, src_dt = tuple(x.shape), DataType.from_numpy(x.dtype)
    elif isinstance(x, (tuple, list)):
        shape, src_dt = _sizes_tuple(x, "x"), DataType.FLOAT32
    else:
        raise invalid("x", f"must be a Tensor, a numpy array or a shape tuple, got {type(x).__name__}")
    if len(shape) != 2:
        raise invalid("x", f"EyeLike takes a 2-D tensor, got {len(shape)} dimensions")
    dev = _device_of(x, out, device=device)
    dt = DataType.coerce(data_type, "data_type") if data_type is not None else src_dt
    rows, cols = shape
    offset = _clamp_k(_int_k(k), rows, cols)
    if out is not None:
        _check_out(out, dev, shape, dt)
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
    dev = _device_of(x, out, device=device)
    kk = _int_k(k)
    xt = as_tensor(x, dev)
    d = xt.desc
    if d.dimension_count < 2:
        raise invalid("x", f"Trilu needs at least 2 dimensions, got {d.dimension_count}")
    rows, cols = d.sizes[-2], d.sizes[-1]
    kc = _clamp_k(kk, rows, cols)
    begin, end = (INT32_MIN, kc) if upper else (kc + 1, INT32_MAX)
    if out is not None:
        _check_out(out, dev, d.sizes, d.data_type)
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


# ---- MATRIX_MULTIPLY_INTEGER_TO_FLOAT (ONNX com.microsoft MatMulIntegerToFloat) ----------
def _mm_broadcast_strides(sizes: tuple[int, ...], strides: tuple[int, ...], target: tuple[int, ...], field: str) -> tuple[int, ...]:
    """Strides laying a tensor of `sizes` (numpy-broadcastable to `target`) over `target`."""
    if len(sizes) > len(target):
        raise invalid(field, f"shape {sizes} does not broadcast to {target}")
    pad = len(target) - len(sizes)
    out = []
    for i, t in enumerate(target):
        s = sizes[i - pad] if i >= pad else 1
        if s == t and t > 1:
            out.append(strides[i - pad])
        elif s == 1:
            out.append(0)
        else:
            raise invalid(field, f"shape {sizes} does not broadcast to {target}")
    return tuple(out)


def _mm_quant_view(t: Tensor, count: int, per_row: bool, field: str) -> Tensor:
    """A scale / zero-point tensor as {1,1}, {M,1} (per row) or {1,N} (per column)."""
    d = t.desc
    if d.element_count == 1:
        return Tensor(t.buffer, TensorDesc(d.data_type, (1, 1), (0, 0)), t.offset)
    if d.element_count != count:
        what = "per row (M)" if per_row else "per column (N)"
        raise invalid(field, f"must hold 1 element or {count} ({what}), got sizes {d.sizes}")
    st = d.effective_strides[next(i for i, s in enumerate(d.sizes) if s == count)]
    sizes, strides = ((count, 1), (st, 0)) if per_row else ((1, count), (0, st))
    return Tensor(t.buffer, TensorDesc(d.data_type, sizes, strides), t.offset)


def matmul_integer_to_float(
    a: Any, b: Any, a_scale: Any, b_scale: Any, a_zero_point: Any = None, b_zero_point: Any = None, bias: Any = None,
    *, out_data_type: Any = None, out: Tensor | None = None, device: Device | None = None,
) -> Tensor:
    """ONNX com.microsoft MatMulIntegerToFloat on DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT.

    `a` (..., M, K) and `b` (..., K, N) multiply with numpy matmul broadcasting (at most two
    batch dimensions after broadcasting; a 1-D `a` or `b` is a row / column vector whose
    dimension is dropped from the result, like numpy). `a_scale` / `a_zero_point`: one
    element or M (per row); `b_scale` / `b_zero_point`: one element or N (per column);
    `bias`: any shape that broadcasts to the result (ONNX: (N,)). Inputs are Tensors or
    numpy arrays; zero points are converted to their matrix's type and scales / bias to the
    output type on the host when they differ (Tensors of another type take a host round
    trip). The output type is `out_data_type`, else the scale's (FLOAT32 for non-float16
    numpy scales). Returns `out` (packed, of the result shape) or a new tensor.
    """
    dev = _device_of(a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias, out, device=device)
    ta, tb = as_tensor(a, dev, "a"), as_tensor(b, dev, "b")
    if out_data_type is not None:
        out_dt = DataType.coerce(out_data_type, "out_data_type")
    else:
        sdt = a_scale.desc.data_type if isinstance(a_scale, Tensor) else DataType.from_numpy(np.asarray(a_scale).dtype)
        out_dt = sdt if sdt == DataType.FLOAT16 else DataType.FLOAT32

    def typed(x: Any, dt: DataType, field: str) -> Tensor | None:
        if x is None:
            return None
        if isinstance(x, Tensor):
            if x.device is not dev:
                raise invalid(field, "belongs to another Device")
            if x.desc.data_type == dt:
                return x
            x = x.numpy()
        if not isinstance(x, (np.ndarray, np.generic, list, tuple, int, float)):
            raise invalid(field, f"must be a Tensor or a numpy array, got {type(x).__name__}")
        arr = np.asarray(x)
        return pooled_upload(dev, arr.astype(dt.numpy_dtype) if arr.dtype != dt.numpy_dtype else arr)

    sa, sta = ta.desc.sizes, ta.desc.effective_strides
    sb, stb = tb.desc.sizes, tb.desc.effective_strides
    a_vec, b_vec = len(sa) == 1, len(sb) == 1
    if a_vec:
        sa, sta = (1, sa[0]), (0, sta[0])
    if b_vec:
        sb, stb = (sb[0], 1), (stb[0], 0)
    (m, k), (k2, n) = sa[-2:], sb[-2:]
    if k != k2:
        raise invalid("b", f"shape {tb.desc.sizes} does not multiply a's {ta.desc.sizes} (K {k2} != {k})")
    try:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        raise invalid("b", f"batch dimensions of {tb.desc.sizes} do not broadcast with a's {ta.desc.sizes}") from None
    if len(batch) > 2:
        raise UnsupportedError(f"a: at most 2 batch dimensions after broadcasting, got {batch}")
    a_desc = TensorDesc(ta.desc.data_type, (*batch, m, k), _mm_broadcast_strides(sa, sta, (*batch, m, k), "a"))
    b_desc = TensorDesc(tb.desc.data_type, (*batch, k, n), _mm_broadcast_strides(sb, stb, (*batch, k, n), "b"))
    res = (*batch, *(() if a_vec else (m,)), *(() if b_vec else (n,))) or (1,)
    if out is None:
        out = pooled_empty(dev, TensorDesc(out_dt, res))
    else:
        _check_out(out, dev, res, out_dt)
    keep = [True] * len(batch) + [not a_vec, not b_vec]

    def full_strides(res_strides: tuple[int, ...]) -> tuple[int, ...]:
        it = iter(res_strides if any(keep) else ())
        return tuple(next(it) if kp else 0 for kp in keep)

    o_desc = TensorDesc(out_dt, (*batch, m, n), full_strides(out.desc.effective_strides))
    tbias = typed(bias, out_dt, "bias")
    bias_desc = None
    if tbias is not None:
        bst = _mm_broadcast_strides(tbias.desc.sizes, tbias.desc.effective_strides, res, "bias")
        bias_desc = TensorDesc(out_dt, (*batch, m, n), full_strides(bst))
    tas = _mm_quant_view(typed(a_scale, out_dt, "a_scale"), m, True, "a_scale")  # type: ignore[arg-type]
    tbs = _mm_quant_view(typed(b_scale, out_dt, "b_scale"), n, False, "b_scale")  # type: ignore[arg-type]
    tz = typed(a_zero_point, ta.desc.data_type, "a_zero_point")
    taz = _mm_quant_view(tz, m, True, "a_zero_point") if tz is not None else None
    tz = typed(b_zero_point, tb.desc.data_type, "b_zero_point")
    tbz = _mm_quant_view(tz, n, False, "b_zero_point") if tz is not None else None
    desc = MatrixMultiplyIntegerToFloatDesc(
        a_desc, tas.desc, taz.desc if taz else None, b_desc, tbs.desc, tbz.desc if tbz else None, bias_desc, o_desc
    )
    op = compile_cached(dev, desc)
    op.execute(
        [Tensor(ta.buffer, a_desc, ta.offset), tas, taz, Tensor(tb.buffer, b_desc, tb.offset), tbs, tbz,
         Tensor(tbias.buffer, bias_desc, tbias.offset) if tbias is not None and bias_desc is not None else None],
        [Tensor(out.buffer, o_desc, out.offset)],
    )
    return out
