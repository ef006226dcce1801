"""Small host constants (scales, zero points, biases of a few elements) kept on the device.

A functional helper given a Python number or a small numpy array for such an operand would
otherwise upload it on every call (a submission each: 1,341-1,655 us a call with Python-float
scales on the H100 before this cache, issue 22). Each device keeps the last CAPACITY distinct constants, keyed by type, shape and
bytes; the tensors are the library's own (never handed to the user), so nothing can change
them.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..device.device import Device
    from ..device.memory import Tensor

SMALL_ELEMENTS = 64
CAPACITY = 256

_lock = threading.Lock()  # (the caches are Device.caches["constants"]: they go with the device)


def constant_key(arr: np.ndarray) -> Hashable | None:
    """The cache key of a host array's value, None when it is too large to be a constant."""
    if arr.size > SMALL_ELEMENTS or arr.dtype.hasobject:
        return None
    return (arr.dtype.str, arr.shape, np.ascontiguousarray(arr).tobytes())


def device_constant(device: Device, arr: np.ndarray, key: Any = None) -> Tensor:
    """A packed tensor on `device` holding `arr` (at most SMALL_ELEMENTS elements)."""
    key = constant_key(arr) if key is None else key
    with _lock:
        cache = device.caches.setdefault("constants", collections.OrderedDict())
        t = cache.get(key)
        if t is not None and not device.closed:
            cache.move_to_end(key)
            return t
    t = device.tensor(np.ascontiguousarray(arr))
    with _lock:
        cache[key] = t
        while len(cache) > CAPACITY:
            cache.popitem(last=False)
    return t
