"""Functional helpers of MEAN_VARIANCE_NORMALIZATION1 (ops/mean_variance_normalization.py,
docs/mean_variance_normalization.md): mean-variance normalization over any axes, ONNX
LayerNormalization, and com.microsoft SkipLayerNormalization (one dispatch: the operator's skip
extension adds the skip, and the bias, before normalizing).

Operands: kompute_dml Tensors or anything kompute_dml/core/inputs.py takes; Python numbers and lists
given as scale / bias take x's data type. Scale and bias broadcast to x's shape with numpy's rules
(stride-0 views: nothing is copied). The result is a new packed Tensor of x's shape and type from
the device's buffer pool, or `out=` (that shape and type, any strides).

The descriptor's dimension counts come from the device's feature level (1 to 8 from 3_1, exactly
4 at 2_1 and 3_0): fewer dimensions get leading 1s; more are folded, merging neighbouring
dimensions that are both reduced or both kept where every tensor's layout allows it (packed ones
do), leading dimensions first; where no fold is left, UnsupportedError names the tensor whose
layout prevents it. Below feature level 5_2 (scale and bias present together there) a missing
scale is a device constant 1 and a missing bias 0, broadcast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dtypes import DataType, FeatureLevel
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, as_int_tuple
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..ops.mean_variance_normalization import MEAN_VARIANCE_NORMALIZATION1, MeanVarianceNormalization1Desc, key_parts
from . import _packed, check_out, compile_cached, pooled_empty
from .constants import device_constant
from .elementwise import _operands, broadcast_view

# the operands in the order _normalize takes them (the names errors use)
_NAMES = ("x", "scale", "bias", "out", "skip", "skip_bias", "sum_out")


def _axes(axes: Any, r: int, field: str = "axes") -> tuple[int, ...]:
    out = []
    for i, a in enumerate(as_int_tuple(axes, field)):
        if not -r <= a < r:
            raise invalid(f"{field}[{i}]", f"must be in [{-r}, {r}) for x of rank {r}, got {a}")
        out.append(a % r)
    if len(set(out)) != len(out):
        raise invalid(field, f"must be distinct, got {tuple(axes)}")
    if not out:
        raise invalid(field, "must name at least one axis")
    return tuple(out)


def _view(t: Tensor, sizes: list[int], strides: list[int]) -> Tensor:
    d = t.desc
    desc = TensorDesc(d.data_type, tuple(sizes), tuple(strides),
                      guaranteed_base_offset_alignment=d.guaranteed_base_offset_alignment)
    return Tensor.trusted(t.buffer, desc, t.offset)


def _fit(tensors: list[Tensor | None], axes: tuple[int, ...], lo: int, hi: int,
         names: tuple[str, ...] = _NAMES) -> tuple[list[Tensor | None], tuple[int, ...]]:
    """The tensors (all of one shape) seen with between lo and hi dimensions: leading 1s added,
    or neighbours of one kind (reduced / kept) merged where every layout allows it, leading ones
    first. UnsupportedError naming (`names`) the blocking tensor where they cannot be."""
    sizes = list(tensors[0].desc.sizes)  # type: ignore[union-attr]
    strides = [list(t.desc.effective_strides) if t is not None else None for t in tensors]
    red = [d in axes for d in range(len(sizes))]
    while len(sizes) < lo:
        sizes.insert(0, 1)
        red.insert(0, False)
        for st in strides:
            if st is not None:
                st.insert(0, 0)
    blocked = None
    while len(sizes) > hi:
        for i in range(len(sizes) - 1):
            if red[i] != red[i + 1]:
                continue
            stop = next((f for f, st in zip(names, strides)
                         if st is not None and st[i] != st[i + 1] * sizes[i + 1]), None)
            if stop is None:
                break
            blocked = blocked or stop
        else:
            why = (f"{blocked}'s strides merge no two neighbouring dimensions of one kind (both reduced or both kept)"
                   if blocked else "no two neighbouring dimensions are both reduced or both kept")
            n = tensors[0].desc.dimension_count  # type: ignore[union-attr]
            raise UnsupportedError(f"{blocked or 'axes'}: MEAN_VARIANCE_NORMALIZATION1 takes {lo} to {hi} dimensions "
                                   f"at this feature level and x's {n} do not fold to {hi}: {why}")
        sizes[i:i + 2] = [sizes[i] * sizes[i + 1]]
        del red[i]
        for st in strides:
            if st is not None:
                st[i:i + 2] = [st[i + 1]]
    views = [t if t is None or st is None or (st == list(t.desc.effective_strides) and len(sizes) == t.desc.dimension_count)
             else _view(t, sizes, st) for t, st in zip(tensors, strides)]
    return views, tuple(d for d in range(len(sizes)) if red[d])


def _normalize(dev: Device, tensors: list[Tensor | None], red: tuple[int, ...], normalize_variance: bool,
               epsilon: float, out: Tensor | None, names: tuple[str, ...] = _NAMES, use_mean: bool = True,
               keys: Tensor | None = None) -> Tensor:
    """One MEAN_VARIANCE_NORMALIZATION1 execution on `tensors` (x, scale, bias; then skip, skip
    bias and the sum's output tensor, or None: the skip extension), each already of x's shape
    (broadcast views); `names`: theirs in errors, in _NAMES' order. Returns the output (`out`, or
    a new pooled tensor)."""
    xt, st, bt, kt, rt, zt = tensors
    assert xt is not None
    shape, dt = xt.desc.sizes, xt.desc.data_type
    level = dev.feature_level
    if level < FeatureLevel.FL_5_2 and (st is None) != (bt is None):  # present together below 5_2
        one = device_constant(dev, np.array([1 if st is None else 0], dt.numpy_dtype))
        filler = broadcast_view(one, shape, names[1] if st is None else names[2])
        st, bt = (filler, bt) if st is None else (st, filler)
    if out is not None:
        check_out(out, dev, shape, dt)
        yt = out
    else:
        yt = pooled_empty(dev, _packed(dt, shape))
    lo, hi = MEAN_VARIANCE_NORMALIZATION1.require(level).tensor("input_tensor").dims
    views, red = _fit([xt, st, bt, yt, kt, rt, zt], red, lo, hi, names)
    xv, sv, bv, yv, kv, rv, zv = (None if v is None else v.desc for v in views)
    assert xv is not None and yv is not None
    desc = MeanVarianceNormalization1Desc(xv, sv, bv, yv, red, normalize_variance, epsilon, skip_tensor=kv,
                                          skip_bias_tensor=rv, sum_output_tensor=zv, use_mean=use_mean,
                                          keys_output_tensor=None if keys is None else keys.desc)
    skip = kv is not None
    ins = views[:3] + (views[4:6] if skip else [])
    outs = views[3:4] + (views[6:] if skip else []) + ([keys] if keys is not None else [])
    compile_cached(dev, desc).execute(ins, outs)
    return yt


def _operand_map(values: tuple[Any, ...], names: tuple[str, ...], device: Device | None) -> tuple[Device, dict[str, Tensor]]:
    """The given operands (None ones left out) as tensors of one device, by name; Python data takes
    x's type."""
    given = [(v, f) for v, f in zip(values, names) if v is not None]
    dev, made = _operands(tuple(v for v, _ in given), tuple(f for _, f in given), device, slice(0, 1))
    return dev, dict(zip((f for _, f in given), made))


