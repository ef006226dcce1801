"""Nodes resolved on the host: those that read no value computed from the model's input
data (Shape, and the arithmetic on shapes and constants that follows it: Gather, Concat,
Unsqueeze, Range, Equal, Where, ...). They are evaluated once per input shape with numpy
(operations that are exact in numpy: integer and boolean arithmetic, indexing, copies) and
cached with the plan; a node type without a numpy form here runs as a one-node sub-model on
the CPU fallback engine (onnxruntime or onnx's reference evaluator)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .graph import _attr, _np_dtype_of_onnx


def _shape(node: onnx.NodeProto, ins: list[Any], shape_of: Callable[[Any], tuple[int, ...]]) -> Any:
    shape = shape_of(ins[0])
    r = len(shape)
    start = int(_attr(node, "start", 0))
    end = _attr(node, "end")
    start = max(0, min(r, start + r if start < 0 else start))
    end = r if end is None else max(0, min(r, int(end) + r if int(end) < 0 else int(end)))
    return np.array(shape[start:end], dtype=np.int64)


def _size(node: onnx.NodeProto, ins: list[Any], shape_of: Callable[[Any], tuple[int, ...]]) -> Any:
    return np.array(math.prod(shape_of(ins[0])), dtype=np.int64)


# the node types whose results need only their input's shape, never its values (a device value's
# shape is known without reading it)
SHAPE_ONLY: dict[str, Callable[..., Any]] = {"Shape": _shape, "Size": _size}


def _axes_arg(node: onnx.NodeProto, ins: list[Any], i: int) -> list[int] | None:
    if len(ins) > i and ins[i] is not None:
        return [int(v) for v in np.asarray(ins[i]).reshape(-1)]
    a = _attr(node, "axes")
    return None if a is None else [int(v) for v in a]


def _unsqueeze(node: onnx.NodeProto, ins: list[Any]) -> Any:
    x = np.asarray(ins[0])
    axes = _axes_arg(node, ins, 1) or []
    rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        shape.insert(a, 1)
    return x.reshape(shape)


def _squeeze(node: onnx.NodeProto, ins: list[Any]) -> Any:
    x = np.asarray(ins[0])
    axes = _axes_arg(node, ins, 1)
    return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(axes))


def _reshape(node: onnx.NodeProto, ins: list[Any]) -> Any:
    x = np.asarray(ins[0])
    spec = [int(v) for v in np.asarray(ins[1]).reshape(-1)]
    if not int(_attr(node, "allowzero", 0)):
        spec = [x.shape[i] if d == 0 else d for i, d in enumerate(spec)]
    return x.reshape(spec)


def _flatten(node: onnx.NodeProto, ins: list[Any]) -> Any:
    x = np.asarray(ins[0])
    axis = int(_attr(node, "axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64)))


def _slice(node: onnx.NodeProto, ins: list[Any]) -> Any:
    x = np.asarray(ins[0])
    starts = np.asarray(ins[1]).reshape(-1)
    ends = np.asarray(ins[2]).reshape(-1)
    axes = np.asarray(ins[3]).reshape(-1) if len(ins) > 3 and ins[3] is not None else np.arange(len(starts))
    steps = np.asarray(ins[4]).reshape(-1) if len(ins) > 4 and ins[4] is not None else np.ones(len(starts), np.int64)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int(a) + x.ndim if a < 0 else int(a)
        n = x.shape[a]
        st = int(st)
        if st == 0:
            raise ValueError(f"Slice {node.name!r}: a step of 0")
        s, e = int(s), int(e)
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)  # ONNX: start into [0, n-1]
        index[a] = slice(s, e if e >= 0 else None, st)
    return x[tuple(index)]


def _range(node: onnx.NodeProto, ins: list[Any]) -> Any:
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins[:3])
    if start.dtype.kind == "f":
        raise NotImplementedError  # float ranges: the fallback engine's own arithmetic
    n = max(int(np.ceil((int(limit) - int(start)) / int(delta))), 0)
    return (int(start) + int(delta) * np.arange(n, dtype=np.int64)).astype(start.dtype)


def _constant_of_shape(node: onnx.NodeProto, ins: list[Any]) -> Any:
    value = _attr(node, "value")
    v = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    return np.full(tuple(int(d) for d in np.asarray(ins[0]).reshape(-1)), v[0], dtype=v.dtype)


# A host value at least this large whose elements repeat along some axes (a Gather of a
# constant table by indices that are equal along the batch: BERT's token-type embeddings) is
# kept as a broadcast view of its distinct part (zero strides): computed, and uploaded by
# PlanContext.to_device, at that part's size (MiniLM 64 x 256: 1 row of 256 x 384, not 64).
BROADCAST_BYTES = 64 << 10


def compact(a: np.ndarray) -> np.ndarray:
    """The distinct part of a broadcast view: its zero-stride axes (of more than one element) cut to one."""
    return a[tuple(slice(0, 1) if st == 0 and n > 1 else slice(None) for st, n in zip(a.strides, a.shape))]


def _repeating(idx: np.ndarray) -> np.ndarray:
    """idx with every axis along which it is constant made a zero-stride broadcast of its first slice."""
    base = idx
    for ax in range(idx.ndim):
        if idx.shape[ax] > 1:
            first = np.take(base, [0], axis=ax)
            if np.array_equal(np.broadcast_to(first, base.shape), base):
                base = first
    return np.broadcast_to(base, idx.shape)


def _gather(take: Callable[..., Any]) -> Callable[[onnx.NodeProto, list[Any]], Any]:
    """Gather (np.take) or GatherElements (np.take_along_axis): negative indices from the end.
    A large Gather whose indices repeat along axes is taken once and broadcast (BROADCAST_BYTES)."""
    def run(node: onnx.NodeProto, ins: list[Any]) -> Any:
        x, idx = np.asarray(ins[0]), np.asarray(ins[1])
        axis = int(_attr(node, "axis", 0))
        axis = axis + x.ndim if axis < 0 else axis
        idx = np.where(idx < 0, idx + x.shape[axis], idx)
        if take is np.take and idx.size * x.itemsize * (x.size // max(x.shape[axis], 1)) >= BROADCAST_BYTES:
            part = compact(_repeating(idx))
            if part.size < idx.size:
                out = take(x, part, axis=axis)
                return np.broadcast_to(out, x.shape[:axis] + idx.shape + x.shape[axis + 1:])
        return take(x, idx, axis=axis)
    return run


def _cast(node: onnx.NodeProto, ins: list[Any]) -> Any:
    """Cast between integers, bools, float32 and float64 as onnxruntime's CPU kernel does it: C++'s
    static_cast, which on x86-64 and ARM64 rounds an integer or float64 to the nearest float32 (ties
    to even) and truncates a float toward zero, as numpy's astype; a float to an integer type only
    where every value is finite and fits (C++ leaves the rest undefined), float16 and the others to
    the fallback engine (its own conversion routine)."""
    to = _np_dtype_of_onnx(int(_attr(node, "to")))
    x = np.asarray(ins[0])
    if to is None or x.dtype.kind not in _CAST_KINDS or to.kind not in _CAST_KINDS or \
            (x.dtype.kind == "f" and x.dtype not in _HOST_FLOATS) or (to.kind == "f" and to not in _HOST_FLOATS):
        raise NotImplementedError
    if to == np.bool_:
        return x != 0  # (NaN is non-zero: True, as static_cast<bool>)
    if x.dtype.kind == "f" and to.kind in "iu":
        info = np.iinfo(to)
        if not (np.isfinite(x).all() and (x.size == 0 or (x.min() > info.min - 1 and x.max() < info.max + 1))):
            raise NotImplementedError
    with np.errstate(over="ignore"):  # float64 past float32's range: inf, as static_cast
        return x.astype(to)


def _dequantize(node: onnx.NodeProto, ins: list[Any]) -> Any:
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    zp = np.asarray(ins[2]) if len(ins) > 2 and ins[2] is not None else np.zeros((), x.dtype)
    if scale.dtype != np.float32 or x.dtype.kind not in "iu" or x.dtype.itemsize > 4:
        raise NotImplementedError
    if scale.size != 1 or zp.size != 1:
        if scale.ndim != 1:
            raise NotImplementedError  # blocked quantization
        axis = int(_attr(node, "axis", 1))
        axis = axis + x.ndim if axis < 0 else axis
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    if scale.size == 1 and zp.size == 1 and x.size > compact(x).size:  # a broadcast view: its distinct part
        return np.broadcast_to(_dequantize(node, [compact(x), *ins[1:]]), x.shape)
    # the difference exactly, then one float32 multiplication, as onnxruntime does; 8- and
    # 16-bit differences are exact in float32 (|x - zp| < 2^24), in place: a third of the time
    with np.errstate(over="ignore"):  # products past float32's range are inf, as there
        if x.dtype.itemsize <= 2:
            y = x.astype(np.float32)
            y -= zp.astype(np.float32)
            y *= scale
            return y
        return (x.astype(np.int64) - zp.astype(np.int64)).astype(np.float32) * scale


def _binary(fn: Callable[[Any, Any], Any], exact_kinds: str = "biu",
            floats: bool = False) -> Callable[[onnx.NodeProto, list[Any]], Any]:
    """A binary node on host values: integers (`exact_kinds`), and with `floats` float32 / float64
    operands of one type, whose IEEE operations (+, -, *, /, comparisons) give onnxruntime's CPU
    results bit for bit (one correctly rounded operation per element, no fused or reordered
    arithmetic; neither flushes subnormals by default); other types to the fallback engine."""
    def run(node: onnx.NodeProto, ins: list[Any]) -> Any:
        a, b = np.asarray(ins[0]), np.asarray(ins[1])
        if not (a.dtype.kind in exact_kinds and b.dtype.kind in exact_kinds) and not (
                floats and a.dtype == b.dtype and a.dtype in _HOST_FLOATS):
            raise NotImplementedError  # float16 or mixed types: the fallback engine's arithmetic
        with np.errstate(all="ignore"):  # inf and NaN results as IEEE gives them, as there
            return np.asarray(fn(a, b)).astype(a.dtype) if fn not in _PREDICATES else np.asarray(fn(a, b))
    return run


def _div(a: Any, b: Any) -> Any:
    """Div: integers as onnxruntime (_int_div), floats IEEE's quotient (inf and NaN for 0 divisors)."""
    return np.true_divide(a, b) if a.dtype.kind == "f" else _int_div(a, b)


