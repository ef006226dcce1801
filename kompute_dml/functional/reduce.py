"""The helpers of REDUCE (ops/reduce.py): kdml.reduce_sum, reduce_mean, reduce_max, reduce_min,
reduce_prod, reduce_sum_square, reduce_l1, reduce_l2, reduce_log_sum, reduce_log_sum_exp, argmax,
argmin. Each takes `axes` (None: every axis; an int or a sequence; negative counts from the end)
and `keepdims` (True: the reduced axes stay with size 1, DirectML's output; False: dropped, a
full reduction then giving sizes (1,), as DirectML has no 0-dimensional tensors)."""

from __future__ import annotations

from typing import Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int, as_int_tuple
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from . import _packed, check_out, compile_cached, pooled_empty
from .elementwise import _operands


def normalize_axes(axes: Any, rank: int) -> tuple[int, ...]:
    """axes as sorted non-negative axes of a rank-`rank` tensor (None: all); InvalidArgumentError
    naming `axes` for one out of range or named twice."""
    if axes is None:
        return tuple(range(rank))
    values = (as_int(axes, "axes"),) if isinstance(axes, int) else as_int_tuple(axes, "axes")
    for a in values:
        if not -rank <= a < rank:
            raise invalid("axes", f"each axis must be in [{-rank}, {rank}) for x of rank {rank}, got {a}")
    norm = tuple(sorted(a % rank for a in values))
    if len(set(norm)) != len(norm):
        raise invalid("axes", f"names an axis twice: {values} (rank {rank})")
    return norm


def reduce(x: Any, function: Any, axes: Any = None, keepdims: bool = True, *, out: Tensor | None = None,
           index_type: Any = DataType.INT64, device: Device | None = None) -> Tensor:
    """One REDUCE of x over `axes` by `function` (a kdml.ReduceFunction); ARGMAX / ARGMIN write
    `index_type` (INT64 default: ONNX's and numpy's indices; UINT32 / INT32 / UINT64)."""
    from ..ops.reduce import ARG, ReduceDesc, ReduceFunction

    fn = ReduceFunction(function)
    dev, (t,) = _operands((x,), ("x",), device)
    d = t.desc
    red = normalize_axes(axes, d.dimension_count)
    keep = tuple(1 if i in red else s for i, s in enumerate(d.sizes))
    shown = keep if keepdims else (tuple(s for i, s in enumerate(d.sizes) if i not in red) or (1,))
    dt = DataType.coerce(index_type, "index_type") if fn in ARG else d.data_type
    if out is not None:
        check_out(out, dev, shown, dt)
    else:
        out = pooled_empty(dev, _packed(dt, shown))
    if keepdims:
        view = out
    else:  # the same elements with the reduced axes back as size 1 (stride 0: never stepped)
        it = iter(out.desc.effective_strides)  # a full reduction takes none of them
        strides = tuple(0 if i in red else next(it) for i in range(len(keep)))
        view = Tensor.trusted(out.buffer, TensorDesc(dt, keep, strides), out.offset)
    op = compile_cached(dev, ReduceDesc(d, view.desc, fn, red))
    op.execute([t], [view])
    return out


def _helper(name: str, fn: Any) -> Any:
    def helper(x: Any, axes: Any = None, keepdims: bool = True, *, out: Tensor | None = None,
               device: Device | None = None, **kw: Any) -> Tensor:
        return reduce(x, fn, axes, keepdims, out=out, device=device, **kw)
    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = (f"REDUCE {fn.name} of x over axes (None: all), keeping them as size 1 unless keepdims "
                      f"is False (kompute_dml/functional/reduce.py; bounds in ops/reduce.py)"
                      + ("; index_type= the output's index type (INT64 default)" if name.startswith("arg") else ""))
    return helper


def _make() -> dict[str, Any]:
    from ..ops.reduce import HELPERS
    return {name: _helper(name, fn) for name, fn in HELPERS.items()}


globals().update(_make())
