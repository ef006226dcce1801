"""DirectML's SLICE, SLICE1's first version (DML_SLICE_OPERATOR_DESC, DML_OPERATOR_TYPE 60, from
feature level 1_0): OutputTensor[c] = InputTensor[Offsets + Strides * c], data movement, exact
(elements copied as bit patterns; 64-bit types as word pairs).

Offsets, Sizes and Strides are UINT arrays (no negative stride: SLICE1 brought those). The slice is
the same strided copy as SLICE1's, planned by ops/identity.plan_region_copy on COPY's shaders (or a
transfer copy), with no shader of its own; kdml.slice1 / kdml.onnx_slice (ops/join.py) remain the
helpers.

Tensor support as the page gives it: 4 to 5 dimensions from 1_0 (FLOAT32, FLOAT16, INT32, INT16,
UINT32, UINT16), INT8 / UINT8 from 2_1, 1 to 8 dimensions from 3_0, the 64-bit types and FLOAT64 from
4_1. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the table (InvalidArgumentError /
UnsupportedError naming the field), the page's rules (InvalidArgumentError whose message starts with
the field): the same DataType and DimensionCount, DimensionCount values in each array, each value a
UINT ([0, 2^32)), Sizes equal to the output's sizes, every copied element inside the input
(Offsets[i] + (Sizes[i] - 1) * Strides[i] < the input's size); then a non-overlapping output and
32-bit element addressing. The page is silent on a stride of 0 (a UINT allows it; the formula would
repeat one element): kompute_dml refuses it (`strides[i] must be >= 1`), as SLICE1 does, since
DirectML's later versions describe the same slice as a window that a stride of 0 leaves undefined.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int_tuple
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from .base import CompiledOperator, validate_tensors
from .identity import _COPY_SHADERS
from .join import compile_window
from .spec import OperatorSpec

_MOVE_1_0 = FLOATS | frozenset({D.INT32, D.INT16, D.UINT32, D.UINT16})
_MOVE_2_1 = FLOATS | INTS_8_32
_MOVE_4_1 = _MOVE_2_1 | INTS_64 | frozenset({D.FLOAT64})
SLICE = OperatorSupport("SLICE", 60, tuple(
    row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_1_0, (4, 5), _MOVE_1_0), (FL.FL_2_1, (4, 5), _MOVE_2_1),
                               (FL.FL_3_0, (1, 8), _MOVE_2_1), (FL.FL_4_1, (1, 8), _MOVE_4_1))))
_UINT_MAX = (1 << 32) - 1


@dataclass(frozen=True)
class SliceDesc:
    """DML_SLICE_OPERATOR_DESC { InputTensor, OutputTensor, DimensionCount, Offsets, Sizes, Strides }
    (DimensionCount = the length of the three tuples, the tensors' DimensionCount):
    output[c] = input[offsets + strides * c]; sizes are the output's sizes; every copied element lies
    inside the input; strides >= 1 (kompute_dml's reading of a UINT stride of 0, refused)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


def slice_window(desc: SliceDesc) -> tuple[int, tuple[int, ...]]:
    """Validate the page's rules; (input element index of output[0, ..., 0], input element stride of
    each output dimension)."""
    x, y = desc.input_tensor, desc.output_tensor
    n = x.dimension_count
    if y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), got {y.data_type.name}")
    if y.dimension_count != n:
        raise invalid("output_tensor.sizes", f"dimension count must equal input_tensor's ({n}), got {y.dimension_count}")
    arrays = {}
    for name in ("offsets", "sizes", "strides"):
        v = as_int_tuple(getattr(desc, name), name)
        if len(v) != n:
            raise invalid(name, f"must hold DimensionCount = {n} values (the tensors'), got {len(v)}")
        for i, e in enumerate(v):
            if not 0 <= e <= _UINT_MAX:
                raise invalid(f"{name}[{i}]", f"must be a UINT in [0, 2^32), got {e}")
        arrays[name] = v
    offsets, sizes, strides = arrays["offsets"], arrays["sizes"], arrays["strides"]
    if sizes != y.sizes:
        raise invalid("sizes", f"must equal output_tensor's sizes {y.sizes} (the page's rule), got {sizes}")
    xs = x.effective_strides
    for i in range(n):
        if strides[i] < 1:
            raise invalid(f"strides[{i}]", "must be >= 1 (a stride of 0 is refused: the page defines none)")
        last = offsets[i] + (sizes[i] - 1) * strides[i]
        if last >= x.sizes[i]:
            raise invalid(f"offsets[{i}]", f"+ (sizes[{i}] - 1) * strides[{i}] must be < input_tensor.sizes[{i}] "
                          f"({x.sizes[i]}: no read outside the input), got {offsets[i]} + {sizes[i] - 1} * {strides[i]}")
    start = sum(o * s for o, s in zip(offsets, xs))
    return start, tuple(st * s for st, s in zip(strides, xs))


def compile_slice(device: Device, desc: SliceDesc) -> CompiledOperator:
    validate_tensors(SLICE, device.feature_level, desc, SLICE.fields, SLICE.outputs)
    return compile_window(device, desc, SLICE, *slice_window(desc))


_X = TensorDesc(DataType.FLOAT32, (1, 1, 4, 4))
SPECS = (OperatorSpec(SliceDesc, SLICE, compile_slice, _COPY_SHADERS,
                      example=lambda: SliceDesc(_X, TensorDesc(DataType.FLOAT32, (1, 1, 2, 2)), (0, 0, 1, 0),
                                                (1, 1, 2, 2), (1, 1, 2, 3))),)