def _int_div(a: Any, b: Any) -> Any:
    """onnxruntime's integer Div: C++'s quotient, truncated toward zero (numpy's // floors); a
    zero divisor is left to the fallback engine."""
    if (b == 0).any():
        raise NotImplementedError
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _unary(fn: Callable[[Any], Any]) -> Callable[[onnx.NodeProto, list[Any]], Any]:
    def run(node: onnx.NodeProto, ins: list[Any]) -> Any:
        x = np.asarray(ins[0])
        if x.dtype.kind not in "iuf" or (fn is np.sqrt and x.dtype.kind != "f"):
            raise NotImplementedError
        return np.asarray(fn(x)).astype(x.dtype)
    return run


def _nonzero(node: onnx.NodeProto, ins: list[Any]) -> Any:
    x = np.asarray(ins[0])
    if x.ndim == 0:
        raise NotImplementedError  # (a scalar's: the fallback engine's)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def _engine(node: onnx.NodeProto, ins: list[Any]) -> Any:
    raise NotImplementedError  # onnxruntime (or onnx's reference evaluator) for this one node


_CAST_KINDS, _HOST_FLOATS = "biuf", (np.dtype(np.float32), np.dtype(np.float64))
_PREDICATES = {np.equal, np.greater_equal, np.greater, np.less, np.less_equal, np.logical_and, np.logical_or}

