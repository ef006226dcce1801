"""DirectML's unary element-wise float math operators, declared once as a table (`OPS`) from
which each operator's descriptor class, support table, compile function, helper and spec are
made: ELEMENT_WISE_ABS, _NEGATE, _CEIL, _FLOOR, _ROUND, _SIGN, _RECIP, _SQRT, _EXP, _LOG,
ACTIVATION_SIGMOID, ACTIVATION_SOFTSIGN, ACTIVATION_TANH and ELEMENT_WISE_TANH (one function),
ELEMENT_WISE_ERF, ACTIVATION_SOFTPLUS (Steepness), ELEMENT_WISE_SIN, ELEMENT_WISE_COS; and
ELEMENT_WISE_IS_INFINITY (UINT8 output, on shaders/elementwise.comp: contract.EW_ISINF; ONNX IsInf
through handlers_math._h_isinf). Rows with FLOAT parameters (`UnaryOp.params`, sent in b_str[3],
b_str[4]) are ops/activation_params.py's (the parameterized activations and ELEMENT_WISE_CLIP).

All run on the element-wise plans (ops/elementwise_plan.py: merged dimensions, per-tensor
strides, stride-0 broadcast, offsets, host-enumerated dimensions) with shaders/float_unary.comp,
whose FN_<NAME> variants take their function from shaders/unary_math.glsl: integer code and
float32 +, -, * only, so a result does not depend on the device's built-ins or denormal mode.
FLOAT16 is decoded exactly, computed in float32 and rounded once.

Exact (bit for bit against the correctly rounded result, both types, subnormals included):
IS_INFINITY (its three InfinityModes), ABS, NEGATE, CEIL, FLOOR, ROUND (its three RoundingModes), SIGN, RECIP, SQRT. The others, measured
against float64 (tools/measure_unary.py: every float16 input, 2^21 float32 inputs with the
special values, and the suite's random draws; docs/elementwise_unary.md), largest seen in ulps of
the result: EXP 1.13, LOG 0.80, SIGMOID 2.40, SOFTSIGN 1.50, TANH 1.45, ERF 1.44, SOFTPLUS 1.92
(Steepness 1; 2.76 at Steepness 3, the product Steepness * x rounded to float32 first) in float32
(tested against 1.3, 0.9, 2.6, 1.6, 1.6, 1.6, 2.1 and 3.0: sampled maxima, not proofs; SIGMOID's quotient
is the device's division, which may add 2 ulps: tested against 4.6);
SIN 0.82, COS 0.82 (tested against 0.85) for every finite float32: an
exact Payne-Hanek reduction in integer code (shaders/trig_math.glsl: 94 bits of the remainder, so
the inputs nearest multiples of pi / 2 and those up to 3.4e38 keep the bound; no range limit),
measured over every positive float32 from 2^-12 (below: x and 1, correctly rounded; negative x
by the sign, in integer code); in float16 0.5 ulp (the float32 result rounded: 99.99% correctly rounded).

Special values follow the pages where they define them (SIGN: -1 / 1 / 0, -0 and NaN giving
+0), else IEEE-754 / numpy: NaN in, NaN out (ABS / NEGATE keep a float32 NaN's payload, the
others return the input quieted or the default NaN), sqrt(-0) = -0, sqrt(x < 0) = NaN,
log(+-0) = -inf, log(x < 0) = NaN, recip(+-0) = +-inf, softsign(+-inf) = tanh(+-inf) = erf(+-inf)
= +-1, sin(+-inf) = cos(+-inf) = NaN, softplus(-inf) = +0, softplus(x) = x once Steepness * x >= 16 (no overflow through the product).

ScaleBias (the pages' optional DML_SCALE_BIAS, `scale_bias=ScaleBias(scale, bias)`): the input
becomes x * scale + bias, a float32 product rounded, then a float32 sum rounded (not fused), before
the function; scale and bias are rounded to float32 at compile. That step uses the device's
float32 multiply and add, so a subnormal product or sum may be flushed to zero on a device that
flushes (the function itself never is).

kompute_dml implements the pages' FLOAT32 / FLOAT16 rows, and NEGATE's signed integer ones
(ops/negate_integer.py: 0 - x, wrapping); the other integer rows (ABS, SIGN at later levels) are
refused. The output may alias the input exactly (the pages allow in-place
execution). Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), the same DataType, DimensionCount
and Sizes for both tensors, scale_bias / rounding_mode / steepness (finite, >= 1: the page's
"cannot be less than 1"), a non-overlapping output, 32-bit
element addressing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from . import contract
from .activation import _unary
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise, CompiledElementWiseInPlace, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .negate_integer import SIGNED, compile_integer_negate
from .onnx_types import NodeTypes, float_input, float_or_signed_input
from .spec import OnnxOp, OperatorSpec

# their families in shaders/float_unary.comp (FN_<NAME>: shaders/unary_math.glsl); ops/contract reads this line
FLOAT_UNARY = ("abs", "neg", "ceil", "floor", "round", "sign", "recip", "sqrt", "exp", "log", "sigmoid", "softsign",
               "tanh", "erf", "softplus", "sin", "cos")


@dataclass(frozen=True)
class ScaleBias:
    """DML_SCALE_BIAS { Scale, Bias }: the input becomes x * scale + bias (float32) first."""

    scale: float
    bias: float


class RoundingMode(IntEnum):
    """DML_ROUNDING_MODE (DirectML.h)."""

    HALVES_TO_NEAREST_EVEN = 0
    TOWARD_ZERO = 1
    TOWARD_INFINITY = 2  # to nearest, halves away from zero


class IsInfinityMode(IntEnum):
    """DML_IS_INFINITY_MODE (DirectML.h)."""

    EITHER = 0
    POSITIVE = 1
    NEGATIVE = 2


EXPORTS = {"ScaleBias": ScaleBias, "RoundingMode": RoundingMode, "IsInfinityMode": IsInfinityMode}

# Tensor-support rows per page ((level, (min dims, max dims)), FLOAT32 / FLOAT16 only): the
# ScaleBias math operators of 1_0 (4 dimensions, 1 to 8 from 3_0), 2_0's (SIGN ...), 2_1's (ROUND),
# 5_0's NEGATE, and the activations (4, 4 to 5 at 2_0, 1 to 8 from 3_0)
L10 = ((FL.FL_1_0, (4, 4)), (FL.FL_3_0, (1, 8)))
L20 = ((FL.FL_2_0, (4, 4)), (FL.FL_3_0, (1, 8)))
L21 = ((FL.FL_2_1, (4, 4)), (FL.FL_3_0, (1, 8)))
L50 = ((FL.FL_5_0, (1, 8)),)
LACT = ((FL.FL_1_0, (4, 4)), (FL.FL_2_0, (4, 5)), (FL.FL_3_0, (1, 8)))


@dataclass(frozen=True)
class UnaryOp:
    """One row of the table: a DirectML operator of this family."""

    name: str  # DML_OPERATOR_<name>
    op_type: int  # its DML_OPERATOR_TYPE value
    onnx: str  # the ONNX node type placed on it ("" for none)
    helper: str  # kdml.<helper>
    fn: str  # its family in FLOAT_UNARY (FN_<FN> of unary_math.glsl)
    rows: tuple[tuple[FL, tuple[int, int]], ...]
    scale_bias: bool  # the descriptor has DML_SCALE_BIAS* ScaleBias
    formula: str  # f(x), for the descriptor's docstring
    exact: bool  # bit for bit the correctly rounded result (else within docs/elementwise_unary.md's bound)
    rounding_mode: bool = False  # ROUND's DML_ROUNDING_MODE field
    steepness: bool = False  # SOFTPLUS's FLOAT Steepness field (>= 1, default 1)
    # FLOAT fields (name, default) in the descriptor's order, sent in b_str[3], b_str[4] (not NaN;
    # ops/activation_params.py)
    params: tuple[tuple[str, float], ...] = ()
    ints: frozenset[DataType] = frozenset()  # the page's integer rows (NEGATE's signed ones: ops/negate_integer.py)


OPS = (
    UnaryOp("ELEMENT_WISE_ABS", 2, "Abs", "abs", "abs", L10, True, "|x|", True),
    UnaryOp("ELEMENT_WISE_NEGATE", 156, "Neg", "neg", "neg", L50, False, "-x", True, ints=SIGNED),
    UnaryOp("ELEMENT_WISE_CEIL", 7, "Ceil", "ceil", "ceil", L10, True, "ceil(x)", True),
    UnaryOp("ELEMENT_WISE_FLOOR", 12, "Floor", "floor", "floor", L10, True, "floor(x)", True),
    UnaryOp("ELEMENT_WISE_ROUND", 99, "Round", "round", "round", L21, False, "x rounded to an integer by "
            "rounding_mode", True, rounding_mode=True),
    UnaryOp("ELEMENT_WISE_SIGN", 79, "Sign", "sign", "sign", L20, False, "-1 (x < 0), 1 (x > 0), else +0", True),
    UnaryOp("ELEMENT_WISE_RECIP", 27, "Reciprocal", "reciprocal", "recip", L10, True, "1 / x", True),
    UnaryOp("ELEMENT_WISE_SQRT", 29, "Sqrt", "sqrt", "sqrt", L10, True, "sqrt(x)", True),
    UnaryOp("ELEMENT_WISE_EXP", 11, "Exp", "exp", "exp", L10, True, "exp(x)", False),
    UnaryOp("ELEMENT_WISE_LOG", 13, "Log", "log", "log", L10, True, "ln(x)", False),
    UnaryOp("ACTIVATION_SIGMOID", 47, "Sigmoid", "sigmoid", "sigmoid", LACT, False, "1 / (1 + exp(-x))", False),
    UnaryOp("ACTIVATION_SOFTSIGN", 50, "Softsign", "softsign", "softsign", LACT, False, "x / (1 + |x|)", False),
    UnaryOp("ACTIVATION_TANH", 51, "Tanh", "tanh", "tanh", LACT, False, "tanh(x)", False),
    UnaryOp("ELEMENT_WISE_TANH", 84, "", "elementwise_tanh", "tanh", L20, True, "tanh(x)", False),
    UnaryOp("ELEMENT_WISE_ERF", 81, "Erf", "erf", "erf", L20, True, "erf(x)", False),
    UnaryOp("ACTIVATION_SOFTPLUS", 49, "Softplus", "softplus", "softplus", LACT, False,
            "ln(1 + exp(steepness * x)) / steepness", False, steepness=True),
    UnaryOp("ELEMENT_WISE_SIN", 28, "Sin", "sin", "sin", L10, True, "sin(x)", False),
    UnaryOp("ELEMENT_WISE_COS", 9, "Cos", "cos", "cos", L10, True, "cos(x)", False),
)


def _support(op: UnaryOp) -> OperatorSupport:
    return OperatorSupport(op.name, op.op_type, tuple(
        row(level, ("input_tensor", "input", dims, FLOATS | op.ints), ("output_tensor", "output", dims, FLOATS | op.ints))
        for level, dims in op.rows))


def _class_name(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_")) + "Desc"


def _desc_class(op: UnaryOp, home: str = __name__) -> type:
    fields: list[Any] = [("input_tensor", TensorDesc), ("output_tensor", TensorDesc)]
    extra = ""
    if op.scale_bias:
        fields.append(("scale_bias", "ScaleBias | None", dataclasses.field(default=None)))
        extra = ", ScaleBias"
    if op.rounding_mode:
        fields.append(("rounding_mode", "RoundingMode", dataclasses.field(default=RoundingMode.HALVES_TO_NEAREST_EVEN)))
        extra = ", RoundingMode"
    if op.steepness:
        fields.append(("steepness", float, dataclasses.field(default=1.0)))
        extra = ", Steepness"
    for name, default in op.params:
        fields.append((name, float, dataclasses.field(default=default)))
        extra += ", " + "".join(w.capitalize() for w in name.split("_"))  # the page's field name
    cls = dataclasses.make_dataclass(_class_name(op.name), fields, frozen=True)
    cls.__module__ = home
    exactness = "exact" if op.exact else "error bound: docs/elementwise_unary.md"
    cls.__doc__ = (f"DML_{op.name}_OPERATOR_DESC {{ InputTensor, OutputTensor{extra} }}: f(x) = {op.formula}, "
                   f"element by element ({exactness}); the same DataType, DimensionCount and Sizes for both.")
    return cls


def _f32(value: Any, field: str) -> int:
    """A float's float32 bit pattern (InvalidArgumentError naming the field if not a real number)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise invalid(field, f"must be a real number, got {type(value).__name__} {value!r}")
    with np.errstate(over="ignore"):
        return int(np.array([value], np.float32).view(np.uint32)[0])


