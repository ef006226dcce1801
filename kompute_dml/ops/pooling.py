"""DirectML's MAX_POOLING2 (DML_MAX_POOLING2_OPERATOR_DESC), AVERAGE_POOLING
(DML_AVERAGE_POOLING_OPERATOR_DESC) and LP_POOLING (DML_LP_POOLING_OPERATOR_DESC), and their other
versions on the same code: MAX_POOLING (no indices, no dilations), MAX_POOLING1 (no dilations),
AVERAGE_POOLING1 and LP_POOLING1 (+ Dilations, 6_2): the maximum, the mean or the Lp norm
((sum |x|^P)^(1 / P), padding contributing nothing) of each window of the input's spatial axes (N, C, [D,] H, W), with strides,
zero-size padding at the start and end of each axis (padding elements never win a maximum; AVERAGE
counts them in its divisor only where IncludePadding is set), dilations (MAX_POOLING2,
AVERAGE_POOLING1), and MAX's optional UINT32 indices output (the flat row-major index of the
selected element in the input's logical shape). ONNX MaxPool, AveragePool, GlobalMaxPool and
GlobalAveragePool, LpPool and GlobalLpPool run on them (onnx_backend/handlers_pool.py), MaxPool's
Indices (either storage_order) widened there to int64. Helpers kdml.max_pool / avg_pool / lp_pool in
functional/pooling.py (1-D inputs too).

shaders/pooling.comp: one invocation per output element; for large windows over few outputs
(choose_pool_kernel: global pooling at small batches) one work group of 256 per output element,
partial results combined by a shared-memory tree (MAX by the sequential rule: the same element and
index; AVERAGE within (ceil(n / 256) + 12) u S / count);
FLOAT16 outputs whose rows pack whole words: two outputs per invocation, one plain store.
MAX: exact; the first largest element of the window in row-major order (later equal values are
ignored, as the page says); a NaN counts as the largest (the first NaN wins, as numpy's `max`
propagates NaN); a window wholly in the padding gives -inf (index 0). AVERAGE: a float32 sum in window order, then one division by the
count: |error| <= (n + 2) u S / count with S = sum |x| (u = 2^-24; the division as the device's
float32 division, which Vulkan allows 2.5 ulp: tests/test_pooling.py enforces (n + 4) u);
FLOAT16 decoded exactly and rounded once more. A window with no element and IncludePadding unset
gives NaN (0 / 0).

Tensor support as the pages' tables give it: MAX_POOLING2 from 2_1 and AVERAGE_POOLING from 1_0,
4 or 5 dimensions, FLOAT32 and FLOAT16, MAX_POOLING2 also INT8 / UINT8 from 3_0 (bytes through
float32, exact; a window wholly in the padding gives the type's lowest value); indices UINT32;
AVERAGE_POOLING1 from 6_2; LP_POOLING from 1_0, LP_POOLING1 from 6_2, FLOAT32 and FLOAT16, P >= 1
(LP: |x|^P by P - 1 float32 products, a float32 sum in window order, the root as shaders/pooling.comp
says; relative error <= ((n + P) / P + 2 |ln y| + 4) u, docs/pooling.md). Validation, in order: the tables, the pages' constraints
(InvalidArgumentError whose message starts with the field: arrays of DimensionCount values,
strides, window sizes and dilations >= 1, output sizes by the pages' formula with the dilated
window), non-overlapping outputs, 32-bit element addressing.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spatial import output_sizes, spatial_array, strides5, three
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_U32 = frozenset({DataType.UINT32})
_Q8 = frozenset({DataType.INT8, DataType.UINT8})


def _max_row(level: FL, types: frozenset[DataType]) -> Any:
    return row(level, ("input_tensor", "input", (4, 5), types), ("output_tensor", "output", (4, 5), types),
               ("output_indices_tensor", "optional output", (4, 5), _U32))


MAX_POOLING = OperatorSupport("MAX_POOLING", 58, (
    row(FL.FL_1_0, ("input_tensor", "input", (4, 5), FLOATS), ("output_tensor", "output", (4, 5), FLOATS)),))
MAX_POOLING1 = OperatorSupport("MAX_POOLING1", 91, (_max_row(FL.FL_2_0, FLOATS),))
MAX_POOLING2 = OperatorSupport("MAX_POOLING2", 110, (_max_row(FL.FL_2_1, FLOATS), _max_row(FL.FL_3_0, FLOATS | _Q8)))
AVERAGE_POOLING = OperatorSupport("AVERAGE_POOLING", 56, (
    row(FL.FL_1_0, ("input_tensor", "input", (4, 5), FLOATS), ("output_tensor", "output", (4, 5), FLOATS)),))
# DML_OPERATOR_AVERAGE_POOLING1's numeric value is not in the pages kompute_dml read: None
AVERAGE_POOLING1 = OperatorSupport("AVERAGE_POOLING1", None, (
    row(FL.FL_6_2, ("input_tensor", "input", (4, 5), FLOATS), ("output_tensor", "output", (4, 5), FLOATS)),))
LP_POOLING = OperatorSupport("LP_POOLING", 57, (
    row(FL.FL_1_0, ("input_tensor", "input", (4, 5), FLOATS), ("output_tensor", "output", (4, 5), FLOATS)),))
LP_POOLING1 = OperatorSupport("LP_POOLING1", None, (
    row(FL.FL_6_2, ("input_tensor", "input", (4, 5), FLOATS), ("output_tensor", "output", (4, 5), FLOATS)),))


@dataclass(frozen=True)
class MaxPooling2Desc:
    """DML_MAX_POOLING2_OPERATOR_DESC { InputTensor, OutputTensor, OutputIndicesTensor,
    DimensionCount, Strides, WindowSize, StartPadding, EndPadding, Dilations }: DimensionCount is
    the input's dimension count - 2; empty arrays mean strides / dilations of 1 and no padding."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    output_indices_tensor: TensorDesc | None
    window_size: tuple[int, ...]
    strides: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()