HOST_EVAL: dict[str, Callable[[onnx.NodeProto, list[Any]], Any]] = {
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Concat": lambda node, ins: np.concatenate([np.asarray(v) for v in ins], axis=int(_attr(node, "axis"))),
    "Slice": _slice,
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    "Gather": _gather(np.take),
    "GatherElements": _gather(np.take_along_axis),
    "Cast": _cast,
    "DequantizeLinear": _dequantize,
    "Identity": lambda node, ins: np.array(ins[0], copy=True),
    "Transpose": lambda node, ins: np.transpose(np.asarray(ins[0]), _attr(node, "perm")),
    "Expand": lambda node, ins: np.array(np.broadcast_to(np.asarray(ins[0]), np.broadcast_shapes(
        np.asarray(ins[0]).shape, tuple(int(v) for v in np.asarray(ins[1]).reshape(-1))))),
    "Where": lambda node, ins: np.where(np.asarray(ins[0]), np.asarray(ins[1]), np.asarray(ins[2])),
    "Equal": _binary(np.equal, floats=True),
    "GreaterOrEqual": _binary(np.greater_equal, floats=True),
    "Greater": _binary(np.greater, floats=True),
    "Less": _binary(np.less, floats=True),
    "LessOrEqual": _binary(np.less_equal, floats=True),
    "And": _binary(np.logical_and, "b"),
    "Or": _binary(np.logical_or, "b"),
    "Not": lambda node, ins: np.logical_not(np.asarray(ins[0])),
    "NonZero": _nonzero,  # (X-MOD's language routing: nonzero of a mask made from shapes)
    "Add": _binary(np.add, floats=True),
    "Sub": _binary(np.subtract, floats=True),
    "Mul": _binary(np.multiply, floats=True),
    "Div": _binary(_div, "iu", floats=True),  # shape arithmetic (head_dim // heads in exported decoders)
    # float shape arithmetic (MobileViT's ceil(h / patch)): exact in numpy, the result's type kept
    **{op: _unary(fn) for op, fn in (("Ceil", np.ceil), ("Floor", np.floor), ("Round", np.round), ("Neg", np.negative),
                                     ("Abs", np.abs), ("Sign", np.sign), ("Sqrt", np.sqrt))},
    # the rest of what shape arithmetic uses: the fallback engine for one node
    **{op: _engine for op in ("Mod", "Pow", "Max", "Min", "Clip", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin",
                              "ScatterND", "ScatterElements", "Trilu", "CumSum",  # (Swin's shifted-window mask)
                              "QuantizeLinear",  # (a QDQ MobileViT's quantized float shape arithmetic)
                              "OneHot")},  # (torch's repeat counts as a OneHot of shape arithmetic: YOSO, CANINE)
}


