"""TensorDesc's common-form construction (tensor_desc._valid_common: a DataType and tuples of ints,
made without the dataclass's construction where every rule holds) against the full construction
and its rules (_check): the same fields, equality and hash where it takes a descriptor, and a
descriptor the rules refuse still refused by validate_desc with the field named."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import kompute_dml as kdml
from kompute_dml.core.errors import InvalidArgumentError
from kompute_dml.core.tensor_desc import TensorDesc, _check, _valid_common, validate_desc

EDGES = [0, 1, 2, 3, 7, 16, 2**31, 2**32 - 1, 2**32]
_sizes = st.lists(st.sampled_from(EDGES), min_size=0, max_size=9).map(tuple)
_strides = st.one_of(st.none(), st.lists(st.sampled_from([-1, 0, 1, 5, 2**32 - 1, 2**32]), max_size=9).map(tuple))


def _full(dt: kdml.DataType, sizes: tuple[int, ...], strides: tuple[int, ...] | None) -> TensorDesc:
    return type.__call__(TensorDesc, dt, sizes, strides)  # the dataclass's construction and checks, no interning


@given(st.sampled_from(list(kdml.DataType)), _sizes, _strides)
@example(kdml.DataType.FLOAT32, (1, 16, 384), None)  # the fast path taken, packed and strided
@example(kdml.DataType.FLOAT16, (2, 3, 7), (0, 1, 5))
@example(kdml.DataType.UINT8, (2**32 - 1,), (1,))
def test_common_form_matches_the_full_construction(dt, sizes, strides):
    full = _full(dt, sizes, strides)
    fast = _valid_common(TensorDesc, dt, sizes, strides)
    if fast is None:  # left to the full construction: only where a rule is broken
        with pytest.raises(InvalidArgumentError):
            _check(full, "t")
        return
    assert full._valid and fast._valid
    assert dataclasses.astuple(fast) == dataclasses.astuple(full)
    assert fast == full and hash(fast) == hash(full)
    assert fast.byte_size == full.byte_size == _check(full, "t")


@pytest.mark.parametrize(("sizes", "strides", "field"), [
    ((2, 0), None, "x.sizes[1]"),
    ((), None, "x.sizes"),
    ((2,) * 9, None, "x.sizes"),
    ((2**32,), None, "x.sizes[0]"),
    ((2**16, 2**16), None, "x.sizes"),
    ((2, 3), (1,), "x.strides"),
    ((2, 3), (2**32, 1), "x.strides[0]"),
])
def test_interned_descriptors_keep_every_rule(sizes, strides, field):
    desc = kdml.TensorDesc(kdml.DataType.FLOAT32, sizes, strides)  # the interning path
    with pytest.raises(InvalidArgumentError, match=field.replace("[", r"\[").replace("]", r"\]")):
        validate_desc(desc, "x")


def test_interned_descriptor_is_shared_and_valid():
    a = kdml.TensorDesc(kdml.DataType.UINT8, (3, 5), (5, 1))
    assert a is kdml.TensorDesc(kdml.DataType.UINT8, (3, 5), (5, 1))
    assert validate_desc(a, "x") is a and a.byte_size == 16  # 15 bytes, rounded up to 4
