"""ONNX DFT (opsets 17, 20) and STFT (opset 17) on the device: the transform as one GEMM against a
constant matrix of its twiddle factors (made on the host in float64 once per length and form,
rounded once to the type), the signal's (position, real / imaginary) terms against the outputs'
(frequency, real / imaginary) pairs, as the ONNX reference computes them with numpy's FFT:

    forward   X_k = sum_t x_t e^(-2 pi i k t / n)          k < n, or k <= n / 2 (onesided)
    inverse   x_t = (1 / n) sum_k X_k e^(2 pi i k t / n)    t < n
    inverse onesided (numpy's irfft): x_t = (1 / n) sum_k w_k (Re X_k cos - Im X_k sin)(2 pi k t / n),
              k <= n / 2, w_k = 2 but for k = 0 and k = n / 2: a real signal of n

with the input cropped or zero-padded to n (dft_length) along the axis. The axis is moved next to
the real / imaginary dimension by a strided copy where it is not there already, and the output
moved back. STFT: the frames are a strided view of the signal (frame_step apart, overlapping),
multiplied by the window, then the same GEMM over the frame (n = frame_length, onesided by
default). Sums in float32 (GEMM's order): within the rounding of the sums, not numpy's bits. A
dft_length, axis or frame_step computed on the device, a signal of other than 1 or 2 values in its
last dimension, or a transform whose matrix would pass MAX_MATRIX_BYTES (its terms grow as n^2: no
FFT here) is left to the CPU, named."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .handlers_attention import need
from .handlers_attention import view as _view
from .handlers_nn import _dev, _floats, _opset
from .values import DeviceValue, FallbackNeeded

if TYPE_CHECKING:
    from .context import NodeContext
    from .values import RunStats


# The largest twiddle matrix made (bytes): a transform past it (a length of about 2,000 complex
# values in float32) goes to the CPU, named
MAX_MATRIX_BYTES = 1 << 26


def out_sizes(n: int, inverse: bool, onesided: bool) -> tuple[int, int]:
    """(outputs along the axis, values per output: 1 real, 2 real and imaginary)."""
    if inverse and onesided:
        return n, 1
    return (n // 2 + 1 if onesided and not inverse else n), 2


def twiddles(lin: int, cin: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The [lin x cin, outputs x cout] matrix (float64, out_sizes) of a transform of `lin` input
    positions of `cin` values (1: real, 2: real and imaginary) at length n."""
    kout, cout = out_sizes(n, inverse, onesided)
    if inverse and onesided:  # rows: frequencies k; columns: the n real outputs
        kin = min(lin, n // 2 + 1)
        k, t = np.arange(kin)[:, None], np.arange(n)[None, :]
        w = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0)
        th = 2 * np.pi * ((k * t) % n) / n
        m = np.zeros((lin, cin, n, 1))
        m[:kin, 0, :, 0] = w * np.cos(th) / n
        if cin == 2:
            m[:kin, 1, :, 0] = -w * np.sin(th) / n
        return m.reshape(lin * cin, n * cout)
    tin = min(lin, n)
    t, k = np.arange(tin)[:, None], np.arange(kout)[None, :]
    th = 2 * np.pi * ((t * k) % n) / n
    c, s = np.cos(th), np.sin(th)
    m = np.zeros((lin, cin, kout, 2))
    if not inverse:  # (xr + i xi)(cos - i sin)
        m[:tin, 0, :, 0], m[:tin, 0, :, 1] = c, -s
        if cin == 2:
            m[:tin, 1, :, 0], m[:tin, 1, :, 1] = s, c
    else:  # (Xr + i Xi)(cos + i sin) / n
        m[:tin, 0, :, 0], m[:tin, 0, :, 1] = c / n, s / n
        if cin == 2:
            m[:tin, 1, :, 0], m[:tin, 1, :, 1] = -s / n, c / n
    return m.reshape(lin * cin, kout * cout)



def _host_int(ctx: NodeContext, node: onnx.NodeProto, v: Any, stats: RunStats, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, DeviceValue):
        raise FallbackNeeded(f"{node.op_type}'s {what} computed on the device (read on the host)")
    return int(np.asarray(ctx.host(v, stats)).reshape(-1)[0])


def _matrix(ctx: NodeContext, key: tuple[int, int, int, bool, bool], dt: Any, stats: RunStats) -> kdml.Tensor:
    memo = ("dft", *key, np.dtype(dt).str)
    hit = ctx.memo.get(memo)
    if hit is None:
        hit = ctx.memo[memo] = ctx.to_device(twiddles(*key).astype(dt), stats)
    return hit