@dataclass(frozen=True)
class MaxPoolingDesc:
    """DML_MAX_POOLING_OPERATOR_DESC: MAX_POOLING2 without indices and dilations (1_0)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    window_size: tuple[int, ...]
    strides: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()


@dataclass(frozen=True)
class MaxPooling1Desc:
    """DML_MAX_POOLING1_OPERATOR_DESC: MAX_POOLING2 without dilations (2_0)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    output_indices_tensor: TensorDesc | None
    window_size: tuple[int, ...]
    strides: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()


@dataclass(frozen=True)
class AveragePooling1Desc:
    """DML_AVERAGE_POOLING1_OPERATOR_DESC: AVERAGE_POOLING plus Dilations (6_2)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    window_size: tuple[int, ...]
    strides: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    include_padding: bool = False


@dataclass(frozen=True)
class AveragePoolingDesc:
    """DML_AVERAGE_POOLING_OPERATOR_DESC { InputTensor, OutputTensor, DimensionCount, Strides,
    WindowSize, StartPadding, EndPadding, IncludePadding }."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    window_size: tuple[int, ...]
    strides: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()
    include_padding: bool = False


@dataclass(frozen=True)
class LpPoolingDesc:
    """DML_LP_POOLING_OPERATOR_DESC { InputTensor, OutputTensor, DimensionCount, Strides,
    WindowSize, StartPadding, EndPadding, P }: (sum of |x|^P over the window)^(1 / P), P >= 1."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    window_size: tuple[int, ...]
    strides: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()
    p: int = 2


@dataclass(frozen=True)
class LpPooling1Desc:
    """DML_LP_POOLING1_OPERATOR_DESC: LP_POOLING plus Dilations (6_2)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    window_size: tuple[int, ...]
    strides: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    p: int = 2


