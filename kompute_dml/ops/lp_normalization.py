"""DirectML's LP_NORMALIZATION (DML_LP_NORMALIZATION_OPERATOR_DESC, feature level 1_0): every line of
the input along `axis` divided by its Lp norm, P 1 (the sum of |x|) or 2 (the square root of the
sum of squares); Epsilon "to avoid division by zero".

The page does not say how Epsilon enters. kompute_dml divides by max(norm, Epsilon), the form
DirectML's own developers give for WebNN's decomposition of ONNX LpNormalization (onnxruntime's
WebNN EP: `input / max(Lp_norm(input, axis), eps)`): a line of zeros gives zeros, and a norm above
Epsilon is used as it is (adding Epsilon would bias every output). A NaN norm gives NaN outputs.

shaders/lp_normalization.comp: a line per invocation; the norm accumulated in float32 in ascending
axis position (`precise`, each step rounded once, no contraction), the square root by GLSL's sqrt
(Vulkan's precision: that of 1 / inversesqrt), each quotient correctly rounded in integer code
(shaders/f32_exact.glsl); FLOAT16 decoded exactly, the float32 quotient rounded to float16 (nearest
even). Tests
(tests/test_lp_normalization.py): the bits of a float32 reference wherever the norm's bits agree,
within 2^-22 relative otherwise (the square root), and float64 within the sum's rounding.

ONNX LpNormalization stays on its composition (REDUCE_L1 / L2, ELEMENT_WISE_DIVIDE, ELEMENT_WISE_IF:
onnx_backend/handlers_reduce.py): ONNX divides by the norm itself with 0 where the norm is 0, which
no Epsilon reproduces exactly (a norm that underflows to 0 while the line is not zero, or a
subnormal norm on a device that flushes subnormals, takes x / Epsilon here).

Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the field), the
output's DataType, DimensionCount and Sizes the input's, `axis` below DimensionCount, P 1 or 2,
Epsilon a finite float32 >= 0, non-overlapping output, 32-bit addressing. The dimensions besides the
axis are merged; the shader takes 6 of them, a view with 7 left a dispatch per outermost coordinate.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .contract.sequence import SEQ_RANK
from .elementwise import check_same
from .elementwise_plan import check_addressable
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device


def _row(level: FL, dims: tuple[int, int]) -> Any:
    return row(level, ("input_tensor", "input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS))


LP_NORMALIZATION = OperatorSupport("LP_NORMALIZATION", 75, (_row(FL.FL_1_0, (4, 4)), _row(FL.FL_3_1, (1, 8))))


@dataclass(frozen=True)
class LpNormalizationDesc:
    """DML_LP_NORMALIZATION_OPERATOR_DESC { InputTensor, OutputTensor, Axis, Epsilon, P }."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int
    epsilon: float = 1e-5  # the page's recommended default
    p: int = 2


def _epsilon(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise invalid("epsilon", f"must be a finite FLOAT >= 0, got {value!r}")
    if value > 3.4028234663852886e38:
        raise invalid("epsilon", f"must be within float32, got {value!r}")
    return float(value)


def compile_lp_normalization(device: Device, desc: LpNormalizationDesc) -> CompiledOperator:
    support = LP_NORMALIZATION
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    x, y = desc.input_tensor, desc.output_tensor
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    rank = x.dimension_count
    axis = as_int(desc.axis, "axis")
    if not 0 <= axis < rank:
        raise invalid("axis", f"must be less than input_tensor's DimensionCount ({rank}), got {axis}")
    p = as_int(desc.p, "p")
    if p not in (1, 2):
        raise invalid("p", f"must be 1 or 2, got {p}")
    eps = _epsilon(desc.epsilon)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    xs, ys = x.effective_strides, y.effective_strides
    others = [d for d in range(rank) if d != axis]
    osz, (oxs, oys) = merge_dims([x.sizes[d] for d in others], [xs[d] for d in others], [ys[d] for d in others])
    # dimensions beyond the shader's SEQ_RANK (a rank-8 view whose others do not merge): a dispatch
    # per coordinate of the outer ones, their offsets packed (the runtime adds the binding's)
    extra = max(0, len(osz) - SEQ_RANK)
    isz = osz[extra:]
    pad = SEQ_RANK - len(isz)
    lines = math.prod(isz)
    fam = contract.sequence.LPNORM
    unit = x.data_type.size
    groups = grid_for(lines, 64, device.limits["max_compute_work_group_count"][0])
    plans = []
    for c in itertools.product(*(range(v) for v in osz[:extra])):
        push = fam.pack(x_off=sum(a * b for a, b in zip(c, oxs)), y_off=sum(a * b for a, b in zip(c, oys)), lines=lines,
                        n=x.sizes[axis], x_ax=xs[axis], y_ax=ys[axis], p=p, eps=eps, size=[1] * pad + isz,
                        xs=[0] * pad + oxs[extra:], ys=[0] * pad + oys[extra:])
        plans.append(DispatchPlan(variant=fam.name(t="f16" if x.data_type == DataType.FLOAT16 else "f32"),
                                  bindings=(0, 1), push=push, writes=(1,), groups=groups,
                                  offset_slots=fam.slots(x_off=(0, unit), y_off=(1, unit))))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans)


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def lp_normalization(x: Any, axis: int = -1, *, p: int = 2, epsilon: float = 1e-5, out: Any = None,
                     device: Any = None) -> Any:
    """DML_LP_NORMALIZATION: x / max(||x||_p, epsilon) along `axis` (negative counts from the end),
    p 1 or 2, into a new packed Tensor or `out`."""
    from ..functional import run_into
    from ..functional.elementwise import _operands

    dev, (t,) = _operands((x,), ("x",), device)
    d = t.desc
    rank = d.dimension_count
    a = as_int(axis, "axis")
    if not -rank <= a < rank:
        raise invalid("axis", f"must be in [{-rank}, {rank}) for x of rank {rank}, got {a}")
    return run_into(dev, lambda od: LpNormalizationDesc(d, od, a % rank, epsilon, p), [t], d.sizes, d.data_type, out)


_F32_4D = TensorDesc(DataType.FLOAT32, (2, 3, 4, 5))
SPECS = (OperatorSpec(LpNormalizationDesc, LP_NORMALIZATION, compile_lp_normalization, (contract.sequence.LPNORM,),
                      helpers=("lp_normalization",), example=lambda: LpNormalizationDesc(_F32_4D, _F32_4D, 3)),)
