"""ONNX LSTM, GRU and RNN on the device, step by step: GEMM (DML_GEMM) for the products,
ACTIVATION_SIGMOID / TANH and ELEMENT_WISE_MULTIPLY / ADD / SUBTRACT for the cells, all recorded
into the run's one program.

Per direction, each gate g (LSTM's i, o, f, c; GRU's z, r, h; RNN's one: ONNX's orders) has its
own (H, I) and (H, H) weights (constants, split on the host once): X W_g^T + its biases for every
step in one GEMM, then per step G_g = H_{t-1} R_g^T + that step's rows (GEMM's C) and the cell:
- LSTM: i, o, f = sigmoid, c~ = tanh, C_t = f C_{t-1} + i c~, H_t = o tanh(C_t);
- GRU: z, r = sigmoid, h~ = tanh(X W_h^T + (r H_{t-1}) R_h^T + Wb_h + Rb_h), or with
  linear_before_reset tanh(X W_h^T + Wb_h + r (H_{t-1} R_h^T + Rb_h)); H_t = h~ + z (H_{t-1} - h~);
- RNN: H_t = tanh(G).
The states and the per-step rows live in buffers whose rows are padded to 16 bytes, so every
step's window starts on DirectML's alignment; Y is copied out of the padded H buffer at the end
(one strided COPY), Y_h (and LSTM's Y_c) joined from the last states. Taken (`rnn_rule` in
ops/gemm.py): the default activations, no clip, no LSTM peepholes or input_forget, layout 0,
sequence_lens absent or all T (its values are checked at run time; others: the CPU)."""

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

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _host(ctx: NodeContext, v: Any, stats: RunStats, what: str) -> np.ndarray:
    if isinstance(v, DeviceValue):
        raise FallbackNeeded(f"recurrent {what} computed on the device (weights are read on the host)")
    return np.asarray(ctx.host(v, stats))


def _window(t: Any, start: int, shape: tuple[int, int], row: int, kt: Any) -> kdml.Tensor:
    """(rows, cols) elements of `t`'s buffer from element `start` of `t`, rows `row` apart."""
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(kt, shape, (row, 1)), t.offset + start * kt.size)


def _as_part(v: Any, batch: int, hid: int, kt: Any) -> kdml.Tensor:
    """A direction's last state (batch, hid), rows `hid` or its padded stride apart, as (1, batch, hid)."""
    row = v.desc.strides[0] if v.desc.strides is not None else hid
    return kdml.Tensor.trusted(v.buffer, kdml.TensorDesc(kt, (1, batch, hid), (batch * row, row, 1)), v.offset)


