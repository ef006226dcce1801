"""Quantized products of onnxruntime's QDQ format (quantize_static with QuantFormat.QDQ):
DequantizeLinear(x) -> MatMul(., W) -> QuantizeLinear fused at prepare (fusions.PATTERNS) into
one QLinearMatMul (handlers_integer._h_qlinear_matmul: MATRIX_MULTIPLY_INTEGER_TO_FLOAT, then
the requantization), where W is a DequantizeLinear of a 2-D int8 / uint8 initializer, per tensor
or per output column (axis 1), and x's and the output's scale and zero point are per-tensor
initializers. onnxruntime's own QDQ selectors fuse the same node unit into QLinearMatMul, with the
same arithmetic: the exact integer sums, scaled once by x_scale * w_scale / y_scale in float32.

quantize_static shares one DequantizeLinear among the readers of a value unless asked for a
dedicated pair per reader (its DedicatedQDQPair option): `dedicate_dequantize` gives each MatMul
or Conv of a dequantized constant weight reading a shared DequantizeLinear its own copy at prepare,
as onnxruntime's EnsureUniqueDQForNodeUnit pass does, so that those chains match here and in
fusion_qconv.py (other readers share the original: a copy they read would be one more dispatch).

Products of two computed values (an attention's Q K^T) stay unfused: DequantizeLinear, the float
MatMul and QuantizeLinear, all on the device.

Between the quantized operators, every value of a QDQ graph goes through QuantizeLinear ->
DequantizeLinear with one scale and zero point: such a pair runs as ELEMENT_WISE_QUANTIZE_LINEAR's
round-trip extension (`kdml.quantize_linear(..., round_trip=True)`), the two operators' bits in one
dispatch, unless the DequantizeLinear starts a quantized product's chain (it reads the integers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

import kompute_dml as kdml

from .fusion_qconv import _Q8, _dq, _in, per_tensor_parameters, run_constants, static_constants
from .graph import _attr
from .handlers_integer import _h_qlinear_matmul
from .handlers_values import as_device
from .values import DeviceValue, FallbackNeeded, RunStats

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep

# readers whose chains start at their input 0's DequantizeLinear (DQ -> MatMul / Conv -> Q)
_UNIT_HEADS = frozenset({"MatMul", "Conv"})


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {name: node for node in graph.node for name in node.output if name}


def _starts_product(node: onnx.NodeProto, name: str, producer: dict[str, onnx.NodeProto],
                    is_constant: Callable[[str], bool]) -> bool:
    """Whether `node` reads `name` as the x of a quantized product: a MatMul or Conv reading it as
    input 0 (once) whose weight, input 1, is a DequantizeLinear of a constant (through Identity
    nodes): the chains of this module and fusion_qconv.py."""
    if node.op_type not in _UNIT_HEADS or len(node.input) < 2 or node.input[0] != name or list(node.input).count(name) != 1:
        return False
    w = producer.get(node.input[1])
    while w is not None and w.op_type == "Identity":
        w = producer.get(w.input[0])
    return w is not None and w.op_type == "DequantizeLinear" and is_constant(w.input[0])


def product_inputs(graph: onnx.GraphProto, is_constant: Callable[[str], bool]) -> frozenset[str]:
    """The values quantized products read as their x (`_starts_product`): a DequantizeLinear making
    one belongs to its product's chain, not to a QuantizeLinear -> DequantizeLinear pair."""
    producer = _producers(graph)
    return frozenset(n.input[0] for n in graph.node if n.input and _starts_product(n, n.input[0], producer, is_constant))


def dedicate_dequantize(graph: onnx.GraphProto, outputs: set[str],
                        is_constant: Callable[[str], bool]) -> tuple[onnx.GraphProto, dict[str, str]]:
    """The graph with a DequantizeLinear per quantized product (`_starts_product`) reading a shared
    one, each copy placed just before its reader, and the new values' names -> the names they copy;
    the graph itself where no such DequantizeLinear is shared."""
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(graph.node):
        for name in set(node.input):
            if name:
                readers.setdefault(name, []).append(i)
    producer = _producers(graph)
    dqs = {n.output[0]: n for n in graph.node if n.op_type == "DequantizeLinear" and n.domain in ("", "ai.onnx")}
    copies: dict[int, onnx.NodeProto] = {}  # reader index -> its own DequantizeLinear
    renamed: dict[str, str] = {}
    for name, dq in dqs.items():
        rs = readers.get(name, [])
        if len(rs) < 2 and name not in outputs:
            continue
        heads = [i for i in rs if _starts_product(graph.node[i], name, producer, is_constant)]
        if len(heads) == len(rs) and name not in outputs:
            heads = heads[1:]  # the first reader keeps the original
        for k, i in enumerate(heads):
            copy = onnx.NodeProto()
            copy.CopyFrom(dq)
            copy.output[0] = f"{name}/dq_for_{k}"
            copy.name = f"{dq.name}/dq_for_{k}"
            copies[i] = copy
            renamed[copy.output[0]] = name
    if not copies:
        return graph, {}
    nodes = []
    for i, node in enumerate(graph.node):
        if i in copies:
            copy = copies[i]
            nodes.append(copy)
            node = onnx.NodeProto()
            node.CopyFrom(graph.node[i])
            node.input[0] = copy.output[0]
        nodes.append(node)
    new = helper.make_graph(nodes, graph.name, graph.input, graph.output, value_info=graph.value_info)
    new.sparse_initializer.extend(graph.sparse_initializer)
    return new, renamed