# com.microsoft nodes the fallback engine resolves where their inputs are host values: onnxruntime's
# QOperator quantization writes the shape arithmetic's Mul and Add as QLinearMul / QLinearAdd (X-MOD)
MS_HOST_EVAL = frozenset({"QLinearMul", "QLinearAdd", "QuantizeLinear", "DequantizeLinear"})  # (and its Q / DQ for 16-bit types)


def host_evaluable(node: onnx.NodeProto) -> bool:
    """A node type the host may resolve (numpy here, or the fallback engine for one node)."""
    domain = node.domain if node.domain != "ai.onnx" else ""
    if domain == "com.microsoft":
        return node.op_type in MS_HOST_EVAL
    return not domain and (node.op_type in HOST_EVAL or node.op_type in SHAPE_ONLY)


# Host nodes' results are remembered by their inputs' values (HostMemo), where every input holds
# at most this many bytes (shapes and indices; a table is not keyed), for at most MEMO_ENTRIES nodes.
MEMO_BYTES = 4096
MEMO_ENTRIES = 4096


class HostMemo:
    """A model's host-node results by (the node's type and attributes, its inputs' values):
    the shape arithmetic that a transformer repeats in every layer, and in every plan of an input
    shape seen before, is computed once. Results are made read-only, as they are shared."""

    def __init__(self) -> None:
        self._node_keys: dict[int, tuple[Any, ...]] = {}
        self._results: dict[tuple[Any, ...], list[Any]] = {}

    def key(self, idx: int, node: onnx.NodeProto, ins: list[Any],
            shape_of: Callable[[Any], tuple[int, ...]]) -> tuple[Any, ...] | None:
        nk = self._node_keys.get(idx)
        if nk is None:
            nk = self._node_keys[idx] = (node.domain, node.op_type, len(node.output),
                                         tuple(a.SerializeToString() for a in node.attribute))
        parts: list[Any] = [nk]
        for v in ins:
            if v is None:
                parts.append(None)
            elif node.op_type in SHAPE_ONLY:
                parts.append(tuple(shape_of(v)))
            elif isinstance(v, (np.ndarray, np.generic)) and v.nbytes <= MEMO_BYTES:
                parts.append((v.dtype.str, v.shape, v.tobytes()))
            else:
                return None
        return tuple(parts)

    def get(self, key: tuple[Any, ...] | None) -> list[Any] | None:
        return None if key is None else self._results.get(key)

    def put(self, key: tuple[Any, ...] | None, outs: list[Any]) -> None:
        if key is None or not all(isinstance(o, (np.ndarray, np.generic)) for o in outs):
            return
        for o in outs:
            if isinstance(o, np.ndarray):
                o.flags.writeable = False
        if len(self._results) >= MEMO_ENTRIES:
            self._results.pop(next(iter(self._results)))
        self._results[key] = outs


def evaluate(node: onnx.NodeProto, ins: list[Any], shape_of: Callable[[Any], tuple[int, ...]],
             fallback: Callable[[], list[Any]]) -> list[Any]:
    """The node's outputs from host inputs (`shape_of` gives a value's shape without
    reading it: Shape of a device value); `fallback` runs it on the CPU engine."""
    if node.domain == "com.microsoft":
        return fallback()
    if node.op_type in SHAPE_ONLY:
        return [SHAPE_ONLY[node.op_type](node, ins, shape_of)]
    fn = HOST_EVAL.get(node.op_type)
    if fn is not None:
        try:
            return [fn(node, ins)]
        except NotImplementedError:
            pass
    return fallback()
