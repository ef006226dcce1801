"""One input rule for every entry point (issue 25, item 2): kompute_dml/core/inputs.py, used by
dev.tensor, the functional helpers, write_numpy and the ONNX backend. torch is optional: small
stand-in classes play the __dlpack__ / __array__ exporters."""

from __future__ import annotations

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.core.inputs import as_host_array

IAE, UNS = kdml.InvalidArgumentError, kdml.UnsupportedError


class DLPackCPU:
    """A CPU DLPack exporter with no __array__ (what np.from_dlpack reads)."""

    def __init__(self, a):
        self._a = a
        self.dtype = str(a.dtype)

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


class DLPackCUDA(DLPackCPU):
    def __dlpack_device__(self):
        return (2, 1)

    def __array__(self, *a, **k):  # torch's raises a TypeError for a CUDA tensor: never reached
        raise AssertionError("the device check comes first")


class ArrayLike:
    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


class TorchBF16:
    """What a torch.bfloat16 tensor looks like from outside: a dtype named bfloat16."""

    dtype = "torch.bfloat16"

    def __dlpack__(self, **kwargs):
        raise BufferError("bfloat16 has no numpy type")

    def __dlpack_device__(self):
        return (1, 0)


def _entry_points(dev):
    """Each entry point as (name, fn(x) -> host array of what arrived on the device)."""
    def write(x):
        t = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT32, (2, 3)))
        t.write_numpy(x)
        return t.numpy()
    return [("dev.tensor", lambda x: dev.tensor(x).numpy()),
            ("kdml.copy", lambda x: kdml.copy(x, device=dev).numpy()),
            ("kdml.triu", lambda x: kdml.triu(x, -5, device=dev).numpy()),
            ("write_numpy", write)]


@pytest.mark.parametrize("wrap", [np.asarray, DLPackCPU, ArrayLike, lambda a: a.tolist()],
                         ids=["numpy", "dlpack", "array", "list"])
def test_every_entry_point_takes_every_host_form(dev, rng, wrap):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    for name, fn in _entry_points(dev):
        x = wrap(a)
        got = fn(x)
        want = a if not isinstance(x, list) or name == "write_numpy" else a.astype(np.float64)
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("make,cls,match", [
    (lambda: DLPackCUDA(np.ones((2, 3), np.float32)), IAE, "lives on CUDA device 1.*move it to the CPU"),
    (lambda: TorchBF16(), UNS, "torch.bfloat16 is not a DirectML data type"),
    (lambda: np.ones((2, 3), np.complex64), UNS, "complex64 is not a DirectML data type"),
    (lambda: np.array([["a", "b", "c"]] * 2), UNS, "<U1 is not a DirectML data type"),
    (lambda: np.array([[None] * 3] * 2, dtype=object), UNS, "object is not a DirectML data type"),
    (lambda: "abc", UNS, "str is not a DirectML data type"),
    (lambda: object(), IAE, "must be a numpy array, a Python number or list"),
    (lambda: [[1, 2], [3]], IAE, "no rectangular array"),
])
def test_refusals_name_the_field_and_the_type(dev, make, cls, match):
    for name, fn in _entry_points(dev):
        field = "x" if name.startswith("kdml") else "array"
        with pytest.raises(cls, match=f"^{field}: .*{match}"):
            fn(make())


def test_ml_dtypes_bfloat16_is_unsupported(dev):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.ones((2, 3), ml_dtypes.bfloat16)
    for _name, fn in _entry_points(dev):
        with pytest.raises(UNS, match="bfloat16 is not a DirectML data type"):
            fn(a)


def test_as_host_array_without_the_directml_rule_keeps_any_numpy_type():
    s = np.array(["a"])
    assert as_host_array(s, "x", dml=False) is s
    b = as_host_array(ArrayLike(np.array([True])), "x", dml=False)
    assert b.dtype == bool
    with pytest.raises(IAE, match="lives on CUDA"):
        as_host_array(DLPackCUDA(np.ones(2)), "x", dml=False)


def test_torch_tensors_when_torch_is_installed(dev):
    torch = pytest.importorskip("torch")
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    for name, fn in _entry_points(dev):
        np.testing.assert_array_equal(fn(a), a.numpy(), err_msg=name)
    with pytest.raises(UNS, match="bfloat16"):
        dev.tensor(a.to(torch.bfloat16))
