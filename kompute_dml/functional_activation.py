"""The functional helpers of ACTIVATION_SOFTMAX1 and ACTIVATION_GELU (ops/activation.py,
docs/softmax.md, docs/gelu.md).

Each takes a kompute_dml Tensor or anything kompute_dml/inputs.py takes (numpy arrays, CPU
`__array__` / `__dlpack__` objects) of FLOAT32 or FLOAT16 (other types are refused by the
operator's table: no silent conversion) and returns a new packed Tensor of x's shape and type
from the device's buffer pool, or writes `out=` (a Tensor of that shape and type, any strides).
x may have any strides (stride 0 included).
"""

from __future__ import annotations

from typing import Any

from .device import Device
from .errors import invalid
from .functional import _packed, check_out, compile_cached, pooled_empty
from .functional_elementwise import _operands, broadcast_view
from .ints import as_int, as_int_tuple
from .memory import Tensor
from .ops.activation import ActivationGeluDesc, ActivationSoftmax1Desc


def _unary(make: Any, x: Any, out: Tensor | None, device: Device | None, extra: Tensor | None = None,
           **fields: Any) -> Tensor:
    """One execution of the operator `make(x.desc, out_desc, **fields)` (with `extra`, a further
    input bound after x: `make` takes its desc as mask_tensor)."""
    dev, (t,) = _operands((x,), ("x",), device)
    d = t.desc
    if out is not None:
        check_out(out, dev, d.sizes, d.data_type)
    out_desc = out.desc if out is not None else _packed(d.data_type, d.sizes)
    if extra is not None:
        fields["mask_tensor"] = extra.desc
    op = compile_cached(dev, make(d, out_desc, **fields))
    if out is None:
        out = pooled_empty(dev, out_desc)
    op.execute([t] if extra is None else [t, extra], [out])
    return out


def _axes(axes: Any, rank: int) -> tuple[int, ...]:
    values = (as_int(axes, "axes"),) if isinstance(axes, int) else as_int_tuple(axes, "axes")
    for a in values:
        if not -rank <= a < rank:
            raise invalid("axes", f"each axis must be in [{-rank}, {rank}) for x of rank {rank}, got {a}")
    norm = tuple(a % rank for a in values)
    if len(set(norm)) != len(norm):
        raise invalid("axes", f"names an axis twice: {values} (rank {rank})")
    return norm


def softmax(x: Any, *, axes: Any = (-1,), mask: Any = None, nan_to_zero: bool = False, out: Tensor | None = None,
            device: Device | None = None) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) over `axes` (DML_ACTIVATION_SOFTMAX1; negative axes count
    from the end; default the last axis, ONNX Softmax's). A row of only -inf, or one holding a
    NaN or +inf, gives NaN (docs/softmax.md). kompute_dml's extension, in the same dispatch:
    `mask` (broadcast to x's shape with numpy's rules; Python data takes x's type) is added to x
    first, each sum rounded to the type as kdml.add rounds it; `nan_to_zero` writes NaN results
    as +0 (ONNX's Where(IsNaN(s), 0, s))."""
    if mask is None:
        dev, (t,) = _operands((x,), ("x",), device)
        m = None
    else:
        dev, (t, m) = _operands((x, mask), ("x", "mask"), device, slice(0, 1))
        m = broadcast_view(m, t.desc.sizes, "mask")
    norm = _axes(axes, t.desc.dimension_count)
    return _unary(ActivationSoftmax1Desc, t, out, dev, m, axes=norm, nan_to_zero=nan_to_zero)


def gelu(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """x * 0.5 * (1 + erf(x / sqrt 2)) (DML_ACTIVATION_GELU, the exact erf form; com.microsoft
    Gelu), computed in float32 within the bound of docs/gelu.md."""
    return _unary(ActivationGeluDesc, x, out, device)


__all__ = ["gelu", "softmax"]
