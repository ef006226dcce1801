"""A float64 numpy reference of DirectML's RNN / LSTM / GRU pages (ops/rnn.py, lstm.py, gru.py), independent of
kompute_dml's plans: the pages' gate formulas step by step, sequence lengths as ONNX (0 past a length, the
state held), the activations' own formulas."""

from __future__ import annotations

import numpy as np

GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}
PER = {"RNN": 1, "LSTM": 3, "GRU": 2}


def act_fn(a):
    n = type(a).__name__
    p = {k: float(np.float32(v)) for k, v in vars(a).items() if k not in ("input_tensor", "output_tensor")}
    return {
        "ActivationSigmoidDesc": lambda x: 1 / (1 + np.exp(-x)),
        "ActivationTanhDesc": np.tanh,
        "ActivationReluDesc": lambda x: np.maximum(x, 0),
        "ActivationIdentityDesc": lambda x: x,
        "ActivationLeakyReluDesc": lambda x: np.where(x >= 0, x, p.get("alpha", 0) * x),
        "ActivationHardSigmoidDesc": lambda x: np.clip(p.get("alpha", 0) * x + p.get("beta", 0), 0, 1),
        "ActivationLinearDesc": lambda x: p.get("alpha", 0) * x + p.get("beta", 0),
        "ActivationScaledTanhDesc": lambda x: p.get("alpha", 0) * np.tanh(p.get("beta", 0) * x),
        "ActivationSoftsignDesc": lambda x: x / (1 + np.abs(x)),
        "ActivationEluDesc": lambda x: np.where(x >= 0, x, p.get("alpha", 0) * np.expm1(np.minimum(x, 0))),
        "ActivationThresholdedReluDesc": lambda x: np.where(x > p.get("alpha", 0), x, 0),
        "ActivationSoftplusDesc": lambda x: np.log1p(np.exp(p.get("steepness", 1) * x)) / p.get("steepness", 1),
    }[n]


def reference(kind, x, w, r, b, h0, lens, acts, direction, c0=None, p=None, clip=None, coupled=False, lbr=False):
    """x {1, T, B, I} ... as the page's tensors (None: absent); returns Y {T, D, B, H}, Y_h, Y_c {1, D, B, H}."""
    x, w, r = (np.asarray(v, np.float64) for v in (x, w, r))
    _, steps, batch, _ = x.shape
    dirs, hid, g_n = w.shape[1], r.shape[3], GATES[kind]
    y = np.zeros((steps, dirs, batch, hid))
    yh, yc = np.zeros((1, dirs, batch, hid)), np.zeros((1, dirs, batch, hid))
    fns = [act_fn(a) for a in acts]
    for d in range(dirs):
        wd, rd = w[0, d], r[0, d]
        bb = np.asarray(b, np.float64)[0, 0, d] if b is not None else np.zeros(2 * g_n * hid)
        h = np.asarray(h0, np.float64)[0, d] if h0 is not None else np.zeros((batch, hid))
        c = np.asarray(c0, np.float64)[0, d] if c0 is not None else np.zeros((batch, hid))
        pp = np.asarray(p, np.float64)[0, 0, d] if p is not None else np.zeros(3 * hid)
        f = fns[PER[kind] * d:PER[kind] * (d + 1)]
        backward = direction == 1 or d == 1
        for t in (range(steps - 1, -1, -1) if backward else range(steps)):
            valid = (np.asarray(lens).reshape(-1) > t)[:, None] if lens is not None else np.ones((batch, 1), bool)

            def sl(k):
                return slice(k * hid, (k + 1) * hid)

            # (the helpers run within this step: the loop variables they read are this step's)
            def xw(k):
                return x[0, t] @ wd[sl(k)].T + bb[sl(k)]  # noqa: B023

            def gate(k):
                return xw(k) + h @ rd[sl(k)].T + bb[sl(g_n + k)]  # noqa: B023

            def cl(v):
                return np.clip(v, -clip, clip) if clip is not None else v

            cn = c
            if kind == "RNN":
                hn = f[0](gate(0))
            elif kind == "LSTM":
                i = f[0](cl(gate(0) + pp[sl(0)] * c))
                fg = 1 - i if coupled else f[0](cl(gate(2) + pp[sl(2)] * c))
                cc = f[1](cl(gate(3)))
                cn = fg * c + i * cc
                o = f[0](cl(gate(1) + pp[sl(1)] * c))  # the page: P_o (.) C_{t-1}
                hn = o * f[2](cn)
            else:
                z, rr = f[0](gate(0)), f[0](gate(1))
                if lbr:
                    hh = f[1](xw(2) + rr * (h @ rd[sl(2)].T + bb[sl(5)]))
                else:
                    hh = f[1](xw(2) + (rr * h) @ rd[sl(2)].T + bb[sl(5)])
                hn = (1 - z) * hh + z * h
            y[t, d] = np.where(valid, hn, 0)
            h, c = np.where(valid, hn, h), np.where(valid, cn, c)
        yh[0, d], yc[0, d] = h, c
    return y, yh, yc
