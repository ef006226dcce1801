"""DirectML's CONVOLUTION (DML_CONVOLUTION_OPERATOR_DESC). FORWARD: the input (N, Cin, [D,] [H,] W)
correlated (CROSS_CORRELATION) or convolved (CONVOLUTION: the window reversed) with the filter
(Cout, Cin / GroupCount, [KD,] [KH,] KW), per group of channels, with strides, dilations, zero
padding at the start and the end of each spatial axis, an optional per-channel bias and a fused
activation. BACKWARD (transposed convolution, the adjoint of FORWARD): the filter (Cin, Cout /
GroupCount, window...), each input element scattered through the window to output position
i * stride + k * dilation - start; output sizes (in - 1) * stride + (window - 1) * dilation + 1
- start - end + output_padding. ONNX Conv and ConvTranspose run on it
(onnx_backend/handlers_conv.py); helpers in functional/convolution.py.

shaders/convolution.comp: an implicit GEMM, 64 output channels x 64 output pixels per work-group
(4 x 4 per invocation), k decoded by a table in the operator's constant (_k_table), float32 fma
sums in the order k = (ci, kd, kh, kw) row-major (`precise`), then + bias, then the fused
activation (shaders/conv_common.glsl); FLOAT16 tensors decoded exactly and the result rounded once.
Its direct variant (few channels per group) sums each output in one invocation, in the same order;
its lanes variant (GPUs: FLOAT32 layers of few output pixels, coop_policy.LANES_MAX_WORK) over 32
invocations per output channel, added by a fixed tree.
shaders/conv_coop.comp (ops/conv_coop.py): the same implicit GEMM on float16 cooperative matrices
for FORWARD in half precision where the device policy takes it (its own bound, docs/convolution.md);
`allow_half_precision` (Device.compile's flag) lets FLOAT32 run there (converted to float16 as the
tiles load; kompute_dml's extension: then a FLOAT16 filter too). On GPUs, grids of few tiles cut the reduction
into parts (split-K, conv_split: CONV_SPLIT's partial sums to the operator's scratch, then
CONV_REDUCE adds them in part order; the same bound). Bound (tests/test_convolution.py
enforces it against float64; tools/measure_conv.py measures it): |error| <= (K + 1) u S with
u = 2^-24, K = CinG * KD * KH * KW and S = sum |x w| + |bias| over the output's terms; FLOAT16
outputs one more rounding (2^-11 relative).

Tensor support: FLOAT32 and FLOAT16, 4 or 5 dimensions from 1_0 (2-D and 3-D convolutions), 3
dimensions too from 3_0 (1-D). (The page as stored in MicrosoftDocs/sdk-api holds no tensor-support
table; these rows are kompute_dml's reading of the feature-level history, the float rows only.)
FusedActivation (ops/conv_fused.py): None, IDENTITY, RELU, LEAKY_RELU, SIGMOID, HARD_SIGMOID,
HARD_SWISH, TANH, ELU, SWISH or ELEMENT_WISE_CLIP, their tensors None, each the standalone operator's bits
of the output; others are refused (UnsupportedError naming `fused_activation`). OutputPadding
applies to BACKWARD only (zeros for FORWARD). DimensionCount is the tensors' dimension count - 2 (a
property here). Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table,
then the page's constraints (InvalidArgumentError whose message starts with the field), the output
sizes the formula gives, a non-overlapping output, 32-bit element addressing.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, cdiv
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, TransferPlan, grid_for
from ..runtime.coop_policy import CONV_KERNEL_ENV, DIRECT_BELOW_COUTG  # noqa: F401 (DIRECT_BELOW_COUTG re-exported)
from . import contract, conv_coop, conv_pointwise
from .act_table import conv_act, table_slot
from .base import CompiledOperator, validate_tensors
from .contract.conv import LANES_CHANNELS, LANES_PIXELS, LANES_UNROLL
from .conv_direct import direct_window
from .conv_fused import fused_words
from .conv_split import CONV_SPLIT_ENV, TILE_K, conv_parts, conv_split  # noqa: F401 (conv_split re-exported)
from .elementwise_plan import check_addressable
from .gemm_coop import CoopTile
from .onnx_types import float_input
from .spatial import output_sizes, spatial_array, strides5, three
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
_F32, _F16 = DataType.FLOAT32, DataType.FLOAT16
CONVOLUTION = OperatorSupport("CONVOLUTION", 53, tuple(
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


def backward_output_sizes(in_sizes: tuple[int, ...], window: tuple[int, ...], strides: tuple[int, ...],
                          dilations: tuple[int, ...], start: tuple[int, ...], end: tuple[int, ...],
                          output_padding: tuple[int, ...]) -> tuple[int, ...]:
    """BACKWARD (transposed) output sizes: the sizes whose FORWARD convolution gives `in_sizes`,
    the last positions of the stride's remainder added by `output_padding`."""
    return tuple((i - 1) * st + (k - 1) * d + 1 - s - e + op
                 for i, k, st, d, s, e, op in zip(in_sizes, window, strides, dilations, start, end, output_padding))


