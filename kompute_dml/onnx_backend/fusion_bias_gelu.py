"""A product, its bias and GELU in one GEMM dispatch (fusions.py's patterns): the feed-forward's first
layer as torch.onnx.export writes it, MatMul -> Add(bias) -> the exact GELU chain (BERT, ViT, Whisper)
or the tanh chain (GPT-2), and as onnxruntime's optimizer leaves it, MatMul -> Add -> Gelu (opset 20
or com.microsoft), MatMul -> com.microsoft BiasGelu and MatMul -> com.microsoft FastGelu(x, bias) (tanh);
on DML_GEMM with the bias as C and ACTIVATION_GELU as its FusedActivation (ops/conv_fused.py: kompute_dml's extension of GEMM's list).

The result is the bits of the two pieces run one after the other: fusion_bias.py's GEMM (the
conditions are its own: a constant bias along the last axis, float32 or float16, no half precision)
and then fusion_gelu.py's ACTIVATION_GELU, or the Gelu / BiasGelu node's, since GEMM applies the
activation to each output as the output type holds it. Where a run-time condition fails, the
pieces run by themselves (Fusion.within): also where the product's kernel is slower with a fused
activation than the two dispatches (run_matmul_bias asks ops/gemm.py keeps_speed_with_activation,
DevicePolicy.gemm_act_blocks: GELU's basic-arithmetic code costs the tensor-core kernels and the 128 x 128 tile
their occupancy; the 128 x 64 tile, which a product alone takes over K >= 512, has no activation variant): there
the chain runs the product with its bias as C, then GELU's own dispatch (for BiasGelu / FastGelu two, where the
node's handler alone adds the bias in a third).

Not matched: an exact chain whose x / sqrt 2 is a Mul reading x at the same input index as the
chain's Mul(x, .) (the two readers cannot be told apart): fusion_bias.py and fusion_gelu.py still
run it in two dispatches."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import onnx

import kompute_dml as kdml

from .fusion_bias import SlowerFused, check_matmul_bias, run_matmul_bias
from .fusion_gelu import check_gelu, check_gelu_tanh
from .graph import attr_text
from .values import DeviceValue

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep
    from .values import RunStats


def _gelu_node_form(node: onnx.NodeProto) -> str:
    return attr_text(node, "approximate", "none")


def _check(tail: Callable[[BackendRep, list[onnx.NodeProto]], str]) -> Callable[[BackendRep, list[onnx.NodeProto]], str]:
    def check(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
        return check_matmul_bias(rep, nodes[:2]) or tail(rep, nodes[2:])
    return check


def _check_gelu_node(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    form = _gelu_node_form(nodes[-1])
    return "" if form in ("none", "tanh") else f"Gelu's approximate {form!r}"


def _check_bias_gelu(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """BiasGelu(x, bias) or FastGelu(x, bias): x the product, the bias as fusion_bias.py takes an Add's."""
    op = nodes[1].op_type
    if list(nodes[1].input[:1]) != [nodes[0].output[0]]:
        return f"{op}'s x is not the product"
    if len(nodes[1].input) < 2 or not nodes[1].input[1]:
        return f"{op} without a bias"
    return check_matmul_bias(rep, nodes)


def _run(approximate: str | None) -> Callable[..., list[Any]]:
    """The fused run: GELU of the form `approximate` (None: the Gelu node's attribute)."""
    def run(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any], stats: RunStats) -> list[Any]:
        form = approximate or _gelu_node_form(nodes[-1])
        try:
            return run_matmul_bias(ctx, nodes[:2], lookup, stats,
                                   activation=kdml.ActivationGeluDesc(None, None, approximate=form))
        except SlowerFused:
            # the two pieces: the product with its bias as C (for BiasGelu / FastGelu too, whose own handlers
            # would add the bias in a dispatch of its own: the same rounding, one float32 addition to the
            # product's sum), then ACTIVATION_GELU, as the chain's shorter fusions run them
            (y,) = run_matmul_bias(ctx, nodes[:2], lookup, stats)
            out = kdml.gelu(y.tensor, approximate=form, out=ctx.out_tensor(y.shape, y.dtype), device=ctx.device)
            return [DeviceValue(out, y.shape, y.dtype)]
    return run


def matmul_bias_gelu_patterns(pattern: Callable[..., Any]) -> list[Any]:
    """fusion_bias's MatMul -> Add (the product on either side), then fusion_gelu's chains reading
    the sum (their operands on either side), a Gelu node, or BiasGelu alone."""
    out = []
    for k in (0, 1):
        for head, kx, k_add, k_mul, k_half, half_first in itertools.product(("Div", "Mul"), (0, 1), (0, 1), (0, 1), (0, 1),
                                                                            (False, True)):
            if head == "Div" and kx == 1:
                continue
            # positions: MatMul 0, Add 1 (x), x / sqrt 2 2, Erf 3, Add 4, Mul(x, .) 5, Mul(., 0.5) 6; or (the dynamo
            # exporter's order) Mul(., 0.5) 5, Mul(x, .) 6
            tail = (((4, 5, k_half), (5, 6, k_mul), (1, 6, 1 - k_mul)) if half_first else
                    ((4, 5, k_mul), (1, 5, 1 - k_mul), (5, 6, k_half)))
            edges = ((0, 1, k), (1, 2, kx), (2, 3, 0), (3, 4, k_add), *tail)
            out.append(pattern(f"MatMul+Add+{head}+Erf+Add+Mul+Mul", ("MatMul", "Add", head, "Erf", "Add", "Mul", "Mul"),
                               edges, "GEMM", _check(check_gelu), _run("none")))
        for kh, k_half in itertools.product((0, 1), (0, 1)):
            # MatMul 0, Add 1 (x), Mul(x, 0.5) 2, Pow 3, Mul(b) 4, Add(x, .) 5, Mul(a) 6, Tanh 7, Add(1) 8, Mul 9
            edges = ((0, 1, k), (1, 2, kh), (1, 3, 0), (1, 5, 0), (3, 4, 0), (4, 5, 1), (5, 6, 0), (6, 7, 0), (7, 8, 0),
                     (2, 9, k_half), (8, 9, 1 - k_half))
            out.append(pattern("MatMul+Add+Mul+Pow+Mul+Add+Mul+Tanh+Add+Mul",
                               ("MatMul", "Add", "Mul", "Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul"), edges, "GEMM",
                               _check(check_gelu_tanh), _run("tanh")))
        out.append(pattern("MatMul+Add+Gelu", ("MatMul", "Add", "Gelu"), ((0, 1, k), (1, 2, 0)), "GEMM",
                           _check(_check_gelu_node), _run(None)))
        out.append(pattern("MatMul+Add+Gelu", ("MatMul", "Add", "Gelu"), ((0, 1, k), (1, 2, 0)), "GEMM",
                           _check(_check_gelu_node), _run(None), ms_ops=frozenset({"Gelu"})))
    out.append(pattern("MatMul+BiasGelu", ("MatMul", "BiasGelu"), ((0, 1, 0),), "GEMM", _check_bias_gelu, _run("none"),
                       ms_ops=frozenset({"BiasGelu"})))
    out.append(pattern("MatMul+FastGelu", ("MatMul", "FastGelu"), ((0, 1, 0),), "GEMM", _check_bias_gelu, _run("tanh"),
                       ms_ops=frozenset({"FastGelu"})))
    return out