def qdq_matmul_plan(graph: onnx.GraphProto, constant: Callable[[str], np.ndarray | None],
                    nodes: list[onnx.NodeProto]) -> str | dict[str, Any]:
    """Why DequantizeLinear -> MatMul -> QuantizeLinear cannot run as one QLinearMatMul (a
    message), else the weight's DequantizeLinear inputs (integers, scale, zero point)."""
    dq, mm, q = nodes
    why = per_tensor_parameters((dq, q), constant)
    if why:
        return why
    if dq.input[0] == mm.input[1]:
        return "x is also the weight"
    weights = _dq(graph, constant, mm.input[1])
    if weights is None:
        return "the weight is not a DequantizeLinear of initializers"
    wdq, w, ws, wz = weights
    if w.dtype not in _Q8 or w.ndim != 2 or ws.dtype != np.float32:
        return f"the weight is {w.dtype} of {w.ndim} dimensions dequantized by {ws.dtype}"
    per_column = ws.ndim == 1 and ws.size == w.shape[1] and int(_attr(wdq, "axis", 1)) in (1, -1)
    if ws.size != 1 and not per_column:
        return "the weight's scale is neither per tensor nor per output column"
    if wz is not None and wz.size != 1 and (not per_column or wz.shape != ws.shape):
        return "the weight's zero point is neither per tensor nor per output column"
    return {"w": [_in(wdq, i) for i in range(3)]}


def check_qdq_matmul(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    x_t = rep._elem_dtype(nodes[0].input[0])
    if x_t is not None and x_t not in _Q8:
        return f"the quantized input is {x_t}"
    plan = qdq_matmul_plan(rep.graph, static_constants(rep), nodes)
    return plan if isinstance(plan, str) else ""


def run_qdq_matmul(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                   stats: RunStats) -> list[Any]:
    dq, mm, q = nodes
    prepared = ctx.prepared
    plan = qdq_matmul_plan(prepared.graph, run_constants(prepared), nodes)
    if isinstance(plan, str):
        raise FallbackNeeded(plan)  # Fusion.run: the chain runs unfused
    # the node unit as the QLinearMatMul onnxruntime fuses it into (its inputs' names key the uploads)
    names = [dq.input[0], dq.input[1], _in(dq, 2), *plan["w"], q.input[1], _in(q, 2)]
    unit = helper.make_node("QLinearMatMul", names, [q.output[0]], name=mm.name)
    return _h_qlinear_matmul(ctx, unit, [lookup(n) if n else None for n in names], stats)


def check_qdq_pair(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    q, dq = nodes
    x_t = rep._elem_dtype(q.input[0])
    if x_t is not None and x_t != np.float32:
        return f"QuantizeLinear of {x_t}"
    if any(a.name in ("block_size", "output_dtype", "saturate") for a in q.attribute):
        return "QuantizeLinear's attributes beyond axis"
    constant = static_constants(rep)
    const = [[constant(n) for n in (_in(node, 1), _in(node, 2))] for node in (q, dq)]
    for (scale, zp), node in zip(const, (q, dq)):
        if scale is None or scale.size != 1 or scale.dtype != np.float32 or (_in(node, 2) and (zp is None or zp.size != 1)):
            return f"{node.op_type}'s scale / zero point is not a per-tensor initializer (float32 scale)"
    (qs, qz), (ds, dz) = const
    qz, dz = (np.zeros((), np.uint8) if z is None else z.reshape(()) for z in (qz, dz))
    if qs.tobytes() != ds.tobytes() or qz.dtype != dz.dtype or qz != dz:
        return "the pair's scales or zero points differ"
    if dq.output[0] in rep.qdq_product_inputs:  # its product's chain reads the integers
        return "the DequantizeLinear starts a quantized product's chain"
    return ""


def run_qdq_pair(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                 stats: RunStats) -> list[Any]:
    q, _dq_node = nodes
    prepared = ctx.prepared
    x = as_device(ctx, lookup(q.input[0]), stats, q.input[0])
    if x.dtype != np.float32:
        raise FallbackNeeded(f"QuantizeLinear of {x.dtype}")
    scale = ctx.to_device(prepared.constant_host(q.input[1]), stats, q.input[1])
    zp_name = _in(q, 2)
    zp = ctx.to_device(prepared.constant_host(zp_name) if zp_name else np.zeros((), np.uint8), stats, zp_name or None)
    shape = x.shape
    y = kdml.quantize_linear(x.tensor, scale, zp, round_trip=True, out=ctx.out_tensor(shape, np.dtype(np.float32)),
                             device=ctx.device)
    return [DeviceValue(y, shape, np.dtype(np.float32))]
