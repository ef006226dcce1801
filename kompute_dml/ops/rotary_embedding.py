"""kompute_dml's ROTARY_EMBEDDING (an extension: DirectML has no such operator): rotary position
embedding with the tables already picked per element,

    y = x * cos + rotate_half(x) * sin,   rotate_half(x)[..., j] = -x[..., j + D/2] (j < D/2), x[..., j - D/2],

over the last dimension of D (even) elements, as Llama-family models export it (Slice, Slice, Neg,
Concat, Mul, Mul, Add: onnx_backend/fusion_rotary.py runs that chain on it in one dispatch), and
com.microsoft RotaryEmbedding / GroupQueryAttention's do_rotary on the halves, their tables' rows
gathered by position first (onnx_backend/rotary.py). Each step rounds as its node does: the sign
flipped on the bits, the two products and the sum the device's float32 operations (not fused into
an fma), FLOAT16 rounded to nearest even after each (as the element-wise operators round them):
the unfused chain's bits. shaders/rotary.comp: one invocation per output element (contract.ROTARY).

Tensors: FLOAT32 or FLOAT16, all four of one type, 1 to 4 dimensions of the output's sizes (cos and
sin broadcast by zero strides, DirectML's way), any strides and offsets; the output may not
overlap itself. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the table
(InvalidArgumentError / UnsupportedError naming the field), one data type, equal sizes, the last
dimension even, a non-overlapping output, 32-bit element addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands, broadcast_view
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

_FIELDS = ("input_tensor", "cos_tensor", "sin_tensor", "output_tensor")
ROTARY_EMBEDDING = OperatorSupport("ROTARY_EMBEDDING", None, (
    row(FL.FL_1_0, *((f, "output" if f == "output_tensor" else "input", (1, contract.ROTARY_RANK), FLOATS)
                     for f in _FIELDS)),))


@dataclass(frozen=True)
class RotaryEmbeddingDesc:
    """kompute_dml's ROTARY_EMBEDDING { InputTensor, CosTensor, SinTensor, OutputTensor,
    SineFirst }: y = x cos + rotate_half(x) sin over the last dimension (module docstring); the
    four tensors of one type and the output's sizes. `sine_first`: the sum as rotate_half(x) sin +
    x cos (the order of an Add whose first operand is the sine's product; the same value, and the
    same NaN the device's addition picks)."""

    input_tensor: TensorDesc
    cos_tensor: TensorDesc
    sin_tensor: TensorDesc
    output_tensor: TensorDesc
    sine_first: bool = False


def compile_rotary_embedding(device: Device, desc: RotaryEmbeddingDesc) -> CompiledOperator:
    support = ROTARY_EMBEDDING
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    y = desc.output_tensor
    descs = [getattr(desc, f) for f in _FIELDS]
    for f, d in zip(_FIELDS[:3], descs):
        if d.data_type != y.data_type:
            raise invalid(f"{f}.data_type", f"must equal output_tensor's ({y.data_type.name}), got {d.data_type.name}")
        if d.sizes != y.sizes:
            raise invalid(f"{f}.sizes", f"must equal output_tensor's {y.sizes}, got {d.sizes}")
    dim = y.sizes[-1]
    if dim % 2:
        raise invalid("output_tensor.sizes", f"the last dimension (rotated in halves) must be even, got {dim}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(_FIELDS, descs)
    rank = contract.ROTARY_RANK
    pad = rank - y.dimension_count
    sizes = (1,) * pad + y.sizes
    strides = {k: (0,) * pad + d.effective_strides for k, d in zip(("x_str", "c_str", "s_str", "y_str"), descs)}
    count = y.element_count
    fam = contract.ROTARY
    unit = y.data_type.size
    plan = DispatchPlan(
        variant=fam.name(t="f16" if y.data_type == DataType.FLOAT16 else "f32"), bindings=(0, 1, 2, 3),
        push=fam.pack(x_off=0, c_off=0, s_off=0, y_off=0, hd=dim // 2, count=count, flags=int(bool(desc.sine_first)),
                      size=sizes, **strides),
        groups=grid_for(count, 256, device.limits["max_compute_work_group_count"][0]), writes=(3,),
        offset_slots=fam.slots(x_off=(0, unit), c_off=(1, unit), s_off=(2, unit), y_off=(3, unit)))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def rotary_embedding(x: Any, cos: Any, sin: Any, *, sine_first: bool = False, out: Tensor | None = None,
                     device: Device | None = None) -> Tensor:
    """x * cos + rotate_half(x) * sin over x's last dimension (kompute_dml's ROTARY_EMBEDDING), cos
    and sin numpy-broadcast to x's shape: a new Tensor of x's shape, or `out`."""
    dev, (tx, tc, ts) = _operands((x, cos, sin), ("x", "cos", "sin"), device)
    shape, dt = tx.desc.sizes, tx.desc.data_type
    tc, ts = broadcast_view(tc, shape, "cos"), broadcast_view(ts, shape, "sin")
    if out is not None:
        check_out(out, dev, shape, dt)
    od = out.desc if out is not None else TensorDesc(dt, shape)
    op = compile_cached(dev, RotaryEmbeddingDesc(tx.desc, tc.desc, ts.desc, od, bool(sine_first)))
    if out is None:
        out = pooled_empty(dev, od)
    op.execute([tx, tc, ts], [out])
    return out


_F4 = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
SPECS = (OperatorSpec(RotaryEmbeddingDesc, ROTARY_EMBEDDING, compile_rotary_embedding, (contract.ROTARY,),
                      helpers=("rotary_embedding",),
                      # the halves on it, the tables' rows gathered by position (onnx_backend/rotary.py;
                      # interleaved pairs: GATHER, MULTIPLY and ADD1)
                      onnx=(OnnxOp("RotaryEmbedding", "com.microsoft", "rotary_embedding", check=float_input),),
                      example=lambda: RotaryEmbeddingDesc(_F4, _F4, _F4, _F4)),)
