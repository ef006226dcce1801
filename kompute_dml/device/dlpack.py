"""DLPack for Tensors, the array API's interchange protocol (docs/tensor.md).

A Tensor lives in Vulkan device memory: `__dlpack_device__()` is (kDLVulkan, its device index).
No consumer here reads Vulkan memory in place (numpy and torch take CPU or CUDA), so
`__dlpack__` exports a host copy when the consumer asks for host memory and allows a copy, as
the protocol lets a producer do (numpy: `np.from_dlpack(t, device="cpu")`, which asks for
`dl_device=(kDLCPU, 0)`), and otherwise raises BufferError saying how to ask.

`kdml.from_dlpack(x, device=None, copy=None)` makes a Tensor from any DLPack producer in host
memory (numpy, torch CPU tensors, ...), uploaded to `device` (default: the default device); a
Tensor of that device comes back as it is (a copy with `copy=True`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .memory import Tensor

KDL_CPU = 1
KDL_VULKAN = 7


def dlpack_device(self: Tensor) -> tuple[int, int]:
    return (KDL_VULKAN, self.device.index)


def dlpack(self: Tensor, *, stream: Any = None, max_version: tuple[int, int] | None = None,
           dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    if dl_device is not None and tuple(dl_device) == (KDL_CPU, 0) and copy is not False:
        host = np.ascontiguousarray(self.numpy())  # the copy the consumer allowed
        return host.__dlpack__(max_version=max_version) if max_version is not None else host.__dlpack__()
    raise BufferError(
        f"__dlpack__: a kompute_dml Tensor is in Vulkan device memory (device {self.device.index}), which this "
        "consumer cannot read in place; ask for a host copy (dl_device=(kDLCPU, 0) with copy allowed, e.g. "
        "np.from_dlpack(t, device='cpu')) or use t.numpy()")


def from_dlpack(x: Any, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """A Tensor from a DLPack producer (see the module docstring)."""
    from ..functional import default_device

    dev = device if device is not None else (x.device if isinstance(x, Tensor) else default_device())
    if isinstance(x, Tensor) and x.device is dev:
        return x.copy() if copy else x
    if isinstance(x, Tensor):  # another Vulkan device: through the host
        return dev.tensor(x.numpy())
    if copy is False:
        raise BufferError("from_dlpack: copy=False, but host memory reaches the device only by a copy")
    kind = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else KDL_CPU
    if kind != KDL_CPU:
        raise BufferError(f"from_dlpack: the producer's memory is DLPack device type {kind}; kompute_dml takes "
                          f"host memory (type {KDL_CPU}): move it to the CPU first")
    return dev.tensor(np.from_dlpack(x))


Tensor.__dlpack__ = dlpack  # type: ignore[method-assign]
Tensor.__dlpack_device__ = dlpack_device  # type: ignore[attr-defined]
