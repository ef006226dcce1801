"""The functional helpers of GATHER and GATHER_ELEMENTS (ops/gather.py, docs/gather.md), with
ONNX Gather / GatherElements semantics mapped onto the DirectML descriptors.

`gather(x, indices, axis)`: x of rank r, indices of rank q (a 0-d numpy index: q = 0), output
x.shape[:axis] + indices.shape + x.shape[axis + 1:] (rank q + r - 1; a rank-0 result is
returned as shape (1,): kompute_dml tensors have 1 to 8 dimensions). The descriptor has
DimensionCount N = r + max(q, 1) - 1 for all three tensors (leading 1s added), Axis = axis +
N - r, IndexDimensions = q. `axis` may be negative ([-r, r)). Operands: kompute_dml Tensors or
anything kompute_dml/inputs.py takes (Python integers become INT64 indices); the result is a
new packed Tensor from the device's buffer pool, or `out=` (that shape, x's type, any strides).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .device import Device
from .errors import UnsupportedError, invalid
from .functional import _packed, check_out, compile_cached, pooled_empty
from .functional_elementwise import _operands
from .inputs import as_host_array
from .ints import as_int
from .memory import Tensor
from .ops.gather import GatherDesc, GatherElementsDesc
from .tensor_desc import MAX_DIMENSIONS, TensorDesc


def _padded(desc: TensorDesc, n: int) -> TensorDesc:
    """desc with leading 1s up to n dimensions (the same elements at the same places)."""
    k = n - desc.dimension_count
    if k == 0:
        return desc
    strides = None if desc.strides is None else (1,) * k + desc.strides
    return TensorDesc(desc.data_type, (1,) * k + desc.sizes, strides, desc.total_tensor_size_in_bytes,
                      desc.guaranteed_base_offset_alignment, desc.flags)


def _axis(axis: Any, r: int) -> int:
    a = as_int(axis, "axis")
    if not -r <= a < r:
        raise invalid("axis", f"must be in [{-r}, {r}) for x of rank {r}, got {a}")
    return a % r


def _run(dev: Device, desc: Any, ins: list[Tensor], shape: tuple[int, ...], out: Tensor | None) -> Tensor:
    """Compile (cached) and run `desc`, whose output is `shape` padded with leading 1s: into
    `out` (any strides) or a pooled packed tensor returned with `shape` (GATHER, JOIN, SLICE1)."""
    dt = desc.output_tensor.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
        od = _padded(out.desc, desc.output_tensor.dimension_count)
        op = compile_cached(dev, dataclasses.replace(desc, output_tensor=od))
        op.execute(ins, [Tensor(out.buffer, od, out.offset)])
        return out
    op = compile_cached(dev, desc)
    t = pooled_empty(dev, desc.output_tensor)
    op.execute(ins, [t])
    return t if t.desc.sizes == shape else Tensor(t.buffer, _packed(dt, shape), t.offset)


def gather(x: Any, indices: Any, axis: Any = 0, *, out: Tensor | None = None,
           device: Device | None = None) -> Tensor:
    """ONNX Gather on DML_GATHER: x's slices along `axis` picked by `indices` (negative indices
    count from the end; an index outside the axis gives 0)."""
    q0 = None
    if not isinstance(indices, Tensor):
        indices = as_host_array(indices, "indices", dml=False)
        if indices.ndim == 0:
            q0, indices = 0, indices.reshape(1)
    dev, (t, it) = _operands((x, indices), ("x", "indices"), device, typed=slice(0, 0))
    r = t.desc.dimension_count
    q = it.desc.dimension_count if q0 is None else 0
    a = _axis(axis, r)
    shape = t.desc.sizes[:a] + (it.desc.sizes if q else ()) + t.desc.sizes[a + 1:]
    n = r + max(q, 1) - 1
    if n > MAX_DIMENSIONS:
        raise UnsupportedError(f"indices: gather of rank-{r} x by rank-{q} indices needs {n} dimensions "
                               f"(at most {MAX_DIMENSIONS})")
    xd, idd = _padded(t.desc, n), _padded(it.desc, n)
    od = _packed(t.desc.data_type, (1,) * (n - len(shape)) + shape)
    desc = GatherDesc(xd, idd, od, axis=a + n - r, index_dimensions=q)
    ins = [Tensor(t.buffer, xd, t.offset), Tensor(it.buffer, idd, it.offset)]
    return _run(dev, desc, ins, shape or (1,), out)


def gather_elements(x: Any, indices: Any, axis: Any = 0, *, out: Tensor | None = None,
                    device: Device | None = None) -> Tensor:
    """ONNX GatherElements on DML_GATHER_ELEMENTS: output[..i..] = x[.., indices[..i..] at axis, ..]
    (indices of x's rank, x's sizes except at `axis`)."""
    dev, (t, it) = _operands((x, indices), ("x", "indices"), device, typed=slice(0, 0))
    a = _axis(axis, t.desc.dimension_count)
    od = _packed(t.desc.data_type, it.desc.sizes)
    return _run(dev, GatherElementsDesc(t.desc, it.desc, od, axis=a), [t, it], it.desc.sizes, out)


__all__ = ["gather", "gather_elements"]
