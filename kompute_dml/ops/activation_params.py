"""DirectML's activations with FLOAT parameters and ELEMENT_WISE_CLIP, as rows of
ops/elementwise_unary.py's table (`UnaryOp.params`: the parameters in the element-wise block's
unused b_str[3], b_str[4]; CLIP's ScaleBias in b_str[0..2] like the math operators'), on the
element-wise plans with shaders/float_unary.comp, the functions in shaders/act_math.glsl:

ACTIVATION_LEAKY_RELU (Alpha), ACTIVATION_ELU (Alpha), ACTIVATION_CELU (Alpha),
ACTIVATION_SCALED_ELU (Alpha, Gamma), ACTIVATION_HARD_SIGMOID (Alpha, Beta), ACTIVATION_HARD_SWISH
(Alpha, Beta), ACTIVATION_THRESHOLDED_RELU (Alpha), ACTIVATION_SHRINK (Bias, Threshold),
ACTIVATION_LINEAR (Alpha, Beta), ACTIVATION_SCALED_TANH (Alpha, Beta),
ACTIVATION_PARAMETRIC_SOFTPLUS (Alpha, Beta), ACTIVATION_SWISH (SigmoidInputScale),
ELEMENT_WISE_THRESHOLD (ScaleBias, Min: max(x, Min), CLIP without its Max), ELEMENT_WISE_CLIP (ScaleBias, Min, Max).

Each evaluates its page's formula in float32, one rounding per step in the order its docstring
and docs/activation_params.md give (products correctly rounded in integer code, sums by the
device's float32 + and -, comparisons on the bits); FLOAT16 inputs are widened exactly and the
float32 result rounded once. Exact (bit for bit a numpy float32 evaluation of the same steps):
LEAKY_RELU, HARD_SIGMOID, HARD_SWISH, THRESHOLDED_RELU, SHRINK, LINEAR, THRESHOLD, CLIP. ELU, CELU,
SCALED_ELU, SCALED_TANH and PARAMETRIC_SOFTPLUS use unary_math.glsl's exp / expm1 / tanh / log1p
and are within the float32 ulp bounds measured by `python tools/measure_unary.py --params`
(docs/activation_params.md); float16 0.5 ulp plus the float32 error.

SWISH is the unfused pair's steps, not one rounding: SigmoidInputScale * x rounded to float32,
ACTIVATION_SIGMOID's function, that sigmoid rounded to the element type, then the product by the
device's float32 multiply (ELEMENT_WISE_MULTIPLY's), rounded to the type. So with a scale of 1 it
is bit for bit ELEMENT_WISE_MULTIPLY(x, ACTIVATION_SIGMOID(x)) on the same device (the ONNX
backend fuses SiLU's Sigmoid -> Mul into it): SIGMOID's 2.4 ulp plus a rounding in float32, up to
1.5 ulp in float16 (two roundings); a subnormal float32 product as the device's multiply gives it.

Special values: NaN in gives NaN out (THRESHOLD too, as CLIP), except THRESHOLDED_RELU and SHRINK,
whose comparisons are false for NaN: +0 (the pages' "0, otherwise"). Parameters are rounded to float32 at compile and
must not be NaN (InvalidArgumentError naming the field); any other value (infinities, 0,
negative) is taken as the formula has it. CLIP with Min > Max gives Min (the page's
max(Min, min(x, Max))). The pages' FLOAT32 / FLOAT16 rows are implemented, and CLIP's integer
rows (8- to 32-bit from 2_1, 64-bit from 5_0) on shaders/elementwise.comp (`compile_clip`,
contract.EW_EXT's ew_clip_<t>): Min and Max cast as the page's remark says (float32, truncated
toward zero), saturated to the type's range (`integer_bound`), exact; ScaleBias with integers is
refused (UnsupportedError), and so are the integer types SHRINK adds at 5_1.

ONNX: LeakyRelu, Elu, Celu, Selu, HardSigmoid, HardSwish, ThresholdedRelu, Shrink, Swish (opset 24:
alpha as SigmoidInputScale) and Clip (onnx_backend/handlers_activation.py: attributes as parameters; Clip's opset-11 min / max inputs
must be constants, else the node stays on the CPU; integer Clip's bounds must survive the FLOAT
fields, else it stays on the CPU).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, NUMERIC, OperatorSupport, row
from ..device.device import Device
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWiseInPlace, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .elementwise_unary import L10, LACT, UnaryOp, _compiler, _param_words, _spec
from .onnx_types import DML_NUMPY, FLOAT_NUMPY, NodeTypes, float_input
from .spec import OnnxOp

# their families in shaders/float_unary.comp (FN_<NAME>: shaders/act_math.glsl); ops/contract reads this line
FLOAT_UNARY = ("leaky_relu", "elu", "celu", "selu", "hard_sigmoid", "hard_swish", "thresholded_relu", "shrink",
               "linear", "scaled_tanh", "parametric_softplus", "swish", "threshold", "clip")

L30 = ((FL.FL_3_0, (1, 8)),)
L62 = ((FL.FL_6_2, (1, 8)),)
LSHRINK = ((FL.FL_2_0, (4, 5)), (FL.FL_3_0, (1, 8)))
F32_MAX = float(np.finfo(np.float32).max)

OPS = (
    UnaryOp("ACTIVATION_LEAKY_RELU", 39, "LeakyRelu", "leaky_relu", "leaky_relu", LACT, False,
            "x if x >= 0, else alpha * x", True, params=(("alpha", 0.01),)),
    UnaryOp("ACTIVATION_ELU", 35, "Elu", "elu", "elu", LACT, False,
            "x if x >= 0, else alpha * (exp(x) - 1)", False, params=(("alpha", 1.0),)),
    UnaryOp("ACTIVATION_CELU", 128, "Celu", "celu", "celu", L30, False,
            "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))", False, params=(("alpha", 1.0),)),
    UnaryOp("ACTIVATION_SCALED_ELU", 45, "Selu", "selu", "selu", LACT, False,
            "gamma * x if x > 0, else gamma * (alpha * exp(x) - alpha)", False,
            params=(("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875))),
    UnaryOp("ACTIVATION_HARD_SIGMOID", 37, "HardSigmoid", "hard_sigmoid", "hard_sigmoid", LACT, False,
            "max(0, min(alpha * x + beta, 1))", True, params=(("alpha", 0.2), ("beta", 0.5))),
    UnaryOp("ACTIVATION_HARD_SWISH", 168, "HardSwish", "hard_swish", "hard_swish", L62, False,
            "x * max(0, min(alpha * x + beta, 1))", True, params=(("alpha", 1.0 / 6.0), ("beta", 0.5))),
    UnaryOp("ACTIVATION_THRESHOLDED_RELU", 52, "ThresholdedRelu", "thresholded_relu", "thresholded_relu", LACT,
            False, "x if x > alpha, else 0", True, params=(("alpha", 1.0),)),
    UnaryOp("ACTIVATION_SHRINK", 90, "Shrink", "shrink", "shrink", LSHRINK, False,
            "x - bias if x > threshold, x + bias if x < -threshold, else 0", True,
            params=(("bias", 0.0), ("threshold", 0.5))),
    UnaryOp("ACTIVATION_LINEAR", 40, "", "linear", "linear", LACT, False, "alpha * x + beta", True,
            params=(("alpha", 1.0), ("beta", 0.0))),
    UnaryOp("ACTIVATION_SCALED_TANH", 46, "", "scaled_tanh", "scaled_tanh", LACT, False, "alpha * tanh(beta * x)",
            False, params=(("alpha", 1.0), ("beta", 1.0))),
    UnaryOp("ACTIVATION_PARAMETRIC_SOFTPLUS", 43, "", "parametric_softplus", "parametric_softplus", LACT, False,
            "alpha * ln(1 + exp(beta * x))", False, params=(("alpha", 1.0), ("beta", 1.0))),
    # (before THRESHOLD and CLIP: CLIP stays last, and the rows' indices above are the tests')
    UnaryOp("ACTIVATION_SWISH", 167, "Swish", "swish", "swish", L62, False,
            "x * sigmoid(sigmoid_input_scale * x)", False, params=(("sigmoid_input_scale", 1.0),)),
    UnaryOp("ELEMENT_WISE_THRESHOLD", 32, "", "threshold", "threshold", L10, True, "max(x, min)", True,
            params=(("min", -F32_MAX),)),
    UnaryOp("ELEMENT_WISE_CLIP", 8, "Clip", "clip", "clip", L10, True, "max(min, min(x, max))", True,
            params=(("min", -F32_MAX), ("max", F32_MAX))),
)


# ---- ELEMENT_WISE_CLIP of integers: the page's table adds them from 2_1 (8- to 32-bit) and 5_0
# (64-bit); they run on shaders/elementwise.comp (contract.EW_EXT), the floats on FN_CLIP
CLIP = OPS[-1]
assert CLIP.name == "ELEMENT_WISE_CLIP"
_CLIP_ROWS = ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_8_32),
              (FL.FL_3_0, (1, 8), FLOATS | INTS_8_32), (FL.FL_5_0, (1, 8), NUMERIC))
CLIP_SUPPORT = OperatorSupport(CLIP.name, CLIP.op_type, tuple(
    row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in _CLIP_ROWS))
_compile_float_clip = _compiler(CLIP, CLIP_SUPPORT)


def integer_bound(value: float, dt: DataType) -> int:
    """A FLOAT bound of an integer CLIP as the page casts it: rounded to float32 (the field's
    type), then truncated toward zero; kompute_dml saturates what lies outside the type's range
    (+-inf included), where the page says nothing."""
    info = np.iinfo(dt.numpy_dtype)
    f = float(np.float32(value))
    v = math.trunc(f) if math.isfinite(f) else (info.max if f > 0 else info.min)
    return int(min(max(v, int(info.min)), int(info.max)))


def _bound_words(lo: int, hi: int, dt: DataType) -> list[int]:
    """b_str[0..] of elementwise.comp's OP_CLIP: 32-bit two's complement words (64-bit: pairs)."""
    if dt.size == 8:
        lo64, hi64 = lo & ((1 << 64) - 1), hi & ((1 << 64) - 1)
        return [lo64 & 0xFFFFFFFF, lo64 >> 32, hi64 & 0xFFFFFFFF, hi64 >> 32]
    return [lo & 0xFFFFFFFF, hi & 0xFFFFFFFF]


def compile_clip(device: Device, desc: Any) -> CompiledOperator:
    """ELEMENT_WISE_CLIP: floats as the table's other rows (FN_CLIP), integers on EW_CLIP with
    Min and Max cast to the element type (`integer_bound`); ScaleBias is refused for integers."""
    support = CLIP_SUPPORT
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    if x.data_type in FLOATS:
        return _compile_float_clip(device, desc)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    _param_words(CLIP, dataclasses.replace(desc, scale_bias=None))  # min / max: real numbers, not NaN
    if desc.scale_bias is not None:
        raise UnsupportedError(f"scale_bias: kompute_dml's ELEMENT_WISE_CLIP takes a ScaleBias with FLOAT32 / "
                               f"FLOAT16 tensors only, not {x.data_type.name}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    words = _bound_words(integer_bound(desc.min, x.data_type), integer_bound(desc.max, x.data_type), x.data_type)
    family = contract.EW_EXT
    plans = plan_elementwise(family, family.name(op="clip", t=type_code(x.data_type, True)), (x, y),
                             **device_limits(device), unused_b=words)
    return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, list(plans))


_CLIP_NUMPY = frozenset(np.dtype(t) for t in DML_NUMPY if np.dtype(t) != np.float64)


def _clip_rule(t: NodeTypes) -> str:
    """ONNX Clip on the device: a float or integer input of DirectML's types but FLOAT64; min /
    max inputs (opset 11 on) read on the host (a fed bound: node by node, checked per run); an
    integer node's constant bounds exact through float32 (CLIP's FLOAT Min / Max: the type's limits are, by the
    saturation), else it stays on the CPU."""
    dt = t.elem(0) if t.inputs else None
    if dt is not None and dt not in _CLIP_NUMPY:
        return f"type {dt} is not one ELEMENT_WISE_CLIP takes"
    for i in (1, 2):
        if t.inputs > i and t.declared(i) is not None:
            v = t.constant(i)
            b = v.reshape(-1)[0] if v is not None and v.size == 1 else None
            if dt is not None and dt not in FLOAT_NUMPY and b is not None and \
                    integer_bound(float(b), DataType.from_numpy(dt)) != int(b):
                return f"the {('min', 'max')[i - 1]} bound {b} is not exact through a float32 (CLIP's FLOAT field)"
    return ""


def _onnx(op: UnaryOp) -> tuple[OnnxOp, ...]:
    if not op.onnx:
        return ()
    main = OnnxOp(op.onnx, "", op.helper, check=_clip_rule if op.onnx == "Clip" else float_input)
    if op.onnx == "Swish":  # onnxruntime's fusion of x * sigmoid(alpha * x) (CLIP): Swish with alpha 1.702
        return (main, OnnxOp("QuickGelu", "com.microsoft", op.helper, check=float_input))
    return (main,)


_HOME: dict[str, Any] = globals()
assert {op.fn for op in OPS} == set(FLOAT_UNARY), "FLOAT_UNARY must name the table's functions"
SPECS = tuple(dataclasses.replace(_spec(op, _HOME, _onnx(op)), support=CLIP_SUPPORT, compile=compile_clip,
                                  shaders=(contract.FLOAT_UNARY[op.fn], contract.EW_EXT))
              if op is CLIP else _spec(op, _HOME, _onnx(op)) for op in OPS)
_HOME["clip"].__doc__ = ("max(min, min(x, max)) element by element (DML_ELEMENT_WISE_CLIP; FLOAT32 / FLOAT16, and the "
                         "8- to 64-bit integers with min / max cast as the page says (float32, truncated toward zero, "
                         "saturated); keywords min, max, scale_bias (floats only)): a new Tensor of x's shape and type, "
                         "or `out`.")