POOL_KERNEL_ENV = "KDML_POOL_KERNEL"  # "thread", "group" or "team" forces one (tests, benchmarks)
# The work-group kernel where a window has at least GROUP_MIN_TAPS taps and there are at most
# GROUP_OUTPUTS_PER_TAP outputs per tap: with few outputs the one-invocation kernel's serial window
# sets the time, with many the work-group kernel's 256 invocations per output do. H100,
# `python -m benchmarks.bench_small_layers` (global average pools, us, thread / group):
# 1x96x14x14 16.2 / 5.9, 1x576x7x7 9.7 / 6.4, 1x16x56x56 141.6 / 8.4, 8x240x14x14 17.7 / 9.9,
# 8x576x7x7 10.0 / 15.2, 8x2048x7x7 9.9 / 40.7.
GROUP_MIN_TAPS = 32
GROUP_OUTPUTS_PER_TAP = 24
# On GPUs the team kernel (contract.POOL_TEAM invocations per output; MAX_POOLING2 / AVERAGE_POOLING's
# FLOAT32 / FLOAT16 only) takes windows of GROUP_MIN_TAPS to TEAM_TAPS[1] taps over TEAM_OUTPUTS outputs,
# windows past TEAM_TAPS[0] taps only from TEAM_TAPS[0] outputs. H200, device call 319 (`python -m
# benchmarks.bench_small_layers --pools --rounds 3`, global average pools, us, thread / group / team):
# 1x96x14x14 16.0 / 5.2 / 4.7, 1x576x7x7 9.0 / 5.9 / 4.5, 8x240x14x14 16.8 / 10.7 / 4.9, 8x672x14x14
# 17.7 / 22.9 / 7.5, 8x1152x7x7 10.0 / 30.6 / 9.1, 8x144x56x56 423.6 / 9.0 / 8.1; but 1x96x56x56 199.5 / 5.4 /
# 6.9, 8x32x112x112 1655 / 8.4 / 16.2 (the group kernel), 8x2048x7x7 9.5 / 47.5 / 11.2, 32x2048x7x7 11.2 / 180.6
# / 33.9 (one output per invocation). EfficientNet-B0 at 8 x 224: its pools 187 -> 149 us with the team kernel
# where the group kernel's rule left the one-invocation kernel (`encoder_profile`, calls 316 / 319).
TEAM_ON_GPUS = True
TEAM_TAPS = (1024, 4096)
TEAM_OUTPUTS = (64, 12288)


def choose_pool_kernel(taps: int, outputs: int, team: bool = False, gpu: bool = False) -> str:
    """The kernel of a pooling of `taps`-element windows and `outputs` outputs: "" (an output per
    invocation), "_group" (per work group) or, where `team` allows it (the variant exists) and on GPUs,
    "_team" (per team of contract.POOL_TEAM invocations); KDML_POOL_KERNEL forces one ("team" where the
    variant does not exist: "_group")."""
    forced = os.environ.get(POOL_KERNEL_ENV, "auto")
    kinds = {"thread": "", "group": "_group", "team": "_team" if team else "_group"}
    if forced != "auto" and forced not in kinds:
        raise ValueError(f"{POOL_KERNEL_ENV}={forced!r}: auto, thread, group or team")
    if forced != "auto":
        return kinds[forced]
    if taps < GROUP_MIN_TAPS:
        return ""
    if (team and gpu and TEAM_ON_GPUS and taps <= TEAM_TAPS[1] and TEAM_OUTPUTS[0] <= outputs <= TEAM_OUTPUTS[1]
            and (taps <= TEAM_TAPS[0] or outputs >= TEAM_TAPS[0])):
        return "_team"
    return "_group" if outputs <= GROUP_OUTPUTS_PER_TAP * taps else ""


def global_run(x: TensorDesc, window: tuple[int, ...], dil: tuple[int, ...], start: tuple[int, ...]) -> int | None:
    """The element stride of a global window's taps where they address as one dimension (the window
    is the input's spatial extent from its origin, undilated, and the spatial strides merge): the
    work-group kernel then loads them at tap x stride, several at a time; else None."""
    if tuple(window) != tuple(x.sizes[2:]) or any(d != 1 for d in dil) or any(start):
        return None
    merged, (st,) = merge_dims(x.sizes[2:], x.effective_strides[2:])
    return st[0] if len(merged) == 1 else None


def writes_words(y: TensorDesc) -> bool:
    """FLOAT16 outputs whose words each hold two adjacent outputs of a row (the last dimension of
    even size and stride 1, every other stride even; offsets are multiples of 16 bytes): the
    one-invocation kernel computes both and stores the word (no atomics)."""
    s = y.effective_strides
    return (y.data_type == DataType.FLOAT16 and y.sizes[-1] % 2 == 0 and s[-1] == 1
            and all(st % 2 == 0 for n, st in zip(y.sizes[:-1], s[:-1]) if n > 1))


