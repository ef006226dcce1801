"""Tensor methods of the array contract (docs/tensor.md): 0-d tensors, `strides`, `reshape`,
`.T` / `transpose`, `astype`, `copy`, `item`, `tolist`, `float()` / `int()` / `bool()`, and the
reductions' refusal; registered onto `memory.Tensor` when kompute_dml is imported (as views.py
registers indexing), so memory.py, below the operators, stays short.

**0-d tensors.** DirectML tensors have at least one dimension, so a 0-d tensor (`t[0, 0]`,
`kdml.zeros(())`, an operator on 0-d operands) is a `Tensor0d`: a Tensor subclass over a
one-element desc of sizes (1,), whose `shape` is `()`, `ndim` 0, `strides` `()`, which has
no `len()` and downloads as a 0-d numpy array. Operators bind its (1,) desc, which broadcasts
as `()` does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.inputs import check_dml_dtype
from ..core.ints import as_int
from ..core.tensor_desc import TensorDesc, packed_strides
from ..ops.cast import cast
from ..ops.identity import copy as device_copy
from .memory import Tensor


class Tensor0d(Tensor):
    """A 0-d tensor: one element over a desc of sizes (1,) (module docstring)."""

    __slots__ = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def ndim(self) -> int:
        return 0

    def __len__(self) -> int:
        raise TypeError("len() of a 0-d tensor")

    def __iter__(self) -> Any:
        raise TypeError("iteration over a 0-d tensor")

    def numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        if out is not None and isinstance(out, np.ndarray) and out.shape == ():
            super().numpy(out.reshape(1))
            return out
        return super().numpy(out).reshape(())


def as_0d(t: Tensor) -> Tensor0d:
    """The one-element tensor `t` seen as 0-d (same buffer, desc and offset)."""
    if isinstance(t, Tensor0d):
        return t
    if t.size != 1:
        raise invalid("tensor", f"a 0-d tensor has one element, got shape {t.shape}")
    desc = t.desc if t.desc.strides is None else TensorDesc(t.desc.data_type, (1,))  # one element: packed
    return Tensor0d.trusted(t.buffer, desc, t.offset)


def _dtype(dtype: Any, field: str = "dtype") -> DataType:
    """A DirectML data type from a numpy dtype (or its name, a scalar type) or a DataType."""
    if isinstance(dtype, DataType):
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise invalid(field, f"{dtype!r} is no numpy dtype or kompute_dml DataType") from None
    return check_dml_dtype(dt, field)


def _shape(shape: Any, field: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, (tuple, list)):
        return tuple(as_int(v, field) for v in shape)
    return (as_int(shape, field),)


# ---- properties ---------------------------------------------------------------------------
def strides(self: Tensor) -> tuple[int, ...]:
    """Bytes between neighbours of each dimension, as numpy's strides (0-d: ())."""
    if self.ndim == 0:
        return ()
    size = self.desc.data_type.size
    return tuple(s * size for s in self.desc.effective_strides)


# ---- shape changes --------------------------------------------------------------------------
def _packed(t: Tensor) -> bool:
    d = t.desc
    return d.effective_strides == packed_strides(d.sizes) or t.size == 1


