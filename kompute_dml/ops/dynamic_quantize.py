"""DirectML's DYNAMIC_QUANTIZE_LINEAR operator (DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC): the
scale and zero point that quantize the whole input to 8 bits, and that quantization.

Semantics (docs/dynamic_quantize.md): ONNX DynamicQuantizeLinear as ONNX Runtime's CPU kernel
computes it, bit for bit, for UINT8 (qmin 0, qmax 255) and, as DirectML's page gives it, INT8
(qmin -128, qmax 127, asymmetric): the range [min(x), max(x)] widened to include 0 (NaN elements
left out), scale = (max - min) / (qmax - qmin) in float32 (1 where max == min), zero point =
round-half-even(clamp(qmin - min / scale, qmin, qmax)), y = clamp(round-half-even(x / scale) + zero
point, qmin, qmax), every division correctly rounded (shaders/f32_exact.glsl). FLOAT16 inputs are
converted exactly to float32 first.

Two dispatches of shaders/dynamic_quantize.comp, with a barrier between them: `dql_minmax` (at
most MAX_PARTS work groups reduce their share of the input to min / max order keys in the
operator's own scratch buffer), `dql_quant` (every work group reduces those keys and computes the
scale and zero point itself, group 0 writes them to their outputs; then the element-wise
quantization). The scratch is the compiled operator's constant (CompiledOperator.constants, bound
after the outputs): each execution's `dql_minmax` writes every scratch word its `dql_quant`
reads, and no byte outside the three outputs changes.

Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), then the page's constraints (the four
tensors share a DimensionCount; OutputTensor and OutputZeroPointTensor a DataType; the scale and
zero point hold one element; the output has the input's sizes), then a non-overlapping output and
32-bit element addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.inputs import as_host_array, conform, is_python_data
from ..core.ints import cdiv
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import F32, FL, FLOATS, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc, validate_desc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, as_tensor, check_out, compile_cached, device_of, pooled_empty
from ..runtime import DispatchPlan, grid_for
from ..runtime.policy import DQL_GEOMETRY
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float32_input
from .plan_chain import rebind
from .spec import OnnxOp, OperatorSpec

# ---- DYNAMIC_QUANTIZE_LINEAR from
# DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC's page: one row, from 4_0; the four tensors share a
# DimensionCount (1 to 8), OutputTensor and OutputZeroPointTensor a DataType.
_Q8 = frozenset({D.INT8, D.UINT8})
DYNAMIC_QUANTIZE_LINEAR = OperatorSupport("DYNAMIC_QUANTIZE_LINEAR", 148, (
    row(FL.FL_4_0, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), _Q8),
         ("output_scale_tensor", "output", (1, 8), F32), ("output_zero_point_tensor", "output", (1, 8), _Q8)),
))


LOCAL_SIZE = 256
# dql_minmax's work groups: at least ELEMENTS_PER_GROUP elements each (lavapipe's policy: 16 per invocation), at most
# MAX_PARTS, each looping over more elements beyond that. Every dql_quant work group reduces all
# their keys before it quantizes, one key pair per invocation: the cap keeps that prologue to one
# 8-byte load per invocation (2 KiB per group, against its 16 KiB of FLOAT32 input) and one
# shared-memory pass (reduce_keys); dql_minmax keeps QUANT_UNITS loads in flight per invocation
# to make up for the fewer groups.
# The device's policy sets dql_minmax's share per group and dql_quant's 16-byte loads per invocation
# (DevicePolicy.dql_geometry): few groups suit lavapipe, whose every group is a loop on a core;
# a GPU wants groups enough for its multiprocessors at a model's sizes (runtime/policy.py, figures).
MAX_PARTS = LOCAL_SIZE
ELEMENTS_PER_GROUP = DQL_GEOMETRY["cpu"][0]  # (the default geometry's: plan_dynamic_quantize)
SCRATCH_WORDS = 2 * MAX_PARTS  # group g's (lo, hi) keys at words 2g, 2g + 1
QUANT_UNITS = contract.DQL_UNITS  # the packed variants' 16-byte input loads per invocation (shaders: UNITS)
_MAX_RANK = 8
# the binding list: input, output, scale, zero point, then the operator's scratch; with an
# input_keys_tensor (_KEYS in place of the scratch) the list is input, keys, output, scale, zero point
_X, _Y, _SCALE, _ZP, _SCRATCH = range(5)
_KEYS = 5
_REMAP = {_X: 0, _KEYS: 1, _Y: 2, _SCALE: 3, _ZP: 4}
_TYPE = {DataType.FLOAT32: "f32", DataType.FLOAT16: "f16", DataType.UINT8: "u8", DataType.INT8: "i8"}


@dataclass(frozen=True)
class DynamicQuantizeLinearDesc:
    """DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC { InputTensor, OutputTensor, OutputScaleTensor,
    OutputZeroPointTensor }: InputMin / InputMax over the whole input, OutputScale = (InputMax -
    InputMin) / (Max - Min), OutputZeroPoint = Min - InputMin / OutputScale, OutputTensor =
    clamp(round(InputValue / OutputScale) + OutputZeroPoint, Min, Max), with Min, Max = 0, 255
    (UINT8) or -128, 127 (INT8). The page's constraints: the four tensors share a DimensionCount,
    OutputTensor and OutputZeroPointTensor a DataType; the scale and zero point hold one element.
    The arithmetic is ONNX Runtime's (docs/dynamic_quantize.md): the range includes 0 and leaves
    NaNs out, scale 1 where it is empty, correctly rounded float32 operations, ties to even."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    output_scale_tensor: TensorDesc
    output_zero_point_tensor: TensorDesc
    # kompute_dml's extension: the input's partial keys as another operator wrote them with the
    # input (MEAN_VARIANCE_NORMALIZATION1's keys_output_tensor): UINT32 (P, 2), packed; one dispatch
    input_keys_tensor: TensorDesc | None = None


