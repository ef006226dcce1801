"""Basic indexing of a Tensor (`t[1:, ::2]`, `t[..., 0]`, `t[None]`): a view where DirectML can
bind one, else a copy.

A DirectML binding is a buffer range that starts at a multiple of 16 bytes with UINT32
(non-negative) strides, and has no element offset of its own. So the result of `t[key]` is

1. a **view** (a new Tensor over the same buffer: writes through either show in the other)
   when its first element sits at a multiple of 16 bytes, every stride is non-negative and
   the bound range stays inside the buffer;
2. else, for non-negative strides, a **device copy** into a new packed tensor by the COPY
   operator: the input binding starts at the 16-byte boundary below the first element, and a
   leading dimension of size 2 whose stride is the distance to it makes its second half the
   elements wanted (the first half, a copy of what lies before them, is scratch);
3. else (a negative step, more than 7 dimensions after merging, a range DirectML cannot
   bind) a **host round trip**: download, index with numpy, upload.

`v.buffer is t.buffer` tells a view from a copy. Integer indices drop their dimension as in
numpy; indexing every dimension with an integer gives a 0-d tensor (shape (), over a desc of
sizes (1,): DirectML tensors have at least one dimension; array_methods.Tensor0d). An empty result (a zero-length slice) raises
InvalidArgumentError (DirectML has no empty dimensions); an integer out of range IndexError.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ..core.errors import InvalidArgumentError, invalid
from ..core.ints import cdiv
from ..core.layout import merge_dims
from ..core.tensor_desc import MAX_DIMENSIONS, MINIMUM_BUFFER_TENSOR_ALIGNMENT, TensorDesc, packed_strides
from ..functional import compile_cached
from ..ops.identity import CopyDesc
from .array_methods import as_0d
from .memory import Buffer, Tensor, register_slicer


def _normalize(key: Any, ndim: int) -> list[Any]:
    items = list(key) if isinstance(key, tuple) else [key]
    for k in items:
        if not (k is None or k is Ellipsis or isinstance(k, slice) or _is_int(k)):
            raise invalid("index", f"only basic indexing is supported (integers, slices, ..., None), got "
                                   f"{type(k).__name__}; download with .numpy() for numpy's other indexing")
    if sum(k is Ellipsis for k in items) > 1:
        raise invalid("index", "an index can only have a single ellipsis ('...')")
    used = sum(k is not None and k is not Ellipsis for k in items)
    if used > ndim:
        raise IndexError(f"too many indices for a tensor of {ndim} dimensions: {used} were indexed")
    rest = [slice(None)] * (ndim - used)
    if any(k is Ellipsis for k in items):
        i = next(j for j, k in enumerate(items) if k is Ellipsis)
        return items[:i] + rest + items[i + 1:]
    return items + rest


def _is_int(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def layout_of(t: Tensor, key: Any) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(sizes, strides in elements (may be negative), element offset from t's first element)."""
    d = t.desc
    sizes, strides = d.sizes, d.effective_strides
    out_sizes: list[int] = []
    out_strides: list[int] = []
    off = 0
    dim = 0
    for k in _normalize(key, len(sizes)):
        if k is None:
            out_sizes.append(1)
            out_strides.append(0)
            continue
        n, st = sizes[dim], strides[dim]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            length = len(range(start, stop, step))
            if length == 0:
                raise invalid("index", f"slice {k} of dimension {dim} (size {n}) is empty; DirectML tensors have no "
                                       "empty dimensions")
            off += start * st
            out_sizes.append(length)
            out_strides.append(step * st if length > 1 else 0)
        else:
            i = operator.index(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            off += (i % n) * st
        dim += 1
    if not out_sizes:
        out_sizes, out_strides = [1], [0]
    if len(out_sizes) > MAX_DIMENSIONS:
        raise invalid("index", f"the result would have {len(out_sizes)} dimensions; DirectML tensors have at most "
                               f"{MAX_DIMENSIONS}")
    return tuple(out_sizes), tuple(out_strides), off


def _desc(t: Tensor, sizes: tuple[int, ...], strides: tuple[int, ...]) -> TensorDesc:
    packed = strides == packed_strides(sizes)
    return TensorDesc(t.desc.data_type, sizes, None if packed else strides)


def _try_view(t: Tensor, sizes: tuple[int, ...], strides: tuple[int, ...], byte_off: int) -> Tensor | None:
    if byte_off % MINIMUM_BUFFER_TENSOR_ALIGNMENT or any(s < 0 for s in strides):
        return None
    try:
        return Tensor(t.buffer, _desc(t, sizes, strides), byte_off)
    except InvalidArgumentError:  # the bound range (rounded to 4 bytes) passes the buffer's end
        return None


def _device_copy(t: Tensor, sizes: tuple[int, ...], strides: tuple[int, ...], byte_off: int) -> Tensor | None:
    esize = t.desc.data_type.size
    lead = (byte_off % MINIMUM_BUFFER_TENSOR_ALIGNMENT) // esize  # elements before the first, from the boundary
    base = byte_off - lead * esize
    msizes, (mstrides, _) = merge_dims(sizes, strides, packed_strides(sizes))
    if len(msizes) + 1 > MAX_DIMENSIONS:
        return None
    count = math.prod(sizes)
    half = cdiv(count * esize, MINIMUM_BUFFER_TENSOR_ALIGNMENT) * MINIMUM_BUFFER_TENSOR_ALIGNMENT // esize
    dt = t.desc.data_type
    src = TensorDesc(dt, (2, *msizes), (lead, *mstrides))
    if base + src.byte_size > t.buffer.nbytes:
        return None
    dst = TensorDesc(dt, (2, *msizes), (half, *packed_strides(msizes)))
    dev = t.device
    out = Buffer(dev, 2 * half * esize)
    op = compile_cached(dev, CopyDesc(src, dst))
    op.execute([Tensor(t.buffer, src, base)], [Tensor(out, dst, 0)])
    return Tensor(out, TensorDesc(dt, sizes), half * esize)


def getitem(t: Tensor, key: Any) -> Tensor:
    if t.ndim == 0:  # a 0-d tensor over a (1,) desc: index that dimension with 0 first
        key = (0, *(key if isinstance(key, tuple) else (key,)))
    r = _getitem(t, key)
    # every dimension indexed by an integer: numpy's 0-d result (array_methods.Tensor0d)
    return as_0d(r) if all(_is_int(k) for k in _normalize(key, t.desc.dimension_count)) else r


def _getitem(t: Tensor, key: Any) -> Tensor:
    sizes, strides, off = layout_of(t, key)
    byte_off = t.offset + off * t.desc.data_type.size
    view = _try_view(t, sizes, strides, byte_off)
    if view is None and min(strides) >= 0:
        view = _device_copy(t, sizes, strides, byte_off)
    if view is not None:
        return view
    host = np.ascontiguousarray(t.numpy()[key]).reshape(sizes)  # the host round trip
    return t.device.tensor(host)


register_slicer(getitem)

__all__ = ["getitem", "layout_of"]
