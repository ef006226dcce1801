"""DirectML's ACTIVATION_GELU (DML_ACTIVATION_GELU_OPERATOR_DESC) and ACTIVATION_SOFTMAX1
(DML_ACTIVATION_SOFTMAX1_OPERATOR_DESC), both from feature level 5_1, FLOAT32 and FLOAT16, 1 to 8
dimensions.

GELU runs on the element-wise plans (ops/elementwise_plan.py: merged dimensions, per-tensor
strides, stride-0 broadcast, offsets, host-enumerated dimensions beyond the shader's rank) with
shaders/float_unary.comp; SOFTMAX1 on its own plans (`plan_softmax`: a row per 8 to 256
invocations, ops/softmax_geometry.py) with shaders/softmax.comp. The arithmetic of both (shaders/gelu_math.glsl) uses
only operations Vulkan rounds correctly, and its error bounds are in docs/gelu.md and
docs/softmax.md. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's
table (InvalidArgumentError / UnsupportedError naming the field), then the pages' tensor
constraint (the same DataType, DimensionCount and Sizes: InvalidArgumentError naming
output_tensor.data_type / output_tensor.sizes), SOFTMAX1's axes, then a non-overlapping output
and 32-bit element addressing.

kompute_dml's extension of ACTIVATION_SOFTMAX1 (no DirectML field; the smx_ext_* variants):
`mask_tensor`, added to the input before the softmax, each sum rounded to the data type exactly
as ELEMENT_WISE_ADD rounds it (sizes 1 or the input's: broadcast), and `nan_to_zero`, NaN results
written as +0: ONNX's Add(scores, mask) -> Softmax -> Where(IsNaN(s), 0, s) in one dispatch, bit
for bit the four-dispatch result. The mask is bound after the input (inputs: input, mask); a
descriptor without it binds as DirectML's does.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, as_int_tuple, cdiv
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc, validate_desc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands, broadcast_view
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise, CompiledElementWiseInPlace, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .gelu_keys import compile_gelu_keys
from .onnx_types import float_input
from .softmax_geometry import fast_geometry, lanes_of
from .spec import OnnxOp, OperatorSpec
from .split_range import binding_window, fits, split_outer

# ACTIVATION_GELU's families in shaders/float_unary.comp (ops/contract reads this line); gelu_tab: the erfc
# coefficients from a table (DevicePolicy.gelu_table)
FLOAT_UNARY = ("gelu", "gelu_tab", "gelu_tanh")
GELU_APPROXIMATIONS = ("none", "tanh")


# ---- ACTIVATION_GELU, ACTIVATION_SOFTMAX1 from
# DML_ACTIVATION_GELU_OPERATOR_DESC's and DML_ACTIVATION_SOFTMAX1_OPERATOR_DESC's pages: both
# introduced at 5_1, one table each (1 to 8 dimensions, FLOAT32 and FLOAT16).
ACTIVATION_GELU = OperatorSupport("ACTIVATION_GELU", 157, (
    row(FL.FL_5_1, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), FLOATS)),))
ACTIVATION_SOFTMAX1 = OperatorSupport("ACTIVATION_SOFTMAX1", 158, (
    row(FL.FL_5_1, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), FLOATS)),))


@dataclass(frozen=True)
class ActivationGeluDesc:
    """DML_ACTIVATION_GELU_OPERATOR_DESC { InputTensor, OutputTensor }:
    f(x) = 0.5 * x * (1 + erf(x / sqrt(2))), element by element, computed in float32 (FLOAT16
    rounded once). Error bound: docs/gelu.md.

    kompute_dml's extension (not DirectML's): `approximate` "tanh" computes ONNX Gelu's tanh form
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) in the order torch.onnx.export writes it, each
    step rounded to the type: (x 0.5) (tanh((x + x^3 b) a) + 1), a and b rounded to the type, x^3 as
    (x x) x in FLOAT32 and as ELEMENT_WISE_POW(x, 3) in FLOAT16 (the ONNX backend's Pow by 3): the
    bits of those element-wise operators run one by one. `keys_output_tensor` (UINT32, packed
    (gelu_key_parts(n), 2); FLOAT32 input and output of one run of unit strides): per work group the
    order keys of its outputs' range with +0, DynamicQuantizeLinearDesc's input_keys_tensor."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    approximate: str = "none"
    keys_output_tensor: TensorDesc | None = None


@dataclass(frozen=True)
class ActivationSoftmax1Desc:
    """DML_ACTIVATION_SOFTMAX1_OPERATOR_DESC { InputTensor, OutputTensor, AxisCount, Axes }:
    f(x) = exp(x) / sum(exp(x)) over the elements of the dimensions in `axes` (AxisCount is
    len(axes)), computed as exp(x - max) / sum(exp(x - max)) in float32. Each axis in
    [0, DimensionCount); kompute_dml also refuses an empty or repeated axis list (the page says
    neither). Error bound and the rows of NaN / infinities: docs/softmax.md.

    kompute_dml's extension (not DirectML's): `mask_tensor` (the input's data type and dimension
    count, each size 1 or the input's) is added to the input first, each sum rounded to the data
    type as ELEMENT_WISE_ADD rounds it; `nan_to_zero` writes NaN results as +0. With either, at
    most 6 dimensions may remain after merging (UnsupportedError)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axes: tuple[int, ...] = ()
    mask_tensor: TensorDesc | None = None
    nan_to_zero: bool = False

    def __post_init__(self) -> None:
        axes = self.axes  # a list or an array made hashable; anything else is refused at compile
        if not isinstance(axes, tuple) and isinstance(axes, Iterable) and not isinstance(axes, (str, bytes)):
            with contextlib.suppress(TypeError):
                object.__setattr__(self, "axes", tuple(axes))


def _same(desc: Any) -> None:
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)


def compile_gelu(device: Device, desc: ActivationGeluDesc) -> CompiledOperator:
    support = ACTIVATION_GELU
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    _same(desc)
    x, y = desc.input_tensor, desc.output_tensor
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    if desc.approximate not in GELU_APPROXIMATIONS:
        raise invalid("approximate", f"must be one of {GELU_APPROXIMATIONS}, got {desc.approximate!r}")
    exact = "gelu_tab" if device.policy.gelu_table else "gelu"
    fn = "gelu_tanh" if desc.approximate == "tanh" else exact
    if desc.keys_output_tensor is not None:  # (ops/gelu_keys.py)
        return compile_gelu_keys(device, desc, fn, ACTIVATION_GELU)
    family = contract.FLOAT_UNARY[fn]
    t = type_code(x.data_type, True)
    plans = plan_elementwise(family, family.name(t=t, vec=""), (x, y), **device_limits(device),
                             vector=family.name(t=t, vec="_v"))
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


def softmax_axes(axes: object, dimension_count: int) -> tuple[int, ...]:
    """The validated axes (Axes of the page: each in [0, DimensionCount); not empty, no repeats)."""
    values = as_int_tuple(axes, "axes")
    if not values:
        raise invalid("axes", "must name at least one axis (AxisCount >= 1)")
    for i, a in enumerate(values):
        if not 0 <= a < dimension_count:
            raise invalid(f"axes[{i}]", f"must be in [0, {dimension_count - 1}] (input_tensor's DimensionCount "
                                        f"{dimension_count}), got {a}")
    if len(set(values)) != len(values):
        raise invalid("axes", f"must not repeat an axis, got {values}")
    return values


# A row of at most FAST_ELEMENTS (float16: twice as many) in one reduced dimension is read once,
# into registers (contract.SMX_FAST, its geometry by ops/softmax_geometry.py); longer or
# multi-dimensional rows are read three times (contract.SMX_GEN):
GEN_WIDE_ABOVE = 4096  # rows longer than this take 256 invocations (smx_gen g256), else 32


def _merged(sizes: Sequence[int], dims: Sequence[int], strides: Sequence[Sequence[int]],
            logical: bool = False) -> tuple[list[int], list[list[int]]]:
    """`dims` merged (layout.merge_dims) over every tensor's strides (the output's last) after
    ordering them by the output's stride, largest first: the order of a row's or of the rows'
    enumeration is free, and this one merges what is contiguous in all tensors whatever the
    dimension order, innermost last. With `logical`, in their own order (HARDMAX's first maximum
    is first in the row's logical order)."""
    order = sorted(dims) if logical else sorted(dims, key=lambda d: -strides[-1][d])
    m_sizes, m_strides = merge_dims([sizes[d] for d in order], *([st[d] for d in order] for st in strides))
    if m_sizes == [1]:
        return [], [[] for _ in strides]
    return m_sizes, m_strides


def plan_softmax(x: TensorDesc, y: TensorDesc, axes: Sequence[int], max_groups: int = 65535,
                 mask: TensorDesc | None = None, nan_to_zero: bool = False,
                 families: tuple[Any, Any] | None = None, logical: bool = False) -> list[DispatchPlan]:
    """One dispatch: the rows (coordinates of the dimensions outside `axes`) over the work groups.
    With the extension (a mask or nan_to_zero) the smx_ext families, whose push block holds 6
    merged dimensions (UnsupportedError beyond). `families`: another row function's (fast, general)
    families of SMX_PUSH (ops/activation_log_softmax.py); `logical`: the reduced dimensions merged
    in their order (_merged)."""
    n = x.dimension_count
    ext = mask is not None or nan_to_zero
    strides: list[Sequence[int]] = [x.effective_strides, y.effective_strides]
    if ext:  # the mask broadcasts where its size is 1; an absent one reads nothing
        mst = [0] * n if mask is None else [st if sz != 1 else 0 for sz, st in zip(mask.sizes, mask.effective_strides)]
        strides.insert(1, mst)
    red = sorted(set(axes))
    o_sizes, o_st = _merged(x.sizes, [d for d in range(n) if d not in red], strides)
    r_sizes, r_st = _merged(x.sizes, red, strides, logical)
    if not r_sizes:
        r_sizes, r_st = [1], [[0] for _ in strides]
    dims = contract.SMX_EXT_DIMS if ext else 8
    if len(o_sizes) + len(r_sizes) > dims:
        field = "mask_tensor" if mask is not None else "nan_to_zero"
        raise UnsupportedError(f"{field}: ACTIVATION_SOFTMAX1 with kompute_dml's mask / nan_to_zero extension takes "
                               f"at most {dims} dimensions after merging, these tensors leave "
                               f"{len(o_sizes) + len(r_sizes)}")
    nouter = dims - len(r_sizes)
    pad = nouter - len(o_sizes)
    rows, length = math.prod(o_sizes), math.prod(r_sizes)
    t = type_code(x.data_type, True)
    fast_family, gen_family = (contract.SMX_EXT_FAST, contract.SMX_EXT_GEN) if ext else (
        families or (contract.SMX_FAST, contract.SMX_GEN))
    row_geometry = fast_geometry(length, x.data_type.size) if len(r_sizes) == 1 else None
    if row_geometry is not None:
        lanes, family = lanes_of(row_geometry), fast_family
        variant = family.name(t=t, g=row_geometry)
    else:
        lanes = 256 if length > GEN_WIDE_ABOVE else 32
        family, variant = gen_family, gen_family.name(t=t, lanes=lanes)
    geometry = {f"{c}_str": [0] * pad + o + r for c, o, r in zip("xmy" if ext else "xy", o_st, r_st)}
    size = x.data_type.size
    common = dict(x_off=0, y_off=0, rows=rows, len=length, nouter=nouter, size=[1] * pad + o_sizes + r_sizes)
    if ext:
        push = family.pack(**common, m_off=0, flags=(1 if mask is not None else 0) | (2 if nan_to_zero else 0),
                           **geometry)
        # binding list: input, mask, output (the mask's entry only where it is present)
        out_entry = 2 if mask is not None else 1
        bindings: tuple[int | None, ...] = (0, out_entry, 1 if mask is not None else None)
        slots = family.slots(x_off=(0, size), y_off=(out_entry, size),
                             **({"m_off": (1, size)} if mask is not None else {}))
    else:
        push = family.pack(**common, **geometry)
        out_entry, bindings = 1, (0, 1)
        slots = family.slots(x_off=(0, size), y_off=(1, size))
    groups = grid_for(cdiv(rows, 256 // lanes) * 256, 256, max_groups)
    return [DispatchPlan(variant=variant, bindings=bindings, push=push, groups=groups, writes=(out_entry,),
                         offset_slots=slots)]


def _nan_flag(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and int(value) in (0, 1)):
        return bool(value)
    raise invalid("nan_to_zero", f"must be a bool (True / False, 1 / 0), got {type(value).__name__} {value!r}")


def _check_mask(support: OperatorSupport, level: Any, x: TensorDesc, mask: TensorDesc) -> None:
    """The extension's mask: a valid buffer tensor the input's table row takes, of the input's
    data type and dimension count, each size 1 (broadcast) or the input's."""
    validate_desc(mask, "mask_tensor")
    support.check_tensor(level, "input_tensor", mask, name="mask_tensor")
    if mask.data_type != x.data_type:
        raise invalid("mask_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), got "
                                               f"{mask.data_type.name}")
    if mask.dimension_count != x.dimension_count:
        raise invalid("mask_tensor.sizes", f"dimension count must equal input_tensor's ({x.dimension_count}), got "
                                           f"{mask.dimension_count}")
    bad = [d for d in range(x.dimension_count) if mask.sizes[d] not in (1, x.sizes[d])]
    if bad:
        raise invalid("mask_tensor.sizes", f"each size must be 1 or input_tensor's {x.sizes} (broadcast), got "
                                           f"{mask.sizes} (dimension {bad[0]})")


def plan_rows(device: Device, x: TensorDesc, y: TensorDesc, axes: Sequence[int], mask: TensorDesc | None = None,
              nan_to_zero: bool = False, families: tuple[Any, Any] | None = None, logical: bool = False) -> list[Any]:
    """plan_softmax's dispatch, or one per part of the rows along the outer dimensions where a
    tensor is beyond one binding (ops/split_range.py)."""
    max_groups = device.limits["max_compute_work_group_count"][0]
    descs = [t for t in (x, mask, y) if t is not None]
    window = binding_window(device.limits)
    if fits(descs, window):
        return plan_softmax(x, y, axes, max_groups, mask, nan_to_zero, families, logical)
    outer = [d for d in range(x.dimension_count) if d not in axes]
    levels = [[d, *([d if mask.sizes[d] != 1 else None] if mask is not None else []), d] for d in outer]
    return list(split_outer(descs, levels, window, lambda parts: plan_softmax(
        parts[0], parts[-1], axes, max_groups, parts[1] if mask is not None else None, nan_to_zero, families, logical)))


def compile_softmax1(device: Device, desc: ActivationSoftmax1Desc) -> CompiledOperator:
    support = ACTIVATION_SOFTMAX1
    level = device.feature_level
    validate_tensors(support, level, desc, support.fields, support.outputs)
    mask = desc.mask_tensor
    if mask is not None:
        _check_mask(support, level, desc.input_tensor, mask)
    nan_to_zero = _nan_flag(desc.nan_to_zero)
    _same(desc)
    x, y = desc.input_tensor, desc.output_tensor
    axes = softmax_axes(desc.axes, x.dimension_count)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    inputs = support.inputs + (("mask_tensor",) if mask is not None else ())
    check_addressable(inputs + support.outputs, [t for t in (x, mask, y) if t is not None])
    plans = plan_rows(device, x, y, axes, mask, nan_to_zero)
    if mask is None and not nan_to_zero:  # DirectML's operator: its page does not allow aliasing
        return CompiledOperator(device, desc, support, inputs, support.outputs, list(plans))
    # kompute_dml's extension may run exactly in place (the output over the input, same offset and
    # layout: attention scores need no second buffer): a row's invocations finish reading it (max,
    # sum) before any writes, then each reads and writes only its own elements (softmax.comp)
    return CompiledElementWiseInPlace(device, desc, support, inputs, support.outputs, list(plans))


# ---- functional helpers (exported as kdml.<name>) ----------------------------------------
# The functional helpers of ACTIVATION_SOFTMAX1 and ACTIVATION_GELU (ops/activation.py,
# docs/softmax.md, docs/gelu.md).
#
# Each takes a kompute_dml Tensor or anything kompute_dml/core/inputs.py takes (numpy arrays, CPU
# `__array__` / `__dlpack__` objects) of FLOAT32 or FLOAT16 (other types are refused by the
# operator's table: no silent conversion) and returns a new packed Tensor of x's shape and type
# from the device's buffer pool, or writes `out=` (a Tensor of that shape and type, any strides).
# x may have any strides (stride 0 included).
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


def gelu(x: Any, *, approximate: str = "none", out: Tensor | None = None, keys_out: Tensor | None = None,
         device: Device | None = None) -> Tensor:
    """x * 0.5 * (1 + erf(x / sqrt 2)) (DML_ACTIVATION_GELU, the exact erf form; com.microsoft
    Gelu), computed in float32 within the bound of docs/gelu.md; approximate="tanh": ONNX Gelu's
    tanh form, rounded as its exported element-wise chain (ActivationGeluDesc). `keys_out`: a packed
    UINT32 Tensor of sizes (gelu_key_parts(x's elements), 2) for the keys_output_tensor extension
    (kdml.dynamic_quantize_linear's `keys`)."""
    if keys_out is None:
        return _unary(ActivationGeluDesc, x, out, device, approximate=approximate)
    if not isinstance(keys_out, Tensor):
        raise invalid("keys_out", f"must be a kompute_dml Tensor, got {type(keys_out).__name__}")
    dev, (t,) = _operands((x,), ("x",), device)
    if out is not None:
        check_out(out, dev, t.desc.sizes, t.desc.data_type)
    y = out if out is not None else pooled_empty(dev, _packed(t.desc.data_type, t.desc.sizes))
    op = compile_cached(dev, ActivationGeluDesc(t.desc, y.desc, approximate, keys_out.desc))
    op.execute([t], [y, keys_out])
    return y


# ---- specs (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (
    OperatorSpec(ActivationGeluDesc, ACTIVATION_GELU, compile_gelu,
                 (contract.FLOAT_UNARY["gelu"], contract.FLOAT_UNARY["gelu_tab"], contract.FLOAT_UNARY["gelu_tanh"],
                  contract.elementwise.GELU_KEYS),
                 helpers=("gelu",),
                 onnx=(OnnxOp("Gelu", "com.microsoft", "gelu", check=float_input), OnnxOp("Gelu", "", "gelu", check=float_input),
                       OnnxOp("BiasGelu", "com.microsoft", "gelu", check=float_input),
                       # GELU's tanh form, on element-wise operators (onnx_backend/handlers_transformer.py)
                       OnnxOp("FastGelu", "com.microsoft", "gelu", check=float_input))),
    OperatorSpec(ActivationSoftmax1Desc, ACTIVATION_SOFTMAX1, compile_softmax1,
                 (contract.SMX_FAST, contract.SMX_GEN, contract.SMX_EXT_FAST, contract.SMX_EXT_GEN),
                 helpers=("softmax",), onnx=(OnnxOp("Softmax", "", "softmax", check=float_input),)),
)
