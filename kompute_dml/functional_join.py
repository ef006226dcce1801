"""The functional helpers of JOIN and SLICE1 (ops/join.py, docs/join.md), with numpy / ONNX
semantics mapped onto the DirectML descriptors.

`join(tensors, axis)`: numpy.concatenate (ONNX Concat) of tensors of one rank and type.
`slice1(x, offsets, sizes, strides)`: DML_SLICE1's window, every reachable element
(output sizes 1 + (sizes[i] - 1) // |strides[i]|). `onnx_slice(x, starts, ends, axes, steps)`:
ONNX Slice, its clamping computed on the host from x's sizes, as one SLICE1. Ranks below the
device's feature level's smallest (4 before 3_0 / 4_1) get leading 1s in the descriptors.
Operands: kompute_dml Tensors (any strides and offset) or anything kompute_dml/inputs.py takes;
the result is a new packed Tensor from the device's buffer pool, or `out=` (that shape, the
input's type, any strides). Results are bit copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .device import Device
from .errors import UnsupportedError, invalid
from .functional import _packed
from .functional_elementwise import _operands
from .functional_gather import _axis, _padded, _run
from .ints import as_int_tuple
from .memory import Tensor
from .ops.join import JOIN, SLICE1, JoinDesc, Slice1Desc
from .registry import OperatorSupport


def _min_rank(dev: Device, support: OperatorSupport, field: str) -> int:
    row = support.at(dev.feature_level)
    return row.tensor(field).dims[0] if row is not None else 1


def _device(device: Device | None, out: Any) -> Device | None:
    """`device`, else out's device (the operands may all be host data)."""
    return device if device is not None or not isinstance(out, Tensor) else out.device


def _view(t: Tensor, n: int) -> Tensor:
    d = _padded(t.desc, n)
    return t if d is t.desc else Tensor(t.buffer, d, t.offset)


def join(tensors: Sequence[Any], axis: Any = 0, *, out: Tensor | None = None,
         device: Device | None = None) -> Tensor:
    """numpy.concatenate(tensors, axis) on DML_JOIN: one rank and type, the sizes equal except
    at `axis` (negative: from the end)."""
    if isinstance(tensors, (str, bytes)) or not isinstance(tensors, Sequence) or not tensors:
        raise invalid("tensors", "must be a non-empty sequence of tensors")
    names = tuple(f"tensors[{i}]" for i in range(len(tensors)))
    dev, ts = _operands(tuple(tensors), names, _device(device, out))
    r = ts[0].desc.dimension_count
    dt = ts[0].desc.data_type
    for name, t in zip(names, ts):
        if t.desc.dimension_count != r:
            raise invalid(name, f"rank must equal tensors[0]'s ({r}), got {t.desc.dimension_count}")
        if t.desc.data_type != dt:
            raise invalid(name, f"data type must equal tensors[0]'s ({dt.name}), got {t.desc.data_type.name}")
    a = _axis(axis, r)
    shape = list(ts[0].desc.sizes)
    shape[a] = sum(t.desc.sizes[a] for t in ts)
    n = max(r, _min_rank(dev, JOIN, "input_tensors"))
    views = [_view(t, n) for t in ts]
    od = _packed(dt, (1,) * (n - r) + tuple(shape))
    desc = JoinDesc(tuple(v.desc for v in views), od, a + n - r)
    return _run(dev, desc, views, tuple(shape), out)


def _slice(dev: Device, t: Tensor, offsets: tuple[int, ...], sizes: tuple[int, ...], strides: tuple[int, ...],
           shape: tuple[int, ...], out: Tensor | None) -> Tensor:
    r = t.desc.dimension_count
    n = max(r, _min_rank(dev, SLICE1, "input_tensor"))
    k = n - r
    view = _view(t, n)
    od = _packed(t.desc.data_type, (1,) * k + shape)
    desc = Slice1Desc(view.desc, od, (0,) * k + offsets, (1,) * k + sizes, (1,) * k + strides)
    return _run(dev, desc, [view], shape, out)


