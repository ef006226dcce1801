"""SCATTER_ELEMENTS, DirectML's name for SCATTER (DirectML.h: DML_OPERATOR_SCATTER =
DML_OPERATOR_SCATTER_ELEMENTS = 94, `using DML_SCATTER_ELEMENTS_OPERATOR_DESC =
DML_SCATTER_OPERATOR_DESC`): kdml.ScatterElementsDesc is kdml.ScatterDesc, compiles to the SCATTER
spec, and runs the page's example 2 (axis 0) against a numpy loop (updates written at the indices along
the axis, the rest of the input copied) into a strided output poisoned first with every other byte
unchanged. The operator's full tests: tests/test_scatter.py."""

from __future__ import annotations

import numpy as np
from helpers import assert_output, place, poison_against

import kompute_dml as kdml
from kompute_dml.ops import BY_DESC

DT = kdml.DataType
TD = kdml.TensorDesc


def reference(x, indices, updates, axis):
    y = x.copy()
    for pos in np.ndindex(indices.shape):
        at = list(pos)
        at[axis] = indices[pos]
        y[tuple(at)] = updates[pos]
    return y


def test_the_alias_is_scatter(dev, rng):
    assert kdml.ScatterElementsDesc is kdml.ScatterDesc
    spec = BY_DESC[kdml.ScatterElementsDesc]
    assert (spec.name, spec.support.op_type) == ("SCATTER", 94)
    x = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.uint32)
    upd = np.array([[10, 11, 12], [20, 21, 22]], np.float32)
    want = reference(x, idx, upd, 0)
    np.testing.assert_array_equal(want, [[20, 11, 0], [10, 0, 22], [0, 21, 12]])  # the page's example 2
    xd, id_, ud = TD(DT.FLOAT32, (3, 3)), TD(DT.UINT32, (2, 3)), TD(DT.FLOAT32, (2, 3))
    yd = TD(DT.FLOAT32, (3, 3), (1, 5))  # a transposed, gapped output
    tx, _ = place(dev, rng, xd, x)
    ti, _ = place(dev, rng, id_, idx)
    tu, _ = place(dev, rng, ud, upd)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(kdml.ScatterElementsDesc(xd, id_, ud, yd, 0)).execute([tx, ti, tu], [ty])
    assert_output(ty, before, want)
