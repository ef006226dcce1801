"""com.microsoft MatMulNBits (onnxruntime's weight-only quantized product: 4-bit LLM exports) as a
plain MatMul, a pass of `prepare` after constant folding.

A MatMulNBits whose B, scales and zero points are constants (no g_idx) becomes MatMul(A, W) (and
an Add of its bias), W the (K, N) weights dequantized once on the host in A's type, as
onnxruntime's CPU kernel dequantizes them: w[n, k] = (q - zero_point) * scale per block of
`block_size` values of k, q read from B's [N][blocks][block_size * bits / 8] bytes low bits first,
the zero point 2^(bits - 1) where none is given (packed like B, or one value per block of A's
type). The product then runs as any MatMul on the device (its GEMM, bias fusion, tensor cores).
The weights take 32 / bits times their quantized size on the device: the speed of a 4-bit product
is not reached this way, its results are. Only `bits` 2, 4 and 8 (whole values per byte) are
expanded; other nodes are left to the CPU."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"


def _attrs(node: onnx.NodeProto) -> dict[str, int]:
    return {a.name: int(helper.get_attribute_value(a)) for a in node.attribute}


def _unpack(data: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` `bits`-bit values of each row of uint8 `data`, low bits first."""
    per = 8 // bits
    shifts = np.arange(per, dtype=np.uint8) * bits
    vals = (data[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return vals.reshape(*data.shape[:-1], -1)[..., :count]


def dequantize(node: onnx.NodeProto, b: np.ndarray, scales: np.ndarray, zp: np.ndarray | None,
               dtype: np.dtype) -> np.ndarray | None:
    """The (K, N) weights of a MatMulNBits in `dtype` (None where this pass does not take it)."""
    at = _attrs(node)
    k, n, bits, block = at.get("K"), at.get("N"), at.get("bits", 4), at.get("block_size")
    if k is None or n is None or block is None or bits not in (2, 4, 8) or block < 16:
        return None
    blocks = -(-k // block)
    q = _unpack(b.reshape(n, blocks, block * bits // 8), bits, block).astype(np.float32)  # (N, blocks, block)
    s = scales.reshape(n, blocks).astype(np.float32)
    if zp is None:
        z = np.full((n, blocks), float(1 << (bits - 1)), np.float32)
    elif zp.dtype == np.uint8:
        z = _unpack(zp.reshape(n, -1), bits, blocks).astype(np.float32)
    else:  # one zero point per block, of A's type
        z = zp.reshape(n, blocks).astype(np.float32)
    w = (q - z[..., None]) * s[..., None]  # float32, as onnxruntime's kernel dequantizes
    return np.ascontiguousarray(w.reshape(n, blocks * block)[:, :k].T).astype(dtype)


def expand_matmul_nbits(graph: onnx.GraphProto, constants: dict[str, TensorProto],
                        declared: dict[str, onnx.TypeProto]) -> tuple[onnx.GraphProto, int]:
    """The graph with each expandable MatMulNBits replaced (module docstring); new weights join
    `constants` and `declared`. Returns (graph, how many were replaced)."""
    nodes, replaced = [], 0
    for node in graph.node:
        ins = list(node.input) + [""] * (6 - len(node.input))
        a, b, sc, zp, g_idx, bias = ins[:6]
        if node.op_type != "MatMulNBits" or node.domain != MS_DOMAIN or g_idx or not all(
                x in constants for x in (b, sc, *(x for x in (zp,) if x))):
            nodes.append(node)
            continue
        scales = numpy_helper.to_array(constants[sc])
        w = dequantize(node, numpy_helper.to_array(constants[b]), scales,
                       numpy_helper.to_array(constants[zp]) if zp else None, scales.dtype)
        if w is None:
            nodes.append(node)
            continue
        wname, out = f"{node.output[0]}::nbits_weight", node.output[0]
        constants[wname] = numpy_helper.from_array(w, wname)
        declared[wname] = helper.make_tensor_type_proto(constants[wname].data_type, list(w.shape))
        mm_out = f"{out}::nbits_product" if bias else out
        nodes.append(helper.make_node("MatMul", [a, wname], [mm_out], name=f"{node.name}/MatMul"))
        if bias:
            nodes.append(helper.make_node("Add", [mm_out, bias], [out], name=f"{node.name}/Add"))
            if out in declared:
                declared[mm_out] = declared[out]
        replaced += 1
    if not replaced:
        return graph, 0
    new = helper.make_graph(nodes, graph.name, list(graph.input), list(graph.output), value_info=list(graph.value_info),
                            doc_string=graph.doc_string)
    return new, replaced
