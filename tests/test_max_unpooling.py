"""MAX_UNPOOLING (ops/max_unpooling.py, shaders/max_unpooling.comp) against an independent numpy
reference (zeros, then each input element at its flat index; out-of-range indices write nothing):
exact over every width of type (8 to 64 bits) with UINT32 and UINT64 indices, strided inputs and
indices, a strided output poisoned first (every byte outside it unchanged); refused descriptors and
feature levels; the helper after MAX_POOLING2's indices; ONNX MaxUnpool's node test cases on the
device."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import max_unpooling as mu

DT = kdml.DataType
TD = kdml.TensorDesc


def reference(x, idx, out_shape):
    y = np.zeros(int(np.prod(out_shape)), x.dtype)
    for v, i in zip(x.reshape(-1), idx.reshape(-1).astype(np.uint64)):
        if i < y.size:
            y[int(i)] = v
    return y.reshape(out_shape)


def _values(rng, dt, shape):
    if dt in (DT.FLOAT32, DT.FLOAT16):
        return rng.standard_normal(shape).astype(dt.numpy_dtype)
    info = np.iinfo(dt.numpy_dtype)
    return rng.integers(info.min, info.max, shape, dtype=dt.numpy_dtype, endpoint=True)


@pytest.mark.parametrize("it", [DT.UINT32, DT.UINT64], ids=lambda d: d.name)
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16, DT.INT8, DT.UINT16, DT.INT32, DT.INT64, DT.UINT64],
                         ids=lambda d: d.name)
def test_max_unpooling_against_numpy(dev, rng, dt, it):
    shape, out_shape = (2, 3, 3, 4), (2, 3, 5, 7)
    x = _values(rng, dt, shape)
    n_out = int(np.prod(out_shape))
    idx = rng.permutation(n_out)[:x.size].astype(it.numpy_dtype).reshape(shape)
    idx.reshape(-1)[[0, 7]] = (n_out, n_out + 5)  # out of range: no write
    if it == DT.UINT64:
        idx.reshape(-1)[3] = (1 << 32) + 2  # its low word in range, its high word not
    want = reference(x, idx, out_shape)
    xd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    idd = TD(it, shape, random_strides(rng, shape, allow_broadcast=False))
    yd = TD(dt, out_shape, random_strides(rng, out_shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ti, _ = place(dev, rng, idd, idx)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(mu.MaxUnpoolingDesc(xd, idd, yd)).execute([tx, ti], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def _desc(**over):
    f32 = DT.FLOAT32
    d = {"input_tensor": TD(f32, (1, 2, 2, 2)), "indices_tensor": TD(DT.UINT32, (1, 2, 2, 2)),
         "output_tensor": TD(f32, (1, 2, 4, 4))}
    d.update(over)
    return mu.MaxUnpoolingDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"output_tensor": TD(DT.FLOAT16, (1, 2, 4, 4))}, kdml.InvalidArgumentError, "output_tensor.data_type"),
    ({"indices_tensor": TD(DT.UINT32, (1, 2, 2, 3))}, kdml.InvalidArgumentError, "indices_tensor.sizes"),
    ({"indices_tensor": TD(DT.INT32, (1, 2, 2, 2))}, kdml.UnsupportedError, "indices_tensor"),
    ({"input_tensor": TD(DT.FLOAT32, (2, 2, 2))}, kdml.UnsupportedError, "input_tensor"),
    ({"output_tensor": TD(DT.FLOAT32, (1, 2, 4, 4), (32, 16, 0, 1))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None


def test_feature_levels():
    compile_at_level(kdml.FeatureLevel.FL_3_0, _desc())
    with pytest.raises(kdml.UnsupportedError, match="3_0"):
        compile_at_level(kdml.FeatureLevel.FL_2_1, _desc())
    for over in ({"indices_tensor": TD(DT.UINT64, (1, 2, 2, 2))},
                 {"input_tensor": TD(DT.INT8, (1, 2, 2, 2)), "output_tensor": TD(DT.INT8, (1, 2, 4, 4))}):
        with pytest.raises(kdml.UnsupportedError):
            compile_at_level(kdml.FeatureLevel.FL_4_1, _desc(**over))
        compile_at_level(kdml.FeatureLevel.FL_5_0, _desc(**over))


def test_helper_inverts_max_pooling(dev, rng):
    x = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    pooled = dev.empty((2, 3, 3, 4))
    ind = dev.empty((2, 3, 3, 4), dtype=np.uint32)
    desc = kdml.MaxPooling2Desc(dev.tensor(x).desc, pooled.desc, ind.desc, (2, 2), (2, 2))
    dev.compile(desc).execute([dev.tensor(x)], [pooled, ind])
    y = kdml.max_unpool(pooled, ind, x.shape, device=dev).numpy()
    np.testing.assert_array_equal(y, reference(pooled.numpy(), ind.numpy(), x.shape))
    assert kdml.max_unpool(pooled, ind, x.shape, out=dev.empty(x.shape), device=dev).shape == x.shape


onnx = pytest.importorskip("onnx")
from onnx_node_cases import node_cases, run_on_device  # noqa: E402

UNPOOL, UNPOOL_NAMES = node_cases(r"^test_maxunpool.*_cpu$", __name__)


@pytest.mark.parametrize("name", UNPOOL_NAMES)
def test_onnx_maxunpool_node_cases_on_the_device(name):
    (rep,) = run_on_device(UNPOOL, name)
    assert "MAX_UNPOOLING" in rep.summary()
