"""DirectML's CONVOLUTION (DML_CONVOLUTION_OPERATOR_DESC), forward direction: the input (N, Cin,
[D,] [H,] W) correlated (CROSS_CORRELATION) or convolved (CONVOLUTION: the window reversed) with the
filter (Cout, Cin / GroupCount, [KD,] [KH,] KW), per group of channels, with strides, dilations,
zero padding at the start and the end of each spatial axis, an optional per-channel bias and a
fused ReLU. ONNX Conv runs on it (onnx_backend/handlers_conv.py).

shaders/convolution.comp: an implicit GEMM, 64 output channels x 64 output pixels per work-group
(4 x 4 per invocation), k decoded by a table in the operator's constant (_k_table), float32 fma
sums in the order k = (ci, kd, kh, kw) row-major (`precise`), then + bias, then ReLU; FLOAT16
tensors decoded exactly and the result rounded once. Bound (tests/test_convolution.py
enforces it against float64; tools/measure_conv.py measures it): |error| <= (K + 1) u S with
u = 2^-24, K = CinG * KD * KH * KW and S = sum |x w| + |bias| over the output's terms; FLOAT16
outputs one more rounding (2^-11 relative).

Tensor support as the page's table gives it: FLOAT32 and FLOAT16, 4 or 5 dimensions from 1_0
(2-D and 3-D convolutions), 3 dimensions too from 3_0 (1-D). kompute_dml implements Direction
FORWARD; BACKWARD (transposed convolution) is refused (UnsupportedError naming `direction`).
FusedActivation: None or an ActivationReluDesc (its tensors None); others are refused
(UnsupportedError naming `fused_activation`). OutputPadding applies to BACKWARD only: all zeros
here. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table, then the
page's constraints (InvalidArgumentError whose message starts with the field), the output sizes
the formula gives, a non-overlapping output, 32-bit element addressing.
"""

from __future__ import annotations

import enum
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, as_int_tuple, cdiv
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .activation_relu import ActivationReluDesc
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device


class ConvolutionMode(enum.IntEnum):
    """DML_CONVOLUTION_MODE (exported as kdml.ConvolutionMode)."""

    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class ConvolutionDirection(enum.IntEnum):
    """DML_CONVOLUTION_DIRECTION (exported as kdml.ConvolutionDirection)."""

    FORWARD = 0
    BACKWARD = 1


