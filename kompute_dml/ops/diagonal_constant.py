"""Small outputs that depend on the descriptor alone (DIAGONAL_MATRIX, DIAGONAL_MATRIX1 without
an input): computed once when the operator compiles, kept on the device as the operator's
constant, and copied into the output by one vkCmdCopyBuffer per execution, for packed outputs
of at most DevicePolicy.constant_below bytes.

Why: an eager execution of a small operator costs the submission's round trip plus its
commands' time on the device, and there a small copy finishes sooner than any dispatch (H100,
kp timestamps in `benchmarks/latency.py --ops`: the 64x64 FLOAT32 identity's 16 KiB copy 3.1 us,
the DIAGONAL_MATRIX kernel on the same output 5.2-5.3 us at VECS 4, 4.3 at the VECS 1 small
outputs now take; docs/diagonal.md, policy.CONSTANT_BELOW).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, TransferPlan
from .gpu_flat import is_packed

if TYPE_CHECKING:
    from ..device.device import Device
    from ..device.memory import Tensor


def constant_bytes(out: TensorDesc, begin: int, end: int, value_bits: int) -> np.ndarray:
    """The packed output's bytes: element (.., y, x) is Value where
    (End >= Begin) ^ (x - y >= Begin) ^ (x - y < End) (shaders/diagonal.comp's rule), else 0."""
    width = out.data_type.size
    sizes = out.sizes
    rows, cols = (sizes[-2], sizes[-1]) if len(sizes) >= 2 else (1, sizes[-1])
    top_x = np.arange(cols, dtype=np.int64)[None, :] - np.arange(rows, dtype=np.int64)[:, None]
    use = (end >= begin) ^ (top_x >= begin) ^ (top_x < end)
    value = np.frombuffer((value_bits & ((1 << (8 * width)) - 1)).to_bytes(width, "little"), np.uint8)
    plane = np.where(use[:, :, None], value[None, None, :], np.uint8(0)).astype(np.uint8)
    return np.tile(plane.reshape(-1), math.prod(sizes[:-2]))


def plan_constant(device: Device, out: TensorDesc, inp: TensorDesc | None, begin: int, end: int, value_bits: int,
                  out_index: int) -> tuple[list[DispatchPlan | TransferPlan], list[Tensor]] | None:
    """The copy from a constant computed now (bound after the operator's tensors, at
    out_index + 1), and that constant; None where the output has an input, is not packed or is
    larger than the device's policy allows."""
    nbytes = out.element_count * out.data_type.size
    if inp is not None or not is_packed(out) or nbytes > device.policy.constant_below:
        return None
    constant = device.tensor(constant_bytes(out, begin, end, value_bits))
    regions = np.array([[0, 0, nbytes]], dtype=np.int64)
    return [TransferPlan("copy", (out_index + 1, out_index), regions, (out_index,))], [constant]