def mean_variance_normalization(x: Any, scale: Any = None, bias: Any = None, *, axes: Any = (-1,),
                                normalize_variance: bool = True, epsilon: float = 1e-5, out: Tensor | None = None,
                                device: Device | None = None) -> Tensor:
    """(x - mean) / sqrt(variance + epsilon) * scale + bias, mean and (population) variance over
    `axes` (negative ones count from the end); without `normalize_variance`, (x - mean) * scale +
    bias. FLOAT32 / FLOAT16, computed in float32 (DML_MEAN_VARIANCE_NORMALIZATION1)."""
    dev, found = _operand_map((x, scale, bias), _NAMES[:3], device)
    shape = found["x"].desc.sizes
    red = _axes(axes, len(shape))
    st, bt = (broadcast_view(found[f], shape, f) if f in found else None for f in ("scale", "bias"))
    return _normalize(dev, [found["x"], st, bt, None, None, None], red, normalize_variance, epsilon, out)


def _trailing(found: dict[str, Tensor], names: tuple[str, ...], trailing: tuple[int, ...], a: int) -> None:
    """InvalidArgumentError unless each of `names` broadcasts (numpy's rules) to `trailing`, x's
    normalized dimensions from axis `a`."""
    for f in names:
        t = found.get(f)
        if t is None:
            continue
        ok = t.desc.dimension_count <= len(trailing) and all(
            s in (1, w) for s, w in zip(t.desc.sizes[::-1], trailing[::-1]))
        if not ok:
            raise invalid(f, f"sizes {t.desc.sizes} do not broadcast to x's normalized dimensions {trailing} "
                             f"(axis {a})")


