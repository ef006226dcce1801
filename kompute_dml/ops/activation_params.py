"""DirectML's activations with FLOAT parameters and ELEMENT_WISE_CLIP, as rows of
ops/elementwise_unary.py's table (`UnaryOp.params`: the parameters in the element-wise block's
unused b_str[3], b_str[4]; CLIP's ScaleBias in b_str[0..2] like the math operators'), on the
element-wise plans with shaders/float_unary.comp, the functions in shaders/act_math.glsl:

ACTIVATION_LEAKY_RELU (Alpha), ACTIVATION_ELU (Alpha), ACTIVATION_CELU (Alpha),
ACTIVATION_SCALED_ELU (Alpha, Gamma), ACTIVATION_HARD_SIGMOID (Alpha, Beta), ACTIVATION_HARD_SWISH
(Alpha, Beta), ACTIVATION_THRESHOLDED_RELU (Alpha), ACTIVATION_SHRINK (Bias, Threshold),
ACTIVATION_LINEAR (Alpha, Beta), ACTIVATION_SCALED_TANH (Alpha, Beta),
ACTIVATION_PARAMETRIC_SOFTPLUS (Alpha, Beta), ELEMENT_WISE_CLIP (ScaleBias, Min, Max).

Each evaluates its page's formula in float32, one rounding per step in the order its docstring
and docs/activation_params.md give (products correctly rounded in integer code, sums by the
device's float32 + and -, comparisons on the bits); FLOAT16 inputs are widened exactly and the
float32 result rounded once. Exact (bit for bit a numpy float32 evaluation of the same steps):
LEAKY_RELU, HARD_SIGMOID, HARD_SWISH, THRESHOLDED_RELU, SHRINK, LINEAR, CLIP. ELU, CELU,
SCALED_ELU, SCALED_TANH and PARAMETRIC_SOFTPLUS use unary_math.glsl's exp / expm1 / tanh / log1p
and are within the float32 ulp bounds measured by `python tools/measure_unary.py --params`
(docs/activation_params.md); float16 0.5 ulp plus the float32 error.

Special values: NaN in gives NaN out, except THRESHOLDED_RELU and SHRINK, whose comparisons are
false for NaN: +0 (the pages' "0, otherwise"). Parameters are rounded to float32 at compile and
must not be NaN (InvalidArgumentError naming the field); any other value (infinities, 0,
negative) is taken as the formula has it. CLIP with Min > Max gives Min (the page's
max(Min, min(x, Max))). The pages' FLOAT32 / FLOAT16 rows are implemented; the integer types
SHRINK (5_1) and CLIP (2_1 on) add are refused (UnsupportedError).

ONNX: LeakyRelu, Elu, Celu, Selu, HardSigmoid, HardSwish, ThresholdedRelu, Shrink and Clip
(onnx_backend/handlers_activation.py: attributes as parameters; Clip's opset-11 min / max inputs
must be constants, else the node stays on the CPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.registry import FL
from .elementwise_unary import L10, LACT, UnaryOp, _spec
from .onnx_types import NodeTypes, float_input
from .spec import OnnxOp

# their families in shaders/float_unary.comp (FN_<NAME>: shaders/act_math.glsl); ops/contract reads this line
FLOAT_UNARY = ("leaky_relu", "elu", "celu", "selu", "hard_sigmoid", "hard_swish", "thresholded_relu", "shrink",
               "linear", "scaled_tanh", "parametric_softplus", "clip")

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
    UnaryOp("ELEMENT_WISE_CLIP", 8, "Clip", "clip", "clip", L10, True, "max(min, min(x, max))", True,
            params=(("min", -F32_MAX), ("max", F32_MAX))),
)


def _clip_rule(t: NodeTypes) -> str:
    """ONNX Clip on the device: a float32 / float16 input, and min / max inputs (opset 11 on),
    where present, constants (a fed bound stays on the CPU)."""
    for i in (1, 2):
        if t.inputs > i and t.declared(i) is not None and t.constant(i) is None:
            return f"the {('min', 'max')[i - 1]} input is not a constant"
    return float_input(t)


def _onnx(op: UnaryOp) -> tuple[OnnxOp, ...]:
    if not op.onnx:
        return ()
    return (OnnxOp(op.onnx, "", op.helper, check=_clip_rule if op.onnx == "Clip" else float_input),)


_HOME: dict[str, Any] = globals()
assert {op.fn for op in OPS} == set(FLOAT_UNARY), "FLOAT_UNARY must name the table's functions"
SPECS = tuple(_spec(op, _HOME, _onnx(op)) for op in OPS)
