"""The functional helper of CAST (ops/cast.py, docs/cast.md).

`cast(x, data_type)` takes a kompute_dml Tensor or anything kompute_dml/inputs.py takes (numpy
arrays, Python numbers and lists, CPU `__array__` / `__dlpack__` objects; boolean arrays are
uploaded as UINT8) and returns a new packed Tensor of x's shape and `data_type` from the
device's buffer pool, or writes `out=` (a Tensor of that shape and type, any strides). x may
have any strides (stride 0 included).
"""

from __future__ import annotations

from typing import Any

from .device import Device
from .dtypes import DataType
from .functional import _packed, check_out, compile_cached, pooled_empty
from .functional_elementwise import _operands
from .memory import Tensor
from .ops.cast import CastDesc


def cast(x: Any, data_type: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """x converted to `data_type` (DML_CAST): integers wrap, floats to integers truncate toward
    zero and saturate (NaN -> 0), conversions to floats round to nearest even."""
    dt = DataType.coerce(data_type, "data_type")
    dev, (t,) = _operands((x,), ("x",), device)
    shape = t.desc.sizes
    if out is not None:
        check_out(out, dev, shape, dt)
    out_desc = out.desc if out is not None else _packed(dt, shape)
    op = compile_cached(dev, CastDesc(t.desc, out_desc))
    if out is None:
        out = pooled_empty(dev, out_desc)
    op.execute([t], [out])
    return out


__all__ = ["cast"]