def _compile(device: Device, desc: Any, support: OperatorSupport, is_max: bool) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    lp = hasattr(desc, "p")
    power = as_int(desc.p, "p") if lp else 0
    if lp and power < 1:
        raise invalid("p", f"must be >= 1, got {power}")
    x, y = desc.input_tensor, desc.output_tensor
    ind = getattr(desc, "output_indices_tensor", None)
    n = x.dimension_count - 2
    if y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), got {y.data_type.name}")
    for name, t in (("output_tensor", y), ("output_indices_tensor", ind)):
        if t is not None and t.dimension_count != x.dimension_count:
            raise invalid(f"{name}.sizes", f"dimension count must equal input_tensor's ({x.dimension_count})")
    window = spatial_array(desc, "window_size", n, -1, 1)
    strides = spatial_array(desc, "strides", n, 1, 1)
    start = spatial_array(desc, "start_padding", n, 0, 0)
    end = spatial_array(desc, "end_padding", n, 0, 0)
    dil = spatial_array(desc, "dilations", n, 1, 1) if hasattr(desc, "dilations") else (1,) * n
    spatial = output_sizes(x.sizes[2:], window, strides, dil, start, end)
    want = (*x.sizes[:2], *spatial)
    if any(s < 1 for s in spatial) or y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (the pages' formula with the dilated window), got {y.sizes}")
    if ind is not None and ind.sizes != want:
        raise invalid("output_indices_tensor.sizes", f"must equal output_tensor's {want}, got {ind.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    if ind is not None:
        check_no_overlap(ind.sizes, ind.effective_strides, "output_indices_tensor")
    fields = tuple(f for f, t in zip(support.fields, (x, y, ind)) if t is not None)
    check_addressable(fields, tuple(t for t in (x, y, ind) if t is not None))
    out3 = three(spatial, 1)
    total = y.element_count
    q8 = {DataType.INT8: "i8", DataType.UINT8: "u8"}.get(x.data_type)
    k = choose_pool_kernel(math.prod(window), total, team=not (q8 or lp), gpu=device.policy.name != "cpu")
    pairs = not k and writes_words(y)
    run = global_run(x, window, dil, start) if k else None
    flags = ((1 if getattr(desc, "include_padding", False) else 0) | (2 if ind is not None else 0) | (4 if pairs else 0)
             | (8 if run is not None else 0))
    words = np.array([x.sizes[1], *three(x.sizes[2:], 1), *out3, *three(window, 1), *three(strides, 1),
                      *three(dil, 1), *three(start, 0), *strides5(x), *strides5(y), *strides5(ind), flags,
                      total, math.prod(out3), out3[1] * out3[2], power, run or 0], dtype=np.uint32)
    fam = contract.POOL_Q8 if q8 else contract.POOL_LP if lp else contract.POOL
    unit = x.data_type.size
    const = len(support.fields)  # the constant's binding-list index
    plan = DispatchPlan(
        variant=fam.name(t=q8 or ("f16" if x.data_type == DataType.FLOAT16 else "f32"), k=k,
                         **({} if q8 or lp else {"fn": "max" if is_max else "avg"})),
        bindings=(0, 1, 2 if ind is not None else None, const), push=fam.pack(x_off=0, y_off=0, i_off=0),
        groups=grid_for(total * {"_group": 256, "_team": contract.POOL_TEAM}.get(k, 1) // (2 if pairs else 1), 256,
                        device.limits["max_compute_work_group_count"][0]),
        writes=(1, 2) if ind is not None else (1,),
        offset_slots=fam.slots(x_off=(0, unit), y_off=(1, unit),
                               **({"i_off": (2, 4)} if "output_indices_tensor" in support.fields else {})))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan],
                            constants=[device.tensor(words)])


def compile_max_pooling2(device: Device, desc: MaxPooling2Desc) -> CompiledOperator:
    return _compile(device, desc, MAX_POOLING2, True)


