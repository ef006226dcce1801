"""The independent float64 reference of CONVOLUTION (windows gathered from the zero-padded input,
one matrix product per group and output position), shared by tests/test_convolution.py and
tools/measure_conv.py."""

from __future__ import annotations

import itertools

import numpy as np


def reference(x, w, b, strides, dilations, start, end, groups, flip=False, relu=False):
    """float64 result and S = sum |x w| + |b| per output element."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n = x.ndim - 2
    if flip:
        w = w[(slice(None), slice(None)) + (slice(None, None, -1),) * n]
    xp = np.pad(x, [(0, 0), (0, 0), *list(zip(start, end))])
    window = w.shape[2:]
    out_sp = [(xp.shape[2 + i] - ((window[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(n)]
    cin_g, cout_g = x.shape[1] // groups, w.shape[0] // groups
    y = np.zeros((x.shape[0], w.shape[0], *out_sp))
    s = np.zeros_like(y)
    for o in itertools.product(*(range(k) for k in out_sp)):
        # the window of output position o: (N, Cin, *window)
        idx = tuple(slice(o[i] * strides[i], o[i] * strides[i] + (window[i] - 1) * dilations[i] + 1, dilations[i])
                    for i in range(n))
        patch = xp[(slice(None), slice(None), *idx)]
        for g in range(groups):
            pg = patch[:, g * cin_g:(g + 1) * cin_g].reshape(x.shape[0], -1)
            wg = w[g * cout_g:(g + 1) * cout_g].reshape(cout_g, -1)
            y[(slice(None), slice(g * cout_g, (g + 1) * cout_g), *o)] = pg @ wg.T
            s[(slice(None), slice(g * cout_g, (g + 1) * cout_g), *o)] = np.abs(pg) @ np.abs(wg).T
    if b is not None:
        bb = b.astype(np.float64).reshape((1, -1) + (1,) * n)
        y = y + bb
        s = s + np.abs(bb)
    if relu:
        y = np.maximum(y, 0.0)
    return y, s


def reference_backward(x, w, b, strides, dilations, start, end, out_pad, groups, flip=False, relu=False):
    """BACKWARD (transposed) convolution in float64 by scattering: every input element times the
    filter's window added at input position * stride + window offset * dilation - start; the full
    result cropped by start / end and extended by out_pad. Returns (y, S = sum |x w| + |b|)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n = x.ndim - 2
    if flip:
        w = w[(slice(None), slice(None)) + (slice(None, None, -1),) * n]
    cin_g, cout_g = x.shape[1] // groups, w.shape[1]
    window = w.shape[2:]
    full = [(x.shape[2 + i] - 1) * strides[i] + (window[i] - 1) * dilations[i] + 1 + out_pad[i] for i in range(n)]
    y = np.zeros((x.shape[0], cout_g * groups, *full))
    s = np.zeros_like(y)
    for i in itertools.product(*(range(v) for v in x.shape[2:])):
        for k in itertools.product(*(range(v) for v in window)):
            o = tuple(i[a] * strides[a] + k[a] * dilations[a] for a in range(n))
            for g in range(groups):
                xv = x[(slice(None), slice(g * cin_g, (g + 1) * cin_g), *i)]  # (N, CinG)
                wv = w[(slice(g * cin_g, (g + 1) * cin_g), slice(None), *k)]  # (CinG, CoutG)
                idx = (slice(None), slice(g * cout_g, (g + 1) * cout_g), *o)
                y[idx] += xv @ wv
                s[idx] += np.abs(xv) @ np.abs(wv)
    crop = tuple(slice(start[a], full[a] - end[a]) for a in range(n))
    y, s = y[(slice(None), slice(None), *crop)], s[(slice(None), slice(None), *crop)]
    if b is not None:
        bb = b.astype(np.float64).reshape((1, -1) + (1,) * n)
        y = y + bb
        s = s + np.abs(bb)
    if relu:
        y = np.maximum(y, 0.0)
    return y, s


U = 2.0 ** -24


def gamma(n):
    """Higham's gamma_n = n u / (1 - n u) (float32's u), elementwise."""
    n = np.asarray(n, np.float64)
    return n * U / (1 - n * U)


def bound(s, k, dt, kernel="tiled", parts=1, want=None):
    """docs/convolution.md's bound per output of S = sum |x w| + |b| over K terms: the portable
    kernels' (K + 1) u S; the tensor cores' ("coopmat": any order and adder) gamma(5K + P) S for P
    split-K parts, with the epilogue's underflow allowance 2^-126; FLOAT16 outputs (`dt` numpy
    float16) their rounding of `want` (2^-11 relative, 2^-25 among subnormals)."""
    b = (k + 1) * U * s if kernel == "tiled" else gamma(5 * k + parts) * s + 2.0 ** -126
    if dt == np.float16:
        b = b + np.abs(want) * 2.0 ** -11 + 2.0 ** -25
    return b


def half_inputs_bound(x, w, s, k, emulated, conv):
    """The error of rounding the FLOAT32 input and filter to float16 (allow_half_precision): per
    term |x~ w~ - x w| <= (2 uh + uh^2) |x w| + eta (1 + uh)(|x| + |w|) + eta^2, uh and eta those of
    the conversion (emulated: f2h, nearest even with subnormals, 2^-11 and 2^-25; tensor cores: the
    device's, any rounding mode, subnormals maybe flushed, 2^-10 and 2^-14), summed over the output's
    terms: `s` the sum of |x w|, `conv(a, b)` a float64 convolution of the output's geometry giving
    sum |x| (filter of ones) and sum |w| (input of ones; padded positions too: an upper bound)."""
    uh, eta = (2.0 ** -11, 2.0 ** -25) if emulated else (2.0 ** -10, 2.0 ** -14)
    sx = conv(np.abs(x).astype(np.float64), np.ones(w.shape))
    sw = conv(np.ones(x.shape), np.abs(w).astype(np.float64))
    return (2 * uh + uh * uh) * s + eta * (1 + uh) * (sx + sw) + k * eta * eta
