"""Values larger than one storage-buffer binding, split over dispatches (ops/split_range.py,
docs/large_values.md), on a device whose bindings are made to stop at 64 KiB (its limits and the
engine's window both narrowed), so small values exercise every path quickly: buffers beyond the
window bound as windows (kp patch level 14) at random offsets with guard bytes and poisoned outputs
(every other byte unchanged), broadcast inputs, strided layouts, the element-wise plans, CAST,
POW's own block, COPY, softmax with and without a mask, GEMM by batch, rows and columns; an
operator that takes its tensors whole refuses at compile. tests/test_large_values.py does it
with a real 144 MB value."""

from __future__ import annotations

import types

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
WINDOW = 1 << 16


@pytest.fixture(scope="module")
def narrow():
    d = kdml.Device()
    d.limits = types.MappingProxyType(dict(d.limits, max_storage_buffer_range=WINDOW))
    d.engine.programs.window_range = WINDOW
    yield d
    d.close()


def parts(op) -> int:
    return sum(1 for p in op.plans if p.windows)


def test_elementwise_offsets_broadcast_and_layouts(narrow, rng):
    """ADD of a (9, 7, 600) float32 value (151 KB) with a row broadcast over it, the tensors at
    random offsets in their buffers (strided output too): several dispatches, each binding windows."""
    sizes = (9, 7, 600)
    a_d = TD(DT.FLOAT32, sizes)
    b_d = TD(DT.FLOAT32, sizes, (0, 0, 1))
    o_d = TD(DT.FLOAT32, sizes, random_strides(rng, sizes, allow_broadcast=False, max_gap=2))
    av = rng.standard_normal(sizes).astype(np.float32)
    row = rng.standard_normal(600).astype(np.float32)
    (a, araw), (b, braw) = place(narrow, rng, a_d, av), place(narrow, rng, b_d, np.broadcast_to(row, sizes).copy())
    o, _ = place(narrow, rng, o_d)
    want = read_logical(araw, a.offset, a_d) + read_logical(braw, b.offset, b_d)
    before = poison_against(o, want, rng)
    op = narrow.compile(kdml.ElementWiseAdd1Desc(a_d, b_d, o_d))
    assert parts(op) >= 3
    op.execute([a, b], [o])
    assert_output(o, before, want)


@pytest.mark.parametrize("case", ["exp-f16", "cast", "pow", "rows-beyond-a-window"])
def test_more_element_wise(narrow, rng, case):
    if case == "exp-f16":
        x = rng.standard_normal((40, 2000)).astype(np.float16)  # 160 KB
        got = kdml.exp(x, device=narrow).numpy()
        np.testing.assert_allclose(got, np.exp(x.astype(np.float32)).astype(np.float16), rtol=1e-3)
    elif case == "cast":
        x = rng.integers(-2**31, 2**31, (3, 50, 300), dtype=np.int64)  # 360 KB in, 180 KB out
        np.testing.assert_array_equal(kdml.cast(x, DT.INT32, device=narrow).numpy(), x.astype(np.int32))
    elif case == "pow":  # EW_POW's 5-dimension block with its parameter words
        x = rng.uniform(0.5, 2, (5, 4, 1000)).astype(np.float32)
        e = rng.integers(-3, 4, (5, 4, 1000)).astype(np.int8)
        np.testing.assert_allclose(kdml.pow(x, e, device=narrow).numpy(), np.power(x.astype(np.float64), e), rtol=1e-6)
    else:  # one row is 80 KB: the second dimension is cut too
        x = rng.standard_normal((3, 20000)).astype(np.float32)
        np.testing.assert_array_equal(kdml.neg(x, device=narrow).numpy(), -x)


def test_copy(narrow, rng):
    """A transposed view copied (the generic copy shader in parts), and a packed one."""
    x = rng.standard_normal((4, 90, 70)).astype(np.float32)
    t = narrow.tensor(x)
    view = kdml.Tensor(t.buffer, TD(DT.FLOAT32, (4, 70, 90), (6300, 1, 70)), t.offset)
    np.testing.assert_array_equal(kdml.copy(view, device=narrow).numpy(), x.transpose(0, 2, 1))
    np.testing.assert_array_equal(kdml.copy(t, device=narrow).numpy(), x)


@pytest.mark.parametrize("masked", [False, True])
def test_softmax(narrow, rng, masked):
    x = rng.standard_normal((3, 4, 30, 100)).astype(np.float32)  # 144 KB
    mask = (rng.standard_normal((3, 1, 1, 100)) * 2).astype(np.float32) if masked else None
    y = kdml.softmax(x, axes=[3], mask=mask, device=narrow).numpy() if masked else \
        kdml.softmax(x, axes=[3], device=narrow).numpy()
    z = x + mask if masked else x
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("shape", ["batch", "rows", "columns"])
def test_gemm(narrow, rng, shape):
    """Batched products cut by batch; one product whose A and output pass a window cut by rows;
    one whose transposed B passes it cut by columns (C added, alpha and beta)."""
    if shape == "batch":
        a, b = rng.standard_normal((6, 40, 70)).astype(np.float32), rng.standard_normal((6, 70, 90)).astype(np.float32)
        np.testing.assert_allclose(kdml.matmul(a, b, device=narrow).numpy(), a @ b, rtol=1e-5, atol=1e-4)
    elif shape == "rows":
        a, b = rng.standard_normal((300, 200)).astype(np.float32), rng.standard_normal((200, 60)).astype(np.float32)
        np.testing.assert_allclose(kdml.matmul(a, b, device=narrow).numpy(), a @ b, rtol=1e-5, atol=1e-4)
    else:
        a = rng.standard_normal((8, 40)).astype(np.float32)
        bt = rng.standard_normal((3000, 40)).astype(np.float32)  # B transposed: 480 KB, cut by its rows (N)
        c = rng.standard_normal((8, 3000)).astype(np.float32)
        got = kdml.gemm(a, bt, c, trans_b=True, alpha=0.5, beta=2.0, device=narrow).numpy()
        np.testing.assert_allclose(got, 0.5 * (a @ bt.T) + 2.0 * c, rtol=1e-5, atol=1e-4)


def test_an_operator_that_does_not_split_refuses(narrow):
    big = TD(DT.FLOAT32, (WINDOW // 4 + 8,))
    with pytest.raises(kdml.UnsupportedError, match=r"^input_tensor: .*beyond one storage-buffer binding.*CUMULATIVE"):
        narrow.compile(kdml.CumulativeSummationDesc(big, big, 0))
    small = TD(DT.FLOAT32, (100,))
    narrow.compile(kdml.CumulativeSummationDesc(small, small, 0))  # within a window: as before