def _param_words(op: UnaryOp, desc: Any) -> list[int]:
    """b_str[0..4] of unary_math.glsl: flags, scale, bias, the operator's parameters."""
    words = [0, 0, 0, 0, 0]
    sb = getattr(desc, "scale_bias", None)
    if sb is not None:
        if isinstance(sb, tuple) and len(sb) == 2:
            sb = ScaleBias(*sb)
        if not isinstance(sb, ScaleBias):
            raise invalid("scale_bias", f"must be a kdml.ScaleBias(scale, bias) or None, got {type(sb).__name__}")
        words[:3] = [1, _f32(sb.scale, "scale_bias.scale"), _f32(sb.bias, "scale_bias.bias")]
    if op.rounding_mode:
        mode = desc.rounding_mode
        if isinstance(mode, (bool, np.bool_)) or mode not in set(RoundingMode):
            raise invalid("rounding_mode", f"must be a kdml.RoundingMode (0, 1 or 2), got {mode!r}")
        words[3] = int(mode)
    if op.steepness:  # the page: "This value cannot be less than 1"
        bits = _f32(desc.steepness, "steepness")
        if not np.float32(desc.steepness) >= 1 or not np.isfinite(np.float32(desc.steepness)):
            raise invalid("steepness", f"must be a finite number >= 1 (DirectML's page), got {desc.steepness!r}")
        words[3] = bits
    for i, (name, _) in enumerate(op.params):
        value = getattr(desc, name)
        words[3 + i] = _f32(value, name)
        if np.isnan(np.float32(value)):
            raise invalid(name, f"must be a number, not NaN, got {value!r}")
    return words


