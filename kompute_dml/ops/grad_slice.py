"""DirectML's SLICE_GRAD (DML_SLICE_GRAD_OPERATOR_DESC, 3_0): the backward pass of SLICE1
(ops/join.py): OutputGradientTensor (the forward input's shape) is 0 except the slice's elements,
which receive InputGradientTensor's (the forward output's shape): OutputGradient[start + c x steps]
= InputGradient[c], with SLICE1's window (start[i] = InputWindowOffsets[i], + InputWindowSizes[i] - 1
where the stride is negative: negative strides flip the window along that axis).

Two plans on existing shaders, no shader of its own: FILL_VALUE_CONSTANT's fill of zero bits over the
output (ops/fill.py's plan), then a strided copy of the gradient into the window
(ops/identity.plan_region_copy, SLICE1's and JOIN's copy: a transfer copy or the COPY shaders). A
negative window stride is taken by reading the gradient backwards along that axis (the copy takes
negative source strides only). Bit patterns are moved: exact for every type, NaN payloads kept. The
window's elements are distinct (strides are non-zero), so no element is written twice by the copy.

The page: "this operator requires non-zero strides" (InvalidArgumentError naming
input_window_strides); DimensionCount equals both tensors'; the same DataType and DimensionCount.
It calls InputGradientTensor's sizes "typically" the forward output's; kompute_dml takes SLICE1's rule
for its output: 1 <= sizes[i] <= 1 + (InputWindowSizes[i] - 1) / |InputWindowStrides[i]| (a shorter
gradient fills the window's first elements), and the window within OutputGradientTensor
(offsets[i] + sizes[i] <= its sizes[i], sizes[i] >= 1). Table: 1 to 8 dimensions, FLOAT32, FLOAT16 and
the 8- to 32-bit integers. Validation, in order: the table (InvalidArgumentError / UnsupportedError
naming the field), the constraints and the window, a non-overlapping output, 32-bit element addressing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int_tuple
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import run_into
from ..functional.elementwise import _operands
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .fill import plan_fill
from .identity import _COPY_SHADERS, plan_region_copy
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_TYPES = FLOATS | INTS_8_32
SLICE_GRAD = OperatorSupport("SLICE_GRAD", 135, (
    row(FL.FL_3_0, ("input_gradient_tensor", "input", (1, 8), _TYPES), ("output_gradient_tensor", "output", (1, 8), _TYPES)),))


@dataclass(frozen=True)
class SliceGradDesc:
    """DML_SLICE_GRAD_OPERATOR_DESC { InputGradientTensor, OutputGradientTensor, DimensionCount,
    InputWindowOffsets, InputWindowSizes, InputWindowStrides }: DimensionCount is the arrays' length."""

    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    input_window_offsets: tuple[int, ...]
    input_window_sizes: tuple[int, ...]
    input_window_strides: tuple[int, ...]


