"""Device handlers of nodes that only re-describe a device value (Reshape, Flatten, Unsqueeze,
Squeeze, Transpose, Expand): a new TensorDesc over the same bytes where the layout allows,
else a copy (ACTIVATION_IDENTITY through kdml.copy) into a packed buffer.

A device value's tensor may be strided (a transposed or broadcast view); operators take
strided inputs, so a view costs nothing until a node needs a packed layout (a Reshape of a
transposed value: a copy)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.core.layout import merge_dims
from kompute_dml.core.tensor_desc import MINIMUM_BUFFER_TENSOR_ALIGNMENT, packed_strides
from kompute_dml.ops.join import onnx_slice_window

from .graph import _attr
from .values import _DML_NUMPY, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

BOOL = np.dtype(np.bool_)


def dml_numpy(dt: np.dtype) -> np.dtype:
    """The numpy type a device tensor of ONNX type `dt` holds (booleans as uint8)."""
    return np.dtype(np.uint8) if dt == BOOL else dt


def device_tensor(ctx: NodeContext, v: Any, stats: RunStats, name: str | None) -> kdml.Tensor:
    """The device tensor of a value: device values as they are, constants uploaded once,
    host values uploaded (booleans as uint8 0 / 1)."""
    if isinstance(v, DeviceValue):
        return v.tensor
    arr = np.asarray(v)
    if arr.dtype == BOOL:
        arr = arr.view(np.uint8)
        name = None  # the constant's own upload would refuse the boolean type
    if arr.size == 0:
        raise FallbackNeeded("an empty tensor")
    return ctx.to_device(arr, stats, name)


def as_device(ctx: NodeContext, v: Any, stats: RunStats, name: str | None) -> DeviceValue:
    if isinstance(v, DeviceValue):
        return v
    return DeviceValue(device_tensor(ctx, v, stats, name), _value_shape(v), _value_dtype(v))


def is_packed(t: kdml.Tensor) -> bool:
    d = t.desc
    return d.strides is None or tuple(d.strides) == packed_strides(d.sizes)


def packed(ctx: NodeContext, v: DeviceValue, stats: RunStats) -> DeviceValue:
    """v itself where its tensor is packed, else a packed copy."""
    if is_packed(v.tensor):
        return v
    t = v.tensor
    out = ctx.out_tensor(t.desc.sizes, dml_numpy(v.dtype))
    return DeviceValue(kdml.copy(t, out=out, device=ctx.device), v.shape, v.dtype)


def gemm_foldable(ctx: NodeContext, a: DeviceValue, b: DeviceValue, stats: RunStats) -> tuple[DeviceValue, DeviceValue]:
    """Product operands (rank >= 2, after any transposition view) whose batch dimensions DirectML
    GEMM's two (batch, channel) address: as they are where they fold (functional/gemm.py's rule), else
    the operand strided across more than two of them (a window or head view of a Transpose) packed,
    and where two broadcasts still keep more than two, both expanded to the whole batch."""
    batch = tuple(int(x) for x in np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    if len(batch) <= 2:
        return a, b
    out = [math.prod(batch[i + 1:]) for i in range(len(batch))]  # a packed result's, in whole matrices

    def over(v: DeviceValue) -> list[int]:  # v's strides over the batch (0 where it broadcasts)
        pad = len(batch) - (len(v.shape) - 2)
        st = v.tensor.desc.effective_strides
        return [0 if i < pad or v.shape[i - pad] == 1 else int(st[i - pad]) for i in range(len(batch))]

    def folds(*vs: DeviceValue) -> bool:
        return len(merge_dims(batch, *(over(v) for v in vs), out)[0]) <= 2

    if folds(a, b):
        return a, b
    a, b = (v if folds(v) else packed(ctx, v, stats) for v in (a, b))
    if folds(a, b):
        return a, b
    return tuple(packed(ctx, strided(v, (*batch, *v.shape[-2:]), (*over(v), *v.tensor.desc.effective_strides[-2:])), stats)
                 for v in (a, b))  # type: ignore[return-value]


def view_strides(shape: tuple[int, ...], strides: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...] | None:
    """Element strides that lay `new` over the same elements as (shape, strides) in the same
    row-major order, without a copy; None where no strides do (numpy's no-copy reshape: each
    run of new dimensions must cover a run of old ones that is contiguous within itself)."""
    old = [(d, st) for d, st in zip(shape, strides) if d != 1]
    out = [1] * len(new)
    ni = oi = 0
    while ni < len(new) and oi < len(old):
        nj, oj = ni + 1, oi + 1
        n_size, o_size = new[ni], old[oi][0]
        while n_size != o_size:
            if n_size < o_size:
                n_size *= new[nj]
                nj += 1
            else:
                o_size *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, oi = nj, oj
    return tuple(out)


def reshaped(ctx: NodeContext, v: Any, shape: tuple[int, ...], stats: RunStats) -> Any:
    """v with another shape of the same element count: a view of the same bytes where
    strides allow (always for a packed v), else a packed copy; or a host reshape."""
    if not isinstance(v, DeviceValue):
        return np.asarray(ctx.host(v, stats)).reshape(shape)
    if not is_packed(v.tensor) and shape:
        st = view_strides(v.shape, _strides_of(v), shape)
        if st is not None:
            return strided(v, shape, st)
    v = packed(ctx, v, stats)
    t = v.tensor
    desc = kdml.TensorDesc(t.desc.data_type, shape if shape else (1,))
    return DeviceValue(kdml.Tensor.trusted(t.buffer, desc, t.offset), shape, v.dtype)


def strided(v: DeviceValue, sizes: tuple[int, ...], strides: tuple[int, ...]) -> DeviceValue:
    """A view of v's bytes with other sizes and element strides (a transpose, a broadcast)."""
    t = v.tensor
    desc = kdml.TensorDesc(t.desc.data_type, sizes if sizes else (1,), strides if sizes else (0,))
    return DeviceValue(kdml.Tensor.trusted(t.buffer, desc, t.offset), sizes, v.dtype)