def _compiler(op: UnaryOp, support: OperatorSupport) -> Callable[[Device, Any], CompiledOperator]:
    def compile_unary(device: Device, desc: Any) -> CompiledOperator:
        validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
        check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
        words = _param_words(op, desc)
        x, y = desc.input_tensor, desc.output_tensor
        check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
        check_addressable(support.fields, (x, y))
        if x.data_type in op.ints:
            return compile_integer_negate(device, desc, support)
        family = contract.FLOAT_UNARY[op.fn]
        t = type_code(x.data_type, True)
        plans = plan_elementwise(family, family.name(t=t, vec=""), (x, y), **device_limits(device), unused_b=words,
                                 vector=family.name(t=t, vec="_v"))
        return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, list(plans))
    compile_unary.__name__ = f"compile_{op.helper}"
    return compile_unary


def _param_helper(op: UnaryOp, desc_type: type) -> Callable[..., Tensor]:
    """The helper of a row with FLOAT parameters: its fields as keywords (defaults: the row's)."""
    names = {n for n, _ in op.params} | ({"scale_bias"} if op.scale_bias else set())

    def helper(x: Any, *, out: Tensor | None = None, device: Device | None = None, **fields: Any) -> Tensor:
        unknown = set(fields) - names
        if unknown:
            raise TypeError(f"{op.helper}() got unexpected keyword arguments {sorted(unknown)}")
        return _unary(desc_type, x, out, device, **fields)
    return helper


