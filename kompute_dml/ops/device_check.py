"""Checks of an operator's input values made on the device (GATHER's indices: ops/gather.py),
raised on the host without a round trip of their own.

The operator owns a check word in device memory. Its plans start with a transfer fill of the
word (0xFFFFFFFF: no error) and a check dispatch that atomicMins into it the row-major position
of the first bad element; its later dispatches read the word and write nothing once it is set
(../shared/API.md: nothing is written to an output when an error is raised). Whoever submits
the execution (CompiledOperator.execute, Recording) adds a copy of the word into a host word
(`Device.host_array` memory) to the same submission, as the ONNX plan copies its outputs
(Recording.copy_out), and reads that word once the submission completed: the error costs one
small dispatch and a 4-byte copy per execution, and no submission or wait of its own.

A submission may hold several executions of one operator (a recording, the ONNX plan, where
`compile_cached` shares an operator between nodes): each occurrence copies into a host word of
its own (occurrence k of the operator in that submission -> word k), so the word of every
execution survives until it is read, and equal recordings keep equal replay keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import InvalidArgumentError
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import TransferPlan
from ..runtime.inflight import Pending, settle

__all__ = ["NO_ERROR", "DeviceCheck", "Pending", "settle"]  # the submitters' side: runtime/inflight.py

if TYPE_CHECKING:
    from ..device.device import Device

NO_ERROR = 0xFFFFFFFF  # the check word's value while every element passed (atomicMin's identity)
_WORDS = 16  # host words made at once (one kp host allocation): occurrences 0-15 share one
_COPY = TransferPlan("copy", (0, 1), np.array([[0, 0, 4]], np.int64), (1,))


class DeviceCheck:
    """An operator's check word and its host copies; `index` is the word's place in the
    operator's binding list (after its inputs and outputs: CompiledOperator's constants), where
    `fill`, the plan that resets it, writes. `describe(position, bound)` is the error
    message for the bad element at row-major `position` of the checked tensor, reading its
    value from the bound tensors (the error path: its cost does not matter)."""

    def __init__(self, device: Device, index: int, describe: Callable[[int, Sequence[Any]], str]) -> None:
        desc = TensorDesc(DataType.UINT32, (4,))
        # not zeroed: every execution's fill writes the word before anything reads it
        self.word = Tensor.scratch(device, desc)
        self.fill = TransferPlan("fill", (index,), np.array([[0, 4]], np.int64), (index,), NO_ERROR)
        self._device = device
        self._describe = describe
        self._host: list[np.ndarray] = []  # host words, _WORDS per allocation
        self._copies: list[tuple[Any, Any]] = []  # per occurrence: (key, work) of its copy

    def copy(self, k: int) -> tuple[Any, Any]:
        """The replay key and work of occurrence k's copy of the word into its host word."""
        while len(self._copies) <= k:
            i = len(self._copies)
            if i % _WORDS == 0:
                words = self._device.host_array(_WORDS, np.uint32)
                words[:] = NO_ERROR  # read before any copy (a failed submission): no error
                self._host.append(words)
            host = self._device.engine.host_range(self._host[i // _WORDS][i % _WORDS:i % _WORDS + 1])
            key = ("check", self.word.buffer.serial, host.memory.serial, host.offset)
            self._copies.append((key, ((_COPY,), (self.word, host))))
        return self._copies[k]

    def error(self, k: int, bound: Sequence[Any]) -> InvalidArgumentError | None:
        """Occurrence k's error, once its submission completed; None where every element passed."""
        position = int(self._host[k // _WORDS][k % _WORDS])
        return None if position == NO_ERROR else InvalidArgumentError(self._describe(position, bound))
