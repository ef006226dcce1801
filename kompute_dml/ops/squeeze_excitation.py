"""kompute_dml's SQUEEZE_EXCITATION (an extension: DirectML has no such operator): the gate of a
squeeze-and-excitation block (MobileNetV3's, EfficientNet's, SE-ResNet's) in one dispatch,

    Output[n, c]  = Activation2(Bias2[c] + sum over r of Filter2[c, r] * Hidden[n, r])
    Hidden[n, r]  = Activation1(Bias1[r] + sum over c' of Filter1[r, c'] * Mean[n, c'])
    Mean[n, c']   = (sum of Input[n, c', ...] over the spatial positions) / their count,

which the exported graphs spell GlobalAveragePool -> Conv 1x1 -> activation -> Conv 1x1 ->
activation (onnx_backend/fusion_se.py runs that chain on it; the Mul by the gate stays an
ELEMENT_WISE_MULTIPLY). Three dispatches become one, and the means and hidden values never leave
the work group. Each of Mean, Hidden and Output is rounded to the tensors' type as the unfused
chain rounds it (AVERAGE_POOLING's division, CONVOLUTION's epilogue: + the bias, ReLU, or another
fused activation on the value the type holds, by the standalone operator's own function). A mean
sums its positions in order (AVERAGE_POOLING's one-invocation kernel's sum); the products sum in
their own order (shaders/squeeze_excitation.comp: 32 lanes per output, then a fixed tree), so the
result is within the float32 bound of the unfused chain's, not its bits. The optional
ScaledOutputTensor (packed, Input's sizes) also receives Input * Output broadcast over the spatial
positions, ELEMENT_WISE_MULTIPLY's product of the gate as the type holds it: the block's Mul(x, gate)
in the same dispatch (each work group scales its own 64 channels), where DevicePolicy allows
(fusion_se.py).

Tensors: FLOAT32 or FLOAT16, all of one type. Input (N, C, spatial...) of 3 to 5 dimensions whose
spatial dimensions address as one (merged strides); Filter1 (R, C), Filter2 (C, R), the optional
Bias1 (R) and Bias2 (C), Output (N, C); any strides and offsets, the output not overlapping itself;
ScaledOutput packed (N, C, spatial...), Input's sizes.
C at most MAX_CHANNELS, R at most MAX_HIDDEN (the work group's shared memory). The activations:
CONVOLUTION's fused activations (ops/conv_fused.py), None for none. Validation, in order:
DML_BUFFER_TENSOR_DESC rules and the table (InvalidArgumentError / UnsupportedError naming the
field), one data type, the sizes above, the limits, the spatial strides, a non-overlapping output,
32-bit element addressing, the activations.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import cdiv
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import as_tensor, check_out, compile_cached, device_of, pooled_empty
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, validate_tensors
from .conv_fused import fused_words
from .elementwise_plan import check_addressable
from .matmul_coop import subgroup_size
from .spec import OperatorSpec

_FIELDS = ("input_tensor", "filter1_tensor", "bias1_tensor", "filter2_tensor", "bias2_tensor", "output_tensor",
           "scaled_output_tensor")
SQUEEZE_EXCITATION = OperatorSupport("SQUEEZE_EXCITATION", None, (
    row(FL.FL_1_0, ("input_tensor", "input", (3, 5), FLOATS), ("filter1_tensor", "input", (2, 2), FLOATS),
        ("bias1_tensor", "optional input", (1, 1), FLOATS), ("filter2_tensor", "input", (2, 2), FLOATS),
        ("bias2_tensor", "optional input", (1, 1), FLOATS), ("output_tensor", "output", (2, 2), FLOATS),
        ("scaled_output_tensor", "optional output", (3, 5), FLOATS)),))
MAX_CHANNELS, MAX_HIDDEN = contract.SE_MAX_C, contract.SE_MAX_R
_LANES = 256  # the work group
# 8 invocations per channel's mean (H100, device call 221, `python -m benchmarks.bench_se --mean-lanes
# 0,2,3,5`): within 2 us of the best of 1, 4, 8 and 32 at every MobileNetV3-small and EfficientNet-B0
# block but 240 x 28 x 28 (28.3 against 4's 25.1; call 222: 23.9 against 23.7), where 1 took up to 5.6x
# as long (16 channels of 56 x 56) and 32 up to 1.85x (1152 of 7 x 7: its partial sums go through five
# butterfly levels per channel); 16 channels of 56 x 56 took 16.0 us on 8 and 11.7 on 32, hence more
# lanes where the channels fill at most one round
MEAN_LANES = 8
MEAN_LANES_ENV = "KDML_SE_MEAN_LANES"
_F_BIAS1, _F_BIAS2, _F_XQUADS, _F_SCALE = 1, 2, 4, 8


@dataclass(frozen=True)
class SqueezeExcitationDesc:
    """kompute_dml's SQUEEZE_EXCITATION { InputTensor, Filter1Tensor, Bias1Tensor, Filter2Tensor,
    Bias2Tensor, OutputTensor, Activation1, Activation2, ScaledOutputTensor } (module docstring); the
    activations are fused-activation descriptors (tensors None) or None."""

    input_tensor: TensorDesc
    filter1_tensor: TensorDesc
    bias1_tensor: TensorDesc | None
    filter2_tensor: TensorDesc
    bias2_tensor: TensorDesc | None
    output_tensor: TensorDesc
    activation1: Any = None
    activation2: Any = None
    scaled_output_tensor: TensorDesc | None = None


def _check(desc: SqueezeExcitationDesc) -> tuple[int, int, int, int, int]:
    """(N, C, R, the spatial count, its stride) of a descriptor whose tensors passed the table."""
    x, w1, b1, w2, b2, y, z = (getattr(desc, f) for f in _FIELDS)
    for f, d in zip(_FIELDS[1:], (w1, b1, w2, b2, y, z)):
        if d is not None and d.data_type != x.data_type:
            raise invalid(f"{f}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {d.data_type.name}")
    n, c = x.sizes[:2]
    r = w1.sizes[0]
    want = {"filter1_tensor": (r, c), "bias1_tensor": (r,), "filter2_tensor": (c, r), "bias2_tensor": (c,),
            "output_tensor": (n, c)}
    for f, d in zip(_FIELDS[1:], (w1, b1, w2, b2, y)):
        if d is not None and d.sizes != want[f]:
            raise invalid(f"{f}.sizes", f"must be {want[f]} (input_tensor {x.sizes}, filter1_tensor {w1.sizes}), "
                                        f"got {d.sizes}")
    if c > MAX_CHANNELS:
        raise UnsupportedError(f"input_tensor.sizes: {c} channels, more than the {MAX_CHANNELS} one work group holds")
    if r > MAX_HIDDEN:
        raise UnsupportedError(f"filter1_tensor.sizes: {r} hidden values, more than the {MAX_HIDDEN} one work group holds")
    spatial, (strides,) = merge_dims(x.sizes[2:], x.effective_strides[2:])
    if len(spatial) != 1:
        raise UnsupportedError(f"input_tensor.strides: the spatial dimensions {x.sizes[2:]} with strides "
                               f"{x.effective_strides[2:]} do not address as one dimension")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    if z is not None:
        if z.sizes != x.sizes:
            raise invalid("scaled_output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {z.sizes}")
        if z.effective_strides != TensorDesc(z.data_type, z.sizes).effective_strides:
            raise UnsupportedError(f"scaled_output_tensor.strides: kompute_dml writes it packed, got {z.effective_strides}")
    check_addressable(tuple(f for f, d in zip(_FIELDS, (x, w1, b1, w2, b2, y, z)) if d is not None),
                      tuple(d for d in (x, w1, b1, w2, b2, y, z) if d is not None))
    return n, c, r, math.prod(x.sizes[2:]), strides[0]


def mean_lanes_log2(c: int, items: int, subgroup: int = 32) -> int:
    """log2 of the invocations per channel's mean (shaders/squeeze_excitation.comp): P = MEAN_LANES,
    doubled while the channels fill at most one round of 256 lanes (few channels, long rows),
    at most 32, the subgroup size and the items (positions or quads). KDML_SE_MEAN_LANES=log2
    forces one (within the cap)."""
    cap = min(32, subgroup, items)
    forced = os.environ.get(MEAN_LANES_ENV, "").strip()
    if forced:  # tests and benchmarks
        if forced not in ("0", "1", "2", "3", "4", "5"):
            raise ValueError(f"{MEAN_LANES_ENV}={forced!r}: log2 of the lanes per mean, 0 to 5")
        return min(int(forced), cap.bit_length() - 1)
    p = MEAN_LANES
    while p < 32 and c * p <= _LANES:
        p *= 2
    return min(p, cap).bit_length() - 1


def compile_squeeze_excitation(device: Device, desc: SqueezeExcitationDesc) -> CompiledOperator:
    support = SQUEEZE_EXCITATION
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    n, c, r, hw, x_s = _check(desc)
    act1, act2 = (fused_words(device, a, "SQUEEZE_EXCITATION") for a in (desc.activation1, desc.activation2))
    if n > device.limits["max_compute_work_group_count"][1]:
        raise UnsupportedError(f"input_tensor.sizes: a batch of {n}, more work groups than the device's grid axis 1")
    x, w1, b1, w2, b2, y, z = (getattr(desc, f) for f in _FIELDS)
    xs, w1s, w2s, ys = x.effective_strides, w1.effective_strides, w2.effective_strides, y.effective_strides
    fam = contract.SE
    unit = x.data_type.size
    # the means load 4 positions at once where a channel's are contiguous and every channel's start
    # is 4-aligned (tensors start 16-byte aligned; the kernel checks the offset)
    quads = x_s == 1 and hw % 4 == 0 and xs[1] % 4 == 0 and (n == 1 or xs[0] % 4 == 0)
    plan = DispatchPlan(
        variant=fam.name(t="f16" if x.data_type == DataType.FLOAT16 else "f32"),
        bindings=(0, 1, 2 if b1 is not None else None, 3, 4 if b2 is not None else None, 5, 6 if z is not None else None),
        push=fam.pack(x_off=0, w1_off=0, b1_off=0, w2_off=0, b2_off=0, y_off=0, c=c, r=r, hw=hw, x_b=xs[0], x_c=xs[1],
                      x_s=x_s, w1_r=w1s[0], w1_c=w1s[1], w2_c=w2s[0], w2_r=w2s[1],
                      b1_s=b1.effective_strides[0] if b1 is not None else 0,
                      b2_s=b2.effective_strides[0] if b2 is not None else 0, y_b=ys[0], y_c=ys[1],
                      act1=act1[0], act1_p0=act1[1], act1_p1=act1[2], act2=act2[0], act2_p0=act2[1], act2_p1=act2[2],
                      flags=(_F_BIAS1 if b1 is not None else 0) | (_F_BIAS2 if b2 is not None else 0)
                      | (_F_XQUADS if quads else 0) | (_F_SCALE if z is not None else 0),
                      mp=mean_lanes_log2(c, hw // 4 if quads else hw, subgroup_size(device)), z_off=0),
        groups=(cdiv(c, 64), n, 1), writes=(5,) if z is None else (5, 6),
        spec=(act1[0], act2[0]),  # the kinds compiled in (the shader's SE_ACT1, SE_ACT2)
        offset_slots=fam.slots(**{k: (i, unit) for k, i, d in zip(("x_off", "w1_off", "b1_off", "w2_off", "b2_off", "y_off",
                                                                  "z_off"), range(7), (x, w1, b1, w2, b2, y, z))
                                  if d is not None}))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def squeeze_excitation(x: Any, filter1: Any, bias1: Any, filter2: Any, bias2: Any, *, activation1: Any = None,
                       activation2: Any = None, out: Tensor | None = None, scaled_out: Tensor | None = None,
                       device: Device | None = None) -> Tensor:
    """The gate of a squeeze-and-excitation block (kompute_dml's SQUEEZE_EXCITATION): x (N, C,
    spatial...), filter1 (R, C), filter2 (C, R), the biases (R) and (C) or None, the activations
    fused-activation descriptors (kdml.ActivationReluDesc(None, None), ...) or None: a new Tensor
    (N, C), or `out`. `scaled_out` (packed, x's shape and type): also x times the gate, written by
    the same dispatch (the block's output)."""
    dev = device_of(x, filter1, bias1, filter2, bias2, device=device)
    tx, tw1, tw2 = (as_tensor(v, dev, name) for v, name in ((x, "x"), (filter1, "filter1"), (filter2, "filter2")))
    tb1, tb2 = (None if v is None else as_tensor(v, dev, name) for v, name in ((bias1, "bias1"), (bias2, "bias2")))
    shape, dt = tx.desc.sizes[:2], tx.desc.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
    if scaled_out is not None:
        check_out(scaled_out, dev, tx.desc.sizes, dt, "scaled_out")
    od = out.desc if out is not None else TensorDesc(dt, shape)
    op = compile_cached(dev, SqueezeExcitationDesc(tx.desc, tw1.desc, None if tb1 is None else tb1.desc, tw2.desc,
                                                   None if tb2 is None else tb2.desc, od, activation1, activation2,
                                                   None if scaled_out is None else scaled_out.desc))
    if out is None:
        out = pooled_empty(dev, od)
    op.execute([tx, tw1, tb1, tw2, tb2], [out, scaled_out])
    return out


def _example() -> SqueezeExcitationDesc:
    f32 = DataType.FLOAT32
    return SqueezeExcitationDesc(TensorDesc(f32, (2, 8, 3, 3)), TensorDesc(f32, (4, 8)), TensorDesc(f32, (4,)),
                                 TensorDesc(f32, (8, 4)), TensorDesc(f32, (8,)), TensorDesc(f32, (2, 8)),
                                 scaled_output_tensor=TensorDesc(f32, (2, 8, 3, 3)))


SPECS = (OperatorSpec(SqueezeExcitationDesc, SQUEEZE_EXCITATION, compile_squeeze_excitation, (contract.SE,),
                      helpers=("squeeze_excitation",), example=_example),)