def _h_recurrent(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    ins = ins + [None] * (8 - len(ins))
    x, w_in, r_in, b_in, lens, h0 = ins[:6]
    c0 = ins[6] if node.op_type == "LSTM" else None
    gates = GATES[node.op_type]
    dt = _value_dtype(x)
    if dt not in _FLOAT_OUT:
        raise FallbackNeeded(f"type {dt} is not float32/float16")
    steps, batch, _ = _value_shape(x)
    w, r = _host(ctx, w_in, stats, "W"), _host(ctx, r_in, stats, "R")
    dirs, hid = r.shape[0], r.shape[2]
    bias = _host(ctx, b_in, stats, "B") if b_in is not None else np.zeros((dirs, 2 * gates * hid), dt)
    if lens is not None and np.any(np.asarray(ctx.host(lens, stats)) != steps):
        raise FallbackNeeded("sequence_lens other than the whole sequence")
    if steps == 0 or batch == 0:
        raise FallbackNeeded("an empty sequence")
    dev = ctx.device
    per = 16 // dt.itemsize
    hp = -(-hid // per) * per  # rows padded to 16 bytes: every step's window aligned
    xt = as_device(ctx, x, stats, node.input[0]).tensor
    if xt.desc.strides is not None:  # (the step rows are read as one matrix)
        xt = kdml.copy(xt, out=ctx.out_tensor(tuple(xt.desc.sizes), dt), device=dev)
    kt = xt.desc.data_type
    x2 = kdml.Tensor.trusted(xt.buffer, kdml.TensorDesc(kt, (steps * batch, xt.desc.sizes[-1])), xt.offset)
    lbr = node.op_type == "GRU" and int(_attr(node, "linear_before_reset", 0)) != 0
    hs = ctx.out_tensor((steps * dirs * batch * hp,), dt)  # every step's H, padded rows
    lasts_h: list[Any] = []
    lasts_c: list[Any] = []

    def const(a: np.ndarray) -> kdml.Tensor:
        return ctx.to_device(np.ascontiguousarray(a).astype(dt), stats)

    for d in range(dirs):
        rows = []  # per gate: X W_g^T + its biases for every step, padded rows
        for g in range(gates):
            wb, rb = bias[d, g * hid:(g + 1) * hid], bias[d, (gates + g) * hid:(gates + g + 1) * hid]
            bg = wb if (lbr and g == 2) else wb + rb  # (GRU's h gate adds Rb_h inside r (...))
            buf = ctx.out_tensor((steps * batch * hp,), dt)
            out = kdml.Tensor.trusted(buf.buffer, kdml.TensorDesc(kt, (steps * batch, hid), (hp, 1)), buf.offset)
            kdml.gemm(x2, const(w[d, g * hid:(g + 1) * hid].T), const(bg.reshape(1, hid)), out=out, device=dev)
            rows.append(buf)
        rts = [const(r[d, g * hid:(g + 1) * hid].T) for g in range(gates)]
        h_init = np.asarray(ctx.host(h0, stats))[d] if h0 is not None else np.zeros((batch, hid), dt)
        h_prev: Any = const(h_init)
        cell = ctx.out_tensor((batch, hid), dt) if node.op_type == "LSTM" else None
        if cell is not None:
            c_init = np.asarray(ctx.host(c0, stats))[d] if c0 is not None else np.zeros((batch, hid), dt)
            kdml.copy(const(c_init), out=cell, device=dev)
        rb_h = const(bias[d, (gates + 2) * hid:(gates + 3) * hid].reshape(1, hid)) if lbr else None
        temps = [ctx.out_tensor((batch, hid), dt) for _ in range(gates + 1)]
        backward = d == 1 or _attr(node, "direction", b"forward") in (b"reverse", "reverse")
        for t in (range(steps - 1, -1, -1) if backward else range(steps)):
            step_rows = [_window(rows[g], t * batch * hp, (batch, hid), hp, kt) for g in range(gates)]
            h_now = _window(hs, (t * dirs + d) * batch * hp, (batch, hid), hp, kt)
            if node.op_type == "LSTM":
                _lstm_step(dev, step_rows, rts, h_prev, h_now, cell, temps)
            elif node.op_type == "GRU":
                _gru_step(dev, step_rows, rts, h_prev, h_now, temps, rb_h)
            else:
                kdml.gemm(h_prev, rts[0], step_rows[0], out=h_now, device=dev)
                kdml.tanh(h_now, out=h_now, device=dev)
            h_prev = h_now
        lasts_h.append(h_prev)
        lasts_c.append(cell)
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


def _lstm_step(dev: Any, rows: list[Any], rts: list[Any], h_prev: Any, h_now: Any, cell: Any, temps: list[Any]) -> None:
    i, o, f, c, tmp = temps
    for g, gate in enumerate((i, o, f, c)):
        kdml.gemm(h_prev, rts[g], rows[g], out=gate, device=dev)
    for v in (i, o, f):
        kdml.sigmoid(v, out=v, device=dev)
    kdml.tanh(c, out=c, device=dev)
    kdml.mul(f, cell, out=cell, device=dev)
    kdml.mul(i, c, out=tmp, device=dev)
    kdml.add(cell, tmp, out=cell, device=dev)
    kdml.tanh(cell, out=tmp, device=dev)
    kdml.mul(o, tmp, out=h_now, device=dev)


def _gru_step(dev: Any, rows: list[Any], rts: list[Any], h_prev: Any, h_now: Any, temps: list[Any],
              rb_h: Any) -> None:
    z, r, h, tmp = temps
    kdml.gemm(h_prev, rts[0], rows[0], out=z, device=dev)
    kdml.gemm(h_prev, rts[1], rows[1], out=r, device=dev)
    kdml.sigmoid(z, out=z, device=dev)
    kdml.sigmoid(r, out=r, device=dev)
    if rb_h is None:  # (r H) R_h^T + X W_h^T + Wb_h + Rb_h
        kdml.mul(r, h_prev, out=tmp, device=dev)
        kdml.gemm(tmp, rts[2], rows[2], out=h, device=dev)
    else:  # r (H R_h^T + Rb_h) + X W_h^T + Wb_h
        kdml.gemm(h_prev, rts[2], rb_h, out=tmp, device=dev)
        kdml.mul(r, tmp, out=tmp, device=dev)
        kdml.add(tmp, rows[2], out=h, device=dev)
    kdml.tanh(h, out=h, device=dev)
    kdml.sub(h_prev, h, out=tmp, device=dev)  # H = h~ + z (H_{t-1} - h~)
    kdml.mul(z, tmp, out=tmp, device=dev)
    kdml.add(h, tmp, out=h_now, device=dev)


RNN_HANDLERS = {op: _h_recurrent for op in GATES}