def _strides_of(v: DeviceValue) -> tuple[int, ...]:
    s = v.tensor.desc.effective_strides
    return tuple(s) if v.shape else ()


def _reshape_target(shape: tuple[int, ...], spec: np.ndarray, allowzero: bool) -> tuple[int, ...]:
    out = [int(d) for d in spec.reshape(-1)]
    if not allowzero:
        out = [shape[i] if d == 0 else d for i, d in enumerate(out)]
    if out.count(-1) > 1:
        raise ValueError(f"Reshape: more than one -1 in {out}")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        total = math.prod(shape)
        if known == 0 or total % known:
            raise ValueError(f"Reshape: cannot reshape {shape} to {out}")
        out[out.index(-1)] = total // known
    if math.prod(out) != math.prod(shape):
        raise ValueError(f"Reshape: cannot reshape {shape} to {tuple(out)}")
    return tuple(out)


def _h_reshape(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    spec = np.asarray(ctx.host(ins[1], stats))
    return [reshaped(ctx, x, _reshape_target(_value_shape(x), spec, bool(_attr(node, "allowzero", 0))), stats)]


def _h_flatten(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    shape = _value_shape(ins[0])
    axis = int(_attr(node, "axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    return [reshaped(ctx, ins[0], (math.prod(shape[:axis]), math.prod(shape[axis:])), stats)]


def _axes(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[int] | None:
    if len(ins) > 1 and ins[1] is not None:
        return [int(a) for a in np.asarray(ctx.host(ins[1], stats)).reshape(-1)]
    a = _attr(node, "axes")
    return None if a is None else [int(v) for v in a]


def _h_unsqueeze(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    shape = list(_value_shape(ins[0]))
    axes = _axes(ctx, node, ins, stats) or []
    rank = len(shape) + len(axes)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        shape.insert(a, 1)
    return [_regrouped(ctx, ins[0], tuple(shape), stats)]


def _h_squeeze(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    shape = _value_shape(ins[0])
    axes = _axes(ctx, node, ins, stats)
    drop = {a + len(shape) if a < 0 else a for a in axes} if axes is not None else {i for i, s in enumerate(shape) if s == 1}
    return [_regrouped(ctx, ins[0], tuple(s for i, s in enumerate(shape) if i not in drop), stats)]


def _regrouped(ctx: NodeContext, x: Any, shape: tuple[int, ...], stats: RunStats) -> Any:
    """Unsqueeze / Squeeze: only dimensions of size 1 come or go, so a strided view keeps its
    strides (no copy)."""
    if not isinstance(x, DeviceValue):
        return np.asarray(ctx.host(x, stats)).reshape(shape)
    old = [(s, st) for s, st in zip(x.shape, _strides_of(x)) if s != 1]
    it = iter(old)
    strides = tuple(1 if s == 1 else next(it)[1] for s in shape)
    return strided(x, shape, strides)


def _h_transpose(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    shape = _value_shape(x)
    perm = _attr(node, "perm")
    perm = list(range(len(shape)))[::-1] if perm is None else [int(p) for p in perm]
    if not isinstance(x, DeviceValue):
        return [np.transpose(np.asarray(ctx.host(x, stats)), perm)]
    st = _strides_of(x)
    return [strided(x, tuple(shape[p] for p in perm), tuple(st[p] for p in perm))]


def _h_expand(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    target = tuple(int(v) for v in np.asarray(ctx.host(ins[1], stats)).reshape(-1))
    shape = _value_shape(x)
    out = tuple(np.broadcast_shapes(shape, target))
    if not isinstance(x, DeviceValue):
        return [np.array(np.broadcast_to(np.asarray(ctx.host(x, stats)), out))]
    pad = len(out) - len(shape)
    st = (0,) * pad + _strides_of(x)
    full = (1,) * pad + shape
    return [strided(x, out, tuple(0 if s == 1 and o != 1 else t for s, o, t in zip(full, out, st)))]


def _h_concat(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Concat on JOIN (kdml.join): inputs empty along the axis contribute nothing and are left out."""
    vals = [v for v in ins if v is not None]
    dt = _value_dtype(vals[0])
    r = len(_value_shape(vals[0]))
    if r == 0:
        raise ValueError(f"Concat {node.name!r}: inputs must have rank >= 1")
    axis = int(_attr(node, "axis"))
    axis = axis + r if axis < 0 else axis
    for v in vals:
        if _value_dtype(v) != dt or len(_value_shape(v)) != r:
            raise ValueError(f"Concat {node.name!r}: inputs differ in type or rank")
    if dt != BOOL and dt not in _DML_NUMPY:
        raise FallbackNeeded(f"type {dt} is not a DirectML type")
    parts = [(v, n) for v, n in zip(ins, node.input) if v is not None and 0 not in _value_shape(v)]
    if not parts:
        raise FallbackNeeded("an empty tensor")
    shape = list(_value_shape(parts[0][0]))
    shape[axis] = sum(_value_shape(v)[axis] for v, _ in parts)
    tensors = [device_tensor(ctx, v, stats, n) for v, n in parts]
    out = ctx.out_tensor(tuple(shape), dml_numpy(dt))
    return [DeviceValue(kdml.join(tensors, axis, out=out, device=ctx.device), tuple(shape), dt)]


def _slice_args(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """starts, ends, axes, steps: the host-known inputs (opset 10+; a device-computed one raises
    FallbackNeeded while planning) or the attributes (opset 1-9)."""
    if len(ins) == 1:
        return [_attr(node, "starts"), _attr(node, "ends"), _attr(node, "axes"), None]
    args = [np.asarray(ctx.host(v, stats)).reshape(-1).tolist() if v is not None else None for v in ins[1:5]]
    return args + [None] * (4 - len(args))


def _h_slice(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Slice on SLICE1 (kdml.slice1), ONNX's clamping computed on the host from x's shape."""
    x = ins[0]
    dt = _value_dtype(x)
    shape = _value_shape(x)
    starts, ends, axes, steps = _slice_args(ctx, node, ins, stats)
    if not shape:
        raise ValueError(f"Slice {node.name!r}: the input must have rank >= 1")
    offsets, sizes, strides, out_shape = onnx_slice_window(shape, starts, ends, axes, steps)
    if dt != BOOL and dt not in _DML_NUMPY:
        raise FallbackNeeded(f"type {dt} is not a DirectML type")
    if 0 in out_shape:  # nothing to compute: an empty host value (Concat leaves it out; Phi-3's rotary pass-through)
        return [np.empty(out_shape, dt)]
    if isinstance(x, DeviceValue) and min(strides) > 0:
        view = _slice_view(x, offsets, strides, out_shape)
        if view is not None:
            return [view]
    t = device_tensor(ctx, x, stats, node.input[0])
    out = ctx.out_tensor(out_shape, dml_numpy(dt))
    return [DeviceValue(kdml.slice1(t, offsets, sizes, strides, out=out, device=ctx.device), out_shape, dt)]


def _slice_view(x: DeviceValue, offsets: tuple[int, ...], steps: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """A window of positive steps as a view of x's bytes (no dispatch, as a Transpose is one), where
    its first element lies on DirectML's 16-byte tensor alignment (None elsewhere: SLICE1 copies it)."""
    t = x.tensor
    st = _strides_of(x)
    start = t.offset + sum(o * s for o, s in zip(offsets, st)) * t.desc.data_type.size
    if start % MINIMUM_BUFFER_TENSOR_ALIGNMENT:
        return None
    desc = kdml.TensorDesc(t.desc.data_type, shape, tuple(s * k for s, k in zip(st, steps)))
    return DeviceValue(kdml.Tensor.trusted(t.buffer, desc, start), shape, x.dtype)


def onnx_split_sizes(node: onnx.NodeProto, length: int, split: Any) -> list[int]:
    """The part sizes of ONNX Split along an axis of `length`: `split` (the opset 11-12 attribute
    or the opset 13+ input) as given; else opset 18's `num_outputs` parts of ceil(length / n),
    the last one smaller; else as many equal parts as the node has outputs."""
    n_out = len(node.output)
    if split is not None:
        sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        if len(sizes) != n_out or min(sizes, default=0) < 0 or sum(sizes) != length:
            raise ValueError(f"Split {node.name!r}: split {sizes} must hold {n_out} sizes >= 0 summing to {length}")
        return sizes
    num = _attr(node, "num_outputs")
    if num is not None:
        chunk = -(-length // int(num))
        sizes = [chunk] * (int(num) - 1) + [length - chunk * (int(num) - 1)]
        if int(num) != n_out or sizes[-1] < 0:
            raise ValueError(f"Split {node.name!r}: num_outputs {num} does not split {length} into {n_out} parts")
        return sizes
    if length % n_out:
        raise ValueError(f"Split {node.name!r}: {length} does not split evenly into {n_out} parts")
    return [length // n_out] * n_out


def _h_split(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Split on SPLIT (kdml.split): the sizes from host-known values (a `split` input computed on
    the device raises FallbackNeeded while planning); empty parts are host arrays. Where every
    part starts on DirectML's 16-byte alignment, the parts are views of x (no dispatch)."""
    x = ins[0]
    dt = _value_dtype(x)
    shape = _value_shape(x)
    if not shape:
        raise ValueError(f"Split {node.name!r}: the input must have rank >= 1")
    axis = int(_attr(node, "axis", 0))
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"Split {node.name!r}: axis {axis} is outside rank {len(shape)}")
    axis %= len(shape)
    split = _attr(node, "split")
    if split is None and len(ins) > 1 and ins[1] is not None:
        split = ctx.host(ins[1], stats)
    sizes = onnx_split_sizes(node, shape[axis], split)
    if dt != BOOL and dt not in _DML_NUMPY:
        raise FallbackNeeded(f"type {dt} is not a DirectML type")
    shapes = [(*shape[:axis], s, *shape[axis + 1:]) for s in sizes]
    full = [i for i, sh in enumerate(shapes) if 0 not in sh]
    outs: list[Any] = [np.empty(sh, dt) for sh in shapes]
    if full and isinstance(x, DeviceValue):  # every part a view where each starts 16-byte aligned
        starts = np.cumsum([0, *sizes[:-1]])
        views = [_slice_view(x, tuple(int(starts[i]) if d == axis else 0 for d in range(len(shape))),
                             (1,) * len(shape), shapes[i]) for i in full]
        if all(v is not None for v in views):
            for i, v in zip(full, views):
                outs[i] = v
            return outs
    if full:
        t = device_tensor(ctx, x, stats, node.input[0])
        parts = [ctx.out_tensor(shapes[i], dml_numpy(dt)) for i in full]
        kdml.split(t, [sizes[i] for i in full], axis, out=parts, device=ctx.device)
        for i, p in zip(full, parts):
            outs[i] = DeviceValue(p, shapes[i], dt)
    return outs


# data movement on operators of their own (JOIN, SLICE1, SPLIT): placed through the specs' `onnx` entries
MOVE_HANDLERS = {"Concat": _h_concat, "Slice": _h_slice, "Split": _h_split}

VALUE_HANDLERS = {
    "Reshape": _h_reshape,
    "Flatten": _h_flatten,
    "Unsqueeze": _h_unsqueeze,
    "Squeeze": _h_squeeze,
    "Transpose": _h_transpose,
    "Expand": _h_expand,
}


# BackendRep.run's `out`: (output index, shape, dtype) -> the array the caller wants it in
OutputArrays = Callable[[int, tuple[int, ...], np.dtype], np.ndarray]


def into(out: OutputArrays | None, k: int, value: Any) -> Any:
    """A host result copied into out's array k (a tensor of a type the caller takes); as it is otherwise."""
    if out is None or not isinstance(value, np.ndarray) or value.dtype == BOOL:
        return value
    arr = out(k, value.shape, value.dtype)
    np.copyto(arr, value, casting="no")
    return arr