_T = ("input_tensor", "filter_tensor", "bias_tensor", "output_tensor")
CONVOLUTION = OperatorSupport("CONVOLUTION", 1, tuple(
    row(level, ("input_tensor", "input", dims, FLOATS), ("filter_tensor", "input", dims, FLOATS),
        ("bias_tensor", "optional input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS))
    for level, dims in ((FL.FL_1_0, (4, 5)), (FL.FL_3_0, (3, 5)))))


@dataclass(frozen=True)
class ConvolutionDesc:
    """DML_CONVOLUTION_OPERATOR_DESC { InputTensor, FilterTensor, BiasTensor, OutputTensor, Mode,
    Direction, DimensionCount, Strides, Dilations, StartPadding, EndPadding, OutputPadding,
    GroupCount, FusedActivation }: DimensionCount = the tensors' dimension count - 2 (implied by
    the tensors here), each array of that length. Input (N, Cin, spatial...), filter (Cout,
    Cin / GroupCount, window...), bias (1, Cout, 1...), output (N, Cout, out...), where out =
    (in + start + end - ((window - 1) * dilation + 1)) // stride + 1."""

    input_tensor: TensorDesc
    filter_tensor: TensorDesc
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc
    mode: ConvolutionMode = ConvolutionMode.CROSS_CORRELATION
    direction: ConvolutionDirection = ConvolutionDirection.FORWARD
    strides: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()
    output_padding: tuple[int, ...] = ()
    group_count: int = 1
    fused_activation: Any = None

    def __post_init__(self) -> None:
        for name in ("strides", "dilations", "start_padding", "end_padding", "output_padding"):
            v = getattr(self, name)
            if isinstance(v, (list, range)) or (isinstance(v, np.ndarray) and v.ndim == 1):
                object.__setattr__(self, name, tuple(v))

    @property
    def dimension_count(self) -> int:
        return self.input_tensor.dimension_count - 2


def _array(desc: ConvolutionDesc, name: str, n: int, default: int, least: int) -> tuple[int, ...]:
    v = as_int_tuple(getattr(desc, name), name)
    if not v:
        return (default,) * n
    if len(v) != n:
        raise invalid(name, f"must hold DimensionCount ({n}) values, got {len(v)}")
    for i, a in enumerate(v):
        if a < least:
            raise invalid(f"{name}[{i}]", f"must be >= {least}, got {a}")
    return v


def output_sizes(in_sizes: tuple[int, ...], window: tuple[int, ...], strides: tuple[int, ...],
                 dilations: tuple[int, ...], start: tuple[int, ...], end: tuple[int, ...]) -> tuple[int, ...]:
    """The page's forward output sizes (spatial axes only); a size < 1 is returned as is."""
    return tuple((i + s + e - ((k - 1) * d + 1)) // st + 1
                 for i, k, st, d, s, e in zip(in_sizes, window, strides, dilations, start, end))


def _validate(device: Device, desc: ConvolutionDesc) -> dict[str, Any]:
    support = CONVOLUTION
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, w, b, y = desc.input_tensor, desc.filter_tensor, desc.bias_tensor, desc.output_tensor
    try:
        direction = ConvolutionDirection(desc.direction)
    except ValueError:
        raise invalid("direction", f"must be a ConvolutionDirection, got {desc.direction!r}") from None
    try:
        mode = ConvolutionMode(desc.mode)
    except ValueError:
        raise invalid("mode", f"must be a ConvolutionMode, got {desc.mode!r}") from None
    if direction != ConvolutionDirection.FORWARD:
        raise UnsupportedError("direction: CONVOLUTION BACKWARD (transposed convolution) is not implemented by "
                               "kompute_dml")
    act = desc.fused_activation
    relu = False
    if act is not None:
        if not isinstance(act, ActivationReluDesc):
            raise UnsupportedError(f"fused_activation: CONVOLUTION fuses ACTIVATION_RELU only in kompute_dml, got "
                                   f"{type(act).__name__}")
        if act.input_tensor is not None or act.output_tensor is not None:
            raise invalid("fused_activation", "a fused activation's tensors must be None")
        relu = True
    r = x.dimension_count
    n = r - 2
    for name, t in (("filter_tensor", w), ("output_tensor", y)) + ((("bias_tensor", b),) if b is not None else ()):
        if t.dimension_count != r:
            raise invalid(f"{name}.sizes", f"dimension count must equal input_tensor's ({r}), got {t.dimension_count}")
        if t.data_type != x.data_type:
            raise invalid(f"{name}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {t.data_type.name}")
    groups = as_int(desc.group_count, "group_count")
    if groups < 1:
        raise invalid("group_count", f"must be >= 1, got {groups}")
    batch, cin, cout = x.sizes[0], x.sizes[1], w.sizes[0]
    if cin % groups:
        raise invalid("group_count", f"must divide input_tensor's channel count {cin}, got {groups}")
    if cout % groups:
        raise invalid("group_count", f"must divide filter_tensor's batch count (output channels) {cout}, got {groups}")
    if w.sizes[1] != cin // groups:
        raise invalid("filter_tensor.sizes", f"channel count must be input channels / group_count = {cin // groups}, "
                                             f"got {w.sizes[1]}")
    strides = _array(desc, "strides", n, 1, 1)
    dilations = _array(desc, "dilations", n, 1, 1)
    start = _array(desc, "start_padding", n, 0, 0)
    end = _array(desc, "end_padding", n, 0, 0)
    out_pad = _array(desc, "output_padding", n, 0, 0)
    if any(out_pad):
        raise invalid("output_padding", f"applies to BACKWARD only: must be zeros for FORWARD, got {out_pad}")
    spatial = output_sizes(x.sizes[2:], w.sizes[2:], strides, dilations, start, end)
    want = (batch, cout, *spatial)
    if any(s < 1 for s in spatial):
        raise invalid("output_tensor.sizes", f"the window ({w.sizes[2:]}, dilations {dilations}) is larger than the "
                                             f"padded input {tuple(i + s + e for i, s, e in zip(x.sizes[2:], start, end))}")
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (batch, output channels, the forward formula's sizes), "
                                             f"got {y.sizes}")
    if b is not None and b.sizes != (1, cout) + (1,) * n:
        raise invalid("bias_tensor.sizes", f"must be {(1, cout) + (1,) * n}, got {b.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = tuple(f for f, t in zip(_T, (x, w, b, y)) if t is not None)
    check_addressable(present, tuple(t for t in (x, w, b, y) if t is not None))
    return {"mode": mode, "relu": relu, "groups": groups, "strides": strides, "dilations": dilations, "start": start,
            "spatial": spatial}


def _three(values: tuple[int, ...], fill: int) -> list[int]:
    """Spatial values as (D, H, W): missing leading axes take `fill`."""
    return [fill] * (3 - len(values)) + list(values)


def _strides5(t: TensorDesc) -> list[int]:
    s = list(t.effective_strides)
    return s[:2] + [0] * (5 - len(s)) + s[2:]


def _params(desc: ConvolutionDesc, v: dict[str, Any]) -> np.ndarray:
    """The geometry the shader reads (shaders/convolution.comp's P_* words, in order)."""
    x, w, b, y = desc.input_tensor, desc.filter_tensor, desc.bias_tensor, desc.output_tensor
    groups = v["groups"]
    window = _three(w.sizes[2:], 1)
    out = _three(v["spatial"], 1)
    flags = (1 if v["mode"] == ConvolutionMode.CONVOLUTION else 0) | (2 if v["relu"] else 0) | (4 if b is not None else 0)
    kvol = math.prod(window)
    words = [x.sizes[1] // groups, w.sizes[0] // groups, *_three(x.sizes[2:], 1), *out, *window,
             *_three(v["strides"], 1), *_three(v["dilations"], 1), *_three(v["start"], 0),
             *_strides5(x), *_strides5(w), *_strides5(y), b.effective_strides[1] if b is not None else 0, flags,
             x.sizes[0] * math.prod(out), (x.sizes[1] // groups) * kvol, kvol, window[1] * window[2],
             out[1] * out[2], math.prod(out), w.sizes[0]]
    return np.concatenate([np.array(words, dtype=np.uint32), _k_table(desc, v)])


TAB_W = 5  # words per k of the k table (shaders/convolution.comp P_TAB)


def _k_table(desc: ConvolutionDesc, v: dict[str, Any]) -> np.ndarray:
    """Per reduction index k = (ci, kd, kh, kw) row-major: the input's element offset of (ci, kd *
    dd, kh * dh, kw * dw) from the window's first element, the filter's offset of (ci, the window
    position, reversed in CONVOLUTION mode), and kd * dd, kh * dh, kw * dw (the bounds checks)."""
    x, w = desc.input_tensor, desc.filter_tensor
    window = _three(w.sizes[2:], 1)
    ci, kd, kh, kw = (a.ravel().astype(np.int64) for a in np.indices((w.sizes[1], *window)))
    pos = [k * d for k, d in zip((kd, kh, kw), _three(v["dilations"], 1))]
    if v["mode"] == ConvolutionMode.CONVOLUTION:
        kd, kh, kw = (n - 1 - k for k, n in zip((kd, kh, kw), window))
    xs, ws = _strides5(x), _strides5(w)
    x_off = ci * xs[1] + pos[0] * xs[2] + pos[1] * xs[3] + pos[2] * xs[4]
    w_off = ci * ws[1] + kd * ws[2] + kh * ws[3] + kw * ws[4]
    return np.stack([x_off, w_off, *pos], axis=1).astype(np.uint32).ravel()


# Convolutions of fewer output channels per group than this take the direct kernel (one output
# element per invocation): the tiled kernel computes 64 channels of a group per work-group and
# idles the rest (H100, benchmarks/bench_conv.py: depthwise 3x3 over 8 x 96 x 56 x 56, tiled 0.535 ms).
DIRECT_BELOW_COUTG = 8
CONV_KERNEL_ENV = "KDML_CONV_KERNEL"  # "tiled" or "direct" forces one (tests, benchmarks)


def conv_kernel(coutg: int) -> str:
    """Which kernel a convolution of `coutg` output channels per group takes."""
    forced = os.environ.get(CONV_KERNEL_ENV, "auto")
    if forced not in ("auto", "tiled", "direct"):
        raise ValueError(f"{CONV_KERNEL_ENV}={forced!r}: auto, tiled or direct")
    if forced != "auto":
        return forced
    return "direct" if coutg < DIRECT_BELOW_COUTG else "tiled"


def compile_convolution(device: Device, desc: ConvolutionDesc) -> CompiledOperator:
    v = _validate(device, desc)
    x = desc.input_tensor
    p = _params(desc, v)
    npix, coutg = int(p[37]), int(p[1])
    if p.nbytes > device.limits["max_storage_buffer_range"]:
        raise UnsupportedError(f"filter_tensor: the reduction's {int(p[38])} terms per output need a table of "
                               f"{p.nbytes} bytes, more than the device's storage buffer range")
    limit = device.limits["max_compute_work_group_count"]
    if conv_kernel(coutg) == "direct":
        fam = contract.CONV_DIRECT
        grid = grid_for(npix * int(p[43]), 256, limit[0])
    else:
        fam = contract.CONV
        # pixel tiles (x) and groups (z) beyond the device's counts loop inside the shader
        if cdiv(coutg, 64) > limit[1]:
            raise UnsupportedError(f"filter_tensor: {coutg} output channels per group need {cdiv(coutg, 64)} "
                                   f"work-groups along grid axis 1, more than the device's {limit[1]}")
        grid = (min(cdiv(npix, 64), limit[0]), cdiv(coutg, 64), min(v["groups"], limit[2]))
    unit = x.data_type.size
    plan = DispatchPlan(
        variant=fam.name(t="f16" if x.data_type == DataType.FLOAT16 else "f32"),
        bindings=(0, 1, 2 if desc.bias_tensor is not None else None, 3, 4),
        push=fam.pack(x_off=0, w_off=0, b_off=0, y_off=0), groups=grid, writes=(3,),
        offset_slots=fam.slots(x_off=(0, unit), w_off=(1, unit), b_off=(2, unit), y_off=(3, unit)))
    return CompiledOperator(device, desc, CONVOLUTION, CONVOLUTION.inputs, CONVOLUTION.outputs, [plan],
                            constants=[device.tensor(p)])


def conv(x: Any, w: Any, bias: Any = None, *, strides: Any = None, dilations: Any = None, start_padding: Any = None,
         end_padding: Any = None, groups: int = 1, mode: Any = ConvolutionMode.CROSS_CORRELATION, relu: bool = False,
         out: Tensor | None = None, device: Device | None = None) -> Tensor:
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
    start_padding, end_padding : sequence of int, optional
        Zeros added before / after each spatial axis (>= 0); None: no padding.
    groups : int, default 1
        Channel groups; it must divide Cin and Cout (groups = Cin = Cout: depthwise).
    mode : ConvolutionMode, default CROSS_CORRELATION
        ``ConvolutionMode.CONVOLUTION`` reverses the window along every spatial axis.
    relu : bool, default False
        Apply ReLU to the result (DML's fused activation).
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
    operands = (x, w) if bias is None else (x, w, bias)
    if device is None and isinstance(out, Tensor):
        device = out.device
    dev, ts = _operands(operands, ("x", "w", "bias")[:len(operands)], device)
    tx, tw = ts[0], ts[1]
    r = tx.desc.dimension_count
    if r not in (3, 4, 5) or tw.desc.dimension_count != r:
        raise invalid("x", f"x and w must both have 3, 4 or 5 dimensions, got {tx.desc.sizes} and {tw.desc.sizes}")
    n = r - 2
    tb = None
    if bias is not None:
        tb, cout = ts[2], tw.desc.sizes[0]
        long = [i for i, v in enumerate(tb.desc.sizes) if v != 1]
        if tb.desc.element_count != cout or len(long) > 1:
            raise invalid("bias", f"must hold one value per output channel ({cout}) along one axis, got {tb.desc.sizes}")
        step = tb.desc.effective_strides[long[0]] if long else 0  # viewed as (1, Cout, 1, ...)
        tb = Tensor.trusted(tb.buffer, TensorDesc(tb.desc.data_type, (1, cout) + (1,) * n, (0, step) + (0,) * n),
                            tb.offset)
    arrays = {name: (tuple(as_int_tuple(v, name)) if v is not None else default)
              for name, v, default in (("strides", strides, (1,) * n), ("dilations", dilations, (1,) * n),
                                       ("start_padding", start_padding, (0,) * n), ("end_padding", end_padding, (0,) * n))}
    for name, v in arrays.items():
        if len(v) != n:
            raise invalid(name, f"must hold {n} values (one per spatial axis), got {len(v)}")
    spatial = output_sizes(tx.desc.sizes[2:], tw.desc.sizes[2:], arrays["strides"], arrays["dilations"],
                           arrays["start_padding"], arrays["end_padding"])
    shape = (tx.desc.sizes[0], tw.desc.sizes[0], *spatial)
    dt = tx.desc.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
    elif all(s >= 1 for s in spatial):
        out = pooled_empty(dev, _packed(dt, shape))
    yd = out.desc if out is not None else TensorDesc(dt, tuple(max(s, 1) for s in shape))
    desc = ConvolutionDesc(tx.desc, tw.desc, tb.desc if tb is not None else None, yd, ConvolutionMode(mode),
                           ConvolutionDirection.FORWARD, arrays["strides"], arrays["dilations"], arrays["start_padding"],
                           arrays["end_padding"], (0,) * n, as_int(groups, "groups"),
                           ActivationReluDesc(None, None) if relu else None)  # type: ignore[arg-type]
    op = compile_cached(dev, desc)
    assert out is not None  # compile refused an empty output
    op.execute([tx, tw, tb], [out])
    return out


_F32 = DataType.FLOAT32
EXPORTS = {"ConvolutionMode": ConvolutionMode, "ConvolutionDirection": ConvolutionDirection}
SPECS = (OperatorSpec(
    ConvolutionDesc, CONVOLUTION, compile_convolution, (contract.CONV, contract.CONV_DIRECT), helpers=("conv",),
    onnx=(OnnxOp("Conv", "", "conv", check=float_input),),
    example=lambda: ConvolutionDesc(TensorDesc(_F32, (1, 4, 5, 5)), TensorDesc(_F32, (6, 4, 3, 3)),
                                    TensorDesc(_F32, (1, 6, 1, 1)), TensorDesc(_F32, (1, 6, 3, 3)))),)
