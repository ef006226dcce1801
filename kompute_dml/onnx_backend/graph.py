"""Graph helpers: the names a node reads, attributes, types of runtime values, sparse initializers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .values import _FLOAT_OUT, _is_tensor_value, _value_dtype, _value_shape


# ---------------------------------------------------------------------------------
# graph helpers
# ---------------------------------------------------------------------------------
def _subgraph_free_names(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads from an enclosing scope."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}
    used: set[str] = set()
    for node in graph.node:
        for name in _node_inputs(node):
            if name not in defined:
                used.add(name)
        defined.update(o for o in node.output if o)
    used.update(o.name for o in graph.output if o.name not in defined)
    return used


def _node_inputs(node: onnx.NodeProto) -> list[str]:
    """Explicit inputs (non-empty) plus the outer-scope names its graph attributes read."""
    names = [i for i in node.input if i]
    for attr in node.attribute:
        graphs = list(attr.graphs)
        if attr.HasField("g"):
            graphs.append(attr.g)
        for g in graphs:
            for name in sorted(_subgraph_free_names(g)):
                if name not in names:
                    names.append(name)
    return names


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def attr_text(node: onnx.NodeProto, name: str, default: Any = None) -> str:
    """A string attribute as text (onnx's helper gives bytes), or str(default) where absent."""
    v = _attr(node, name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def other_input(node: onnx.NodeProto, name: str) -> str:
    """A two-input node's operand that is not `name` (the Add / Mul / Div of a fused chain)."""
    return node.input[1] if node.input[0] == name else node.input[0]


def positive_zero_constant(rep: Any, name: str) -> str:
    """Why the value `name` (a Where's, which a kernel writes as +0) is not a float32 / float16
    constant of +0.0 everywhere; "" where it is."""
    if name not in rep.constants or name in rep.input_names:
        return f"Where's value {name!r} is not a constant"
    zero = rep.constant_host(name)
    if zero.dtype not in (np.float32, np.float16) or zero.size < 1:
        return f"Where's constant is {zero.dtype} of {zero.size} elements"
    if zero.view(np.uint32 if zero.dtype == np.float32 else np.uint16).any():
        return "Where's constant is not +0.0 everywhere (the kernel writes +0)"
    return ""


def constant_float(rep: Any, name: str) -> float | None:
    """The value of a constant (an initializer that is no graph input) of one float element of
    the prepared model `rep`; None for anything else."""
    if name not in rep.constants or name in rep.input_names:
        return None
    c = rep.constant_host(name)
    return float(c.reshape(-1)[0]) if c.size == 1 and c.dtype.kind == "f" else None


def _np_dtype_of_onnx(elem_type: int) -> np.dtype | None:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


def _type_proto_of_value(value: Any, declared: onnx.TypeProto | None) -> onnx.TypeProto:
    """A TypeProto for a runtime value: element type and rank, every dimension unknown."""
    if _is_tensor_value(value):
        dt = _value_dtype(value)
        if dt.kind == "O":
            elem = TensorProto.STRING
        else:
            elem = helper.np_dtype_to_tensor_dtype(dt)
        return helper.make_tensor_type_proto(elem, [None] * len(_value_shape(value)))
    if isinstance(value, list) and value:
        return helper.make_sequence_type_proto(_type_proto_of_value(value[0], None))
    if declared is not None:
        return declared
    if isinstance(value, list):
        raise ValueError("cannot type an empty sequence without a declared type")
    raise ValueError("cannot type an absent optional value without a declared type")


def _signature(value: Any) -> Any:
    if _is_tensor_value(value):
        return ("t", str(_value_dtype(value)), len(_value_shape(value)))
    if isinstance(value, list):
        return ("s", _signature(value[0]) if value else None)
    if value is None:
        return ("none",)
    return ("?", type(value).__name__)


def _densify(sp: onnx.SparseTensorProto) -> np.ndarray:
    vals = numpy_helper.to_array(sp.values).reshape(-1)
    idx = numpy_helper.to_array(sp.indices)
    dense = np.zeros(int(np.prod(sp.dims)), dtype=vals.dtype)
    flat = idx.reshape(-1) if idx.ndim == 1 else np.ravel_multi_index(idx.T, tuple(sp.dims))
    dense[flat] = vals
    return dense.reshape(tuple(sp.dims))


_F32 = np.finfo(np.float32)


def exact_reciprocal(c: float) -> float | None:
    """1 / c where it is exact and a normal float32 (c a power of two); None otherwise."""
    if not math.isfinite(c) or c == 0.0 or abs(math.frexp(c)[0]) != 0.5:
        return None
    r = 1.0 / c
    return r if float(_F32.tiny) <= abs(r) <= float(_F32.max) else None


def float_product(rep: Any, mm: onnx.NodeProto) -> str:
    """Why a MatMul's declared operand types are not float32 / float16 ("" where they are, or are unknown)."""
    dts = {rep._elem_dtype(n) for n in mm.input[:2]}
    return "" if dts <= _FLOAT_OUT | {None} else f"a product of {sorted(map(str, dts - {None}))}"
