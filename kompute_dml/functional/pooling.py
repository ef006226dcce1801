"""The helpers of the pooling operators (ops/pooling.py): kdml.max_pool (MAX_POOLING2, optional
UINT32 indices), kdml.avg_pool (AVERAGE_POOLING; AVERAGE_POOLING1 where dilations are not all
1) and kdml.lp_pool (LP_POOLING; LP_POOLING1 with dilations). Inputs of 3 to 5 dimensions: a 1-D
input (N, C, W) runs as (N, C, 1, W), the operators' tables having 4 or 5 dimensions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int_tuple
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..ops.pooling import AveragePooling1Desc, AveragePoolingDesc, LpPooling1Desc, LpPoolingDesc, MaxPooling2Desc
from ..ops.spatial import output_sizes
from . import _packed, check_out, compile_cached, pooled_empty
from .elementwise import _operands

if TYPE_CHECKING:
    from ..device.device import Device


def view_1d(t: Tensor) -> Tensor:
    """A (N, C, W) tensor seen as (N, C, 1, W): the same elements (1-D pooling on the 4-D tables)."""
    d = t.desc
    s = d.effective_strides
    return Tensor.trusted(t.buffer, TensorDesc(d.data_type, (d.sizes[0], d.sizes[1], 1, d.sizes[2]),
                                               (s[0], s[1], 0, s[2])), t.offset)


def _pool(x: Any, window: Any, strides: Any, start_padding: Any, end_padding: Any, dilations: Any,
          out: Tensor | None, device: Device | None) -> tuple[Device, Tensor, dict[str, tuple[int, ...]],
                                                            tuple[int, ...], bool]:
    """The operand (a 1-D input seen as (N, C, 1, W)), the arrays (4-D / 5-D form), the result's
    shape as the caller sees it, and whether the input was 1-D."""
    if device is None and isinstance(out, Tensor):
        device = out.device
    dev, (t,) = _operands((x,), ("x",), device)
    n = t.desc.dimension_count - 2
    if n not in (1, 2, 3):
        raise invalid("x", f"must have 3 to 5 dimensions (N, C, [[D,] H,] W), got {t.desc.sizes}")
    a: dict[str, tuple[int, ...]] = {}
    for k, v, d in (("window", window, -1), ("strides", strides, 1), ("start_padding", start_padding, 0),
                    ("end_padding", end_padding, 0), ("dilations", dilations, 1)):
        if v is None and d < 0:
            raise invalid(k, f"must hold {n} sizes (one per spatial axis), got None")
        a[k] = as_int_tuple(v, k) if v is not None else (d,) * n
        if len(a[k]) != n:
            raise invalid(k, f"must hold {n} values (one per spatial axis), got {a[k]}")
    shape = (*t.desc.sizes[:2], *output_sizes(t.desc.sizes[2:], a["window"], a["strides"], a["dilations"],
                                              a["start_padding"], a["end_padding"]))
    if n == 1:
        t = view_1d(t)
        a = {k: ((1,) if k in ("window", "strides", "dilations") else (0,)) + v for k, v in a.items()}
    return dev, t, a, shape, n == 1


def _result(dev: Device, out: Tensor | None, shape: tuple[int, ...], dt: DataType, one_d: bool,
            field: str) -> tuple[Tensor, TensorDesc, Tensor]:
    """The caller's result tensor, the operator's output desc (4-D / 5-D) and the tensor bound."""
    if out is not None:
        check_out(out, dev, shape, dt, field)
    y = out if out is not None else pooled_empty(dev, _packed(dt, tuple(max(1, s) for s in shape)))
    bound = view_1d(y) if one_d else y
    want = (*shape[:2], 1, shape[2]) if one_d else shape
    return y, (bound.desc if bound.desc.sizes == want else TensorDesc(dt, want)), bound


def max_pool(x: Any, window: Any, *, strides: Any = None, start_padding: Any = None, end_padding: Any = None,
             dilations: Any = None, indices: bool = False, out: Tensor | None = None,
             indices_out: Tensor | None = None, device: Device | None = None) -> Any:
    """The maximum of each window of x (MAX_POOLING2).

    Parameters
    ----------
    x : Tensor or array_like
        (N, C, W), (N, C, H, W) or (N, C, D, H, W); FLOAT32, FLOAT16, INT8 or UINT8. A 1-D input
        runs as (N, C, 1, W).
    window : sequence of int
        The window's size along each spatial axis.
    strides, start_padding, end_padding, dilations : sequence of int, optional
        One value per spatial axis (defaults 1, 0, 0, 1). Padding never wins a maximum.
    indices : bool
        Also return the UINT32 flat row-major index into x of each maximum (the first of equal
        maxima; the first NaN, which counts as the largest).
    out, indices_out : Tensor, optional
        Result tensors of the output's shape (any strides and offsets); `indices_out` implies
        `indices`.
    device : Device, optional

    Returns
    -------
    Tensor, or (Tensor, Tensor) with `indices`
        New packed tensors from the device's buffer pool where `out` / `indices_out` are not given.
    """
    dev, t, a, shape, one_d = _pool(x, window, strides, start_padding, end_padding, dilations, out, device)
    y, y_desc, yb = _result(dev, out, shape, t.desc.data_type, one_d, "out")
    ind = ind_b = None
    if indices or indices_out is not None:
        ind, _, ind_b = _result(dev, indices_out, shape, DataType.UINT32, one_d, "indices_out")
    op = compile_cached(dev, MaxPooling2Desc(t.desc, y_desc, ind_b.desc if ind_b is not None else None, a["window"],
                                             a["strides"], a["start_padding"], a["end_padding"], a["dilations"]))
    op.execute([t], [yb, ind_b])
    return (y, ind) if ind is not None else y


def avg_pool(x: Any, window: Any, *, strides: Any = None, start_padding: Any = None, end_padding: Any = None,
             dilations: Any = None, include_padding: bool = False, out: Tensor | None = None,
             device: Device | None = None) -> Tensor:
    """The mean of each window of x (AVERAGE_POOLING; AVERAGE_POOLING1 where `dilations` are not all 1).

    Parameters
    ----------
    x : Tensor or array_like
        (N, C, W), (N, C, H, W) or (N, C, D, H, W); FLOAT32 or FLOAT16. A 1-D input runs as
        (N, C, 1, W).
    window : sequence of int
        The window's size along each spatial axis.
    strides, start_padding, end_padding, dilations : sequence of int, optional
        One value per spatial axis (defaults 1, 0, 0, 1).
    include_padding : bool
        Count padding elements in the divisor (the window's size); else the divisor is the
        number of input elements in the window (none: NaN).
    out : Tensor, optional
        The result tensor (the output's shape; any strides and offsets).
    device : Device, optional

    Returns
    -------
    Tensor
        A new packed tensor from the device's buffer pool where `out` is not given.
    """
    dev, t, a, shape, one_d = _pool(x, window, strides, start_padding, end_padding, dilations, out, device)
    y, y_desc, yb = _result(dev, out, shape, t.desc.data_type, one_d, "out")
    desc: Any = AveragePoolingDesc(t.desc, y_desc, a["window"], a["strides"], a["start_padding"], a["end_padding"],
                                   bool(include_padding))
    if any(d != 1 for d in a["dilations"]):
        desc = AveragePooling1Desc(t.desc, y_desc, a["window"], a["strides"], a["start_padding"], a["end_padding"],
                                   a["dilations"], bool(include_padding))
    compile_cached(dev, desc).execute([t], [yb])
    return y


def lp_pool(x: Any, window: Any, p: int = 2, *, strides: Any = None, start_padding: Any = None,
            end_padding: Any = None, dilations: Any = None, out: Tensor | None = None,
            device: Device | None = None) -> Tensor:
    """(sum of |x|^p over each window)^(1 / p) (LP_POOLING; LP_POOLING1 where `dilations` are
    not all 1): x of 3 to 5 dimensions, FLOAT32 or FLOAT16, p >= 1; padding contributes nothing.
    The arrays and `out` as avg_pool's."""
    dev, t, a, shape, one_d = _pool(x, window, strides, start_padding, end_padding, dilations, out, device)
    y, y_desc, yb = _result(dev, out, shape, t.desc.data_type, one_d, "out")
    desc: Any = LpPoolingDesc(t.desc, y_desc, a["window"], a["strides"], a["start_padding"], a["end_padding"], p)
    if any(d != 1 for d in a["dilations"]):
        desc = LpPooling1Desc(t.desc, y_desc, a["window"], a["strides"], a["start_padding"], a["end_padding"],
                              a["dilations"], p)
    compile_cached(dev, desc).execute([t], [yb])
    return y
