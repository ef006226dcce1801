"""The exported graphs' RMS normalization as one MEAN_VARIANCE_NORMALIZATION1 dispatch
(kdml.rms_norm; fusions.py's patterns), as torch.onnx.export writes Llama's, Mistral's and T5's:

    Pow(x, 2) -> ReduceMean(last axis, keepdims) -> Add(., eps) -> Sqrt
    -> Div(1, .) | Reciprocal -> Mul(x, .)      (or Div(x, .) straight after the Sqrt)
    -> [Cast to x's own type] -> Mul(weight, .)

x is the same value at the Pow and at the Mul (or Div), eps a constant scalar, the 1 a constant
scalar one, the weight broadcast along the last axis only (checked at run: anything else runs
the chain node by node). The statistics are float32 sums in the operator's order, so the result
differs from the unfused nodes' only in rounding (as onnxruntime's own SimplifiedLayerNormalization
fusion does): within the families' tolerance (tests/test_model_families.py, tests/test_fusion_rmsnorm.py).
A float16 x gets float32 statistics, where the unfused chain rounds every step to float16."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr, constant_float, other_input
from .handlers_values import as_device
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep

_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def _axes(rep: BackendRep, node: onnx.NodeProto) -> list[int] | None:
    if len(node.input) > 1 and node.input[1]:  # opset 18: an input
        if node.input[1] not in rep.constants or node.input[1] in rep.input_names:
            return None
        return [int(a) for a in rep.constant_host(node.input[1]).reshape(-1)]
    a = _attr(node, "axes")
    return None if a is None else [int(v) for v in a]


def _roles(nodes: list[onnx.NodeProto]) -> dict[str, onnx.NodeProto]:
    """pow, mean, add, sqrt, [inv,] combine (Mul(x, 1/s) or Div(x, s)), [cast,] scale: a chain
    with the 1 / s node has 7 nodes besides its Cast, one without it 6."""
    cast = [n for n in nodes if n.op_type == "Cast"]
    r = dict(zip(("pow", "mean", "add", "sqrt"), nodes[:4]))
    rest = nodes[4:]
    if len(nodes) - len(cast) == 7:
        r["inv"], rest = rest[0], rest[1:]
    r["combine"], r["scale"] = rest[0], rest[-1]
    if cast:
        r["cast"] = cast[0]
    return r


def check_rms_norm(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not an RMS normalization ("" where it is)."""
    r = _roles(nodes)
    x = r["pow"].input[0]
    dt = rep._elem_dtype(x)
    if dt not in _FLOATS:
        return f"x of type {dt}"
    if constant_float(rep, r["pow"].input[1]) != 2.0:
        return "Pow's exponent is not the constant 2"
    rank = rep._declared_rank(x)
    axes = _axes(rep, r["mean"])
    if rank is None or axes not in ([-1], [rank - 1]) or int(_attr(r["mean"], "keepdims", 1)) != 1:
        return f"ReduceMean over {axes} (rank {rank}, keepdims {_attr(r['mean'], 'keepdims', 1)})"
    if constant_float(rep, other_input(r["add"], r["mean"].output[0])) is None:
        return "Add's epsilon is not a constant scalar"
    inv = r.get("inv")
    if inv is not None and inv.op_type == "Div" and constant_float(rep, inv.input[0]) != 1.0:
        return "Div's numerator is not the constant 1"
    combine = r["combine"]
    joined = combine.input[0] if combine.op_type == "Div" else other_input(combine, (inv or r["sqrt"]).output[0])
    if joined != x:
        return "the normalized value is not the Pow's input"
    cast = r.get("cast")
    if cast is not None and onnx.helper.tensor_dtype_to_np_dtype(int(_attr(cast, "to", 0))) != dt:
        return "Cast to another type"
    weight = other_input(r["scale"], (cast or combine).output[0])
    if rep._elem_dtype(weight) not in (dt, None):
        return f"weight of type {rep._elem_dtype(weight)}"
    return ""


def run_rms_norm(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                 stats: RunStats) -> list[Any]:
    r = _roles(nodes)
    name = r["pow"].input[0]
    x = lookup(name)
    weight_name = other_input(r["scale"], (r.get("cast") or r["combine"]).output[0])
    weight = lookup(weight_name)
    shape, dt = _value_shape(x), _value_dtype(x)
    wshape = _value_shape(weight)
    if not shape or _value_dtype(weight) != dt or any(s != 1 for s in wshape[:-1]) or \
            (wshape and wshape[-1] not in (1, shape[-1])) or len(wshape) > len(shape):
        raise FallbackNeeded(f"x {shape} {dt}, weight {wshape} {_value_dtype(weight)}")
    eps = float(ctx.prepared.constant_host(other_input(r["add"], r["mean"].output[0])).reshape(-1)[0])
    tx, tw = (as_device(ctx, v, stats, n).tensor for v, n in ((x, name), (weight, weight_name)))
    tw = kdml.Tensor.trusted(tw.buffer, kdml.TensorDesc(tw.desc.data_type, (wshape[-1] if wshape else 1,)), tw.offset) \
        if len(wshape) != 1 else tw
    y = kdml.rms_norm(tx, tw, axis=-1, epsilon=eps, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(y, shape, dt)]


def rms_norm_patterns(pattern: Callable[..., Any]) -> list[Any]:
    """Every variant's Pattern: the epsilon on either side of the Add, 1 / s by Div or Reciprocal
    (or x / s at once), x on either side of the Mul, the Cast or none, the weight on either side."""
    out = []
    for add_k, inv, mul_k, cast, w_k in itertools.product((0, 1), ("Div", "Reciprocal", None), (0, 1),
                                                            (False, True), (0, 1)):
        if inv is None and mul_k:  # Div(x, s): x is its input 0, one variant
            continue
        ops = ["Pow", "ReduceMean", "Add", "Sqrt"]
        edges = [(0, 1, 0), (1, 2, add_k), (2, 3, 0)]
        if inv is not None:
            ops += [inv, "Mul"]
            edges += [(3, 4, 1 if inv == "Div" else 0), (4, 5, mul_k)]
        else:
            ops.append("Div")
            edges.append((3, 4, 1))
        if cast:
            ops.append("Cast")
            edges.append((len(ops) - 2, len(ops) - 1, 0))
        ops.append("Mul")
        edges.append((len(ops) - 2, len(ops) - 1, w_k))
        out.append(pattern("+".join(ops), tuple(ops), tuple(edges), "MEAN_VARIANCE_NORMALIZATION1",
                           check_rms_norm, run_rms_norm))
    return out