def _validate(device: Device, desc: ConvolutionDesc, allow_half_precision: bool = False) -> dict[str, Any]:
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
    act = fused_words(device, desc.fused_activation)
    r = x.dimension_count
    n = r - 2
    for name, t in (("filter_tensor", w), ("output_tensor", y)) + ((("bias_tensor", b),) if b is not None else ()):
        if t.dimension_count != r:
            raise invalid(f"{name}.sizes", f"dimension count must equal input_tensor's ({r}), got {t.dimension_count}")
        # kompute_dml's extension under allow_half_precision: a FLOAT16 filter with FLOAT32 tensors
        # (the tensor-core kernel's filter converted once; compile_convolution checks the kernel)
        half_filter = allow_half_precision and name == "filter_tensor" and (x.data_type, t.data_type) == (_F32, _F16)
        if t.data_type != x.data_type and not half_filter:
            raise invalid(f"{name}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {t.data_type.name}")
    groups = as_int(desc.group_count, "group_count")
    if groups < 1:
        raise invalid("group_count", f"must be >= 1, got {groups}")
    backward = direction == ConvolutionDirection.BACKWARD
    batch, cin = x.sizes[0], x.sizes[1]
    if cin % groups:
        raise invalid("group_count", f"must divide input_tensor's channel count {cin}, got {groups}")
    if backward:  # filter (Cin, Cout / GroupCount, window...)
        cout = w.sizes[1] * groups
        if w.sizes[0] != cin:
            raise invalid("filter_tensor.sizes", f"batch count must be the input channels {cin} (BACKWARD), "
                                                 f"got {w.sizes[0]}")
    else:  # filter (Cout, Cin / GroupCount, window...)
        cout = w.sizes[0]
        if cout % groups:
            raise invalid("group_count", f"must divide filter_tensor's batch count (output channels) {cout}, "
                                         f"got {groups}")
        if w.sizes[1] != cin // groups:
            raise invalid("filter_tensor.sizes", f"channel count must be input channels / group_count = "
                                                 f"{cin // groups}, got {w.sizes[1]}")
    strides = spatial_array(desc, "strides", n, 1, 1)
    dilations = spatial_array(desc, "dilations", n, 1, 1)
    start = spatial_array(desc, "start_padding", n, 0, 0)
    end = spatial_array(desc, "end_padding", n, 0, 0)
    out_pad = spatial_array(desc, "output_padding", n, 0, 0)
    if any(out_pad) and not backward:
        raise invalid("output_padding", f"applies to BACKWARD only: must be zeros for FORWARD, got {out_pad}")
    spatial = (backward_output_sizes(x.sizes[2:], w.sizes[2:], strides, dilations, start, end, out_pad) if backward
               else output_sizes(x.sizes[2:], w.sizes[2:], strides, dilations, start, end))
    want = (batch, cout, *spatial)
    if any(s < 1 for s in spatial):
        raise invalid("output_tensor.sizes", f"the window ({w.sizes[2:]}, dilations {dilations}) is larger than the "
                                             f"padded input {tuple(i + s + e for i, s, e in zip(x.sizes[2:], start, end))}")
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (batch, output channels, the "
                                             f"{'backward' if backward else 'forward'} formula's sizes), got {y.sizes}")
    if b is not None and b.sizes != (1, cout) + (1,) * n:
        raise invalid("bias_tensor.sizes", f"must be {(1, cout) + (1,) * n}, got {b.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = tuple(f for f, t in zip(_T, (x, w, b, y)) if t is not None)
    check_addressable(present, tuple(t for t in (x, w, b, y) if t is not None))
    return {"mode": mode, "backward": backward, "coutg": cout // groups, "act": act, "groups": groups,
            "strides": strides, "dilations": dilations, "start": start, "spatial": spatial}


def _params(desc: ConvolutionDesc, v: dict[str, Any], split: int = 1, kchunk: int = 0) -> np.ndarray:
    """The geometry the shaders read (shaders/conv_common.glsl's P_* words, in order), then the k table."""
    x, w, b = desc.input_tensor, desc.filter_tensor, desc.bias_tensor
    groups, coutg = v["groups"], v["coutg"]
    window = three(w.sizes[2:], 1)
    out = three(v["spatial"], 1)
    flags = (1 if v["mode"] == ConvolutionMode.CONVOLUTION else 0) | (4 if b is not None else 0)
    flags |= 8 if v["backward"] else 0
    kvol = math.prod(window)
    ws = w.effective_strides
    # the filter's step per output channel and per group: (Cout, CinG, ...) or BACKWARD (Cin, CoutG, ...)
    wm, wg = (ws[1], (x.sizes[1] // groups) * ws[0]) if v["backward"] else (ws[0], coutg * ws[0])
    table = _k_table(desc, v)
    # the filter's k table offsets are k and its rows' steps whole 16-byte units: conv_coop.comp loads
    # 16 bytes at a time (its tensor's offset is a multiple of 16 bytes)
    per16 = 16 // w.data_type.size
    if np.array_equal(table[1::TAB_W], np.arange(len(table) // TAB_W)) and wm % per16 == 0 and wg % per16 == 0:
        flags |= 16
    words = [x.sizes[1] // groups, coutg, *three(x.sizes[2:], 1), *out, *window,
             *three(v["strides"], 1), *three(v["dilations"], 1), *three(v["start"], 0),
             *strides5(x), *strides5(w), *strides5(desc.output_tensor), b.effective_strides[1] if b is not None else 0,
             flags, x.sizes[0] * math.prod(out), (x.sizes[1] // groups) * kvol, kvol, window[1] * window[2],
             out[1] * out[2], math.prod(out), coutg * groups, wm, wg, split, kchunk, *v["act"], 0]
    assert len(words) == P_TAB_WORD
    return np.concatenate([np.array(words, dtype=np.uint32), table])


TAB_W = 5  # words per k of the k table (shaders/convolution.comp P_TAB)
P_TAB_WORD = 52  # where the k table starts (P_TAB)


def _k_table(desc: ConvolutionDesc, v: dict[str, Any]) -> np.ndarray:
    """Per reduction index k = (ci, kd, kh, kw) row-major: the input's element offset of (ci, kd *
    dd, kh * dh, kw * dw) from the window's first element (BACKWARD: of channel ci only), the
    filter's offset of (ci, the window position, reversed in CONVOLUTION mode), and kd * dd,
    kh * dh, kw * dw (the bounds checks)."""
    x, w = desc.input_tensor, desc.filter_tensor
    window = three(w.sizes[2:], 1)
    ci, kd, kh, kw = (a.ravel().astype(np.int64) for a in np.indices((x.sizes[1] // v["groups"], *window)))
    pos = [k * d for k, d in zip((kd, kh, kw), three(v["dilations"], 1))]
    if v["mode"] == ConvolutionMode.CONVOLUTION:
        kd, kh, kw = (n - 1 - k for k, n in zip((kd, kh, kw), window))
    xs, ws = strides5(x), strides5(w)
    x_off = ci * xs[1] + (0 if v["backward"] else pos[0] * xs[2] + pos[1] * xs[3] + pos[2] * xs[4])
    w_off = ci * ws[0 if v["backward"] else 1] + kd * ws[2] + kh * ws[3] + kw * ws[4]
    return np.stack([x_off, w_off, *pos], axis=1).astype(np.uint32).ravel()


def compile_convolution(device: Device, desc: ConvolutionDesc, *, allow_half_precision: bool = False,
                        kernel: str | None = None, config: CoopTile | None = None) -> CompiledOperator:
    """CONVOLUTION's plans: the kernel the device policy chooses (DevicePolicy.conv_family_for; `kernel`
    or KDML_CONV_KERNEL forces one, `config` a tensor-core tile); `allow_half_precision` (DirectML's
    DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION) lets FLOAT32 run on the float16 tensor-core
    kernel and take a FLOAT16 filter there."""
    v = _validate(device, desc, allow_half_precision)
    x, w = desc.input_tensor, desc.filter_tensor
    coutg, cout = v["coutg"], v["coutg"] * v["groups"]
    npix = x.sizes[0] * math.prod(v["spatial"])
    klen = (x.sizes[1] // v["groups"]) * math.prod(w.sizes[2:])
    tab_bytes = 4 * (P_TAB_WORD + TAB_W * klen)
    if tab_bytes > device.limits["max_storage_buffer_range"]:
        raise UnsupportedError(f"filter_tensor: the reduction's {klen} terms per output need a table of "
                               f"{tab_bytes} bytes, more than the device's storage buffer range")
    limit = device.limits["max_compute_work_group_count"]
    bias = 2 if desc.bias_tensor is not None else None
    half = x.data_type == _F16 or allow_half_precision
    gemm_desc = conv_pointwise.pointwise(desc, v)
    family = device.policy.conv_family_for(half=half, coutg=coutg, klen=klen, backward=v["backward"], kernel=kernel,
                                           lanes_work=lanes_work(npix, cout, klen), pointwise=gemm_desc is not None,
                                           float16=x.data_type == _F16, pixels=math.prod(v["spatial"]))
    if family == "gemm" and gemm_desc is not None:  # GEMM's kernels (ops/conv_pointwise.py)
        return _compiled(device, desc, *conv_pointwise.gemm_plans(device, gemm_desc))
    if w.data_type != x.data_type and family not in ("coopmat", "coopmat-emulated"):
        raise UnsupportedError(f"filter_tensor.data_type: a FLOAT16 filter with FLOAT32 tensors runs on the "
                               f"tensor-core kernel only, not the {family!r} kernel this convolution takes")
    if family in ("direct", "lanes"):
        if v["backward"]:
            raise UnsupportedError(f"direction: BACKWARD runs on the tiled kernel only ({CONV_KERNEL_ENV}={family})")
        if family == "direct":
            win, invocations = direct_window(v, three(w.sizes[2:], 1), npix, cout, x.data_type == _F16)
            variant = contract.CONV_DIRECT.name(win=win, t="f16" if x.data_type == _F16 else "f32")
            plan = _plan(contract.CONV_DIRECT, x.data_type, (0, 1, bias, 3), grid_for(invocations, 256, limit[0]), (3,),
                         variant)
        elif cdiv(cout, LANES_CHANNELS) > limit[1]:
            raise UnsupportedError(f"filter_tensor: {cout} output channels need {cdiv(cout, LANES_CHANNELS)} "
                                   f"work-groups along grid axis 1, more than the device's {limit[1]}")
        else:  # pixel blocks beyond the device's count loop inside the shader
            grid = (min(cdiv(npix, LANES_PIXELS), limit[0]), cdiv(cout, LANES_CHANNELS), 1)
            plan = _plan(contract.CONV_LANES, x.data_type, (0, 1, bias, 3), grid, (3,))
        return _compiled(device, desc, [plan], [device.tensor(_params(desc, v))])
    coop = None
    bm, bn, step = 64, 64, TILE_K
    if family in ("coopmat", "coopmat-emulated"):
        coop = conv_coop.choose(device, family, x.data_type, w.data_type, coutg, config)
        bm, bn, step = coop.tile.bm, coop.tile.bn, coop.tile.bk
    # pixel tiles (x) and groups (z) beyond the device's counts loop inside the shader
    if cdiv(coutg, bm) > limit[1]:
        raise UnsupportedError(f"filter_tensor: {coutg} output channels per group need {cdiv(coutg, bm)} "
                               f"work-groups along grid axis 1, more than the device's {limit[1]}")
    grid = (min(cdiv(npix, bn), limit[0]), cdiv(coutg, bm), min(v["groups"], limit[2]))
    split, kchunk = conv_parts(device, grid, klen, cout * npix, step)
    p = device.tensor(_params(desc, v, split, kchunk))
    if split == 1:
        main = (_coop_plan(coop, 0, x.data_type, bias, grid) if coop is not None
                else _plan(contract.CONV, x.data_type, (0, 1, bias, 3), grid, (3,)))
        return _compiled(device, desc, [main], [p])
    scratch = Tensor.scratch(device, TensorDesc(DataType.UINT32, (split * cout * npix,)))
    parts = (_coop_plan(coop, split, x.data_type, bias, grid) if coop is not None else
             _plan(contract.CONV_SPLIT, x.data_type, (0, 1, None, None, 5), (grid[0], grid[1] * split, grid[2]), (5,)))
    out_t = desc.output_tensor.data_type
    plans: list[DispatchPlan | TransferPlan] = [
        parts, _plan(contract.CONV_REDUCE, out_t, (None, None, bias, 3, 5), grid_for(npix * cout, 256, limit[0]), (3,))]
    return _compiled(device, desc, plans, [p, scratch])


def lanes_work(npix: int, cout: int, klen: int) -> int:
    """The lanes variant's work-groups (contract/conv.py: LANES_PIXELS output pixels x LANES_CHANNELS channels
    each) times its rounds over the terms (32 lanes x LANES_UNROLL): what its time grows with once the
    GPU is full (the device policy compares it with coop_policy.LANES_MAX_WORK)."""
    return (cdiv(npix, LANES_PIXELS) * cdiv(cout, LANES_CHANNELS)
            * cdiv(klen, 32 * LANES_UNROLL))


def _coop_plan(coop: Any, split: int, dt: DataType, bias: int | None, grid: tuple[int, int, int]) -> DispatchPlan:
    """The tensor-core kernel's dispatch (`split` parts: the partial sums to the scratch, binding 5)."""
    fam = contract.CONV_COOP
    tensors = (0, 1, None, None, 5) if split else (0, 1, bias, 3)
    plan = _plan(fam, dt, tensors, (grid[0], grid[1] * max(split, 1), grid[2]), (5,) if split else (3,),
                 variant=coop.variant(bool(split)))
    return dataclasses.replace(plan, spec=coop.spec)


def _compiled(device: Device, desc: ConvolutionDesc, plans: list[DispatchPlan | TransferPlan],
              constants: list[Tensor]) -> CompiledOperator:
    plans, constants = conv_act(device, desc, plans, constants)  # the activation compiled in (act_table.py)
    return CompiledOperator(device, desc, CONVOLUTION, CONVOLUTION.inputs, CONVOLUTION.outputs, plans, constants=constants)


def _plan(fam: Any, dt: DataType, tensors: tuple[int | None, ...], grid: tuple[int, int, int],
          writes: tuple[int, ...], variant: str | None = None) -> DispatchPlan:
    """A dispatch of `fam` (its type variant of `dt`, or `variant`) binding the binding-list entries
    `tensors` (x, w, bias, y[, the split parts' scratch at shader binding 5]) and the constant
    (entry 4) at shader binding 4. Offsets are in elements of each tensor's own type."""
    units = [dt.size, 2 if variant is not None and variant.endswith("h") else dt.size, dt.size, dt.size]  # f32h: FLOAT16 w
    return DispatchPlan(
        variant=variant or fam.name(t="f16" if dt == DataType.FLOAT16 else "f32"),
        bindings=(*tensors[:4], 4, *tensors[4:]),
        push=fam.pack(x_off=0, w_off=0, b_off=0, y_off=0), groups=grid, writes=writes,
        offset_slots=fam.slots(**{name: (i, units[k]) for k, (name, i) in enumerate(zip(("x_off", "w_off", "b_off", "y_off"),
                                                                                        tensors)) if i is not None}))


def plans_ahead(device: Device, op: CompiledOperator, done: set[Any]) -> list[DispatchPlan]:
    """OperatorSpec.ahead: another input shape of the same tensors may take the tiled kernel's
    other path, split-K (two dispatches, one binding more) or one pass, or the lanes kernel (GPUs;
    where forced)."""
    if device.policy.name == "cpu" and not os.environ.get(CONV_SPLIT_ENV):
        return []
    out = []
    for plan in op.plans:
        assert isinstance(plan, DispatchPlan)
        t = plan.variant.rsplit("_", 1)[1]
        if plan.variant.startswith(("conv_", "convl_")):  # (the lanes kernel: fewer pixels, FLOAT32)
            out += [dataclasses.replace(plan, variant=contract.CONV_SPLIT.name(t=t), bindings=(0, 1, None, None, 4, 4)),
                    dataclasses.replace(plan, variant=contract.CONV_REDUCE.name(t=t),
                                        bindings=(None, None, plan.bindings[2], 3, 4, 4))]
            other = contract.CONV if plan.variant.startswith("convl_") else contract.CONV_LANES
            if t == "f32":
                out.append(dataclasses.replace(plan, variant=other.name(t=t)))
        elif plan.variant.startswith("convs_"):
            out.append(dataclasses.replace(plan, variant=contract.CONV.name(t=t), bindings=(0, 1, None, 3, 4)))
        elif plan.variant.startswith("convc"):  # the tensor cores' other path (its tile: the same spec)
            head = plan.variant.rsplit("_", 1)[0]
            if head.endswith("s"):
                out.append(dataclasses.replace(plan, variant=f"{head[:-1]}_{t}", bindings=(0, 1, None, 3, 4)))
            else:
                out += [dataclasses.replace(plan, variant=f"{head}s_{t}", bindings=(0, 1, None, None, 4, 4)),
                        dataclasses.replace(plan, variant=contract.CONV_REDUCE.name(t=t[:3]), spec=(),
                                            bindings=(None, None, plan.bindings[2], 3, 4, 4))]
    return [table_slot(p) for p in out]  # the FLOAT16 variants' binding 6, as the plans' own (act_table.py)


EXPORTS = {"ConvolutionMode": ConvolutionMode, "ConvolutionDirection": ConvolutionDirection}
SPECS = (OperatorSpec(
    ConvolutionDesc, CONVOLUTION, compile_convolution,
    (contract.CONV, contract.CONV_DIRECT, contract.CONV_SPLIT, contract.CONV_REDUCE, contract.CONV_LANES, contract.CONV_COOP,
     contract.GEMM, contract.GEMM_SPLIT, contract.GEMM_REDUCE, contract.GEMM_COOP, contract.gemm_stream.GEMM_STREAM),  # (1 x 1)
    helpers=("conv", "conv_transpose"), ahead=plans_ahead, flags=("allow_half_precision",),
    onnx=(OnnxOp("Conv", "", "conv", check=float_input), OnnxOp("ConvTranspose", "", "conv_transpose", check=float_input)),
    example=lambda: ConvolutionDesc(TensorDesc(_F32, (1, 4, 5, 5)), TensorDesc(_F32, (6, 4, 3, 3)),
                                    TensorDesc(_F32, (1, 6, 1, 1)), TensorDesc(_F32, (1, 6, 3, 3)))),)
