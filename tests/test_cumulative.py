"""CUMULATIVE_SUMMATION and CUMULATIVE_PRODUCT (ops/cumulative.py, shaders/cumulative.comp) against
an independent reference: Python integers wrapped into the type (integers exact), float64 for
floats within the stated bounds (docs/cumulative.md), every type and both directions, exclusive
and inclusive, ranks 1-8 with random axes, strided and broadcast inputs, random offsets with guard
bytes, poisoned outputs whose every other byte must stay unchanged; the pages' examples, special
values, a long axis, in place, the helpers and refused descriptors.

`-s` prints the worst measured error as a fraction of the bound (docs/cumulative.md's figures):
`.venv/bin/python -m pytest tests/test_cumulative.py -k bound -s`."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops.cumulative import WG_MIN_AXIS

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
AD = kdml.AxisDirection
TYPES = (DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.UINT32, DT.INT64, DT.UINT64)
U = 2.0 ** -24
WORST: dict[tuple[str, str, str], float] = {}


def reference(x: np.ndarray, axis: int, op: str, reverse: bool, exclusive: bool) -> tuple[np.ndarray, np.ndarray]:
    """(result, the number of elements each output took in) in float64 / Python ints, by a plain
    loop over the axis in traversal order."""
    xs = np.moveaxis(x, axis, -1)
    n = xs.shape[-1]
    exact = xs.dtype.kind in "iu"
    flat = xs.reshape(-1, n)
    out = np.empty(flat.shape, dtype=object if exact else np.float64)
    taken = np.empty(flat.shape, dtype=np.int64)
    order = range(n - 1, -1, -1) if reverse else range(n)
    for r in range(flat.shape[0]):
        acc = (1 if op == "prod" else 0) if exact else (1.0 if op == "prod" else 0.0)
        for k, j in enumerate(order):  # k elements taken before this one
            v = int(flat[r, j]) if exact else float(flat[r, j])
            if exclusive:
                out[r, j], taken[r, j] = acc, k
            acc = v if k == 0 and not exclusive else (acc * v if op == "prod" else acc + v)  # the first as it is
            if not exclusive:
                out[r, j], taken[r, j] = acc, k + 1
    return np.moveaxis(out.reshape(xs.shape), -1, axis), np.moveaxis(taken.reshape(xs.shape), -1, axis)


def wrap(v: np.ndarray, dt: DT) -> np.ndarray:
    bits = 8 * dt.size
    w = [int(a) % (1 << bits) for a in v.reshape(-1)]
    if dt.is_signed:
        w = [a - (1 << bits) if a >= 1 << (bits - 1) else a for a in w]
    return np.array(w, dtype=object).astype(dt.numpy_dtype).reshape(v.shape)


def bound(x: np.ndarray, axis: int, op: str, reverse: bool, exclusive: bool, want: np.ndarray, taken: np.ndarray,
          dt: DT) -> np.ndarray:
    """docs/cumulative.md: sums gamma_h S_k, h the most roundings a term went through: k - 1 (k the
    elements taken) for an invocation per line; for a work group per line (axes of WG_MIN_AXIS or
    more) at most 8 in the first chunk of 256, 9 + c in chunk c; products gamma_(k-1) |P_k| (every
    one of the k - 1 roundings scales the whole product) in both;
    FLOAT16 adds its one rounding (2^-11 relative, half its smallest subnormal)."""
    h = np.maximum(taken - 1, 0)
    if x.shape[axis] >= WG_MIN_AXIS and op == "sum":  # a product's k - 1 roundings all reach it
        chunk = (taken - (0 if exclusive else 1)) // 256  # the output's position in traversal order
        h = np.minimum(h, np.where(chunk == 0, 8, 9 + chunk))
    m = h * U
    gamma = m / (1 - m)
    if op == "sum":
        s, _ = reference(np.abs(x.astype(np.float64)), axis, "sum", reverse, exclusive)
        e = gamma * s
    else:
        e = gamma * np.abs(want)
    if dt == DT.FLOAT16:
        e = e * (1 + 2.0 ** -11) + 2.0 ** -11 * np.abs(want) + 2.0 ** -25
    return e


def values(rng, dt: DT, op: str, sizes) -> np.ndarray:
    if not dt.is_float:
        info = np.iinfo(dt.numpy_dtype)
        return rng.integers(info.min, info.max, size=sizes, dtype=dt.numpy_dtype, endpoint=True)
    if op == "prod":
        spread = 0.6 if max(sizes) <= 8 else 0.03  # long rows: products that stay in float16's range
        x = rng.uniform(1 - spread, 1 + spread, sizes) * rng.choice([-1.0, 1.0], sizes)
    else:
        x = rng.standard_normal(sizes) * 10.0 ** rng.integers(-2, 3, sizes)
    return x.astype(dt.numpy_dtype)


def random_sizes(rng, rank: int, max_elems: int = 400) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def make(op: str, x: TD, y: TD, axis: int, reverse: bool, exclusive: bool):
    cls = kdml.CumulativeSummationDesc if op == "sum" else kdml.CumulativeProductDesc
    return cls(x, y, axis, AD.DECREASING if reverse else AD.INCREASING, exclusive)


def check(got: np.ndarray, want: np.ndarray, taken: np.ndarray, x: np.ndarray, axis, op, reverse, exclusive,
          dt: DT) -> None:
    if not dt.is_float:
        np.testing.assert_array_equal(got, wrap(want, dt))
        return
    g = got.astype(np.float64)
    e = bound(x, axis, op, reverse, exclusive, want, taken, dt)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - want)
    ok = (err <= e) | (np.isnan(g) & np.isnan(want)) | (g == want)
    assert ok.all(), f"error {np.max(err - e)} above the bound"
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(e > 0, err / e, 0.0)
    key = (op, dt.name, "group" if x.shape[axis] >= WG_MIN_AXIS else "line")
    WORST[key] = max(WORST.get(key, 0.0), float(np.nanmax(r)) if r.size else 0.0)


def run(dev, rng, op, dt, sizes, axis, reverse, exclusive, *, v=None, in_strides=None, out_strides=None):
    x_desc, y_desc = TD(dt, sizes, in_strides), TD(dt, sizes, out_strides)
    x, xraw = place(dev, rng, x_desc, values(rng, dt, op, sizes) if v is None else v)
    y, _ = place(dev, rng, y_desc)
    xv = read_logical(xraw, x.offset, x_desc)
    want, taken = reference(xv, axis, op, reverse, exclusive)
    before = poison_against(y, wrap(want, dt) if not dt.is_float else want.astype(dt.numpy_dtype), rng)
    dev.compile(make(op, x_desc, y_desc, axis, reverse, exclusive)).execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    check(got, want, taken, xv, axis, op, reverse, exclusive, dt)
    return got


@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
def test_values(dev, rng, op, dt):
    for rank in (1, 2, 3, 4, 6, 8):
        sizes = random_sizes(rng, rank)
        axis = int(rng.integers(0, rank))
        kind = rng.integers(0, 3)
        ins = None if kind == 0 else random_strides(rng, sizes, allow_broadcast=kind == 2)
        outs = None if rng.random() < 0.5 else random_strides(rng, sizes, allow_broadcast=False)
        run(dev, rng, op, dt, sizes, axis, bool(rng.integers(0, 2)), bool(rng.integers(0, 2)), in_strides=ins,
            out_strides=outs)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("op", ["sum", "prod"])
def test_bound_long_rows(dev, rng, op, dt):
    """Rows of 60 (an invocation per line) and 1000 (a work group per line; float16 sums stay
    below its overflow): every direction and form."""
    for n in (60, 1000):
        for reverse in (False, True):
            for exclusive in (False, True):
                run(dev, rng, op, dt, (3, n), 1, reverse, exclusive)
    for plan, label in (("line", "an invocation"), ("group", "a work group")):
        print(f"\nworst error / bound, {op} {dt.name}, {label} per line: {WORST.get((op, dt.name, plan), 0.0):.3f}")


# the DirectML pages' examples (Sizes {1,1,3,4}, FLOAT32)
PAGE_X = np.array([[2, 1, 3, 5], [3, 8, 7, 3], [9, 6, 2, 4]], np.float32).reshape(1, 1, 3, 4)
PAGE = [
    ("sum", 3, False, False, [[2, 3, 6, 11], [3, 11, 18, 21], [9, 15, 17, 21]]),
    ("sum", 3, False, True, [[0, 2, 3, 6], [0, 3, 11, 18], [0, 9, 15, 17]]),
    ("sum", 3, True, False, [[11, 9, 8, 5], [21, 18, 10, 3], [21, 12, 6, 4]]),
    ("sum", 2, False, False, [[2, 1, 3, 5], [5, 9, 10, 8], [14, 15, 12, 12]]),
    ("prod", 3, False, False, [[2, 2, 6, 30], [3, 24, 168, 504], [9, 54, 108, 432]]),
    ("prod", 3, False, True, [[1, 2, 2, 6], [1, 3, 24, 168], [1, 9, 54, 108]]),
    ("prod", 3, True, False, [[30, 15, 15, 5], [504, 168, 21, 3], [432, 48, 8, 4]]),
    ("prod", 2, False, False, [[2, 1, 3, 5], [6, 8, 21, 15], [54, 48, 42, 60]]),
]


@pytest.mark.parametrize(("op", "axis", "reverse", "exclusive", "want"), PAGE, ids=str)
def test_page_examples(dev, op, axis, reverse, exclusive, want):
    d = TD(DT.FLOAT32, (1, 1, 3, 4))
    x, y = dev.tensor(PAGE_X), dev.empty(d)
    dev.compile(make(op, d, d, axis, reverse, exclusive)).execute([x], [y])
    assert np.array_equal(y.numpy(), np.array(want, np.float32).reshape(d.sizes))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_special_values(dev, rng, dt):
    x = np.array([[1.0, np.inf, 2.0, -np.inf, 1.0], [np.nan, 1.0, 2.0, 3.0, 4.0], [-0.0, -0.0, 0.0, -0.0, 5.0],
                  [0.0, np.inf, 1.0, 2.0, 3.0]], dt.numpy_dtype)
    got = run(dev, rng, "sum", dt, x.shape, 1, False, False, v=x)
    assert np.signbit(got[2, 1]) and not np.signbit(got[2, 2])  # -0 + -0 = -0; -0 + 0 = +0
    got = run(dev, rng, "prod", dt, x.shape, 1, True, False, v=x)
    assert np.isnan(got[3, 0])  # 0 * inf


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.INT32, DT.INT64], ids=lambda d: d.name)
def test_long_axis(dev, rng, dt):
    """One line of 70001 (past lavapipe's 65535 iterations per loop) and a line per invocation."""
    n = 70001
    x = (rng.integers(-3, 4, n) if not dt.is_float else rng.integers(-3, 4, n) * 0.25).astype(dt.numpy_dtype)
    got = kdml.cumsum(x, 0, reverse=True, device=dev).numpy()
    assert np.array_equal(got, np.cumsum(x[::-1].astype(np.float64 if dt.is_float else np.int64))[::-1])


@pytest.mark.parametrize(("dt", "strides"), [(DT.FLOAT32, None), (DT.FLOAT16, None), (DT.FLOAT16, (1, 7)),
                                             (DT.INT64, (9, 1))], ids=str)
def test_in_place(dev, rng, dt, strides):
    desc = TD(dt, (7, 5), strides)
    x, raw = place(dev, rng, desc, values(rng, dt, "sum", (7, 5)))
    xv = read_logical(raw, x.offset, desc)
    dev.compile(make("sum", desc, desc, 0, True, True)).execute([x], [x])
    got = read_logical(assert_outside_unchanged(x, raw), x.offset, desc)
    want, taken = reference(xv, 0, "sum", True, True)
    check(got, want, taken, xv, 0, "sum", True, True, dt)


def test_helpers(dev, rng):
    x = rng.integers(-5, 6, (3, 4, 5)).astype(np.int32)
    assert np.array_equal(kdml.cumsum(x, -1, device=dev).numpy(), np.cumsum(x, -1))
    assert np.array_equal(kdml.cumprod(x, 1, device=dev).numpy(), np.cumprod(x, 1))
    ex = kdml.cumsum(x, 0, exclusive=True, device=dev).numpy()
    assert np.array_equal(ex, np.cumsum(x, 0) - x)
    out = dev.empty(TD(DT.INT32, x.shape))
    assert kdml.cumprod(x, 2, exclusive=True, reverse=True, out=out, device=dev) is out
    assert np.array_equal(out.numpy(), wrap(reference(x, 2, "prod", True, True)[0], DT.INT32))
    with pytest.raises(kdml.InvalidArgumentError, match=r"^axis: must be in \[-3, 3\)"):
        kdml.cumsum(x, 3, device=dev)


F4 = TD(DT.FLOAT32, (2, 3, 4, 5))
BAD = [
    (kdml.CumulativeSummationDesc(F4, TD(DT.FLOAT16, F4.sizes), 0), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal input_tensor's \(FLOAT32\)"),
    (kdml.CumulativeProductDesc(F4, TD(DT.FLOAT32, (2, 3, 4, 6)), 0), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: must equal input_tensor's"),
    (kdml.CumulativeSummationDesc(F4, F4, 4), kdml.InvalidArgumentError,
     r"^axis: must be less than input_tensor's DimensionCount \(4\), got 4"),
    (kdml.CumulativeSummationDesc(F4, F4, 0, 2), kdml.InvalidArgumentError,
     r"^axis_direction: 2 is not a DML_AXIS_DIRECTION value"),
    (kdml.CumulativeProductDesc(F4, F4, 0, AD.INCREASING, 2), kdml.InvalidArgumentError,
     r"^has_exclusive_product: must be a BOOL"),
    (kdml.CumulativeSummationDesc(F4, TD(DT.FLOAT32, F4.sizes, (0, 20, 5, 1)), 1), kdml.InvalidArgumentError,
     r"^output_tensor\.strides: an output may not broadcast"),
    (kdml.CumulativeSummationDesc(*[TD(DT.INT16, F4.sizes)] * 2, 0), kdml.UnsupportedError,
     r"^input_tensor: CUMULATIVE_SUMMATION does not support INT16"),
    (kdml.CumulativeProductDesc(*[TD(DT.FLOAT64, F4.sizes)] * 2, 0), kdml.UnsupportedError,
     r"^input_tensor: CUMULATIVE_PRODUCT does not support FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_feature_levels():
    i64 = TD(DT.INT64, (2, 3))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: CUMULATIVE_SUMMATION does not support INT64"):
        compile_at_level(FL.FL_4_1, kdml.CumulativeSummationDesc(i64, i64, 1))
    compile_at_level(FL.FL_5_0, kdml.CumulativeProductDesc(i64, i64, 1))
    f2 = TD(DT.FLOAT32, (2, 3))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: CUMULATIVE_SUMMATION supports 4 dimensions"):
        compile_at_level(FL.FL_3_1, kdml.CumulativeSummationDesc(f2, f2, 1))
    compile_at_level(FL.FL_2_1, kdml.CumulativeSummationDesc(F4, F4, 1))
    with pytest.raises(kdml.UnsupportedError):  # introduced at 3_1
        compile_at_level(FL.FL_3_0, kdml.CumulativeProductDesc(F4, F4, 1))
