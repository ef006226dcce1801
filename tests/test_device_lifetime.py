"""A Device the helpers have used goes when its last reference goes (their caches live in
Device.caches, not in module dicts that kept every device and its Vulkan device until exit), and a
new device after it starts with caches of its own."""

from __future__ import annotations

import gc
import weakref

import numpy as np

import kompute_dml as kdml


def _use_helpers(dev: kdml.Device, rng: np.random.Generator) -> None:
    a = dev.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    b = dev.tensor(rng.standard_normal((8, 4)).astype(np.float32))
    np.testing.assert_allclose(kdml.add(a, a).numpy(), 2 * a.numpy())
    np.testing.assert_allclose(kdml.gemm(a, b).numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kdml.mul(a, 0.5).numpy(), 0.5 * a.numpy())  # a device constant (constants.py)
    a8 = dev.tensor(rng.integers(-128, 128, (4, 8), dtype=np.int8))
    b8 = dev.tensor(rng.integers(-128, 128, (8, 4), dtype=np.int8))
    want = (a8.numpy().astype(np.int64) @ b8.numpy().astype(np.int64)).astype(np.float64) * 0.25
    np.testing.assert_array_equal(kdml.matmul_integer_to_float(a8, b8, 0.5, 0.5).numpy(), want.astype(np.float32))
    x = dev.tensor(rng.standard_normal((1, 2, 5, 5)).astype(np.float16))
    w = dev.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float16))
    kdml.conv(x, w, activation=kdml.ActivationSigmoidDesc(None, None)).numpy()  # float16: the activation's table


def test_a_used_device_is_released_with_its_last_reference(rng):
    dev = kdml.Device()
    _use_helpers(dev, rng)
    assert {"compiled", "gemm", "constants", "matmul_integer", "act_tables"} <= set(dev.caches)
    gone = weakref.ref(dev)
    del dev
    gc.collect()
    assert gone() is None


def test_a_later_device_has_caches_of_its_own(rng):
    first = kdml.Device()
    _use_helpers(first, rng)
    first.close()
    second = kdml.Device()
    assert second.caches == {}
    _use_helpers(second, rng)  # nothing of the closed device's is bound
    second.close()