def window(desc: SliceGradDesc) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """Validate; (gradient start, output start, gradient strides, output strides) in elements, every
    output stride positive (a negative window stride read as the gradient backwards)."""
    g, y = desc.input_gradient_tensor, desc.output_gradient_tensor
    n = y.dimension_count
    if g.data_type != y.data_type:
        raise invalid("input_gradient_tensor.data_type", f"must equal output_gradient_tensor's ({y.data_type.name}), "
                                                         f"got {g.data_type.name}")
    if g.dimension_count != n:
        raise invalid("input_gradient_tensor.sizes", f"dimension count must equal output_gradient_tensor's ({n}), "
                                                     f"got {g.dimension_count}")
    arrays = {f: as_int_tuple(getattr(desc, f), f) for f in ("input_window_offsets", "input_window_sizes",
                                                             "input_window_strides")}
    for f, v in arrays.items():
        if len(v) != n:
            raise invalid(f, f"must hold DimensionCount = {n} values (the tensors'), got {len(v)}")
    gs, ys = g.effective_strides, y.effective_strides
    g_start = y_start = 0
    g_steps, y_steps = [], []
    for i, (o, s, st) in enumerate(zip(*arrays.values())):
        if o < 0:
            raise invalid("input_window_offsets", f"[{i}] must be >= 0, got {o}")
        if s < 1:
            raise invalid("input_window_sizes", f"[{i}] must be >= 1 (the window may not be empty), got {s}")
        if o + s > y.sizes[i]:
            raise invalid("input_window_offsets", f"[{i}] + input_window_sizes[{i}] must be <= output_gradient_tensor"
                                                  f".sizes[{i}] ({y.sizes[i]}), got {o} + {s}")
        if st == 0:
            raise invalid("input_window_strides", f"[{i}] may not be 0 (the page: SLICE_GRAD requires non-zero strides)")
        reach = 1 + (s - 1) // abs(st)
        m = g.sizes[i]
        if not 1 <= m <= reach:
            raise invalid("input_window_sizes", f"[{i}]: input_gradient_tensor.sizes[{i}] must be in [1, {reach}] "
                                                f"(1 + (input_window_sizes - 1) / |input_window_strides|), got {m}")
        if st > 0:
            y_start += o * ys[i]
            g_steps.append(gs[i])
        else:  # gradient element j lands at o + s - 1 - j |st|: read backwards from j = m - 1
            y_start += (o + s - 1 - (m - 1) * -st) * ys[i]
            g_start += (m - 1) * gs[i]
            g_steps.append(-gs[i])
        y_steps.append(abs(st) * ys[i])
    return g_start, y_start, tuple(g_steps), tuple(y_steps)


def compile_slice_grad(device: Device, desc: SliceGradDesc) -> CompiledOperator:
    support = SLICE_GRAD
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    g_start, y_start, g_steps, y_steps = window(desc)
    g, y = desc.input_gradient_tensor, desc.output_gradient_tensor
    check_no_overlap(y.sizes, y.effective_strides, "output_gradient_tensor")
    check_addressable(support.fields, (g, y))
    zero = plan_fill(device, contract.FILL, contract.FILL.name(bits=8 * y.data_type.size), y, 0)
    # (fill's plan binds its output at index 0: here the output is binding-list index 1)
    zero = dataclasses.replace(zero, bindings=(1,), writes=(1,), offset_slots=tuple((w, 1, u) for w, _, u in zero.offset_slots))
    policy = device.policy
    copies = plan_region_copy(y.data_type, g.sizes, g_steps, y_steps, g_start, y_start, 0, 1,
                              device.limits["max_compute_work_group_count"][0],
                              lambda regions: policy.copies_by_transfer(g.byte_size, regions), policy.memory_kernel)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [zero, *copies])


def slice_grad(dy: Any, input_sizes: Any, offsets: Any, sizes: Any, strides: Any, *, out: Tensor | None = None,
               device: Device | None = None) -> Tensor:
    """DML_SLICE_GRAD: a new packed Tensor of `input_sizes` (dy's type), 0 except SLICE1's window
    (offsets, sizes, strides), which receives dy; or `out`."""
    dev, (t,) = _operands((dy,), ("dy",), device)
    shape = as_int_tuple(input_sizes, "input_sizes")
    dt = t.desc.data_type
    return run_into(dev, lambda od: SliceGradDesc(t.desc, od, tuple(offsets), tuple(sizes), tuple(strides)), [t], shape,
                    dt, out)


def _example() -> SliceGradDesc:
    f32 = DataType.FLOAT32
    return SliceGradDesc(TensorDesc(f32, (1, 1, 2, 2)), TensorDesc(f32, (1, 1, 4, 4)), (0, 0, 0, 0), (1, 1, 4, 4),
                         (1, 1, 2, 2))


SPECS = (OperatorSpec(SliceGradDesc, SLICE_GRAD, compile_slice_grad, (contract.FILL, *_COPY_SHADERS),
                      helpers=("slice_grad",), example=_example),)
