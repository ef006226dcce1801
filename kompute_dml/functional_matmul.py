"""The functional helper of MATRIX_MULTIPLY_INTEGER_TO_FLOAT (ONNX com.microsoft
MatMulIntegerToFloat): numpy matmul broadcasting, per-row / per-column quantization
parameters and type conversions on the host, one compiled operator on the device."""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device
from .dtypes import DataType
from .errors import UnsupportedError, invalid
from .functional import as_tensor, check_out, compile_cached, device_of, pooled_empty, pooled_upload
from .inputs import as_host_array
from .memory import Tensor
from .ops.matmul_integer import MatrixMultiplyIntegerToFloatDesc
from .tensor_desc import TensorDesc


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
    dev = device_of(a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias, out, device=device)
    ta, tb = as_tensor(a, dev, "a"), as_tensor(b, dev, "b")
    if out_data_type is not None:
        out_dt = DataType.coerce(out_data_type, "out_data_type")
    else:
        sdt = a_scale.desc.data_type if isinstance(a_scale, Tensor) else DataType.from_numpy(as_host_array(a_scale, "a_scale").dtype)
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
        arr = as_host_array(x, field)
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
        check_out(out, dev, res, out_dt)
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