def _over_trailing(x: Any, scale: Any, bias: Any, axis: Any, epsilon: float, out: Tensor | None,
                   device: Device | None, use_mean: bool) -> Tensor:
    """x normalized over dimensions axis..rank-1, times scale, plus bias (both broadcast to those)."""
    dev, found = _operand_map((x, scale, bias), _NAMES[:3], device)
    r = found["x"].desc.dimension_count
    a = as_int(axis, "axis")
    if not -r <= a < r:
        raise invalid("axis", f"must be in [{-r}, {r}) for x of rank {r}, got {a}")
    a %= r
    shape = found["x"].desc.sizes
    _trailing(found, ("scale", "bias"), shape[a:], a)
    st, bt = (broadcast_view(found[f], shape, f) if f in found else None for f in ("scale", "bias"))
    return _normalize(dev, [found["x"], st, bt, None, None, None], tuple(range(a, r)), True, epsilon, out,
                      use_mean=use_mean)


def layer_norm(x: Any, scale: Any, bias: Any = None, *, axis: Any = -1, epsilon: float = 1e-5,
               out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """ONNX LayerNormalization (its Y): normalized over dimensions axis..rank-1, times `scale`,
    plus `bias`; scale and bias broadcast (numpy's rules) to those trailing dimensions,
    x.shape[axis:]."""
    return _over_trailing(x, scale, bias, axis, epsilon, out, device, True)


def rms_norm(x: Any, scale: Any = None, bias: Any = None, *, axis: Any = -1, epsilon: float = 1e-5,
             out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """RMS normalization (ONNX SimplifiedLayerNormalization, RMSNormalization): x / sqrt(mean(x^2)
    + epsilon) * scale + bias over dimensions axis..rank-1, in one MEAN_VARIANCE_NORMALIZATION1
    dispatch with kompute_dml's use_mean = False (Mean = 0); scale and bias broadcast to those
    trailing dimensions."""
    return _over_trailing(x, scale, bias, axis, epsilon, out, device, False)


def skip_layer_norm(x: Any, skip: Any, scale: Any, bias: Any = None, beta: Any = None, *, epsilon: float = 1e-12,
                    sum_out: bool | Tensor = False, use_mean: bool = True, out: Tensor | None = None,
                    keys_out: Tensor | None = None, device: Device | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """com.microsoft SkipLayerNormalization in one MEAN_VARIANCE_NORMALIZATION1 dispatch (its skip
    extension): s = x + skip (+ bias), each addition rounded to the data type exactly as
    ELEMENT_WISE_ADD1 rounds it (x + skip first, onnxruntime's order; x and skip broadcast to
    their common shape, bias to it, with numpy's rules), then layer_norm(s, scale, beta) over the
    last dimension. Returns the normalized output, or (output, s) with `sum_out` (ONNX's
    input_skip_bias_sum): True for a new packed tensor, or a Tensor of that shape and type (any
    strides) to write it to. `use_mean` False: the sum RMS-normalized (kdml.rms_norm; com.microsoft
    SkipSimplifiedLayerNormalization). `keys_out`: a packed UINT32 Tensor of sizes
    (skip_layer_norm_key_parts(shape, dtype), 2) for the operator's keys_output_tensor (the output's
    partial keys, kdml.dynamic_quantize_linear's `keys`)."""
    dev, found = _operand_map((x, skip, scale, bias, beta), ("x", "skip", "scale", "bias", "beta"), device)
    try:
        shape = tuple(np.broadcast_shapes(found["x"].desc.sizes, found["skip"].desc.sizes))
    except ValueError:
        raise invalid("skip", f"sizes {found['skip'].desc.sizes} do not broadcast with x's "
                              f"{found['x'].desc.sizes}") from None
    _trailing(found, ("scale", "beta"), shape[-1:], len(shape) - 1)
    names = ("x", "scale", "beta", "out", "skip", "bias", "sum_out")  # the operator's order, the helper's names
    views = [broadcast_view(found[f], shape, f) if f in found else None for f in names[:3] + names[4:6]]
    dt = found["x"].desc.data_type
    if isinstance(sum_out, Tensor):
        check_out(sum_out, dev, shape, dt, "sum_out")
        total: Tensor | None = sum_out
    else:
        total = pooled_empty(dev, _packed(dt, shape)) if sum_out else None
    if keys_out is not None and not isinstance(keys_out, Tensor):
        raise invalid("keys_out", f"must be a kompute_dml Tensor, got {type(keys_out).__name__}")
    y = _normalize(dev, [*views, total], (len(shape) - 1,), True, epsilon, out, names, use_mean, keys_out)
    return (y, total) if total is not None else y


def skip_layer_norm_key_parts(shape: Any, data_type: Any) -> int:
    """The pairs of keys skip_layer_norm's `keys_out` holds for a sum of `shape` and `data_type`
    (its work groups: ops/mean_variance_normalization.key_parts)."""
    sizes = as_int_tuple(shape, "shape")
    x = TensorDesc(DataType.coerce(data_type, "data_type"), sizes)
    return key_parts(MeanVarianceNormalization1Desc(x, None, None, x, (len(sizes) - 1,), True, 0.0))


def _channel_view(t: Tensor, groups: int, per: int, r: int, field: str) -> Tensor:
    """A per-channel (groups * per values) or per-group (groups values) operand of one axis seen
    as (1, groups, per, 1, ...) of rank r + 1 (stride 0 where it repeats)."""
    d = t.desc
    long = [i for i, v in enumerate(d.sizes) if v != 1]
    if len(long) > 1 or d.element_count not in (groups, groups * per):
        raise invalid(field, f"must hold one value per channel ({groups * per}) or per group ({groups}) along one "
                             f"axis, got {d.sizes}")
    step = d.effective_strides[long[0]] if long else 0
    by_channel = d.element_count == groups * per and per > 1
    strides = (0, step * per if by_channel else step, step if by_channel else 0) + (0,) * (r - 2)
    return _view(t, [1, groups, per] + [1] * (r - 2), list(strides))


def group_norm(x: Any, scale: Any, bias: Any, num_groups: int, *, epsilon: float = 1e-5, out: Tensor | None = None,
               device: Device | None = None) -> Tensor:
    """ONNX GroupNormalization: x (N, C, ...) normalized over each group of C / num_groups channels
    and the spatial dimensions, then times `scale` plus `bias`, each of C values (opset 21: per
    channel) or num_groups values (opset 18: per group). One MEAN_VARIANCE_NORMALIZATION1 over x
    seen as (N, G, C / G, ...); float32 arithmetic (stash_type 1)."""
    dev, found = _operand_map((x, scale, bias), _NAMES[:3], device if device is not None or out is None else out.device)
    xt = found["x"]
    r = xt.desc.dimension_count
    g = as_int(num_groups, "num_groups")
    if r < 2:
        raise invalid("x", f"must have at least 2 dimensions (N, C, ...), got {xt.desc.sizes}")
    c = xt.desc.sizes[1]
    if g < 1 or c % g:
        raise invalid("num_groups", f"must divide the channels ({c}), got {g}")
    per = c // g
    shape, dt = xt.desc.sizes, xt.desc.data_type
    split = (shape[0], g, per, *shape[2:])
    xs = xt.desc.effective_strides
    xv = _view(xt, list(split), [xs[0], xs[1] * per, xs[1], *xs[2:]])
    if out is not None:
        check_out(out, dev, shape, dt)
    y = out if out is not None else pooled_empty(dev, _packed(dt, shape))
    ys = y.desc.effective_strides
    yv = _view(y, list(split), [ys[0], ys[1] * per, ys[1], *ys[2:]])
    st, bt = (broadcast_view(_channel_view(found[f], g, per, r, f), split, f) for f in ("scale", "bias"))
    _normalize(dev, [xv, st, bt, None, None, None], tuple(range(2, r + 1)), True, epsilon, yv)
    return y


def instance_norm(x: Any, scale: Any, bias: Any, *, epsilon: float = 1e-5, out: Tensor | None = None,
                  device: Device | None = None) -> Tensor:
    """ONNX InstanceNormalization: x (N, C, D1, ...) normalized per (n, c) over D1, ..., then
    times scale[c] plus bias[c] (one MEAN_VARIANCE_NORMALIZATION1)."""
    dev, found = _operand_map((x, scale, bias), _NAMES[:3], device if device is not None or out is None else out.device)
    xt = found["x"]
    r = xt.desc.dimension_count
    if r < 3:
        raise invalid("x", f"must have at least 3 dimensions (N, C, D1, ...), got {xt.desc.sizes}")
    return group_norm(xt, found["scale"], found["bias"], xt.desc.sizes[1], epsilon=epsilon, out=out, device=dev)


__all__ = ["group_norm", "instance_norm", "layer_norm", "mean_variance_normalization", "rms_norm", "skip_layer_norm"]
