"""DEPTH_TO_SPACE and SPACE_TO_DEPTH, the first versions (ops/depth_space_first.py, on the 1
versions' strided copies) against numpy reshape / transpose forms of the DCR arrangement: every type
of the pages' tables (the 64-bit ones of 5_0 included), block sizes 1 to 3, strided inputs and
outputs at random offsets, outputs poisoned first and every other byte unchanged (bit copies), both
the transfer and the shader paths; the pages' examples exactly; feature levels; refused
descriptors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
FL = kdml.FeatureLevel
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.INT16, DT.INT8, DT.UINT32, DT.UINT16, DT.UINT8, DT.FLOAT64, DT.INT64,
         DT.UINT64]


def d2s(x, b):
    n, c, h, w = x.shape
    return x.reshape(n, b, b, c // b // b, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // b // b, h * b, w * b)


def s2d(x, b):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("to_space, xs, b", [
    (True, (2, 12, 3, 5), 2), (True, (1, 18, 2, 2), 3), (True, (3, 4, 2, 3), 1),
    (False, (2, 3, 4, 6), 2), (False, (1, 2, 9, 3), 3),
], ids=["d2s-2", "d2s-3", "d2s-1", "s2d-2", "s2d-3"])
def test_against_numpy(xdev, rng, dt, to_space, xs, b):
    x = random_values(rng, dt, xs)
    want = d2s(x, b) if to_space else s2d(x, b)
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    tx, _ = place(xdev, rng, xd, x)
    ty, _ = place(xdev, rng, yd)
    before = poison_against(ty, want, rng)
    cls = kdml.DepthToSpaceDesc if to_space else kdml.SpaceToDepthDesc
    xdev.compile(cls(xd, yd, b)).execute([tx], [ty])
    assert_output(ty, before, want)


DEEP = np.array([v + 9 * c for c in range(8) for v in range(6)], np.uint32).reshape(1, 8, 2, 3)  # the pages' deep side
SPACE = np.array([[[0, 18, 1, 19, 2, 20], [36, 54, 37, 55, 38, 56], [3, 21, 4, 22, 5, 23], [39, 57, 40, 58, 41, 59]],
                  [[9, 27, 10, 28, 11, 29], [45, 63, 46, 64, 47, 65], [12, 30, 13, 31, 14, 32],
                   [48, 66, 49, 67, 50, 68]]], np.uint32).reshape(1, 2, 4, 6)  # their spatial side


@pytest.mark.parametrize("to_space", [True, False], ids=["depth_to_space", "space_to_depth"])
def test_the_pages_examples(dev, rng, to_space):
    x, want = (DEEP, SPACE) if to_space else (SPACE, DEEP)
    xd, yd = TD(DT.UINT32, x.shape), TD(DT.UINT32, want.shape)
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    cls = kdml.DepthToSpaceDesc if to_space else kdml.SpaceToDepthDesc
    dev.compile(cls(xd, yd, 2)).execute([tx], [ty])
    np.testing.assert_array_equal(ty.numpy(), want)


F = DT.FLOAT32
D2S = kdml.DepthToSpaceDesc(TD(F, (1, 8, 2, 3)), TD(F, (1, 2, 4, 6)), 2)
S2D = kdml.SpaceToDepthDesc(TD(F, (1, 2, 4, 6)), TD(F, (1, 8, 2, 3)), 2)


@pytest.mark.parametrize("base, change, field", [
    (D2S, dict(block_size=0), "block_size"),
    (D2S, dict(block_size=2.0), "block_size"),
    (D2S, dict(input_tensor=TD(F, (1, 6, 2, 3))), "input_tensor.sizes"),
    (D2S, dict(output_tensor=TD(F, (1, 2, 4, 5))), "output_tensor.sizes"),
    (D2S, dict(output_tensor=TD(DT.FLOAT16, (1, 2, 4, 6))), "output_tensor.data_type"),
    (D2S, dict(output_tensor=TD(F, (1, 2, 4, 6), (0, 0, 6, 1))), "output_tensor"),  # overlapping output
    (S2D, dict(input_tensor=TD(F, (1, 2, 4, 5))), "input_tensor.sizes"),
    (S2D, dict(output_tensor=TD(F, (1, 2, 8, 12))), "output_tensor.sizes"),  # the SPACE_TO_DEPTH page's slip
], ids=lambda v: v if isinstance(v, str) else "")
def test_refused_descriptors_name_their_field(dev, base, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(base, **change))


@pytest.mark.parametrize("base", [D2S, S2D], ids=["depth_to_space", "space_to_depth"])
def test_the_tables_feature_levels(base):
    compile_at_level(FL.FL_1_0, base)
    for dt, below, level in ((DT.INT8, FL.FL_2_0, FL.FL_2_1), (DT.INT64, FL.FL_4_1, FL.FL_5_0)):
        typed = dataclasses.replace(base, input_tensor=TD(dt, base.input_tensor.sizes),
                                    output_tensor=TD(dt, base.output_tensor.sizes))
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
            compile_at_level(below, typed)
        compile_at_level(level, typed)
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_5_0, dataclasses.replace(base, input_tensor=TD(F, (1, *base.input_tensor.sizes)),
                                                        output_tensor=TD(F, (1, *base.output_tensor.sizes))))
