"""The functional helper of DYNAMIC_QUANTIZE_LINEAR (ops/dynamic_quantize.py,
docs/dynamic_quantize.md): ONNX DynamicQuantizeLinear on the device.

`dynamic_quantize_linear(x)` returns `(y, scale, zero_point)`, three device tensors: `y` of x's
sizes and `data_type` (UINT8, ONNX's and ONNX Runtime's type, or INT8, DirectML's other one),
packed unless `out=` is given (any strides); `scale` (FLOAT32) and `zero_point` (`data_type`) of
sizes (1,), new unless `scale_out=` / `zero_point_out=` (a one-element Tensor of that type, any
sizes, returned as given) are. The operator wants scale and zero point of x's dimension count
(every size 1): the helper binds views of sizes (1, ..., 1) over the same bytes. Such (1,)
tensors are what kdml.matmul_integer_to_float takes as `a_scale` / `a_zero_point`, so
ONNX DynamicQuantizeMatMul is this helper followed by that one, with nothing read back.

`x` is a Tensor (FLOAT32 or FLOAT16, 1 to 8 dimensions, any strides) or anything
kompute_dml/inputs.py takes (Python numbers and lists become FLOAT32).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device
from .dtypes import DataType
from .errors import invalid
from .functional import _packed, as_tensor, check_out, compile_cached, device_of, pooled_empty
from .inputs import as_host_array, conform, is_python_data
from .memory import Tensor
from .ops.dynamic_quantize import DynamicQuantizeLinearDesc


def _one_element(t: Any, dev: Device, dt: DataType, field: str) -> None:
    if not isinstance(t, Tensor):
        raise invalid(field, f"must be a kompute_dml Tensor, got {type(t).__name__}")
    if t.device is not dev:
        raise invalid(field, "belongs to another Device")
    if t.desc.data_type != dt:
        raise invalid(field, f"data type must be {dt.name}, got {t.desc.data_type.name}")
    if t.desc.element_count != 1:
        raise invalid(field, f"must hold one element, got sizes {t.desc.sizes}")


def dynamic_quantize_linear(
    x: Any, *, data_type: Any = DataType.UINT8, out: Tensor | None = None, scale_out: Tensor | None = None,
    zero_point_out: Tensor | None = None, device: Device | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(y, scale, zero_point) of ONNX DynamicQuantizeLinear (DML_DYNAMIC_QUANTIZE_LINEAR), bit for
    bit as ONNX Runtime's CPU kernel computes it for UINT8 (INT8: DirectML's range -128..127):
    scale = (max(x, 0) - min(x, 0)) / (qmax - qmin) in float32 (1 when both are 0; NaNs left out),
    zero_point = round-half-even(clamp(qmin - min / scale, qmin, qmax)),
    y = clamp(round-half-even(x / scale) + zero_point, qmin, qmax), x / scale correctly rounded,
    NaN elements -> qmin. scale and zero_point have sizes (1,) (module docstring)."""
    if is_python_data(x):
        x = conform(as_host_array(x, "x", dml=False), np.dtype(np.float32), "x", python=True)
    dev = device_of(x, out, scale_out, zero_point_out, device=device)
    dt = DataType.coerce(data_type, "data_type")
    tx = as_tensor(x, dev, "x")
    sizes = tx.desc.sizes
    if out is not None:
        check_out(out, dev, sizes, dt)
    if scale_out is not None:
        _one_element(scale_out, dev, DataType.FLOAT32, "scale_out")
    if zero_point_out is not None:
        _one_element(zero_point_out, dev, dt, "zero_point_out")
    y_desc = out.desc if out is not None else _packed(dt, sizes)
    ones = (1,) * len(sizes)
    s_desc, z_desc = _packed(DataType.FLOAT32, ones), _packed(dt, ones)  # (cached: every layer of a plan asks)
    op = compile_cached(dev, DynamicQuantizeLinearDesc(tx.desc, y_desc, s_desc, z_desc))
    y = out if out is not None else pooled_empty(dev, y_desc)
    scale = scale_out if scale_out is not None else pooled_empty(dev, _packed(DataType.FLOAT32, (1,)))
    zp = zero_point_out if zero_point_out is not None else pooled_empty(dev, _packed(dt, (1,)))
    # one element each (checked above, or made so): seen with x's rank, the same element
    op.execute([tx], [y, Tensor.trusted(scale.buffer, s_desc, scale.offset), Tensor.trusted(zp.buffer, z_desc, zp.offset)])
    return y, scale, zp


__all__ = ["dynamic_quantize_linear"]