def _transform(ctx: NodeContext, x: kdml.Tensor, axis: int, n: int, inverse: bool, onesided: bool, dt: Any,
               stats: RunStats) -> kdml.Tensor:
    """x [..., lin at `axis`, ..., cin] transformed along `axis`: [..., outputs, ..., cout]."""
    shape, st = x.desc.sizes, x.desc.effective_strides
    r, lin, cin = len(shape), shape[axis], shape[-1]
    if cin not in (1, 2):
        raise FallbackNeeded(f"{cin} values in the last dimension (1: real, 2: complex)")
    kout, cout = out_sizes(n, inverse, onesided)
    nbytes = lin * cin * kout * cout * np.dtype(dt).itemsize
    if nbytes > MAX_MATRIX_BYTES:  # O(n^2) terms: a long transform wants an FFT, which this is not
        raise FallbackNeeded(f"a transform of length {n} ({lin} inputs): its matrix of {nbytes} bytes exceeds "
                             f"{MAX_MATRIX_BYTES} (no FFT on the device)")
    m = _matrix(ctx, (lin, cin, n, inverse, onesided), dt, stats)
    others = [i for i in range(r - 1) if i != axis]
    lead = tuple(shape[i] for i in others)
    rows = math.prod(lead)
    # the signal as [others..., lin, cin], packed: one matrix row per transform (copied where it is not)
    moved = _view(x, (*lead, lin, cin), (*(st[i] for i in others), st[axis], st[-1]))
    if moved.desc.effective_strides != kdml.TensorDesc(x.desc.data_type, moved.desc.sizes).effective_strides:
        moved = kdml.copy(moved, out=ctx.out_tensor((*lead, lin, cin), dt), device=ctx.device)
    out_shape = tuple(kout if i == axis else cout if i == r - 1 else shape[i] for i in range(r))
    y = ctx.out_tensor(out_shape, dt)
    packed = axis == r - 2  # the output's rows are the GEMM's as they are
    flat = kdml.gemm(_view(moved, (rows, lin * cin)), m, device=ctx.device,
                     out=_view(y, (rows, kout * cout)) if packed else ctx.out_tensor((rows, kout * cout), dt))
    if not packed:  # [others..., kout, cout] back to the axis's place
        ost = y.desc.effective_strides
        kdml.copy(_view(flat, (*lead, kout, cout)), device=ctx.device,
                  out=_view(y, (*lead, kout, cout), (*(ost[i] for i in others), ost[axis], ost[-1])))
    return y


def _h_dft(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """ONNX DFT: opset 17's axis attribute (default 1), opset 20's axis input (default -2)."""
    dt = _floats(node, ins[:1])
    x = need(ctx, node, ins, 0, stats)
    r = x.desc.dimension_count
    if _opset(ctx.prepared.model) >= 20:
        axis = _host_int(ctx, node, ins[2] if len(ins) > 2 else None, stats, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(_attr(node, "axis", 1))
    axis %= r
    if axis == r - 1:
        raise ValueError(f"DFT {node.name!r}: the axis is the real / imaginary dimension")
    inverse, onesided = bool(_attr(node, "inverse", 0)), bool(_attr(node, "onesided", 0))
    lin = x.desc.sizes[axis]
    n = _host_int(ctx, node, ins[1] if len(ins) > 1 else None, stats, "dft_length")
    n = n if n is not None else 2 * (lin - 1) if inverse and onesided else lin
    if n < 1:
        raise ValueError(f"DFT {node.name!r}: dft_length {n}")
    y = _transform(ctx, x, axis, n, inverse, onesided, dt, stats)
    return [DeviceValue(y, y.desc.sizes, dt)]


def _h_stft(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """ONNX STFT: [batch, length, 1 or 2] signal, frames frame_step apart, the window's length (or
    frame_length, or the whole signal) each, weighted by the window; onesided by default."""
    dt = _floats(node, [ins[0]] + ([ins[2]] if len(ins) > 2 and ins[2] is not None else []))
    x = need(ctx, node, ins, 0, stats)
    b, length, cin = x.desc.sizes
    step = _host_int(ctx, node, ins[1], stats, "frame_step")
    win = _dev(ctx, node, ins, 2, stats)
    flen = _host_int(ctx, node, ins[3] if len(ins) > 3 else None, stats, "frame_length")
    flen = flen if flen is not None else win.desc.sizes[0] if win is not None else length
    if step is None or step < 1 or not 1 <= flen <= length or (win is not None and win.desc.sizes != (flen,)):
        raise ValueError(f"STFT {node.name!r}: frame_step {step}, frame_length {flen}, signal length {length}")
    frames = 1 + (length - flen) // step
    st = x.desc.effective_strides
    view = _view(x, (b, frames, flen, cin), (st[0], step * st[1], st[1], st[2]))  # overlapping frames
    if win is not None:
        ws = win.desc.effective_strides[0]
        framed = kdml.mul(view, _view(win, (1, 1, flen, 1), (0, 0, ws, 0)), out=ctx.out_tensor((b, frames, flen, cin), dt),
                          device=ctx.device)
    else:
        framed = view
    y = _transform(ctx, framed, 2, flen, False, bool(_attr(node, "onesided", 1)), dt, stats)
    return [DeviceValue(y, y.desc.sizes, dt)]


DFT_HANDLERS = {"DFT": _h_dft, "STFT": _h_stft}
