"""Tensors that are not quite arrays (issue 56): operators, numpy's promotion, ufuncs on the device,
methods, 0-d tensors and creation functions (kompute_dml/device/array_ops.py, array_methods.py,
creation.py; docs/tensor.md). Expected values are numpy's on the same inputs."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.device.memory import Tensor

IAE, UE = kdml.InvalidArgumentError, kdml.UnsupportedError


@pytest.fixture
def no_host(monkeypatch):
    """Any download of a Tensor fails: what runs must run on the device."""
    def fail(*args, **kwargs):
        raise AssertionError("a Tensor was downloaded")
    monkeypatch.setattr(Tensor, "numpy", fail)
    monkeypatch.setattr(Tensor, "__array__", fail)


def _arrays(rng, dtype, shape=(3, 5)):
    if np.dtype(dtype).kind == "f":
        a = rng.standard_normal(shape).astype(dtype)
        b = rng.standard_normal(shape).astype(dtype)
        b[np.abs(b) < 0.1] = 0.5  # no division by (near) zero
    else:
        info = np.iinfo(dtype)
        a = rng.integers(max(info.min, -100), min(info.max, 100), shape, dtype=dtype)
        b = rng.integers(1, min(info.max, 100), shape, dtype=dtype)
    return a, b


ARITH = [operator.add, operator.sub, operator.mul]


# ---- operators against numpy ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int8, np.uint8, np.int64])
@pytest.mark.parametrize("op", ARITH, ids=lambda f: f.__name__)
def test_arithmetic_is_numpys(dev, rng, dtype, op):
    a, b = _arrays(rng, dtype)
    with np.errstate(over="ignore"):
        want = op(a, b)  # float add/sub/mul are correctly rounded on both sides; integers wrap on both
    got = op(dev.tensor(a), dev.tensor(b))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_true_division_of_floats_is_exact(dev, rng, dtype):
    a, b = _arrays(rng, dtype)
    np.testing.assert_array_equal((dev.tensor(a) / dev.tensor(b)).numpy(), a / b)


def test_scalars_reflected_forms_and_broadcasting(dev, rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    row = rng.standard_normal(3).astype(np.float32)
    t, r = dev.tensor(a), dev.tensor(row)
    listed = [1.0, 2.0, 3.0]  # Python data takes the tensor's type
    cases = [(t + 1.5, a + np.float32(1.5)), (2 - t, np.float32(2) - a), (t * 3, a * np.float32(3)),
             (1 / (t + 10), np.float32(1) / (a + np.float32(10))), (t + r, a + row), (r - t, row - a),
             (t * row, a * row), (t + listed, a + np.array([1, 2, 3], np.float32))]
    for got, want in cases:
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_unary_operators(dev, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    i = np.array([-128, -3, 0, 7, 127], np.int8)
    t, ti = dev.tensor(a), dev.tensor(i)
    np.testing.assert_array_equal((-t).numpy(), -a)
    np.testing.assert_array_equal(abs(t).numpy(), np.abs(a))
    np.testing.assert_array_equal((+t).numpy(), a)
    np.testing.assert_array_equal((-ti).numpy(), -i)  # -(-128) wraps to -128 in both
    np.testing.assert_array_equal(abs(ti).numpy(), np.abs(i))
    u = np.array([0, 5, 255], np.uint8)
    np.testing.assert_array_equal(abs(dev.tensor(u)).numpy(), u)


COMPARE = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


@pytest.mark.parametrize("op", COMPARE, ids=lambda f: f.__name__)
def test_comparisons_give_uint8_masks_and_treat_nan_and_zeros_as_numpy(dev, op):
    a = np.array([1.0, 2.0, np.nan, 0.0, -0.0, np.inf, 3.0, np.nan], np.float32)
    b = np.array([1.0, 3.0, 1.0, -0.0, 0.0, np.inf, 2.0, np.nan], np.float32)
    got = op(dev.tensor(a), dev.tensor(b))
    assert isinstance(got, Tensor) and got.dtype == np.uint8  # DirectML has no bool type
    np.testing.assert_array_equal(got.numpy(), op(a, b).astype(np.uint8))
    ints = np.array([-5, 0, 7, 7], np.int32)
    np.testing.assert_array_equal(op(dev.tensor(ints), 0).numpy(), op(ints, 0).astype(np.uint8))


def test_logical_operators_on_masks(dev):
    p = np.array([0, 1, 0, 1], np.uint8)
    q = np.array([0, 0, 1, 1], np.uint8)
    tp, tq = dev.tensor(p), dev.tensor(q)
    np.testing.assert_array_equal((tp & tq).numpy(), p & q)
    np.testing.assert_array_equal((tp | tq).numpy(), p | q)
    np.testing.assert_array_equal((~tp).numpy(), [1, 0, 1, 0])  # the logical not of a mask
    # logical, not bitwise (docs/tensor.md): 2 & 1 is 1 here, 0 in numpy's bitwise and
    assert (dev.tensor(np.array([2], np.uint8)) & 1).tolist() == [1]
    with pytest.raises(TypeError, match="logical not of a UINT8 / UINT32"):
        ~dev.tensor(np.ones(2, np.float32))
    with pytest.raises(UE, match=r"\|: .*logical or of UINT8 / UINT32"):
        dev.tensor(np.ones(2, np.float32)) | dev.tensor(np.ones(2, np.float32))


def test_matmul_operator(dev, rng):
    a = rng.integers(-8, 8, (3, 4)).astype(np.float32)  # small integers: every sum exact in float32
    b = rng.integers(-8, 8, (4, 2)).astype(np.float32)
    ta, tb = dev.tensor(a), dev.tensor(b)
    np.testing.assert_array_equal((ta @ tb).numpy(), a @ b)
    np.testing.assert_array_equal((a @ tb).numpy(), a @ b)  # reflected, through __array_ufunc__
    v = dev.tensor(a[0])
    dot = v @ v
    assert dot.shape == () and float(dot) == float(a[0] @ a[0])


def test_power_by_products(dev, rng):
    a = rng.standard_normal(64).astype(np.float32)
    t = dev.tensor(a)
    np.testing.assert_array_equal((t ** 2).numpy(), a * a)
    np.testing.assert_array_equal((t ** 3).numpy(), (a * a) * a)  # onnxruntime's rounding (docs/tensor.md)
    np.testing.assert_array_equal((t ** 1).numpy(), a)
    i = np.array([-3, 2, 5, 7], np.int32)
    np.testing.assert_array_equal((dev.tensor(i) ** 7).numpy(), i ** 7)
    np.testing.assert_array_equal((dev.tensor(i) ** 0).numpy(), i ** 0)
    with pytest.raises(UE, match=r"\*\* 0\.5: DirectML has no POW"):
        t ** 0.5
    with pytest.raises(UE, match="no POW"):
        t ** 4


# ---- promotion ---------------------------------------------------------------------------------
@pytest.mark.parametrize("da,db", [(np.int8, np.int16), (np.uint8, np.int8), (np.float16, np.float32),
                                   (np.int8, np.int32), (np.uint8, np.uint32), (np.uint8, np.float16)])
def test_numpy_promotion_between_tensors(dev, rng, da, db):
    a = rng.integers(0, 50, (2, 3)).astype(da)
    b = rng.integers(1, 50, (2, 3)).astype(db)
    want = a + b
    got = dev.tensor(a) + dev.tensor(b)
    assert got.dtype == want.dtype == np.result_type(da, db)
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal((dev.tensor(a) * b).numpy(), a * b)  # a numpy operand promotes too


def test_promotion_beyond_the_operators_names_the_rule(dev):
    i8, u32 = dev.tensor(np.array([-128, 2], np.int8)), dev.tensor(np.array([4294967295, 2], np.uint32))
    got = i8 + u32  # numpy's int64 (CAST takes INT64 now; the message was about INT32 support)
    assert got.dtype == np.int64 and got.numpy().tolist() == (i8.numpy() + u32.numpy()).tolist() == [4294967167, 4]
    u64 = dev.tensor(np.array([1, 2], np.uint64))
    with pytest.raises(UE, match=r"^\+: numpy promotes int8 \+ uint64 to float64; .*FLOAT64"):
        i8 + u64
    with pytest.raises(UE, match="numpy promotes int32 - float32 to float64"):
        dev.tensor(np.ones(2, np.int32)) - dev.tensor(np.ones(2, np.float32))
    with pytest.raises(UE, match="int32 tensor \\+ Python float: numpy promotes it to float64"):
        dev.tensor(np.ones(2, np.int32)) + 0.5
    with pytest.raises(UE, match="true division gives float64"):
        dev.tensor(np.ones(2, np.int32)) / 2


def test_python_scalars_take_the_tensors_type(dev):
    t = dev.tensor(np.array([1, 2], np.int8))
    got = t + 100
    assert got.dtype == np.int8 and got.tolist() == [101, 102]
    with pytest.raises(IAE, match="do not fit int8"):
        t + 300
    h = dev.tensor(np.array([1, 2], np.float16)) * 0.5
    assert h.dtype == np.float16 and h.tolist() == [0.5, 1.0]


def test_functional_helpers_default_python_floats_to_float32(dev):
    got = kdml.add([1.5, 2.5], [1.0, 2.0], device=dev)  # the issue: float64, "does not support FLOAT64"
    assert got.dtype == np.float32 and got.tolist() == [2.5, 4.5]


def test_functional_helpers_name_the_one_type_rule(dev):
    a, b = dev.tensor(np.ones(2, np.int8)), dev.tensor(np.ones(2, np.uint32))
    with pytest.raises(IAE, match="^b: data type UINT32 differs from a's INT8: .*do not promote .*numpy would give int64"):
        kdml.add(a, b)


# ---- numpy's protocols -------------------------------------------------------------------------
def test_numpy_ufuncs_run_on_the_device(dev, rng, no_host):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    ta, tb = dev.tensor(a), dev.tensor(b)
    for fn in (np.add, np.subtract, np.multiply, np.greater, np.equal, np.less_equal):
        r = fn(ta, tb)
        assert isinstance(r, Tensor)  # computed on the device: no download (no_host)
    assert isinstance(np.negative(ta), Tensor) and isinstance(np.sqrt(abs(ta)), Tensor)
    assert isinstance(np.add(a, tb), Tensor)  # a numpy operand goes up, the work stays on the device


def test_numpy_ufunc_values(dev, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    ta, tb = dev.tensor(a), dev.tensor(b)
    np.testing.assert_array_equal(np.add(ta, tb).numpy(), a + b)
    np.testing.assert_array_equal(np.less(ta, tb).numpy(), (a < b).astype(np.uint8))
    np.testing.assert_array_equal(np.add(a, tb).numpy(), a + b)


def test_numpy_refuses_what_has_no_operator(dev, no_host):
    t = dev.tensor(np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match=r"numpy\.sin has no DirectML operator.*\.numpy\(\)"):
        np.sin(t)
    with pytest.raises(TypeError, match=r"numpy\.add\.reduce has no DirectML operator"):
        np.add.reduce(t)
    with pytest.raises(TypeError, match=r"numpy\.concatenate has no DirectML operator"):
        np.concatenate([t, t])
    with pytest.raises(TypeError, match=r"numpy\.cumsum has no DirectML operator"):
        np.cumsum(t)
    with pytest.raises(TypeError, match="//"):
        t // 2
    with pytest.raises(TypeError, match="%"):
        t % 2


def test_numpy_functions_with_a_device_form(dev):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = dev.tensor(a)
    np.testing.assert_array_equal(np.reshape(t, (3, 2)).numpy(), a.reshape(3, 2))
    np.testing.assert_array_equal(np.transpose(t).numpy(), a.T)
    assert np.shape(t) == (2, 3)


def test_eq_is_element_wise_and_tensors_stay_hashable(dev):
    a, b = dev.tensor(np.array([1, 2], np.int32)), dev.tensor(np.array([1, 3], np.int32))
    eq = a == b  # the issue: False by identity
    assert isinstance(eq, Tensor) and eq.tolist() == [1, 0]
    assert len({a: 1, b: 2}) == 2 and {a: 1}[a] == 1  # hashed by identity (docs/tensor.md)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(eq)
    # operands of no array type: Python's protocol (NotImplemented), so == falls back to identity
    assert (a == None) is False and (a != "x") is True  # noqa: E711
    with pytest.raises(TypeError, match="unsupported operand"):
        a + "x"


@pytest.mark.parametrize("axis,keepdims", [(None, False), (None, True), (0, False), (1, True), ((0, 2), False), (-1, False)])
def test_reductions_on_the_device(dev, rng, no_host, monkeypatch, axis, keepdims):
    """sum / mean / max / min / prod / argmax / argmin as numpy's (axis, keepdims; a full reduction
    0-d), on REDUCE; np.sum & co. dispatch to them. Compared after the block (no_host: nothing read)."""
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    t = dev.tensor(x)
    got = {name: getattr(t, name)(axis=axis, keepdims=keepdims) for name in ("sum", "mean", "max", "min", "prod")}
    got["np.sum"] = np.sum(t, axis=axis, keepdims=keepdims)
    if not keepdims and not isinstance(axis, tuple):
        got["argmax"], got["argmin"] = t.argmax(axis=axis), np.argmin(t, axis=axis)
    monkeypatch.undo()  # the downloads below compare
    x64, u = x.astype(np.float64), 2.0 ** -24
    for name, g in got.items():
        fn = getattr(np, name.removeprefix("np."))
        want = fn(x, axis=axis) if name.startswith("arg") else fn(x, axis=axis, keepdims=keepdims)
        assert isinstance(g, Tensor) and g.shape == np.shape(want), (name, g.shape, np.shape(want))
        if name.startswith("arg") or name in ("max", "min"):
            np.testing.assert_array_equal(g.numpy(), want)
            continue
        # against the float64 result, within float32 evaluation's bound in any order of the n terms:
        # sums (n - 1) u sum |x| (then the mean's division, u of it), products (n - 1) u of it
        exact = fn(x64, axis=axis, keepdims=keepdims)
        n = x.size // exact.size
        if name == "prod":
            tol = (n + 1) * u * np.abs(exact)
        else:
            tol = (n + 1) * u * np.sum(np.abs(x64), axis=axis, keepdims=keepdims) / (n if name == "mean" else 1)
            tol = tol + 2 * u * np.abs(exact)
        err = np.abs(g.numpy().astype(np.float64) - exact)
        assert (err <= tol).all(), (name, err.max(), tol.min())


# ---- methods -------------------------------------------------------------------------------------
def test_scalar_indexing_gives_0d_tensors(dev):
    a = np.array([[1.5, -2.0], [3.25, 4.0]], np.float32)
    t = dev.tensor(a)
    s = t[1, 0]  # the issue: shape (1,)
    assert s.shape == () and s.ndim == 0 and s.size == 1 and s.strides == ()
    assert float(s) == 3.25 and s.item() == 3.25 and s.tolist() == 3.25  # the issue: float() failed
    assert s.numpy().shape == () and np.asarray(s).shape == ()
    assert int(dev.tensor(np.array([7, 8], np.int16))[-1]) == 8
    assert bool(t[0, 1]) is True
    with pytest.raises(TypeError, match="len"):
        len(s)
    assert (s + 1).shape == () and float(s * t[0, 0]) == 3.25 * 1.5  # 0-d operands give 0-d
    assert (s + t).shape == (2, 2) and s[()].shape == () and s[None].shape == (1,)
    assert t[1].shape == (2,) and t[1:, 0].shape == (1,)


def test_strides_are_numpys_bytes(dev):
    a = np.zeros((2, 3, 4), np.float16)
    t = dev.tensor(a)
    assert t.strides == a.strides
    assert t[:, ::2].strides == a[:, ::2].strides
    assert t.T.strides == a.T.strides


def test_reshape_transpose_copy(dev, rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    t = dev.tensor(a)
    r = t.reshape(6, 4)
    assert r.buffer is t.buffer  # packed: a view
    np.testing.assert_array_equal(r.numpy(), a.reshape(6, 4))
    np.testing.assert_array_equal(t.reshape((4, -1)).numpy(), a.reshape(4, -1))
    tt = t.T
    assert tt.buffer is t.buffer and tt.shape == (4, 3, 2)  # a strided view
    np.testing.assert_array_equal(tt.numpy(), a.T)
    np.testing.assert_array_equal(t.transpose(1, 0, 2).numpy(), a.transpose(1, 0, 2))
    moved = tt.reshape(-1)  # not packed: a device copy first
    assert moved.buffer is not t.buffer
    np.testing.assert_array_equal(moved.numpy(), a.T.reshape(-1))
    c = t.copy()
    assert c.buffer is not t.buffer
    np.testing.assert_array_equal(c.numpy(), a)
    assert t[0, 0, 0].reshape(()).shape == ()
    with pytest.raises(IAE, match="cannot reshape 24 elements"):
        t.reshape(5, 5)


def test_astype_and_tolist(dev):
    a = np.array([1.7, -2.5, 300.0], np.float32)
    t = dev.tensor(a)
    i = t.astype(np.int32)  # CAST truncates toward zero, as numpy's astype
    assert i.dtype == np.int32 and i.tolist() == a.astype(np.int32).tolist()
    h = t.astype("float16")
    np.testing.assert_array_equal(h.numpy(), a.astype(np.float16))
    assert t.astype(np.float32, copy=False) is t and t.astype(np.float32).buffer is not t.buffer
    assert dev.tensor(np.arange(6, dtype=np.int8).reshape(2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="one element"):
        t.item()


# ---- creation ------------------------------------------------------------------------------------
def test_creation_functions(dev):
    z = kdml.zeros((2, 3), device=dev)
    assert z.dtype == np.float32 and z.device is dev
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(kdml.ones(4, np.int8, device=dev).numpy(), np.ones(4, np.int8))
    np.testing.assert_array_equal(kdml.full((3, 2), 2.5, device=dev).numpy(), np.full((3, 2), 2.5, np.float32))
    np.testing.assert_array_equal(kdml.full(5, -3, np.int16, device=dev).numpy(), np.full(5, -3, np.int16))
    e = kdml.empty((2, 2), kdml.DataType.UINT32, device=dev)
    assert e.shape == (2, 2) and e.dtype == np.uint32
    np.testing.assert_array_equal(kdml.arange(5, device=dev).numpy(), np.arange(5))
    np.testing.assert_array_equal(kdml.arange(0.0, 1.0, 0.25, device=dev).numpy(),
                                  np.arange(0.0, 1.0, 0.25).astype(np.float32))
    np.testing.assert_array_equal(kdml.arange(2, 8, 2, dtype=np.int32, device=dev).numpy(), np.arange(2, 8, 2))
    s = kdml.full((), 7.0, device=dev)
    assert s.shape == () and float(s) == 7.0
    t = dev.tensor(np.ones((2, 5), np.float16))
    for fn, want in ((kdml.zeros_like, 0), (kdml.ones_like, 1), (kdml.empty_like, 0)):
        r = fn(t)
        assert r.shape == (2, 5) and r.dtype == np.float16 and r.device is dev
        np.testing.assert_array_equal(r.numpy(), np.full((2, 5), want, np.float16))
    np.testing.assert_array_equal(kdml.full_like(t, 3, np.int32).numpy(), np.full((2, 5), 3, np.int32))
    with pytest.raises(IAE, match="do not fit int8"):
        kdml.full(2, 300, np.int8, device=dev)
    with pytest.raises(kdml.UnsupportedError, match="bool is not a DirectML data type"):
        kdml.zeros(2, bool, device=dev)


def test_device_empty_takes_a_shape(dev):
    t = dev.empty((2, 3), np.int16)  # the issue: wanted a TensorDesc
    assert t.shape == (2, 3) and t.dtype == np.int16
    np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3), np.int16))
    assert dev.empty(4).dtype == np.float32
