"""The helper of QUANTIZED_LINEAR_CONVOLUTION (ops/quantized_convolution.py,
docs/quantized_convolution.md): kdml.quantized_conv, ONNX QLinearConv's arguments. Scales and zero
points are scalars (or one-element arrays), the filter's also one per output channel; Python numbers
as scales become FLOAT32. The result is a new packed Tensor of the output zero point's type (or
`output_type`, UINT8 by default) from the device's buffer pool, or `out=`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int_tuple
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..ops.quantized_convolution import QuantizedLinearConvolutionDesc
from ..ops.spatial import output_sizes
from . import _packed, check_out, compile_cached, device_of, pooled_empty
from .elementwise import _operands


def _four(t: Tensor | None, name: str, m: int | None) -> Tensor | None:
    """A scalar (or, with `m`, one value per output channel) seen as {1, 1, 1, 1} / {1, m, 1, 1}."""
    if t is None:
        return None
    d = t.desc
    long = [i for i, v in enumerate(d.sizes) if v != 1]
    if d.element_count == 1:
        return Tensor.trusted(t.buffer, TensorDesc(d.data_type, (1, 1, 1, 1), (0, 0, 0, 0)), t.offset)
    if m is None or d.element_count != m or len(long) != 1:
        raise invalid(name, f"must hold one value{'' if m is None else f' or one per output channel ({m})'}, "
                            f"got {d.sizes}")
    return Tensor.trusted(t.buffer, TensorDesc(d.data_type, (1, m, 1, 1), (0, d.effective_strides[long[0]], 0, 0)),
                          t.offset)


def _scalar_f32(v: Any) -> Any:
    return np.asarray(v, np.float32) if isinstance(v, (int, float, list, tuple)) else v


def quantized_conv(x: Any, x_scale: Any, w: Any, w_scale: Any, y_scale: Any, *, x_zero_point: Any = None,
                   w_zero_point: Any = None, bias: Any = None, y_zero_point: Any = None, strides: Any = None,
                   dilations: Any = None, start_padding: Any = None, end_padding: Any = None, group_count: int = 1,
                   output_type: DataType = DataType.UINT8, out: Tensor | None = None,
                   device: Device | None = None) -> Tensor:
    """QLinearConv (2-D): y = clamp(roundEven(float32(acc) * (x_scale * w_scale / y_scale)) +
    y_zero_point), acc = sum (x - x_zero_point)(w - w_zero_point) + bias (int32), on
    QUANTIZED_LINEAR_CONVOLUTION. x (N, C, H, W) and w (M, C / group_count, KH, KW) INT8 / UINT8;
    bias INT32 of M values."""
    values = (x, _scalar_f32(x_scale), x_zero_point, w, _scalar_f32(w_scale), w_zero_point, bias,
              _scalar_f32(y_scale), y_zero_point)
    names = ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "bias", "y_scale", "y_zero_point")
    dev = device_of(*values, out, device=device)
    given = [(v, f) for v, f in zip(values, names) if v is not None]
    _, made = _operands(tuple(v for v, _ in given), tuple(f for _, f in given), dev, slice(0, 0))
    t = dict(zip((f for _, f in given), made))
    tx, tw = t["x"], t["w"]
    if tx.desc.dimension_count != 4 or tw.desc.dimension_count != 4:
        raise invalid("x", f"x and w must have 4 dimensions, got {tx.desc.sizes} and {tw.desc.sizes}")
    m = tw.desc.sizes[0]
    per = {f: _four(t.get(f), f, m if f in ("w_scale", "w_zero_point", "bias") else None)
           for f in names if f not in ("x", "w")}
    if per["bias"] is not None and t["bias"].desc.element_count != m:
        raise invalid("bias", f"must hold one value per output channel ({m}), got {t['bias'].desc.sizes}")
    arrays = {}
    for k, v, d in (("strides", strides, 1), ("dilations", dilations, 1), ("start_padding", start_padding, 0),
                    ("end_padding", end_padding, 0)):
        arrays[k] = as_int_tuple(v, k) if v is not None else (d, d)
    dt = per["y_zero_point"].desc.data_type if per["y_zero_point"] is not None else output_type
    shape = (tx.desc.sizes[0], m, *output_sizes(tx.desc.sizes[2:], tw.desc.sizes[2:], arrays["strides"],
                                                arrays["dilations"], arrays["start_padding"], arrays["end_padding"]))
    if out is not None:
        check_out(out, dev, shape, dt)
    y = out if out is not None else pooled_empty(dev, _packed(dt, tuple(max(1, s) for s in shape)))
    xs_d, ws_d, ys_d = (_d(per[f]) for f in ("x_scale", "w_scale", "y_scale"))
    assert xs_d is not None and ws_d is not None and ys_d is not None  # required arguments
    desc = QuantizedLinearConvolutionDesc(
        tx.desc, xs_d, _d(per["x_zero_point"]), tw.desc, ws_d, _d(per["w_zero_point"]),
        _d(per["bias"]), ys_d, _d(per["y_zero_point"]), y.desc if y.desc.sizes == shape else
        TensorDesc(dt, shape), arrays["strides"], arrays["dilations"], arrays["start_padding"], arrays["end_padding"],
        group_count)
    ins = [tx, per["x_scale"], per["x_zero_point"], tw, per["w_scale"], per["w_zero_point"], per["bias"], per["y_scale"],
           per["y_zero_point"]]
    compile_cached(dev, desc).execute(ins, [y])
    return y


def _d(t: Tensor | None) -> TensorDesc | None:
    return None if t is None else t.desc


__all__ = ["quantized_conv"]
