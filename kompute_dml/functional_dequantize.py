"""The functional helper of ELEMENT_WISE_DEQUANTIZE_LINEAR (ops/dequantize.py, docs/dequantize.md).

`dequantize_linear(x, scale, zero_point)` takes kompute_dml Tensors or anything
kompute_dml/inputs.py takes, broadcasts the three with numpy's rules (stride-0 views: scales and
zero points per tensor, per axis or per block) and returns a new packed Tensor of the broadcast
shape and the scale's data type (FLOAT32 / FLOAT16) from the device's buffer pool, or writes
`out=`. Python numbers and lists given as the scale become FLOAT32, as the zero point x's data
type (when x is a Tensor or array; InvalidArgumentError where a value does not survive). A
zero point of None leaves the operator's ZeroPointTensor absent (feature level 6_2 and above).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device
from .errors import invalid
from .functional import _packed, check_out, compile_cached, pooled_empty
from .functional_elementwise import _operands, _run, broadcast_view
from .inputs import as_host_array, conform, is_python_data
from .memory import Tensor
from .ops.dequantize import ElementWiseDequantizeLinearDesc


def dequantize_linear(x: Any, scale: Any, zero_point: Any = None, *, out: Tensor | None = None,
                      device: Device | None = None) -> Tensor:
    """(x - zero_point) * scale (DML_ELEMENT_WISE_DEQUANTIZE_LINEAR): the difference exact, one
    float32 multiplication, FLOAT16 results rounded once from it (docs/dequantize.md)."""
    if is_python_data(scale):
        scale = conform(as_host_array(scale, "scale", dml=False), np.dtype(np.float32), "scale", python=True)
    if zero_point is None:  # ZeroPointTensor absent: bound as None
        dev, (tx, ts) = _operands((x, scale), ("x", "scale"), device, slice(0, 1))
        try:
            shape = tuple(np.broadcast_shapes(tx.desc.sizes, ts.desc.sizes)) or (1,)
        except ValueError:
            raise invalid("scale", f"sizes {ts.desc.sizes} and x's {tx.desc.sizes} do not broadcast together") from None
        vx, vs = broadcast_view(tx, shape, "x"), broadcast_view(ts, shape, "scale")
        dt = vs.desc.data_type
        if out is not None:
            check_out(out, dev, shape, dt)
        out_desc = out.desc if out is not None else _packed(dt, shape)
        op = compile_cached(dev, ElementWiseDequantizeLinearDesc(vx.desc, vs.desc, None, out_desc))
        if out is None:
            out = pooled_empty(dev, out_desc)
        op.execute([vx, vs, None], [out])
        return out
    fields = ("x", "scale", "zero_point")
    dev, tensors = _operands((x, scale, zero_point), fields, device, slice(0, 1))
    return _run(ElementWiseDequantizeLinearDesc, tensors, fields, tensors[1].desc.data_type, out, dev)


__all__ = ["dequantize_linear"]