def _helper(op: UnaryOp, desc_type: type, home: str = __name__) -> Callable[..., Tensor]:
    if op.params:
        helper = _param_helper(op, desc_type)
    elif op.rounding_mode:
        def helper(x: Any, *, rounding_mode: Any = RoundingMode.HALVES_TO_NEAREST_EVEN, out: Tensor | None = None,
                   device: Device | None = None) -> Tensor:
            return _unary(desc_type, x, out, device, rounding_mode=rounding_mode)
    elif op.steepness:
        def helper(x: Any, *, steepness: float = 1.0, out: Tensor | None = None,  # type: ignore[misc]
                   device: Device | None = None) -> Tensor:
            return _unary(desc_type, x, out, device, steepness=steepness)
    elif op.scale_bias:
        def helper(x: Any, *, scale_bias: Any = None, out: Tensor | None = None,  # type: ignore[misc]
                   device: Device | None = None) -> Tensor:
            return _unary(desc_type, x, out, device, scale_bias=scale_bias)
    else:
        def helper(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:  # type: ignore[misc]
            return _unary(desc_type, x, out, device)
    helper.__name__ = helper.__qualname__ = op.helper
    helper.__module__ = home
    params = "".join(f", {n}={d!r}" for n, d in op.params)
    helper.__doc__ = (f"{op.formula} element by element (DML_{op.name}; FLOAT32 / FLOAT16; keywords{params}"
                      f"{', scale_bias' if op.scale_bias and op.params else ''}): a new Tensor of x's shape and type, "
                      f"or `out`.")
    return helper


_F32_4D = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))


