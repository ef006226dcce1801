"""The helpers of CONVOLUTION (ops/convolution.py): kdml.conv (FORWARD, ONNX Conv, torch's
conv1d / 2d / 3d) and kdml.conv_transpose (BACKWARD, ONNX ConvTranspose, torch's
conv_transpose1d / 2d / 3d)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import invalid
from ..core.ints import as_int, as_int_tuple
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..ops.activation_relu import ActivationReluDesc
from ..ops.convolution import (
    ConvolutionDesc,
    ConvolutionDirection,
    ConvolutionMode,
    backward_output_sizes,
    output_sizes,
)
from . import _packed, check_out, compile_cached, pooled_empty
from .elementwise import _operands

# a fused activation: its tensors None
_RELU = ActivationReluDesc(None, None)  # type: ignore[arg-type]


def conv(x: Any, w: Any, bias: Any = None, *, strides: Any = None, dilations: Any = None, pads: Any = None,
         start_padding: Any = None, end_padding: Any = None, groups: int = 1,
         mode: Any = ConvolutionMode.CROSS_CORRELATION, relu: bool = False, activation: Any = None,
         allow_half_precision: bool = False, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """Convolve `x` with the filter `w` on DML CONVOLUTION (forward).

    What ``torch.nn.functional.conv1d`` / ``conv2d`` / ``conv3d`` and ONNX ``Conv`` compute
    (cross-correlation), with DirectML's asymmetric zero padding.

    Parameters
    ----------
    x : Tensor or array_like
        The input, (N, Cin, W), (N, Cin, H, W) or (N, Cin, D, H, W); FLOAT32 or FLOAT16. A
        kompute_dml Tensor may have any strides and offset; host data is uploaded.
    w : Tensor or array_like
        The filter, (Cout, Cin / groups, *window), of x's dimension count and type.
    bias : Tensor or array_like, optional
        Cout values (any shape holding them along one axis) added per output channel.
    strides, dilations : sequence of int, optional
        One value (>= 1) per spatial axis; None: ones.
    pads : int or sequence of int, optional
        The padding in one argument, instead of `start_padding` / `end_padding`: an int (every
        side of every axis), one value per spatial axis (both sides, torch's ``padding``) or
        2 x that many (ONNX's ``pads``: the starts, then the ends).
    start_padding, end_padding : sequence of int, optional
        Zeros added before / after each spatial axis (>= 0); None: no padding.
    groups : int, default 1
        Channel groups; it must divide Cin and Cout (groups = Cin = Cout: depthwise).
    mode : ConvolutionMode, default CROSS_CORRELATION
        ``ConvolutionMode.CONVOLUTION`` reverses the window along every spatial axis.
    relu : bool, default False
        Apply ReLU to the result (DML's fused activation; ``activation=kdml.ActivationReluDesc(None,
        None)``).
    activation : activation descriptor, optional
        Another fused activation, its tensors None: ``kdml.ActivationLeakyReluDesc(None, None,
        alpha=0.1)``, ``ActivationSigmoidDesc``, ``ActivationHardSigmoidDesc``,
        ``ActivationHardSwishDesc``, ``ActivationTanhDesc``, ``ActivationEluDesc``, ``ActivationSwishDesc``,
        ``ElementWiseClipDesc(None, None, min=0, max=6)`` (ReLU6), ``ActivationIdentityDesc``: the
        standalone operator's bits of the output (docs/convolution.md). Not with ``relu=True``.
    allow_half_precision : bool, default False
        DirectML's DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION: FLOAT32 may run on the
        float16 tensor-core kernel (the input and filter rounded to float16, float32 sums); `w`
        may then be FLOAT16 (a constant filter converted once). Ignored where the device or the
        convolution takes another kernel (FLOAT32 throughout).
    out : Tensor, optional
        Where to write the result (its shape and type must be the result's; any strides).
    device : Device, optional
        The device, where no operand is a Tensor.

    Returns
    -------
    Tensor
        (N, Cout, *out) with ``out = (in + start + end - ((window - 1) * dilation + 1)) // stride
        + 1`` per spatial axis, a new packed Tensor from the device's buffer pool, or `out`.

    Raises
    ------
    InvalidArgumentError
        Inconsistent shapes, groups, padding or an empty output (the message names the field).
    UnsupportedError
        Other types than FLOAT32 / FLOAT16, 1-D below feature level 3_0.

    Notes
    -----
    float32 sums of the products in (ci, kd, kh, kw) order, then the bias, then ReLU:
    ``|error| <= (K + 1) * 2**-24 * sum |x w| + |bias|`` per output, K = Cin / groups x window
    volume (docs/convolution.md; FLOAT16 outputs one rounding more).

    Examples
    --------
    >>> y = kdml.conv(x, w, b, start_padding=(1, 1), end_padding=(1, 1), strides=(2, 2))
    """
    if relu and activation is not None:
        raise invalid("activation", "give relu=True or an activation, not both")
    act = _RELU if relu else activation
    return _convolution(ConvolutionDirection.FORWARD, x, w, bias, strides, dilations, (pads, start_padding, end_padding),
                        None, groups, mode, act, out, device, allow_half_precision)


def conv_transpose(x: Any, w: Any, bias: Any = None, *, strides: Any = None, dilations: Any = None,
                   pads: Any = None, start_padding: Any = None, end_padding: Any = None, output_padding: Any = None, groups: int = 1,
                   mode: Any = ConvolutionMode.CROSS_CORRELATION, relu: bool = False, out: Tensor | None = None,
                   device: Device | None = None) -> Tensor:
    """Transposed convolution of `x` with the filter `w` on DML CONVOLUTION (BACKWARD).

    What ``torch.nn.functional.conv_transpose1d`` / ``2d`` / ``3d`` and ONNX ``ConvTranspose``
    compute: each input element scattered through the window into the output, ``y[b, g*CoutG +
    co, i * stride + k * dilation - start] += x[b, g*CinG + ci, i] * w[g*CinG + ci, co, k]``.

    Parameters
    ----------
    x : Tensor or array_like
        The input, (N, Cin, *spatial) with 1 to 3 spatial axes; FLOAT32 or FLOAT16.
    w : Tensor or array_like
        The filter, (Cin, Cout / groups, *window), of x's dimension count and type.
    bias : Tensor or array_like, optional
        Cout values added per output channel.
    strides, dilations : sequence of int, optional
        One value (>= 1) per spatial axis; None: ones.
    pads : int or sequence of int, optional
        `start_padding` / `end_padding` in one argument, as `conv` takes it (ONNX's ``pads``).
    start_padding, end_padding : sequence of int, optional
        Positions removed from the start / end of each spatial axis of the full result (>= 0).
    output_padding : sequence of int, optional
        Positions added at the end of each spatial axis (ONNX's output_padding); None: zeros.
    groups : int, default 1
        Channel groups; it must divide Cin.
    mode : ConvolutionMode, default CROSS_CORRELATION
        ``ConvolutionMode.CONVOLUTION`` reverses the window along every spatial axis.
    relu : bool, default False
        Apply ReLU to the result.
    out : Tensor, optional
        Where to write the result (its shape and type must be the result's; any strides).
    device : Device, optional
        The device, where no operand is a Tensor.

    Returns
    -------
    Tensor
        (N, Cout, *out) with ``out = (in - 1) * stride + (window - 1) * dilation + 1 - start - end
        + output_padding`` per spatial axis.

    Raises
    ------
    InvalidArgumentError
        Inconsistent shapes, groups or padding (the message names the field).
    UnsupportedError
        Other types than FLOAT32 / FLOAT16, 1-D below feature level 3_0.

    Notes
    -----
    The same summation and bound as `conv`: K = Cin / groups x window volume terms per output
    (the positions the stride skips are zeros), docs/convolution.md.
    """
    return _convolution(ConvolutionDirection.BACKWARD, x, w, bias, strides, dilations, (pads, start_padding, end_padding),
                        output_padding, groups, mode, _RELU if relu else None, out, device)


def split_pads(pads: Any, start_padding: Any, end_padding: Any, n: int) -> tuple[Any, Any]:
    """`pads` (an int, n per-axis values or ONNX's 2n starts then ends) as (start, end); None:
    the given start_padding / end_padding."""
    if pads is None:
        return start_padding, end_padding
    if start_padding is not None or end_padding is not None:
        raise invalid("pads", "give pads or start_padding / end_padding, not both")
    if isinstance(pads, (int, np.integer)) and not isinstance(pads, bool):
        p = as_int(pads, "pads")
        return (p,) * n, (p,) * n
    v = as_int_tuple(pads, "pads")
    if len(v) == n:
        return v, v
    if len(v) == 2 * n:
        return v[:n], v[n:]
    raise invalid("pads", f"must be an int, {n} values (one per spatial axis) or {2 * n} (starts, then ends), "
                          f"got {len(v)}")


def _convolution(direction: ConvolutionDirection, x: Any, w: Any, bias: Any, strides: Any, dilations: Any,
                 padding: tuple[Any, Any, Any], output_padding: Any, groups: Any, mode: Any, act: Any,
                 out: Tensor | None, device: Device | None, allow_half_precision: bool = False) -> Tensor:
    backward = direction == ConvolutionDirection.BACKWARD
    operands = (x, w) if bias is None else (x, w, bias)
    fields = ("x", "w", "bias")[:len(operands)]
    if device is None and isinstance(out, Tensor):
        device = out.device
    if allow_half_precision and getattr(w, "dtype", None) == np.float16 and getattr(x, "dtype", None) == np.float32:
        # a FLOAT16 filter with FLOAT32 x (ops/convolution.py's extension): w is no operand whose type must be x's
        order = [0, *range(2, len(operands)), 1]
        dev, moved = _operands(tuple(operands[i] for i in order), tuple(fields[i] for i in order), device,
                               slice(0, len(operands) - 1))
        ts = [moved[order.index(i)] for i in range(len(operands))]
    else:
        dev, ts = _operands(operands, fields, device)
    tx, tw = ts[0], ts[1]
    r = tx.desc.dimension_count
    if r not in (3, 4, 5) or tw.desc.dimension_count != r:
        raise invalid("x", f"x and w must both have 3, 4 or 5 dimensions, got {tx.desc.sizes} and {tw.desc.sizes}")
    n = r - 2
    start_padding, end_padding = split_pads(*padding, n)
    g = as_int(groups, "groups")
    cout = tw.desc.sizes[1] * g if backward else tw.desc.sizes[0]
    tb = None
    if bias is not None:
        tb = ts[2]
        long = [i for i, v in enumerate(tb.desc.sizes) if v != 1]
        if tb.desc.element_count != cout or len(long) > 1:
            raise invalid("bias", f"must hold one value per output channel ({cout}) along one axis, got {tb.desc.sizes}")
        step = tb.desc.effective_strides[long[0]] if long else 0  # viewed as (1, Cout, 1, ...)
        tb = Tensor.trusted(tb.buffer, TensorDesc(tb.desc.data_type, (1, cout) + (1,) * n, (0, step) + (0,) * n),
                            tb.offset)
    arrays = {name: (tuple(as_int_tuple(v, name)) if v is not None else default)
              for name, v, default in (("strides", strides, (1,) * n), ("dilations", dilations, (1,) * n),
                                       ("start_padding", start_padding, (0,) * n), ("end_padding", end_padding, (0,) * n),
                                       ("output_padding", output_padding, (0,) * n))}
    for name, v in arrays.items():
        if len(v) != n:
            raise invalid(name, f"must hold {n} values (one per spatial axis), got {len(v)}")
    geometry = (tx.desc.sizes[2:], tw.desc.sizes[2:], arrays["strides"], arrays["dilations"], arrays["start_padding"],
                arrays["end_padding"])
    spatial = backward_output_sizes(*geometry, arrays["output_padding"]) if backward else output_sizes(*geometry)
    shape = (tx.desc.sizes[0], cout, *spatial)
    dt = tx.desc.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
    elif all(s >= 1 for s in spatial):
        out = pooled_empty(dev, _packed(dt, shape))
    yd = out.desc if out is not None else TensorDesc(dt, tuple(max(s, 1) for s in shape))
    desc = ConvolutionDesc(tx.desc, tw.desc, tb.desc if tb is not None else None, yd, ConvolutionMode(mode),
                           direction, arrays["strides"], arrays["dilations"], arrays["start_padding"],
                           arrays["end_padding"], arrays["output_padding"], g, act)  # type: ignore[arg-type]
    op = compile_cached(dev, desc, bool(allow_half_precision))
    assert out is not None  # compile refused an empty output
    op.execute([tx, tw, tb], [out])
    return out