def reshape(self: Tensor, *shape: Any) -> Tensor:
    """The elements in another shape (C order; one -1 is inferred): a view of the same buffer
    where the tensor is packed, else a device copy (COPY) first."""
    want = _shape(shape[0] if len(shape) == 1 else shape)
    unknown = [i for i, v in enumerate(want) if v == -1]
    if len(unknown) > 1 or any(v < -1 or v == 0 for v in want):
        raise invalid("shape", f"{want}: sizes must be positive (DirectML has no empty dimensions), one may be -1")
    if unknown:
        rest = math.prod(v for v in want if v != -1)
        if self.size % rest:
            raise invalid("shape", f"cannot reshape {self.size} elements into {want}")
        want = tuple(self.size // rest if v == -1 else v for v in want)
    if math.prod(want) != self.size:
        raise invalid("shape", f"cannot reshape {self.size} elements (shape {self.shape}) into {want}")
    src = self if _packed(self) else device_copy(self)
    if want == ():
        return as_0d(src)
    if want == src.desc.sizes and src.desc.strides is None and type(src) is Tensor:
        return src
    # the same bytes (a packed range) under another packed desc: the binding checks hold
    return Tensor.trusted(src.buffer, TensorDesc(src.desc.data_type, want), src.offset)


def transpose(self: Tensor, *axes: Any) -> Tensor:
    """The dimensions permuted (reversed by default): a strided view of the same buffer."""
    if self.ndim < 2 and not axes:
        return self
    perm = _shape(axes[0] if len(axes) == 1 else axes, "axes") if axes else tuple(reversed(range(self.ndim)))
    n = self.ndim
    if sorted(a % n if -n <= a < n else a for a in perm) != list(range(n)):
        raise invalid("axes", f"{perm} is no permutation of the {n} dimensions")
    perm = tuple(a % n for a in perm)
    d = self.desc
    sizes = tuple(d.sizes[a] for a in perm)
    strides_ = tuple(d.effective_strides[a] for a in perm)
    packed = strides_ == packed_strides(sizes)
    desc = TensorDesc(d.data_type, sizes, None if packed else strides_,
                      guaranteed_base_offset_alignment=d.guaranteed_base_offset_alignment)
    return Tensor.trusted(self.buffer, desc, self.offset)  # the same elements: the same checked range


def _T(self: Tensor) -> Tensor:
    return transpose(self)


# ---- copies and conversions -----------------------------------------------------------------
def tensor_copy(self: Tensor) -> Tensor:
    """A new packed tensor with the elements (COPY, on the device)."""
    out = device_copy(self)
    return as_0d(out) if self.ndim == 0 else out


def astype(self: Tensor, dtype: Any, copy: bool = True) -> Tensor:
    """The elements converted to `dtype` on the device (CAST: integers wrap, floats to
    integers truncate toward zero and saturate; docs/cast.md); the same type copies unless
    copy=False."""
    dt = _dtype(dtype)
    if dt == self.desc.data_type:
        return tensor_copy(self) if copy else self
    out = cast(self, dt)
    return as_0d(out) if self.ndim == 0 else out


def _one(self: Tensor, what: str) -> Any:
    if self.size != 1:
        raise ValueError(f"{what} needs a tensor of one element, this one has shape {self.shape} "
                         "(reduce it first: .sum(), .max(), ...)")
    return self.numpy().reshape(-1)[0].item()  # a read of one element, no computation


def item(self: Tensor) -> Any:
    """The one element as a Python number (a download of one element)."""
    return _one(self, "item()")


def tolist(self: Tensor) -> Any:
    """The elements as (nested) Python lists (a download; a 0-d tensor gives a number)."""
    return self.numpy().tolist()


def _float(self: Tensor) -> float:
    return float(_one(self, "float()"))


def _int(self: Tensor) -> int:
    return int(_one(self, "int()"))


def _bool(self: Tensor) -> bool:
    if self.size != 1:
        raise ValueError(f"the truth value of a tensor of {self.size} elements is ambiguous (as numpy's); "
                         "compare element-wise and download, or use item() on one element")
    return bool(_one(self, "bool()"))


_REDUCERS = {"sum": "reduce_sum", "mean": "reduce_mean", "max": "reduce_max", "min": "reduce_min",
             "prod": "reduce_prod", "argmax": "argmax", "argmin": "argmin"}


def _reduction(name: str) -> Any:
    def reduce(self: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
        """numpy's `name` on the device (DirectML's REDUCE, kompute_dml/ops/reduce.py): `axis` an int,
        a tuple or None (every axis; argmax / argmin: None flattens, as numpy does); a 0-d Tensor
        where every axis goes and keepdims is False."""
        from ..functional import reduce as helpers  # above this layer: imported when called

        if name in ("argmax", "argmin") and axis is None:
            flat = reshape(self, (self.size,)) if self.ndim != 1 else self
            return as_0d(getattr(helpers, _REDUCERS[name])(flat, axes=0, keepdims=False))
        out = getattr(helpers, _REDUCERS[name])(self, axes=axis, keepdims=keepdims)
        whole = axis is None or (self.ndim and len(tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)) == self.ndim)
        return as_0d(out) if whole and not keepdims else out
    reduce.__name__ = name
    return reduce


METHODS: dict[str, Any] = {
    "strides": property(strides), "T": property(_T), "reshape": reshape, "transpose": transpose, "copy": tensor_copy,
    "astype": astype, "item": item, "tolist": tolist, "__float__": _float, "__int__": _int, "__bool__": _bool,
    **{n: _reduction(n) for n in ("sum", "mean", "max", "min", "argmax", "argmin", "prod")},
}
for _name, _value in METHODS.items():
    setattr(Tensor, _name, _value)

__all__ = ["Tensor0d", "as_0d", "astype", "reshape", "tensor_copy", "transpose"]
