"""DLPack (kompute_dml/device/dlpack.py): a Tensor reports Vulkan device memory, exports a host
copy where the consumer asks for one, refuses an in-place export with a BufferError that says how
to ask; kdml.from_dlpack takes numpy and torch CPU producers and the library's own Tensors."""

from __future__ import annotations

import numpy as np
import pytest

import kompute_dml as kdml


def test_tensor_reports_vulkan_memory_and_exports_a_host_copy_on_request(dev):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = dev.tensor(a)
    assert t.__dlpack_device__() == (7, dev.index)
    got = np.from_dlpack(t, device="cpu", copy=True)
    np.testing.assert_array_equal(got, a)
    got[0, 0] = 99  # a copy: the Tensor is unchanged
    assert t.numpy()[0, 0] == 0
    view = t[:, 1:3]  # a strided view exports its elements
    np.testing.assert_array_equal(np.from_dlpack(view, device="cpu"), a[:, 1:3])


def test_in_place_export_is_refused_with_the_way_to_ask(dev):
    t = dev.tensor(np.ones(3, np.float32))
    with pytest.raises(BufferError, match="device='cpu'"):
        np.from_dlpack(t)
    with pytest.raises(BufferError, match="Vulkan device memory"):
        t.__dlpack__(dl_device=(1, 0), copy=False)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8, np.int32, np.uint16])
def test_from_dlpack_uploads_host_producers(dev, dtype):
    a = (np.arange(10) - 3).astype(dtype)
    t = kdml.from_dlpack(a, device=dev)
    assert isinstance(t, kdml.Tensor) and t.dtype == a.dtype
    np.testing.assert_array_equal(t.numpy(), a)
    assert kdml.from_dlpack(t, device=dev) is t
    c = kdml.from_dlpack(t, device=dev, copy=True)
    assert c is not t and np.array_equal(c.numpy(), a)
    with pytest.raises(BufferError, match="copy=False"):
        kdml.from_dlpack(a, device=dev, copy=False)


def test_from_dlpack_takes_a_torch_cpu_tensor(dev):
    torch = pytest.importorskip("torch")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    np.testing.assert_array_equal(kdml.from_dlpack(x, device=dev).numpy(), x.numpy())
