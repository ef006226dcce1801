"""Integer products that share their quantized A, run as one product.

A transformer's Q, K and V projections are three MatMulIntegerToFloat nodes on one quantized
activation (the same A, A scale and A zero point) with constant weights. DirectML's
MATRIX_MULTIPLY_INTEGER_TO_FLOAT takes B's scale, zero point and the bias per column, so the
three are one product over the weights side by side, [B_q | B_k | B_v], whose output columns
are the three results: every output element is the same integer sum and the same epilogue
(the same float operations on the same values) as in its own product, so the bits are equal.
The members' results are column views of the one output (handlers_values.reshaped keeps
them views through the heads' Reshape). One dispatch instead of three, and a wider product
that fills more of the GPU: at BERT 256 / 3 layers, 8 x 128, each projection was ~10 us of
device time on an H100, mostly fixed cost.

Float products likewise (find_float_groups): MatMul(A, W) with constant 2-D weights of one K and type
on one A, each either followed by Add(., bias) as fusion_bias.py fuses it or alone (plain ones joining
biased ones with a bias of -0, or all plain): one
GEMM over [W_q | W_k | W_v] (and [b_q | b_k | b_v]), each output element the same sum over K in order and
the same bias addition as in its own GEMM (ViT's and Llama's projections: three dispatches of 520 x 256
x 256 at ViT 8 x 64 x 64 images become one).

`find_groups(rep)` / `find_float_groups(rep)` find them once per model; `run(ctx, group, node, ...)` serves a member.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import numpy_helper

import kompute_dml as kdml
from kompute_dml.core.tensor_desc import MINIMUM_BUFFER_TENSOR_ALIGNMENT

from .graph import constant_float, other_input
from .handlers_values import as_device, strided
from .values import DeviceValue, FallbackNeeded, RunStats, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


@dataclass(frozen=True)
class ProductGroup:
    key: tuple[str, ...]  # the shared inputs: A, A scale, A zero point
    columns: dict[str, tuple[int, int]]  # member output name -> (first column, columns)
    names: tuple[str | None, ...]  # merged constants: B, B scale, B zero point, bias (float: W, bias)


def _const(rep: BackendRep, node: onnx.NodeProto, i: int) -> np.ndarray | None:
    """Input i of the node as a constant array, None where absent; raises KeyError where it is
    present but not a constant."""
    if i >= len(node.input) or not node.input[i]:
        return None
    if node.input[i] not in rep.constants:
        raise KeyError(node.input[i])
    return rep.constant_host(node.input[i])


def _per_column(v: np.ndarray | None, n: int, dtype: Any) -> np.ndarray:
    if v is None:
        return np.zeros(n, dtype)
    return np.broadcast_to(v.reshape(-1), (n,)).astype(dtype)


def _aligned(start: int, itemsize: int) -> int:
    """The first column at or after `start` whose output starts on DirectML's 16-byte tensor alignment:
    a member's column view is bound at its first element (a router's 4 columns beside a projection's)."""
    unit = MINIMUM_BUFFER_TENSOR_ALIGNMENT // itemsize
    return -(-start // unit) * unit


def _padded(parts: list[np.ndarray], starts: list[int], axis: int) -> np.ndarray:
    """The members' parts side by side along `axis`, each at its start column, zeros between them
    (columns no member reads: zero weights, scales and biases)."""
    gaps = [b - (a + p.shape[axis]) for a, b, p in zip(starts, starts[1:], parts)]
    out: list[np.ndarray] = []
    for part, gap in zip(parts, [*gaps, 0]):
        out.append(part)
        if gap:
            shape = list(part.shape)
            shape[axis] = gap
            out.append(np.zeros(shape, part.dtype))
    return np.concatenate(out, axis=axis)


def find_groups(rep: BackendRep) -> dict[str, ProductGroup]:
    """member output name -> its group, for groups of two or more MatMulIntegerToFloat nodes
    with the same A, A scale and A zero point, and constant 2-D B (one K and type), B scales
    (one type), B zero points and biases (all or none)."""
    by_a: dict[tuple[str, ...], list[tuple[onnx.NodeProto, tuple[Any, ...]]]] = {}
    for node in rep.graph.node:
        if node.op_type != "MatMulIntegerToFloat" or len(node.input) < 4:
            continue
        try:
            b, bs, bzp, bias = (_const(rep, node, i) for i in (1, 3, 5, 6))
        except KeyError:
            continue
        if b is None or b.ndim != 2 or bs is None or bs.size not in (1, b.shape[1]):
            continue
        if (bzp is not None and bzp.size not in (1, b.shape[1])) or (bias is not None and bias.shape != (b.shape[1],)):
            continue
        key: tuple[str, ...] = (node.input[0], node.input[2], node.input[4] if len(node.input) > 4 else "")
        by_a.setdefault(key, []).append((node, (b, bs, bzp, bias)))
    out: dict[str, ProductGroup] = {}
    for key, members in by_a.items():
        kinds = {(b.shape[0], b.dtype, bs.dtype, bias is None) for _n, (b, bs, _z, bias) in members}
        if len(members) < 2 or len(kinds) != 1:
            continue
        stem = f"{members[0][0].output[0]}#grouped"
        bs_, scales, zps, biases, columns, starts = [], [], [], [], {}, []
        start = 0
        for node, (b, bs, bzp, bias) in members:
            n = b.shape[1]
            start = _aligned(start, bs.dtype.itemsize)  # the output's type is the scales'
            columns[node.output[0]] = (start, n)
            starts.append(start)
            start += n
            bs_.append(b)
            scales.append(_per_column(bs, n, bs.dtype))
            zps.append(_per_column(bzp, n, b.dtype))
            biases.append(bias)
        any_zp = any(m[1][2] is not None for m in members)
        merged = {"B": _padded(bs_, starts, 1), "B_scale": _padded(scales, starts, 0),
                  "B_zero_point": _padded(zps, starts, 0) if any_zp else None,
                  "bias": None if biases[0] is None else _padded(biases, starts, 0)}
        names: list[str | None] = []
        for what, arr in merged.items():
            if arr is None:
                names.append(None)
                continue
            name = f"{stem}/{what}"
            rep.constants[name] = numpy_helper.from_array(np.ascontiguousarray(arr), name)
            names.append(name)
        group = ProductGroup(key, columns, (str(names[0]), str(names[1]), names[2], names[3]))
        for member in columns:
            out[member] = group
    return out


def _exactly_scaled(x: np.ndarray, c: float) -> np.ndarray | None:
    """x * c where every element scales exactly (c a power of two: no overflow, no subnormal loss)."""
    with np.errstate(all="ignore"):
        y = (x * x.dtype.type(c)).astype(x.dtype)
        back = (y / x.dtype.type(c)).astype(x.dtype)
    return y if np.array_equal(back, x) else None


def find_float_groups(rep: BackendRep) -> dict[str, ProductGroup]:
    """member output name -> its group, for groups of two or more float32 / float16 MatMul nodes
    with the same A and constant 2-D weights of one K and type, each the head of a fusion_bias.py chain
    (rep.fusions: MatMul -> Add(bias), the member the Add's output; MatMul -> Add -> Mul by a power of
    two, the member the Mul's, its weights and bias scaled: c (x W) + c b and x (c W) + c b round alike)
    or none of them in a chain at all (the member: the MatMul's output); plain members on the A of
    biased ones join those with a bias of -0."""
    chains = {f.nodes[0]: f for f in rep.fusions.by_carrier.values() if f.pattern.name in ("MatMul+Add", "MatMul+Add+Mul")}
    nodes = rep.graph.node
    by_a: dict[tuple[str, ...], list[tuple[str, np.ndarray, np.ndarray | None]]] = {}
    for i, node in enumerate(nodes):
        chain = chains.get(i)
        if (node.op_type != "MatMul" or (chain is None and i in rep.fusions.absorbed) or node.input[0] in rep.constants
                or node.input[1] not in rep.constants or node.input[1] in rep.input_names):
            continue
        w = rep.constant_host(node.input[1])
        if w.ndim != 2 or w.dtype not in (np.float32, np.float16):
            continue
        member, bias = node.output[0], None
        if chain is not None:  # its check took the bias (a constant along the last axis) and the scale
            add, last = nodes[chain.nodes[1]], nodes[chain.carrier]
            bias = rep.constant_host(other_input(add, node.output[0])).reshape(-1)
            if bias.dtype != w.dtype or bias.size != w.shape[1]:
                continue
            if last is not add:
                c = constant_float(rep, other_input(last, add.output[0]))
                w, bias = _exactly_scaled(w, c), _exactly_scaled(bias, c)
                if w is None or bias is None:
                    continue
            member = last.output[0]
        by_a.setdefault((node.input[0], "bias" if bias is not None else ""), []).append((member, w, bias))
    for (a_name, kind), members in list(by_a.items()):
        # plain products on a biased group's A join it with a bias of -0: S + (-0) is S for every S (an
        # exact zero's sign included), so the member keeps its bits (Whisper's key projection has no bias)
        biased = by_a.get((a_name, "bias"))
        if kind == "" and biased is not None:
            biased += [(m, w, np.full(w.shape[1], -0.0, w.dtype)) for m, w, _b in members]
            del by_a[(a_name, kind)]
    out: dict[str, ProductGroup] = {}
    for key, members in by_a.items():
        if len(members) < 2 or len({(w.shape[0], w.dtype) for _m, w, _b in members}) != 1:
            continue
        stem, columns, start, starts = f"{members[0][0]}#grouped", {}, 0, []
        for member, w, _b in members:
            start = _aligned(start, w.dtype.itemsize)
            columns[member] = (start, w.shape[1])
            starts.append(start)
            start += w.shape[1]
        names: list[str | None] = [f"{stem}/W", f"{stem}/bias" if key[1] else None]
        rep.constants[f"{stem}/W"] = numpy_helper.from_array(_padded([w for _m, w, _b in members], starts, 1), names[0])
        if key[1]:
            rep.constants[f"{stem}/bias"] = numpy_helper.from_array(_padded([b for _m, _w, b in members], starts, 0),
                                                                    names[1])
        group = ProductGroup(key, columns, tuple(names))
        for member in columns:
            out[member] = group
    return out


def _column_view(v: DeviceValue, first: int, n: int) -> DeviceValue:
    """Columns [first, first + n) of v: v's strides, the start moved along the last dimension."""
    strides = tuple(v.tensor.desc.effective_strides)
    view = strided(v, (*v.shape[:-1], n), strides)
    t = view.tensor
    moved = kdml.Tensor.trusted(t.buffer, t.desc, t.offset + first * strides[-1] * t.desc.data_type.size)
    return DeviceValue(moved, view.shape, view.dtype)


def group_of(ctx: NodeContext, node: onnx.NodeProto) -> ProductGroup | None:
    return ctx.prepared.product_groups.get(node.output[0]) if node.output else None


def run(ctx: NodeContext, group: ProductGroup, node: onnx.NodeProto, a: DeviceValue, product: Any) -> Any:
    """The member `node`'s result: the group's one product, made at its first member
    (`product(b, b_name, b_scale, b_scale_name, b_zp, b_zp_name, bias, bias_name)` runs it),
    as a column view. In a whole-graph plan the output buffer is held once per member
    (PlanContext.hold_for_members) and each member releases its hold once its own view is
    held: the buffer is reused only after every member's view has died."""
    memo = ctx.memo
    hit = memo.get(group.key)
    if hit is None or hit[0] is not a:
        args = [(ctx.prepared.constant_host(n), n) if n else (None, None) for n in group.names]
        whole = product(*(x for pair in args for x in pair))
        if not isinstance(whole, DeviceValue):
            raise FallbackNeeded("a grouped integer product gave a host value")
        views = {m: _column_view(whole, *cols) for m, cols in group.columns.items()}
        hit = (a, views, whole)
        memo[group.key] = hit
        ctx.hold_for_members(whole, len(views))
    ctx.release_after_node(hit[2])
    return hit[1][node.output[0]]


def grouped_gemm(ctx: NodeContext, a: DeviceValue, w: tuple[Any, str], bias: tuple[Any, str | None],
                 stats: RunStats) -> DeviceValue:
    """A float product group's one GEMM: a times the merged weights, plus the
    merged biases where the members have them."""
    wt = as_device(ctx, w[0], stats, w[1])
    shape = (*_value_shape(a)[:-1], _value_shape(wt)[-1])
    out = ctx.out_tensor(shape, a.dtype)
    if bias[0] is None:
        return DeviceValue(kdml.matmul(a.tensor, wt.tensor, out=out, device=ctx.device), shape, a.dtype)
    c = as_device(ctx, bias[0], stats, bias[1]).tensor
    return DeviceValue(kdml.gemm(a.tensor, wt.tensor, c, out=out, device=ctx.device), shape, a.dtype)