def compile_average_pooling(device: Device, desc: AveragePoolingDesc) -> CompiledOperator:
    return _compile(device, desc, AVERAGE_POOLING, False)


def compile_max_pooling(device: Device, desc: MaxPoolingDesc) -> CompiledOperator:
    return _compile(device, desc, MAX_POOLING, True)


def compile_max_pooling1(device: Device, desc: MaxPooling1Desc) -> CompiledOperator:
    return _compile(device, desc, MAX_POOLING1, True)


def compile_average_pooling1(device: Device, desc: AveragePooling1Desc) -> CompiledOperator:
    return _compile(device, desc, AVERAGE_POOLING1, False)


def compile_lp_pooling(device: Device, desc: LpPoolingDesc) -> CompiledOperator:
    return _compile(device, desc, LP_POOLING, False)


def compile_lp_pooling1(device: Device, desc: LpPooling1Desc) -> CompiledOperator:
    return _compile(device, desc, LP_POOLING1, False)


_MAX_NUMPY = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.int8, np.uint8))


def _max_pool_rule(t: Any) -> str:
    """MaxPool's input a type MAX_POOLING2 takes; its Indices output from MAX_POOLING2's flat
    row-major index, reordered for storage_order = 1 and widened to int64 by the backend
    (onnx_backend/handlers_pool.py)."""
    dt = t.elem(0) if t.inputs else None
    if dt is not None and dt not in _MAX_NUMPY:
        return f"type {dt} is not float32/float16/int8/uint8"
    return ""


_F = TensorDesc(DataType.FLOAT32, (1, 2, 5, 5))
_G = TensorDesc(DataType.FLOAT32, (1, 2, 2, 2))
SPECS = (
    OperatorSpec(MaxPooling2Desc, MAX_POOLING2, compile_max_pooling2, (contract.POOL, contract.POOL_Q8),
                 helpers=("max_pool",), onnx=(OnnxOp("MaxPool", "", "max_pool", check=_max_pool_rule),
                                              OnnxOp("GlobalMaxPool", "", "max_pool", check=_max_pool_rule)),
                 example=lambda: MaxPooling2Desc(_F, _G, TensorDesc(DataType.UINT32, (1, 2, 2, 2)), (3, 3), (2, 2))),
    OperatorSpec(AveragePoolingDesc, AVERAGE_POOLING, compile_average_pooling, (contract.POOL,), helpers=("avg_pool",),
                 onnx=(OnnxOp("AveragePool", "", "avg_pool", check=float_input),
                       OnnxOp("GlobalAveragePool", "", "avg_pool", check=float_input)),
                 example=lambda: AveragePoolingDesc(_F, _G, (3, 3), (2, 2))),
    OperatorSpec(MaxPoolingDesc, MAX_POOLING, compile_max_pooling, (contract.POOL,),
                 example=lambda: MaxPoolingDesc(_F, _G, (3, 3), (2, 2))),
    OperatorSpec(MaxPooling1Desc, MAX_POOLING1, compile_max_pooling1, (contract.POOL,),
                 example=lambda: MaxPooling1Desc(_F, _G, TensorDesc(DataType.UINT32, (1, 2, 2, 2)), (3, 3), (2, 2))),
    OperatorSpec(AveragePooling1Desc, AVERAGE_POOLING1, compile_average_pooling1, (contract.POOL,),
                 example=lambda: AveragePooling1Desc(_F, _G, (3, 3), (2, 2), (), (), (1, 1), True)),
    OperatorSpec(LpPoolingDesc, LP_POOLING, compile_lp_pooling, (contract.POOL_LP,), helpers=("lp_pool",),
                 onnx=(OnnxOp("LpPool", "", "lp_pool", check=float_input),
                       OnnxOp("GlobalLpPool", "", "lp_pool", check=float_input)),
                 example=lambda: LpPoolingDesc(_F, _G, (3, 3), (2, 2), p=3)),
    OperatorSpec(LpPooling1Desc, LP_POOLING1, compile_lp_pooling1, (contract.POOL_LP,),
                 example=lambda: LpPooling1Desc(_F, _G, (3, 3), (2, 2), (), (), (1, 1), 1)),
)
