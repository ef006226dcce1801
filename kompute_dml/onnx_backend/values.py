"""Constants, device values and run statistics shared by the ONNX backend's modules."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.core.ints import is_int_tuple
from kompute_dml.device.memory import largest_buffer
from kompute_dml.ops import ONNX_PLACEMENT
from kompute_dml.ops.onnx_types import DML_NUMPY, FLOAT_NUMPY, QUANT_NUMPY

MS_DOMAIN = "com.microsoft"
VULKAN = "vulkan"
CPU = "cpu"
HOST = "host"  # resolved on the host per input shape (onnx_backend/host_eval.py)

# The numpy types a DirectML tensor can hold (DataType.from_numpy accepts exactly these).
_DML_NUMPY, _QUANT_TYPES, _FLOAT_OUT = DML_NUMPY, QUANT_NUMPY, FLOAT_NUMPY  # ops/onnx_types.py

# (op_type, domain) -> (DirectML operator, kdml helper, lowest feature level it needs), from the
# operator specs' `onnx` entries (kompute_dml/ops/<op>.py SPECS)
_DEVICE_OPS: dict[tuple[str, str], tuple[str, str, int]] = ONNX_PLACEMENT


class FallbackError(RuntimeError):
    """fallback="onnxruntime" and onnxruntime cannot run a CPU sub-graph (not installed, or it
    refuses the sub-model): raised instead of switching engines behind the caller's back."""


class FallbackNeeded(Exception):
    """Raised by a device handler when this node, with these runtime values, must run on the CPU."""


def at_node(e: ValueError, i: int, node: Any) -> ValueError:
    """`e` naming node i: a plain ValueError (numpy's broadcasting, a shape rule) becomes one whose
    message starts with the node; a kompute_dml error keeps its class and message and gains a note."""
    label = f"node {i} ({node.op_type} {node.name!r})"
    if str(e).startswith("node "):
        return e
    if type(e) is ValueError:
        return ValueError(f"{label}: {e}")
    e.add_note(f"at {label}")
    return e


def check_bindable(device: Any, nbytes: int) -> int:
    """A node's output or uploaded input of `nbytes` must fit one storage buffer of the device (a
    shader binds it whole); a larger one sends the node to the CPU, not an error to the user.
    Returns the largest buffer's size."""
    largest = largest_buffer(device.limits)
    if nbytes > largest:
        raise FallbackNeeded(f"a value of {nbytes} bytes is beyond the device's largest storage buffer "
                             f"({largest} bytes: maxStorageBufferRange / maxMemoryAllocationSize)")
    return largest


@dataclasses.dataclass(frozen=True)
class NodePlacement:
    """Where one node runs: target "vulkan" (operator = the DirectML operator), "host"
    (reads no input data: resolved once per input shape) or "cpu" (operator = the fallback
    engine; segment = the index of its CPU sub-graph). A node of a fused chain (fusions.py)
    runs in its chain's one dispatch, at the chain's last node (the carrier: operator "<DirectML
    operator> (fused <chain>: nodes ...)"); the others say `fused_into` that node (operator
    "fused into node N")."""

    index: int
    name: str
    op_type: str
    domain: str
    target: str
    operator: str
    segment: int | None = None
    reason: str = ""
    fused_into: int | None = None


# ---------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------
class DeviceValue:
    """A tensor that lives on the device: the kdml.Tensor plus its ONNX shape and dtype
    (a rank-0 ONNX tensor is a 1-element DirectML tensor). The host copy is cached."""

    __slots__ = ("_host", "dtype", "keys", "shape", "tensor")

    def __init__(self, tensor: kdml.Tensor, shape: Sequence[int], dtype: Any) -> None:
        self.tensor = tensor
        # the tensor's partial keys as its producer wrote them beside it (MEAN_VARIANCE_NORMALIZATION1's
        # keys_output_tensor), for a DynamicQuantizeLinear of it in one dispatch (handlers_integer.py)
        self.keys: kdml.Tensor | None = None
        # as given where it is already a tuple of ints and a numpy type (handlers pass their
        # inputs' own: a plan makes hundreds of values)
        self.shape = shape if type(shape) is tuple and is_int_tuple(shape) else tuple(int(s) for s in shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self._host: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"DeviceValue({self.dtype}, shape={self.shape})"


def _value_shape(v: Any) -> tuple[int, ...]:
    if isinstance(v, (DeviceValue, np.ndarray)):
        return v.shape
    return tuple(np.shape(v))


def _value_dtype(v: Any) -> np.dtype:
    return v.dtype if isinstance(v, DeviceValue) else np.asarray(v).dtype


def _is_tensor_value(v: Any) -> bool:
    return isinstance(v, (DeviceValue, np.ndarray, np.generic))


@dataclasses.dataclass
class RunStats:
    """What one `rep.run` did: transfers between host and device, and where time went."""

    uploads: int = 0
    constant_uploads: int = 0
    downloads: int = 0
    vulkan_nodes: int = 0
    cpu_segments: int = 0
    runtime_fallbacks: int = 0
    submissions: int = 0  # whole-graph device programs submitted (device_graph.py)
    dispatches: int = 0  # the dispatches of the program this run submitted (0 node by node)
    planned: bool = False  # this run planned its input signature's program
    replayed_nodes: int = 0  # device nodes that plan recorded from their node traces (node_traces.py)
    reused_nodes: int = 0  # device nodes that plan took from the previous plan of its input names (step_reuse.py)
    plan_seconds: float = 0.0  # time planning it took (part of total_seconds)
    vulkan_seconds: float = 0.0
    cpu_seconds: float = 0.0
    host_seconds: float = 0.0  # nodes resolved on the host (host_eval.py)
    total_seconds: float = 0.0
    events: list[str] = dataclasses.field(default_factory=list)


def empty_on_host(ins: list[Any]) -> bool:
    """Whether a device node's inputs are host values (no DeviceValue), one of them empty: the
    node of an empty input (a decoder's first past) is resolved on the host like shape arithmetic."""
    return (any(type(v) is np.ndarray and v.size == 0 for v in ins)
            and not any(isinstance(v, DeviceValue) for v in ins))


def signature(feeds: dict[str, Any]) -> tuple[Any, ...]:
    """Names, shapes, types and where each input lives (a Tensor fed on the device or a host array)."""
    return tuple((n, v.shape, v.dtype.str, False) if type(v) is np.ndarray  # the common case, without str(dtype)
                 else (n, _value_shape(v), np.dtype(_value_dtype(v)).str, isinstance(v, DeviceValue)) if _is_tensor_value(v)
                 else (n, type(v).__name__) for n, v in feeds.items())
