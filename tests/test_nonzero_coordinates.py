"""NONZERO_COORDINATES (ops/nonzero_coordinates.py, shaders/nonzero_coordinates.comp): the page's
example (N 3 of a 4-D input); every data type (FLOAT -0 is zero, NaN is not), 4-D and 5-D, N from
the effective rank to the DimensionCount, inputs past one 256-element chunk, against numpy.argwhere;
strided input and coordinates at random offsets, both outputs poisoned first: the count, the first
count rows, and every other byte (the rows past the count too) unchanged; refused descriptors with
the field they name; the feature level; the helper."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import nonzero_coordinates as nz

DT = kdml.DataType
TD = kdml.TensorDesc
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.INT16, DT.INT8, DT.UINT32, DT.UINT16, DT.UINT8]


def _run(dev, rng, x, xd, n):
    m = x.size
    cd = TD(DT.UINT32, (1,) * xd.dimension_count)
    yd = TD(DT.UINT32, (1,) * (xd.dimension_count - 2) + (m, n), random_strides(rng, (1,) * (xd.dimension_count - 2)
                                                                                  + (m, n), allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    tc, c0 = place(dev, rng, cd)
    ty, y0 = place(dev, rng, yd)
    dev.compile(nz.NonzeroCoordinatesDesc(xd, cd, yd)).execute([tx], [tc, ty])
    count = int(read_logical(assert_outside_unchanged(tc, c0), tc.offset, cd).reshape(-1)[0])
    after = np.frombuffer(ty.buffer.read(), np.uint8)
    coords = read_logical(after, ty.offset, yd).reshape(m, n)
    # every byte but the first `count` rows' is as before (rows past the count are not written)
    written = TD(DT.UINT32, (count, n), yd.effective_strides[-2:]) if count else None
    mask = np.ones(after.size, bool)
    if written is not None:
        from helpers import element_byte_positions
        mask[element_byte_positions(ty.offset, written)] = False
    assert (after[mask] == np.frombuffer(y0, np.uint8)[mask]).all()
    return count, coords[:count]


def test_the_pages_example(dev, rng):
    x = np.array([[1.0, 0.0, 0.0, 2.0], [-0.0, 3.5, 0.0, -5.2]], np.float32).reshape(1, 1, 2, 4)
    count, coords = _run(dev, rng, x, TD(DT.FLOAT32, (1, 1, 2, 4)), 3)
    assert count == 4
    np.testing.assert_array_equal(coords, [[0, 0, 0], [0, 0, 3], [0, 1, 1], [0, 1, 3]])


CASES = [(1, 1, 12, 5), (2, 3, 5, 7), (1, 2, 3, 4, 5), (3, 1, 40, 9), (1, 1, 1, 1), (2, 2, 1, 3, 100)]


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_argwhere(dev, rng, case, dt):
    shape = CASES[case]
    npd = dt.numpy_dtype
    if dt.is_float:
        x = rng.choice(np.array([0.0, -0.0, 1.0, -2.5, np.nan, np.inf, 1e-7, -0.0], npd), size=shape)
        if dt == DT.FLOAT16:
            x.reshape(-1)[:2] = np.array([1, 0x8001], np.uint16).view(np.float16)[:x.size]  # subnormals are nonzero
    else:
        x = (rng.integers(0, 2, shape) * rng.integers(1, 100, shape)).astype(npd)
        x.reshape(-1)[:1] = np.iinfo(npd).max
    rank = len(shape)
    eff = nz.effective_rank(shape)
    for n in sorted({max(eff, 1), rank}):  # N 0 (a rank-0 input) is an empty tensor no TensorDesc describes
        xd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
        count, coords = _run(dev, rng, x, xd, n)
        want = np.argwhere(x != 0)  # numpy: -0.0 == 0, NaN != 0
        assert count == len(want)
        np.testing.assert_array_equal(coords, want[:, rank - n:])


def _desc(**over):
    u32 = DT.UINT32
    d = {"input_tensor": TD(DT.FLOAT32, (1, 1, 12, 5)), "output_count_tensor": TD(u32, (1, 1, 1, 1)),
         "output_coordinates_tensor": TD(u32, (1, 1, 60, 2))}
    d.update(over)
    return nz.NonzeroCoordinatesDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"output_count_tensor": TD(DT.UINT32, (1, 1, 1, 2))}, kdml.InvalidArgumentError, "output_count_tensor.sizes"),
    ({"output_count_tensor": TD(DT.UINT32, (1, 1, 1, 1, 1))}, kdml.InvalidArgumentError, "output_count_tensor.sizes"),
    ({"output_count_tensor": TD(DT.INT32, (1, 1, 1, 1))}, kdml.UnsupportedError, "output_count_tensor"),
    ({"output_coordinates_tensor": TD(DT.UINT32, (1, 1, 60, 1))}, kdml.InvalidArgumentError,
     "output_coordinates_tensor.sizes"),  # N below the effective rank
    ({"output_coordinates_tensor": TD(DT.UINT32, (1, 1, 60, 5))}, kdml.InvalidArgumentError,
     "output_coordinates_tensor.sizes"),  # N above the DimensionCount
    ({"output_coordinates_tensor": TD(DT.UINT32, (1, 1, 59, 2))}, kdml.InvalidArgumentError,
     "output_coordinates_tensor.sizes"),
    ({"output_coordinates_tensor": TD(DT.UINT32, (1, 2, 30, 2))}, kdml.InvalidArgumentError,
     "output_coordinates_tensor.sizes"),
    ({"output_coordinates_tensor": TD(DT.UINT64, (1, 1, 60, 2))}, kdml.UnsupportedError, "output_coordinates_tensor"),
    ({"output_coordinates_tensor": TD(DT.UINT32, (1, 1, 60, 2), (120, 120, 1, 1))}, kdml.InvalidArgumentError,
     "output_coordinates_tensor"),
    ({"input_tensor": TD(DT.INT64, (1, 1, 12, 5))}, kdml.UnsupportedError, "input_tensor"),
    ({"input_tensor": TD(DT.FLOAT32, (12, 5))}, kdml.UnsupportedError, "input_tensor"),
    ({"input_tensor": TD(DT.FLOAT32, (1, 1, 1, 12, 5))}, kdml.InvalidArgumentError, "output_count_tensor.sizes"),
    ({"input_tensor": TD(DT.UINT8, (1, 1, 4096, 4097)), "output_coordinates_tensor": TD(DT.UINT32, (1, 1, 4096 * 4097, 2))},
     kdml.UnsupportedError, "input_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError, match="3_0"):
        compile_at_level(kdml.FeatureLevel.FL_2_1, _desc())


def test_helper(dev, rng):
    x = (rng.random((1, 2, 3, 50)) < 0.4).astype(np.uint8)
    count, coords = kdml.nonzero_coordinates(x, device=dev)
    n = int(count.numpy().reshape(-1)[0])
    np.testing.assert_array_equal(coords.numpy()[0, 0, :n], np.argwhere(x))