def _check_keys(desc: DynamicQuantizeLinearDesc) -> None:
    k = desc.input_keys_tensor
    if k is None:
        return
    validate_desc(k, "input_keys_tensor")
    if k.data_type != DataType.UINT32:
        raise invalid("input_keys_tensor.data_type", f"must be UINT32, got {k.data_type.name}")
    if k.dimension_count != 2 or k.sizes[1] != 2 or k.sizes[0] < 1 or k.effective_strides != (2, 1):
        raise invalid("input_keys_tensor.sizes", f"must be packed (P, 2), P >= 1: a pair of keys per part, got sizes "
                                                 f"{k.sizes} strides {k.effective_strides}")


def _check(desc: DynamicQuantizeLinearDesc) -> None:
    x, y, s, z = desc.input_tensor, desc.output_tensor, desc.output_scale_tensor, desc.output_zero_point_tensor
    for field, t in (("output_tensor", y), ("output_scale_tensor", s), ("output_zero_point_tensor", z)):
        if t.dimension_count != x.dimension_count:
            raise invalid(f"{field}.sizes", f"dimension count must equal input_tensor's ({x.dimension_count}), "
                                            f"got {t.dimension_count}")
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    for field, t in (("output_scale_tensor", s), ("output_zero_point_tensor", z)):
        if t.element_count != 1:
            raise invalid(f"{field}.sizes", f"must hold one element (every size 1), got {t.sizes}")
    if z.data_type != y.data_type:
        raise invalid("output_zero_point_tensor.data_type", f"must equal output_tensor's ({y.data_type.name}), "
                                                            f"got {z.data_type.name}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(("input_tensor", "output_tensor"), (x, y))


def _dims(sizes: list[int], *strides: list[int]) -> dict[str, object]:
    pad = _MAX_RANK - len(sizes)
    return {"rank": len(sizes), "size": [*sizes, *([1] * pad)],
            **{name: [*st, *([0] * pad)] for name, st in zip(("x_str", "y_str"), strides)}}


def plan_dynamic_quantize(desc: DynamicQuantizeLinearDesc, max_groups: int,
                          geometry: tuple[int, int] = DQL_GEOMETRY["cpu"]) -> list[DispatchPlan]:
    """The two dispatches (min / max keys; parameters and quantization) of a checked descriptor;
    `geometry`: (input elements per dql_minmax group, at least; dql_quant's 16-byte loads per
    invocation, a value of QUANT_UNITS)."""
    x, y = desc.input_tensor, desc.output_tensor
    n = x.element_count
    t, o = _TYPE[x.data_type], _TYPE[y.data_type]
    xs, ys = x.data_type.size, y.data_type.size
    per_group, units = geometry
    parts = min(MAX_PARTS, max(1, cdiv(n, per_group)))
    sizes, (x_str,) = merge_dims(x.sizes, x.effective_strides)
    f = contract.DQL_MINMAX
    v = "_v" if x_str == [1] else ""  # one dimension of stride 1: 16-byte loads
    minmax = DispatchPlan(variant=f.name(t=t, v=v), bindings=(_X, _SCRATCH), groups=(parts, 1, 1), writes=(_SCRATCH,),
                          push=f.pack(x_off=0, count=n, **_dims(sizes, x_str)), offset_slots=f.slots(x_off=(_X, xs)))
    sizes, (x_str, y_str) = merge_dims(x.sizes, x.effective_strides, y.effective_strides)
    f = contract.DQL_QUANT
    # both of stride 1: `units` 16-byte loads per invocation
    v = next(k for k, u in QUANT_UNITS.items() if u == units) if x_str == y_str == [1] else ""
    per_inv = units * 16 // xs if v else 4
    keys = desc.input_keys_tensor
    quant = DispatchPlan(variant=f.name(t=t, o=o, v=v), bindings=(_X, _SCRATCH if keys is None else _KEYS, _Y, _SCALE, _ZP),
                         writes=(_Y, _SCALE, _ZP), groups=grid_for(cdiv(n, per_inv), LOCAL_SIZE, max_groups),
                         push=f.pack(x_off=0, y_off=0, scale_off=0, zp_off=0, k_off=0,
                                     parts=parts if keys is None else keys.sizes[0], count=n,
                                     **_dims(sizes, x_str, y_str)),
                         offset_slots=f.slots(x_off=(_X, xs), y_off=(_Y, ys), scale_off=(_SCALE, 4), zp_off=(_ZP, 1),
                                              **({} if keys is None else {"k_off": (_KEYS, 4)})))
    return [minmax, quant] if keys is None else [quant]


def compile_dynamic_quantize_linear(device: Device, desc: DynamicQuantizeLinearDesc) -> CompiledOperator:
    support = DYNAMIC_QUANTIZE_LINEAR
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    _check_keys(desc)
    _check(desc)
    plans = plan_dynamic_quantize(desc, device.limits["max_compute_work_group_count"][0], device.policy.dql_geometry)
    if desc.input_keys_tensor is not None:  # the keys are an input: no scratch (binding list: the inputs first)
        ins = (*support.inputs, "input_keys_tensor")
        plans = [rebind(p, _REMAP) for p in plans]
        return CompiledOperator(device, desc, support, ins, support.outputs, list(plans))
    # not zeroed (no fill submission per compile): dql_minmax writes every key dql_quant reads;
    # made on kp's thread (a synchronous allocation waits while a plan's large ones are made)
    scratch_desc = TensorDesc(DataType.UINT32, (SCRATCH_WORDS,))
    scratch = Tensor.scratch(device, scratch_desc)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, list(plans), constants=[scratch])


