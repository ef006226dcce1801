"""The exported exact GELU as one ACTIVATION_GELU dispatch (kdml.gelu; fusions.py's patterns), as
torch.onnx.export writes nn.GELU() before opset 20 (ViT, Whisper, BERT):

    Div(x, sqrt 2) | Mul(x, 1 / sqrt 2) (either side) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5)

and, as the dynamo exporter (torch.export: torch.onnx.export's default since torch 2.9) writes it,
the two products the other way round, ... -> Add(., 1) -> Mul(., 0.5) -> Mul(x, .); x the same value
at the head and at the Mul that reads it, the constants scalars (sqrt 2 within float32 rounding).
ACTIVATION_GELU computes x * 0.5 * (1 + erf(x / sqrt 2)) with one rounding to the type at the end,
where the unfused nodes round each step: within the families' tolerance
(tests/test_fusion_gelu.py against float64 and the unfused nodes).

And GELU's tanh form as GPT-2's NewGELUActivation exports it, FLOAT32 or FLOAT16:

    Mul(x, 0.5) ; Pow(x, 3) -> Mul(., b) -> Add(x, .) -> Mul(., a) -> Tanh -> Add(., 1) ; Mul(half, .)

a = sqrt(2 / pi) and b = 0.044715 rounded to the type (through float32): ACTIVATION_GELU's approximate
"tanh" extension, which rounds every step as these nodes do (Pow(x, 3) as handlers_arith.py runs it):
the unfused bits."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import constant_float, other_input
from .handlers_values import as_device
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


def _near(rep: BackendRep, name: str, want: float) -> bool:
    """The constant is `want` rounded to its own type (float16's sqrt 2 is 1.4140625)."""
    v = constant_float(rep, name)
    if v is None:
        return False
    own = float(np.asarray(want, rep.constant_host(name).dtype))
    return abs(v - own) <= 1e-6 * want


def _outside(nodes: list[onnx.NodeProto]) -> tuple[str, str]:
    """The two operands the chain's last two Muls read from outside it: x and the 0.5, in either
    order (the 0.5 first: the dynamo exporter's)."""
    add, first, last = nodes[2], nodes[3], nodes[4]
    return other_input(first, add.output[0]), other_input(last, first.output[0])


def check_gelu(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not x * 0.5 * (1 + erf(x / sqrt 2)) ("" where it is)."""
    head, erf, add = nodes[:3]
    x = head.input[0]
    if head.op_type == "Mul" and not _near(rep, head.input[1], math.sqrt(0.5)):  # Mul(c, x): x is its input 1
        x = head.input[1]
    if rep._elem_dtype(x) not in (*_FLOAT_OUT, None):  # (None: undeclared, as after contrib nodes: run_gelu checks)
        return f"x of type {rep._elem_dtype(x)}"
    if head.op_type == "Div" and not _near(rep, head.input[1], math.sqrt(2.0)):
        return "Div's divisor is not sqrt 2"
    if head.op_type == "Mul" and not _near(rep, other_input(head, x), math.sqrt(0.5)):
        return "Mul's factor is not 1 / sqrt 2"
    if constant_float(rep, other_input(add, erf.output[0])) != 1.0:
        return "Add's constant is not 1"
    a, b = _outside(nodes)
    if x not in (a, b):
        return "the Mul does not read the head's x"
    if constant_float(rep, b if a == x else a) != 0.5:
        return "the Mul's constant is not 0.5"
    return ""


def run_gelu(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any], stats: RunStats) -> list[Any]:
    name = gelu_x(nodes)
    x = lookup(name)
    dt, shape = _value_dtype(x), _value_shape(x)
    if dt not in _FLOAT_OUT or not shape or 0 in shape:
        raise FallbackNeeded(f"x of {dt} {shape}")
    y = kdml.gelu(as_device(ctx, x, stats, name).tensor, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(y, shape, np.dtype(dt))]


def gelu_x(nodes: list[onnx.NodeProto]) -> str:
    """The exact chain's x (the chain as matched): of `_outside`'s two, the one the head reads too."""
    a, b = _outside(nodes)
    return a if a in nodes[0].input else b


def _tanh_constants(dt: np.dtype) -> tuple[float, float]:
    """a = sqrt(2 / pi) and b = 0.044715 as the type holds them (float16: through float32)."""
    return tuple(float(np.asarray(np.float32(v), dt)) for v in (math.sqrt(2.0 / math.pi), 0.044715))  # type: ignore[return-value]


def check_gelu_tanh(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not (x 0.5) (tanh((x + x^3 b) a) + 1) of float32 or float16 x ("" where it is)."""
    half, pow_, mul_b, add_x, mul_a, _tanh, add_1, _mul = nodes
    x = pow_.input[0]
    # x's type, or where the graph does not declare it (after contrib nodes) its constants' (ONNX's Mul
    # takes operands of one type; run_gelu_tanh checks x's at run time)
    dt = rep._elem_dtype(x) or rep._elem_dtype(other_input(mul_a, add_x.output[0]))
    if dt not in (np.float32, np.float16):
        return f"x of type {dt}"
    a, b = _tanh_constants(np.dtype(dt))
    checks = ((half, x, 0.5, "the first Mul's"), (pow_, x, 3.0, "Pow's exponent"), (mul_b, pow_.output[0], b, "b"),
              (mul_a, add_x.output[0], a, "a"), (add_1, _tanh.output[0], 1.0, "the last Add's"))
    for node, operand, want, what in checks:
        if node is not pow_ and operand not in node.input:
            return f"{what} node does not read {operand}"
        if constant_float(rep, node.input[1] if node is pow_ else other_input(node, operand)) != want:
            return f"{what} constant is not {want}"
    if other_input(add_x, mul_b.output[0]) != x:
        return "the Add does not read Pow's x"
    return ""


def run_gelu_tanh(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                  stats: RunStats) -> list[Any]:
    name = nodes[1].input[0]
    x = lookup(name)
    dt, shape = _value_dtype(x), _value_shape(x)
    if dt not in (np.float32, np.float16) or not shape or 0 in shape:
        raise FallbackNeeded(f"x of {dt} {shape}")
    y = kdml.gelu(as_device(ctx, x, stats, name).tensor, approximate="tanh", out=ctx.out_tensor(shape, dt),
                  device=ctx.device)
    return [DeviceValue(y, shape, np.dtype(dt))]


def gelu_patterns(pattern: Callable[..., Any]) -> list[Any]:
    """x / sqrt 2 by Div or Mul, each later operand on either side; the tanh form with the last Mul's
    operands on either side (the others as torch.onnx.export orders them)."""
    exact = [pattern(f"{head}+Erf+Add+Mul+Mul", (head, "Erf", "Add", "Mul", "Mul"),
                     ((0, 1, 0), (1, 2, k_add), (2, 3, k_first), (3, 4, k_last)), "ACTIVATION_GELU", check_gelu, run_gelu)
             for head, k_add, k_first, k_last in itertools.product(("Div", "Mul"), (0, 1), (0, 1), (0, 1))]
    tanh = [pattern("Mul+Pow+Mul+Add+Mul+Tanh+Add+Mul", ("Mul", "Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul"),
                    ((1, 2, 0), (2, 3, 1), (3, 4, 0), (4, 5, 0), (5, 6, 0), (0, 7, k_half), (6, 7, 1 - k_half)),
                    "ACTIVATION_GELU", check_gelu_tanh, run_gelu_tanh)
            for k_half in (0, 1)]
    return exact + tanh