def slice1(x: Any, offsets: Any, sizes: Any, strides: Any, *, out: Tensor | None = None,
           device: Device | None = None) -> Tensor:
    """DML_SLICE1: output[c] = x[start + strides * c] with start[i] = offsets[i] (+ sizes[i] - 1
    where strides[i] < 0), every element the window reaches (the rules: ops/join.Slice1Desc)."""
    dev, (t,) = _operands((x,), ("x",), _device(device, out))
    r = t.desc.dimension_count
    vals = []
    for name, v in (("offsets", offsets), ("sizes", sizes), ("strides", strides)):
        v = as_int_tuple(v, name)
        if len(v) != r:
            raise invalid(name, f"must hold {r} values (x's rank), got {len(v)}")
        vals.append(v)
    o, s, st = vals
    for i in range(r):  # the output shape needs these; the descriptor checks the rest
        if s[i] < 1:
            raise invalid("sizes", f"[{i}] must be >= 1 (the window may not be empty), got {s[i]}")
        if st[i] == 0:
            raise invalid("strides", f"[{i}] may not be 0")
    shape = tuple(1 + (s[i] - 1) // abs(st[i]) for i in range(r))
    return _slice(dev, t, o, s, st, shape, out)


def onnx_slice_window(shape: Sequence[int], starts: Any, ends: Any, axes: Any = None,
                      steps: Any = None) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """ONNX Slice on a tensor of `shape`: (offsets, window sizes, strides, output shape) of the
    equivalent SLICE1 window (the output shape may hold 0: an empty result)."""
    r = len(shape)
    starts = as_int_tuple(starts, "starts")
    ends = as_int_tuple(ends, "ends")
    if len(ends) != len(starts):
        raise invalid("ends", f"must hold as many values as starts ({len(starts)}), got {len(ends)}")
    axes = tuple(range(len(starts))) if axes is None else as_int_tuple(axes, "axes")
    steps = (1,) * len(starts) if steps is None else as_int_tuple(steps, "steps")
    for name, v in (("axes", axes), ("steps", steps)):
        if len(v) != len(starts):
            raise invalid(name, f"must hold as many values as starts ({len(starts)}), got {len(v)}")
    offsets, sizes, strides, out = [0] * r, list(shape), [1] * r, list(shape)
    seen: set[int] = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        if not -r <= a < r:
            raise invalid("axes", f"must be in [{-r}, {r}), got {a}")
        a %= r
        if a in seen:
            raise invalid("axes", f"repeats axis {a}")
        seen.add(a)
        if st == 0:
            raise invalid("steps", "may not be 0")
        d = shape[a]
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            count = max(0, -(-(e - s) // st))
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            count = max(0, -(-(s - e) // -st))
        out[a] = count
        if count == 0:
            continue
        span = (count - 1) * abs(st) + 1
        offsets[a] = s if st > 0 else s - span + 1
        sizes[a], strides[a] = span, st
    return tuple(offsets), tuple(sizes), tuple(strides), tuple(out)


def onnx_slice(x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None, *, out: Tensor | None = None,
               device: Device | None = None) -> Tensor:
    """ONNX Slice (opset 10+): starts / ends / axes / steps as the node's inputs, clamped as ONNX
    clamps them against x's sizes, run as one SLICE1. An empty result raises UnsupportedError
    (kompute_dml tensors have at least one element)."""
    dev, (t,) = _operands((x,), ("x",), _device(device, out))
    offsets, sizes, strides, shape = onnx_slice_window(t.desc.sizes, starts, ends, axes, steps)
    if 0 in shape:
        raise UnsupportedError(f"onnx_slice: the result of shape {shape} is empty")
    return _slice(dev, t, offsets, sizes, strides, shape, out)


__all__ = ["join", "onnx_slice", "onnx_slice_window", "slice1"]