# ---- functional helpers (exported as kdml.<name>) ----------------------------------------
# The functional helper of DYNAMIC_QUANTIZE_LINEAR (ops/dynamic_quantize.py,
# docs/dynamic_quantize.md): ONNX DynamicQuantizeLinear on the device.
#
# `dynamic_quantize_linear(x)` returns `(y, scale, zero_point)`, three device tensors: `y` of x's
# sizes and `data_type` (UINT8, ONNX's and ONNX Runtime's type, or INT8, DirectML's other one),
# packed unless `out=` is given (any strides); `scale` (FLOAT32) and `zero_point` (`data_type`) of
# sizes (1,), new unless `scale_out=` / `zero_point_out=` (a one-element Tensor of that type, any
# sizes, returned as given) are. The operator wants scale and zero point of x's dimension count
# (every size 1): the helper binds views of sizes (1, ..., 1) over the same bytes. Such (1,)
# tensors are what kdml.matmul_integer_to_float takes as `a_scale` / `a_zero_point`, so
# ONNX DynamicQuantizeMatMul is this helper followed by that one, with nothing read back.
#
# `x` is a Tensor (FLOAT32 or FLOAT16, 1 to 8 dimensions, any strides) or anything
# kompute_dml/core/inputs.py takes (Python numbers and lists become FLOAT32).
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
    zero_point_out: Tensor | None = None, keys: Tensor | None = None, device: Device | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(y, scale, zero_point) of ONNX DynamicQuantizeLinear (DML_DYNAMIC_QUANTIZE_LINEAR), bit for
    bit as ONNX Runtime's CPU kernel computes it for UINT8 (INT8: DirectML's range -128..127):
    scale = (max(x, 0) - min(x, 0)) / (qmax - qmin) in float32 (1 when both are 0; NaNs left out),
    zero_point = round-half-even(clamp(qmin - min / scale, qmin, qmax)),
    y = clamp(round-half-even(x / scale) + zero_point, qmin, qmax), x / scale correctly rounded,
    NaN elements -> qmin. scale and zero_point have sizes (1,) (module docstring). `keys`: x's
    partial keys as the operator that wrote x also wrote them (kdml.skip_layer_norm's `keys_out`;
    the descriptor's input_keys_tensor): one dispatch instead of two."""
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
    if keys is not None and (not isinstance(keys, Tensor) or keys.device is not dev):
        raise invalid("keys", "must be a kompute_dml Tensor of x's Device")
    op = compile_cached(dev, DynamicQuantizeLinearDesc(tx.desc, y_desc, s_desc, z_desc,
                                                       None if keys is None else keys.desc))
    y = out if out is not None else pooled_empty(dev, y_desc)
    scale = scale_out if scale_out is not None else pooled_empty(dev, _packed(DataType.FLOAT32, (1,)))
    zp = zero_point_out if zero_point_out is not None else pooled_empty(dev, _packed(dt, (1,)))
    # one element each (checked above, or made so): seen with x's rank, the same element
    op.execute([tx] if keys is None else [tx, keys],
               [y, Tensor.trusted(scale.buffer, s_desc, scale.offset), Tensor.trusted(zp.buffer, z_desc, zp.offset)])
    return y, scale, zp


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (OperatorSpec(DynamicQuantizeLinearDesc, DYNAMIC_QUANTIZE_LINEAR, compile_dynamic_quantize_linear,
                      (contract.DQL_MINMAX, contract.DQL_QUANT), helpers=("dynamic_quantize_linear",),
                      onnx=(OnnxOp("DynamicQuantizeLinear", "", "dynamic_quantize_linear", check=float32_input),)),)