def _spec(op: UnaryOp, home: dict[str, Any] | None = None,
          onnx_op: tuple[OnnxOp, ...] | None = None) -> OperatorSpec:
    """The spec of a table row; `home`: the globals of the module that declares it (its class and
    helper go there), `onnx_op`: its ONNX node types where they are not the float_unary kind."""
    home = globals() if home is None else home
    support = _support(op)
    desc_type = _desc_class(op, home["__name__"])
    home[desc_type.__name__] = desc_type
    home[op.helper] = _helper(op, desc_type, home["__name__"])
    example_fields = {"scale_bias": ScaleBias(0.5, 0.25)} if op.scale_bias else {}
    onnx = onnx_op if onnx_op is not None else (
        (OnnxOp(op.onnx, "", op.helper, kind="unary" if op.ints else "float_unary",
                check=float_or_signed_input if op.ints else None),) if op.onnx else ())
    if op.onnx == "Softplus":  # Mish: x * tanh(softplus(x)), its function body (onnx_backend/handlers_activation.py)
        onnx += (OnnxOp("Mish", "", op.helper, check=float_input),)
    return OperatorSpec(desc_type, support, _compiler(op, support),
                        (contract.FLOAT_UNARY[op.fn], *((contract.EW_SUB,) if op.ints else ())),
                        helpers=(op.helper,), onnx=onnx,
                        example=lambda: desc_type(_F32_4D, _F32_4D, **example_fields))


# ---- ELEMENT_WISE_IS_INFINITY: a UINT8 output, so on elementwise.comp (contract.EW_ISINF), not in OPS
ELEMENT_WISE_IS_INFINITY = OperatorSupport("ELEMENT_WISE_IS_INFINITY", 100, tuple(
    row(level, ("input_tensor", "input", dims, FLOATS), ("output_tensor", "output", dims, frozenset({DataType.UINT8})))
    for level, dims in L21))


@dataclass(frozen=True)
class ElementWiseIsInfinityDesc:
    """DML_ELEMENT_WISE_IS_INFINITY_OPERATOR_DESC { InputTensor, OutputTensor, InfinityMode }:
    1 where the input is an infinity of the mode's sign (EITHER, POSITIVE, NEGATIVE), else 0
    (NaN: 0); a UINT8 output of the input's DimensionCount and Sizes. Exact."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    infinity_mode: IsInfinityMode = IsInfinityMode.EITHER


def compile_is_infinity(device: Device, desc: ElementWiseIsInfinityDesc) -> CompiledOperator:
    support = ELEMENT_WISE_IS_INFINITY
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=False)
    mode = desc.infinity_mode
    if isinstance(mode, (bool, np.bool_)) or mode not in set(IsInfinityMode):
        raise invalid("infinity_mode", f"must be a kdml.IsInfinityMode (0, 1 or 2), got {mode!r}")
    x, y = desc.input_tensor, desc.output_tensor
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    family = contract.EW_ISINF
    plans = plan_elementwise(family, family.name(t=type_code(x.data_type, True), ob=8), (x, y),
                             **device_limits(device), unused_b=[int(mode)])
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


def isinf(x: Any, *, infinity_mode: Any = IsInfinityMode.EITHER, out: Tensor | None = None,
          device: Device | None = None) -> Tensor:
    """1 where x (FLOAT32 / FLOAT16) is an infinity of `infinity_mode`'s sign, else 0, as UINT8
    (DML_ELEMENT_WISE_IS_INFINITY)."""
    dev, (t,) = _operands((x,), ("x",), device)
    d = t.desc
    if out is not None:
        check_out(out, dev, d.sizes, DataType.UINT8)
    out_desc = out.desc if out is not None else _packed(DataType.UINT8, d.sizes)
    op = compile_cached(dev, ElementWiseIsInfinityDesc(d, out_desc, infinity_mode))
    if out is None:
        out = pooled_empty(dev, out_desc)
    op.execute([t], [out])
    return out


def _isinf_rule(t: NodeTypes) -> str:
    """ONNX IsInf on the device: a float32 / float16 input and detect_negative / detect_positive
    not both 0 (that node's outputs are all false: it stays on the CPU)."""
    if not int(t.attr("detect_negative", 1)) and not int(t.attr("detect_positive", 1)):
        return "detect_negative = detect_positive = 0"
    return float_input(t)


assert {op.fn for op in OPS} == set(FLOAT_UNARY), "FLOAT_UNARY must name the table's functions"
SPECS = (*(_spec(op) for op in OPS),
         OperatorSpec(ElementWiseIsInfinityDesc, ELEMENT_WISE_IS_INFINITY, compile_is_infinity, (contract.EW_ISINF,),
                      helpers=("isinf",), onnx=(OnnxOp("IsInf", "", "isinf", check=_isinf_rule),),  # handlers_math
                      example=lambda: ElementWiseIsInfinityDesc(_F32_4D, TensorDesc(DataType.UINT8, (1, 2, 3, 4)))))
