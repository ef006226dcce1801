"""A float64 numpy reference of MULTIHEAD_ATTENTION / MULTIHEAD_ATTENTION1 over logical tensors,
written from the DirectML page's formula (and docs/attention.md's readings where the page is
silent), not from kompute_dml's code; and the error bound the tests hold the kernels to.

Logical layouts: query [B, Hq, S, D]; new key [B, Hkv, T, D] and value [B, Hkv, T, Dv] (T may be
0); past key / value [B, Hkv, P, .]; biases already added by the caller's choice (`bias_qkv`:
the three parts, added here in float32 as the kernel adds them); relative position bias and the
BOOLEAN mask [B, Hq, S, P + T]; the output [B, Hq, S, Dv].
"""

from __future__ import annotations

import numpy as np

U32 = 2.0 ** -24


def _biased(x: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """x + bias along the last two axes' (head, dim) hidden layout, rounded to float32 once."""
    if b is None:
        return x.astype(np.float32).astype(np.float64)
    heads, d = x.shape[1], x.shape[-1]
    bb = b.astype(np.float32).reshape(heads, 1, d)
    return (x.astype(np.float32) + bb).astype(np.float64)


def key_padding(kind: int, mask: np.ndarray, b: int, total: int) -> np.ndarray:
    """[total] booleans: key j is padding for batch b, by DML_MULTIHEAD_ATTENTION_MASK_TYPE."""
    j = np.arange(total)
    if kind in (1, 3):
        return j >= int(mask.reshape(-1)[b])
    end, start = int(mask.reshape(2, -1)[0, b]), int(mask.reshape(2, -1)[1, b])
    return (j >= end) | (j < start)


def mha_ref(q, k, v, *, past_k=None, past_v=None, psl=None, bias=None, scale=1.0, filt=-10000.0, rb=None,
            mask_kind=0, mask=None, causal=False):
    """(output [B, Hq, S, Dv] float64, bound [B, Hq, S] per row: (sum_j p_j |v_j|) and the
    largest score magnitude term, used by `bound`); NaN rows as the float64 formula gives."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    B, Hq, S, D = q.shape
    Hkv, Dv = k.shape[1], v.shape[-1]
    P = 0 if past_k is None else past_k.shape[2]
    group = Hq // Hkv
    bq, bk, bv = (None, None, None) if bias is None else bias
    qf, kf, vf = _biased(q, bq), _biased(k, bk), _biased(v, bv)
    out = np.zeros((B, Hq, S, Dv))
    weight = np.zeros((B, Hq, S))  # sum_j p_j |v_j| (inf where the row is NaN)
    mag = np.zeros((B, Hq, S))  # max_j (|scale| sum_d |q_d k_d| + |rb| + |filter|) over the row's keys
    scale = float(np.float32(scale))
    filt = float(np.float32(filt))
    for b in range(B):
        pb = P if psl is None else int(np.clip(np.int64(psl[b]), 0, P))
        for h in range(Hq):
            hk = h // group
            keys = np.concatenate([np.asarray(past_k[b, hk, :pb], np.float64) if P else np.zeros((0, D)), kf[b, hk]])
            vals = np.concatenate([np.asarray(past_v[b, hk, :pb], np.float64) if P else np.zeros((0, Dv)), vf[b, hk]])
            total = keys.shape[0]
            for i in range(S):
                s = keys @ qf[b, h, i] * scale
                m = np.abs(keys) @ np.abs(qf[b, h, i]) * abs(scale)
                if rb is not None:
                    s = s + rb[b, h, i, :total]
                    m = m + np.abs(rb[b, h, i, :total])
                pad = np.zeros(total, bool)
                if mask_kind == 4:
                    pad = mask[b, h, i, :total] <= 0
                elif mask_kind:
                    pad = key_padding(mask_kind, mask, b, total)
                s = s + np.where(pad, filt, 0.0)
                m = m + np.where(pad, abs(filt), 0.0)
                keep = np.ones(total, bool)
                if causal or psl is not None:
                    keep = np.arange(total) <= total - S + i
                s, m, vv = s[keep], m[keep], vals[keep]
                with np.errstate(invalid="ignore", over="ignore"):
                    top = s.max() if s.size else -np.inf
                    if not s.size or np.isnan(s).any() or top == np.inf or top == -np.inf:
                        out[b, h, i], weight[b, h, i] = np.nan, np.inf
                        continue
                    p = np.exp(s - top)
                    p /= p.sum()
                    out[b, h, i] = p @ vv
                weight[b, h, i] = p @ np.abs(vv).max(axis=1) if vv.size else 0.0
                mag[b, h, i] = m.max() if m.size else 0.0
    return out, weight, mag


def bound(weight: np.ndarray, mag: np.ndarray, d: int, keys: int, half: bool, ref: np.ndarray,
          half_weights: bool = False, vmax: float = 0.0, half_inputs: bool = False) -> np.ndarray:
    """The per-element bound of docs/attention.md: each score off by at most
    (D + 4) u mag, a softmax weight by twice that relatively, the value sum by its (keys + 16) u;
    FLOAT16 adds its rounding of the result. `half_weights` (allow_half_precision's tensor-core
    kernel): each weight converted to float16 after the device's exp, 2^-9 of W and 2^-24 of `vmax`
    (the largest |value|) per key; `half_inputs` (FLOAT32 on it): query, key and value converted to
    float16 (each off by 2^-10 of itself), a score by 2^-9 mag more, a weight by twice that
    relatively, the value sum by 2^-10 W. A slack factor 4 over the derivation."""
    delta = (d + 4) * U32 * mag
    err = weight * (2 * delta + (keys + 16) * U32)
    if half_weights:
        err = err + weight * 2.0 ** -9 + keys * 2.0 ** -24 * vmax
    if half_inputs:
        err = err + weight * (2.0 ** -8 * mag + 2.0 ** -10)
    err = np.broadcast_to(err[..., None] * 4 + 1e-30, ref.shape)
    if half:
        err = err + np.abs(ref) * 2.0 ** -11 + 2.0 ** -24
    return err
