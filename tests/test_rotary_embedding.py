"""ROTARY_EMBEDDING (ops/rotary_embedding.py) against a numpy reference of the unfused ONNX chain
(Slice, Neg, Concat, Mul, Mul, Add, each rounded to the type as numpy rounds it: float16 through
float32, one rounding per step): bit for bit, NaN positions as NaN; strided, broadcast and offset
operands with poisoned outputs; the sum's operand order; against the device's own element-wise
operators run one by one (subnormals included, whatever the device's denormal mode); refused
descriptors naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
TYPES = [DT.FLOAT32, DT.FLOAT16]


def reference(x: np.ndarray, c: np.ndarray, s: np.ndarray, sine_first: bool = False,
              rounded=lambda v: v) -> np.ndarray:
    """`rounded` applies to every operand and result (flushed: a GPU's float32 arithmetic)."""
    x, c, s = rounded(x), rounded(c), rounded(s)
    half = x.shape[-1] // 2
    with np.errstate(all="ignore"):
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        a, b = rounded(x * c), rounded(rot * s)  # numpy's float16 arithmetic: through float32, rounded once per step
        return rounded(b + a if sine_first else a + b)


def flushed(v: np.ndarray) -> np.ndarray:
    """v with its float32 subnormals flushed to zero of their sign (a GPU's float32 arithmetic may)."""
    v = np.array(v)
    sub = (v != 0) & (np.abs(v) < np.finfo(np.float32).tiny)
    v[sub] = np.copysign(0.0, v[sub]).astype(v.dtype)
    return v


def same_bits(got: np.ndarray, want: np.ndarray, also: np.ndarray | None = None) -> None:
    """got equals want bit for bit (NaNs where want has them), or, element by element, `also`."""
    if also is not None:
        u = f"u{got.dtype.itemsize}"
        other = (got.view(u) == also.view(u)) | (np.isnan(got) & np.isnan(also))
        got, want = got[~other], want[~other]
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    u = f"u{got.dtype.itemsize}"
    assert np.array_equal(got[~nan].view(u), want[~nan].view(u))


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
def test_layouts(dev, rng, dt):
    for sizes in ((8,), (3, 6), (2, 5, 4), (2, 3, 5, 8), (1, 4, 1, 2)):
        for bcast in (False, True):
            xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
            cd, sd = (TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=bcast)) for _ in range(2))
            od = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
            x, xraw = place(dev, rng, xd, random_values(rng, dt, sizes))
            c, craw = place(dev, rng, cd, random_values(rng, dt, sizes))
            s, sraw = place(dev, rng, sd, random_values(rng, dt, sizes))
            o, _ = place(dev, rng, od)
            first = bool(rng.integers(2))
            operands = (read_logical(xraw, x.offset, xd), read_logical(craw, c.offset, cd),
                        read_logical(sraw, s.offset, sd))
            want = reference(*operands, first)
            before = poison_against(o, want, rng)
            dev.compile(kdml.RotaryEmbeddingDesc(xd, cd, sd, od, first)).execute([x, c, s], [o])
            # a GPU's float32 arithmetic may flush subnormal operands and results (the H100's does)
            also = reference(*operands, first, flushed) if dt == DT.FLOAT32 and dev.device_type != "cpu" else None
            same_bits(read_logical(assert_outside_unchanged(o, before), o.offset, od), want, also)


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
def test_helper_broadcasts_tables(dev, rng, dt):
    """Llama's shapes: x (batch, heads, seq, d), cos / sin (batch, 1, seq, d)."""
    npd = dt.numpy_dtype
    x = rng.standard_normal((2, 4, 7, 16)).astype(npd)
    c, s = (rng.standard_normal((2, 1, 7, 16)).astype(npd) for _ in range(2))
    got = kdml.rotary_embedding(x, c, s, device=dev)
    assert got.desc.sizes == x.shape
    same_bits(got.numpy(), reference(x, c, s))


def test_equals_the_unfused_operators(dev, rng):
    """The device's own NEGATE, JOIN, MULTIPLY and ADD one by one give the same bits, subnormal
    products and sums included (whatever this device does with them)."""
    x = (rng.standard_normal((3, 5, 12)) * 10.0 ** rng.integers(-40, 3, (3, 5, 12))).astype(np.float32)
    c = (rng.standard_normal((3, 1, 12)) * 1e-3).astype(np.float32)
    s = (rng.standard_normal((3, 1, 12)) * 1e-3).astype(np.float32)
    x.reshape(-1)[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45]
    tx = dev.tensor(x)
    hi = kdml.neg(dev.tensor(np.ascontiguousarray(x[..., 6:])), device=dev)
    rot = kdml.join([hi, dev.tensor(np.ascontiguousarray(x[..., :6]))], axis=-1, device=dev)
    chain = kdml.add(kdml.mul(tx, c, device=dev), kdml.mul(rot, s, device=dev), device=dev).numpy()
    same_bits(kdml.rotary_embedding(tx, c, s, device=dev).numpy(), chain)


def test_refused(dev):
    f4, h4 = TD(DT.FLOAT32, (1, 2, 3, 4)), TD(DT.FLOAT16, (1, 2, 3, 4))
    cases = [
        (kdml.RotaryEmbeddingDesc(f4, h4, f4, f4), "cos_tensor.data_type"),
        (kdml.RotaryEmbeddingDesc(f4, f4, TD(DT.FLOAT32, (1, 2, 3, 2)), f4), "sin_tensor.sizes"),
        (kdml.RotaryEmbeddingDesc(*(TD(DT.FLOAT32, (2, 3)),) * 4), "output_tensor.sizes"),
        (kdml.RotaryEmbeddingDesc(f4, f4, f4, TD(DT.FLOAT32, (1, 2, 3, 4), (0, 0, 4, 1))), "output_tensor"),
    ]
    for desc, field in cases:
        with pytest.raises(kdml.InvalidArgumentError, match=field):
            dev.compile(desc)
    i4 = TD(DT.INT32, (1, 2, 3, 4))
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(kdml.RotaryEmbeddingDesc(i4, i4, i4, i4))
    five = TD(DT.FLOAT32, (1, 1, 2, 3, 4))
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(kdml.RotaryEmbeddingDesc(five, five, five, five))
    x = dev.tensor(np.ones((2, 4), np.float32))  # every element reads its partner: never in place
    with pytest.raises(kdml.InvalidArgumentError, match="output_tensor: overlaps input_tensor"):
        kdml.rotary_embedding(x, np.ones(4, np.float32), np.ones(4, np.float32), out=x, device=dev)
    y = kdml.rotary_embedding(np.ones((2, 4), np.float32), np.ones(4, np.float32), np.ones(4, np.float32), device=dev)
    assert y.numpy().tolist() == [[0, 0, 2, 2]] * 2  # 1 * 1 + (-1) * 1, 1 * 1 + 1 * 1: the device stays usable
