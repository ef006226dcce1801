"""SiLU as one ACTIVATION_SWISH (fusions.py's patterns), as torch.onnx.export writes nn.SiLU / F.silu
before opset 24's Swish node (Llama's and Mistral's MLP gate, EfficientNet's blocks):

    Sigmoid(x) -> Mul(x, .)            (either Mul side, x the same value): kdml.swish
    Conv -> Sigmoid -> Mul(conv, .)    (the Conv's output read by exactly those two): CONVOLUTION
                                        with the fused ACTIVATION_SWISH

SWISH with SigmoidInputScale 1 is the unfused pair's own steps (ACTIVATION_SIGMOID's function, its
result rounded to the type, ELEMENT_WISE_MULTIPLY's product: ops/activation_params.py), and the
fused CONVOLUTION applies it to the Conv output rounded to the type as the unfused Sigmoid and Mul
read it (shaders/conv_common.glsl): both fusions give the unfused nodes' bits
(tests/test_fusion_swish.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import other_input
from .handlers_conv import run_conv
from .handlers_values import as_device
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


def check_silu(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why Sigmoid -> Mul is not x * Sigmoid(x) of a float x ("" where it is)."""
    sig, mul = nodes
    x = sig.input[0]
    if other_input(mul, sig.output[0]) != x:
        return "the Mul's other operand is not the Sigmoid's input"
    dt = rep._elem_dtype(x)
    return "" if dt is None or dt in _FLOAT_OUT else f"x of type {dt}"


def run_silu(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any], stats: RunStats) -> list[Any]:
    name = nodes[0].input[0]
    x = lookup(name)
    dt, shape = _value_dtype(x), _value_shape(x)
    if dt not in _FLOAT_OUT or not shape or 0 in shape:  # (the nodes alone take rank 0 and empty values)
        raise FallbackNeeded(f"x of {dt} {shape}")
    y = kdml.swish(as_device(ctx, x, stats, name).tensor, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(y, shape, np.dtype(dt))]


def check_conv_silu(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why Conv -> Sigmoid -> Mul is not a float Conv's SiLU ("" where it is); the edges already
    make the Mul read the Conv's output and the Sigmoid's."""
    dts = {rep._elem_dtype(name) for name in nodes[0].input[:2]}  # only a float Conv runs on CONVOLUTION
    return "" if dts <= _FLOAT_OUT | {None} else f"Conv of {sorted(map(str, dts - {None}))}"


def run_conv_silu(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                  stats: RunStats) -> list[Any]:
    conv = nodes[0]
    ins = [lookup(name) if name else None for name in conv.input]
    return run_conv(ctx, conv, ins, stats, activation=kdml.ActivationSwishDesc(None, None))


def swish_patterns(pattern: Callable[..., Any]) -> list[Any]:
    """x * Sigmoid(x) with the Sigmoid on either side of the Mul; the Conv's SiLU likewise (its
    edges: Conv -> Sigmoid, Sigmoid -> Mul, Conv -> the Mul's other input)."""
    return [
        *(pattern("Conv+Sigmoid+Mul", ("Conv", "Sigmoid", "Mul"), ((0, 1, 0), (1, 2, k), (0, 2, 1 - k)),
                  "CONVOLUTION", check_conv_silu, run_conv_silu) for k in (0, 1)),
        *(pattern("Sigmoid+Mul", ("Sigmoid", "Mul"), ((0, 1, k),), "ACTIVATION_SWISH", check_silu, run_silu)
          for k in (0, 1)),
    ]
