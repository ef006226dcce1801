"""ONNX LSTM on the device, step by step: GEMM (DML_GEMM) for the products, ACTIVATION_SIGMOID /
TANH and ELEMENT_WISE_MULTIPLY / ADD for the cell, all recorded into the run's one program.

Per direction, each gate g of i, o, f, c (ONNX's order) has its own (H, I) and (H, H) weights
(constants, split on the host once): X W_g^T + (Wb_g + Rb_g) for every step in one GEMM, then per
step G_g = H_{t-1} R_g^T + that step's rows (GEMM's C), i, o, f = sigmoid, c~ = tanh, C_t =
f C_{t-1} + i c~, H_t = o tanh(C_t). The states and the per-step rows live in buffers whose rows
are padded to a multiple of 4 elements, so every step's window starts on DirectML's 16-byte
alignment; Y is copied out of the padded H buffer at the end (one strided COPY), Y_h and Y_c
joined from the last states. Taken: the default activations (sigmoid, tanh, tanh), no clip, no
peepholes, input_forget 0, layout 0, sequence_lens absent or all T (others: the CPU, decided at
placement or, for sequence_lens' values, at run time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .handlers_values import as_device
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

def _host(ctx: NodeContext, v: Any, stats: RunStats, what: str) -> np.ndarray:
    if isinstance(v, DeviceValue):
        raise FallbackNeeded(f"LSTM {what} computed on the device (weights are read on the host)")
    return np.asarray(ctx.host(v, stats))


def _h_lstm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    ins = ins + [None] * (8 - len(ins))
    x, w_in, r_in, b_in, lens, h0, c0 = ins[:7]
    dt = _value_dtype(x)
    if dt not in _FLOAT_OUT:
        raise FallbackNeeded(f"type {dt} is not float32/float16")
    steps, batch, _ = _value_shape(x)
    w, r = _host(ctx, w_in, stats, "W"), _host(ctx, r_in, stats, "R")
    dirs, hid = r.shape[0], r.shape[2]
    bias = _host(ctx, b_in, stats, "B") if b_in is not None else np.zeros((dirs, 8 * hid), dt)
    if lens is not None and np.any(np.asarray(ctx.host(lens, stats)) != steps):
        raise FallbackNeeded("sequence_lens other than the whole sequence")
    if steps == 0 or batch == 0:
        raise FallbackNeeded("an empty sequence")
    dev = ctx.device
    per = 16 // dt.itemsize
    hp = -(-hid // per) * per  # rows padded to 16 bytes: every step's window aligned
    xt = as_device(ctx, x, stats, node.input[0]).tensor
    if xt.desc.strides is not None:  # (the step rows are read as one matrix)
        xt = kdml.copy(xt, out=ctx.out_tensor(tuple(xt.desc.sizes), dt), device=ctx.device)
    x2 = kdml.Tensor.trusted(xt.buffer, kdml.TensorDesc(xt.desc.data_type, (steps * batch, xt.desc.sizes[-1])), xt.offset)
    kt = xt.desc.data_type
    hs = ctx.out_tensor((steps * dirs * batch * hp,), dt)  # every step's H, padded rows
    lasts_h: list[Any] = []
    lasts_c: list[Any] = []
    for d in range(dirs):
        rows = []  # per gate: X W_g^T + Wb_g + Rb_g for every step, padded rows
        for g in range(4):
            wg = ctx.to_device(np.ascontiguousarray(w[d, g * hid:(g + 1) * hid].T).astype(dt), stats)
            bg = ctx.to_device((bias[d, g * hid:(g + 1) * hid] + bias[d, (4 + g) * hid:(5 + g) * hid]).astype(dt)
                               .reshape(1, hid), stats)
            buf = ctx.out_tensor((steps * batch * hp,), dt)
            out = kdml.Tensor.trusted(buf.buffer, kdml.TensorDesc(kt, (steps * batch, hid), (hp, 1)), buf.offset)
            kdml.gemm(x2, wg, bg, out=out, device=dev)
            rows.append(buf)
        rts = [ctx.to_device(np.ascontiguousarray(r[d, g * hid:(g + 1) * hid].T).astype(dt), stats) for g in range(4)]
        state = {"c": ctx.out_tensor((batch, hid), dt)}
        h_prev = None
        if h0 is not None:
            h_prev = ctx.to_device(np.asarray(ctx.host(h0, stats))[d].astype(dt), stats) if not isinstance(h0, DeviceValue) \
                else _window(as_device(ctx, h0, stats, node.input[5]).tensor, d * batch * hid, (batch, hid), hid, kt)
        c_init = np.asarray(ctx.host(c0, stats))[d].astype(dt) if c0 is not None else np.zeros((batch, hid), dt)
        kdml.copy(ctx.to_device(c_init, stats), out=state["c"], device=dev)
        backward = d == 1 or _attr(node, "direction", b"forward") in (b"reverse", "reverse")
        order = range(steps - 1, -1, -1) if backward else range(steps)
        gates = [ctx.out_tensor((batch, hid), dt) for _ in range(4)]
        tmp = ctx.out_tensor((batch, hid), dt)
        for t in order:
            for g in range(4):
                c_rows = _window(rows[g], t * batch * hp, (batch, hid), hp, kt)
                if h_prev is None:  # the first step from a zero state: the rows alone
                    kdml.copy(c_rows, out=gates[g], device=dev)
                else:
                    kdml.gemm(h_prev, rts[g], c_rows, out=gates[g], device=dev)
            i, o, f, c = gates
            for v in (i, o, f):
                kdml.sigmoid(v, out=v, device=dev)
            kdml.tanh(c, out=c, device=dev)
            kdml.mul(f, state["c"], out=state["c"], device=dev)
            kdml.mul(i, c, out=tmp, device=dev)
            kdml.add(state["c"], tmp, out=state["c"], device=dev)
            h_now = _window(hs, (t * dirs + d) * batch * hp, (batch, hid), hp, kt)
            kdml.tanh(state["c"], out=tmp, device=dev)
            kdml.mul(o, tmp, out=h_now, device=dev)
            h_prev = h_now
        lasts_h.append(h_prev)
        lasts_c.append(state["c"])
    outs: list[Any] = []
    y_shape = (steps, dirs, batch, hid)
    if len(node.output) > 0 and node.output[0]:
        y = ctx.out_tensor(y_shape, dt)
        view = kdml.Tensor.trusted(hs.buffer, kdml.TensorDesc(kt, y_shape, (dirs * batch * hp, batch * hp, hp, 1)),
                                   hs.offset)
        kdml.copy(view, out=y, device=dev)
        outs.append(DeviceValue(y, y_shape, dt))
    else:
        outs.append(None)
    for k, lasts in ((1, lasts_h), (2, lasts_c)):
        if len(node.output) > k and node.output[k]:
            shape = (dirs, batch, hid)
            out = ctx.out_tensor(shape, dt)
            kdml.join([_as_part(v, batch, hid, kt) for v in lasts], 0, out=out, device=dev)
            outs.append(DeviceValue(out, shape, dt))
    return outs


def _as_part(v: Any, batch: int, hid: int, kt: Any) -> kdml.Tensor:
    """A direction's last state (batch, hid), rows `hid` or its padded stride apart, as (1, batch, hid)."""
    row = v.desc.strides[0] if v.desc.strides is not None else hid
    return kdml.Tensor.trusted(v.buffer, kdml.TensorDesc(kt, (1, batch, hid), (batch * row, row, 1)), v.offset)


def _window(t: kdml.Tensor, start: int, shape: tuple[int, int], row: int, kt: Any) -> kdml.Tensor:
    """(rows, cols) elements of `t`'s buffer from element `start` of `t`, rows `row` apart."""
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(kt, shape, (row, 1)), t.offset + start * kt.size)


RNN_HANDLERS = {"LSTM": _h_lstm}
