"""The plugin EP's logic, called from its C tables (native/ort_ep/ep_main.cc): which Vulkan
devices it offers ORT, what it claims of a graph, and how a claimed sub-graph runs.

Claiming is the ONNX backend's own placement: a BackendRep is analysed over the graph ORT
hands over (nothing is uploaded), every node it does not send to the CPU is claimed, and the
claimed nodes are cut into sub-graphs with onnx_backend.analysis.kind_runs (maximal runs that no
CPU path re-enters, which is what ORT requires of a fused node). Each sub-graph is then prepared
as a kompute_dml model and run per call: one prepared model, one recorded submission where the
backend captures it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

import kompute_dml
from kompute_dml.core.errors import invalid
from kompute_dml.functional import _pool_take
from kompute_dml.onnx_backend.analysis import kind_runs
from kompute_dml.onnx_backend.backend import Backend, _kdml_device
from kompute_dml.onnx_backend.feeds import declared_shape
from kompute_dml.onnx_backend.plan_context import _block
from kompute_dml.onnx_backend.values import CPU

from . import deferred
from .graph import tensor_elem_types, to_model, to_model_and_weights

EP_NAME = "KomputeDmlExecutionProvider"
# The same EP with its inputs and outputs in device memory: what onnxruntime's IO binding needs to
# keep values on the GPU between runs and sessions (ep_memory.cc). The host-memory EP's runs take
# one submission; this one's add onnxruntime's copies around each run for host-bound values.
DEVICE_MEMORY_EP_NAME = "KomputeDmlDeviceMemoryExecutionProvider"
# Provider options (SessionOptions.add_provider_for_devices(devices, {...}), or the ep_options
# of an OrtEpDevice): name -> what it means.
OPTIONS = {
    "device_index": "the Vulkan device (kompute-dml info lists them); default: the one the OrtEpDevice stands for",
    "feature_level": "a DirectML feature level to hold the device to, as FL_5_0 or 0x5000; default: the highest",
    "allow_half_precision": "0 or 1, DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION; default 0",
    "exclude_ops": "comma-separated ONNX op types left to ORT's CPU EP",
}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}
# ONNX element types the device takes as inputs and outputs (no strings, no complex)
_TENSOR_TYPES = {t for t in range(1, 17) if t not in (8, 14, 15)}
METADATA_DEVICE = "kdml.vulkan_device"


def _np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def factories(registered_name: str) -> list[Factory]:
    """What one registration of the library offers: the EP with host-memory inputs and outputs,
    and its device-memory variant."""
    return [Factory(registered_name), Factory(registered_name, device_memory=True)]


class Factory:
    """One per registration of the library (onnxruntime.register_execution_provider_library) and
    kind of memory."""

    vendor = "kompute_dml"
    version = kompute_dml.__version__

    def __init__(self, registered_name: str, device_memory: bool = False) -> None:
        self.registered_name = registered_name
        self.device_memory = device_memory
        self.ep_name = DEVICE_MEMORY_EP_NAME if device_memory else EP_NAME
        self._devices: dict[int, Any] = {}  # the allocator's, by Vulkan index

    def devices(self, hardware: list[tuple[int, int, int, str, dict[str, str]]]) -> list[tuple[int, dict, dict, int]]:
        """(hardware index, metadata, default options, Vulkan index) per Vulkan device offered. A Vulkan device
        sits on the GPU entry ORT lists with its PCI vendor and device id; a device ORT does not
        list (a software rasterizer such as lavapipe, or a GPU ORT's discovery missed) sits on
        the CPU entry, since its memory is host memory to ORT either way."""
        gpu_type, cpu_type = 1, 0  # OrtHardwareDeviceType
        cpu = next((i for i, h in enumerate(hardware) if h[0] == cpu_type), None)
        taken: set[int] = set()
        out: list[tuple[int, dict, dict, int]] = []
        for vk in kompute_dml.list_devices():
            match = next((i for i, h in enumerate(hardware) if h[0] == gpu_type and i not in taken
                          and (h[1], h[2]) == (vk["vendor_id"], vk["device_id"])), None)
            if match is None and cpu is not None and cpu not in taken:
                match = cpu
            if match is None:
                continue
            taken.add(match)
            meta = {METADATA_DEVICE: str(vk["index"]), "kdml.device_name": str(vk["name"]),
                    "kdml.device_uuid": str(vk.get("uuid", ""))}
            out.append((match, meta, {}, int(vk["index"])))
        return out

    # ---- the device-memory variant's memory (ep_memory.cc) ---------------------------------
    def alloc(self, index: int, nbytes: int) -> Any:
        """A Buffer of at least nbytes on Vulkan device `index` (None for an empty block): a pooled one of the
        plans' size classes, free again once onnxruntime frees the block, so that a decoder's presents, a row
        longer at every step, find the last steps' buffers instead of a new zeroed allocation each (a fill
        submission and a wait apiece)."""
        if not nbytes:
            return None
        device = self._devices.get(index)
        if device is None or device.closed:  # (parsing the name took most of an allocation's host time)
            device = self._devices[index] = _kdml_device(f"VULKAN:{index}")
        buffer = _pool_take(device, _block(nbytes))
        deferred.forget(buffer)
        return buffer

    def free(self, buffer: Any) -> None:
        """onnxruntime freed the block of `buffer` (which the pool takes back): its kept contents are void."""
        deferred.forget(buffer)

    def copy(self, pairs: list[tuple[Any, Any, int]]) -> None:
        """onnxruntime's copies: (source, destination, bytes), each (Buffer, byte offset) in
        device memory or a memoryview of host memory."""
        for src, dst, nbytes in pairs:
            if not nbytes:
                continue
            if isinstance(src, tuple) and isinstance(dst, tuple):
                deferred.flush(src[0])
                deferred.flush(dst[0])
                deferred.device_copy(src[0], src[1], dst[0], dst[1], nbytes)
            elif isinstance(dst, tuple):  # kept on the host while small (deferred.py)
                deferred.write_host(dst[0], dst[1], np.frombuffer(src, np.uint8, count=nbytes))
            else:
                out = np.frombuffer(dst, np.uint8, count=nbytes)
                kept = deferred.at(src[0], src[1], nbytes)
                if isinstance(kept, np.ndarray):
                    out[:] = kept
                elif kept is not None:  # an output of ours by reference: read from itself
                    out[:] = kept.numpy().reshape(-1).view(np.uint8)
                else:
                    deferred.flush(src[0])
                    src[0].read_into(out, src[1])

    def create_ep(self, metadata: list[dict[str, str]], config: dict[str, str]) -> Ep:
        """The EP of one session; config holds the session's entries, provider options among
        them under 'ep.<ep name>.'. Unknown or bad options raise ValueError naming them."""
        options = {}
        for key, value in config.items():
            prefix, _, name = key.rpartition(".")
            if prefix.lower() in (f"ep.{EP_NAME}".lower(), f"ep.{self.registered_name}".lower()):
                if name not in OPTIONS:
                    raise invalid(f"provider option {name!r}", f"is not one of {sorted(OPTIONS)}")
                options[name] = value
        index = options.get("device_index")
        if index is None:
            index = metadata[0].get(METADATA_DEVICE, "0") if metadata else "0"
        return Ep(index, options, self.device_memory)


class Ep:
    """The EP of one session: a Vulkan device and the backend options."""

    def __init__(self, index: str, options: dict[str, str], device_memory: bool = False) -> None:
        self.device_memory = device_memory
        try:
            idx = int(index)
        except ValueError:
            raise invalid("provider option 'device_index'", f"must be an integer, got {index!r}") from None
        count = len(kompute_dml.list_devices())
        if not 0 <= idx < count:
            raise invalid("provider option 'device_index'", f"must be in [0, {count}), got {idx}")
        half = options.get("allow_half_precision", "0").strip().lower()
        if half not in _TRUE | _FALSE:
            raise invalid("provider option 'allow_half_precision'", f"must be 0 or 1, got {half!r}")
        self.device = _kdml_device(f"VULKAN:{idx}", options.get("feature_level") or None)
        self.prepare_options: dict[str, Any] = {
            "allow_half_precision": half in _TRUE,
            "exclude_ops": [o.strip() for o in options.get("exclude_ops", "").split(",") if o.strip()],
        }

    def _claimable(self, desc: dict[str, Any]) -> list[bool]:
        """Per described node: does the backend keep it off the CPU."""
        types = tensor_elem_types(desc)
        rep = Backend.prepare(to_model(desc), kdml_device=self.device, fallback="auto",
                              exclude_ops=self.prepare_options["exclude_ops"])
        on_cpu = {out for i, node in enumerate(rep.graph.node) if rep._placement_static[i][0] == CPU
                  for out in node.output if out}
        claim = []
        for _op, _domain, _name, inputs, outputs, attrs, _out_vis in desc["nodes"]:
            produced = [o for o in outputs if o]
            # a node folded at prepare (it reads only constants) is not in rep.graph: claimed with its readers
            claim.append("__subgraphs__" not in attrs and bool(produced) and not any(o in on_cpu for o in produced)
                         and all(types.get(v, -1) in _TENSOR_TYPES for v in list(inputs) + produced if v))
        return claim

    def capability(self, desc: dict[str, Any]) -> list[list[int]]:
        """Groups of node indices (desc order), each to be fused into one compiled node."""
        claim = self._claimable(desc)
        # a node with sub-graphs also reads the outer values they use: ordered after their makers
        nodes = [(list(n[3]) + list(n[5].get("__implicit__", ("strings", []))[1]), list(n[4])) for n in desc["nodes"]]
        runs = kind_runs(nodes, ["ep" if c else "cpu" for c in claim])
        return [run for kind, run in runs if kind == "ep"]

    def compile(self, desc: dict[str, Any], fused_name: str, io: tuple[list[str], list[str]]) -> Kernel:
        model, weights = to_model_and_weights(desc, input_shapes=False)
        rep = Backend.prepare(model, kdml_device=self.device, kdml_weights=weights, **self.prepare_options)
        return Kernel(fused_name, rep, list(io[0]), list(io[1]), self.device_memory)


class Kernel:
    """One compiled sub-graph: ORT's inputs (zero-copy views of its memory) in, numpy outputs out."""

    def __init__(self, name: str, rep: Any, inputs: list[str], outputs: list[str], device_memory: bool = False) -> None:
        self.name, self.rep, self.inputs, self.device_memory = name, rep, inputs, device_memory
        self._order = [rep.output_names.index(o) for o in outputs]  # ORT's output order in the rep's
        self._ort_index = {k: i for i, k in enumerate(self._order)}
        self._scalars = {k for k, name in enumerate(rep.output_names) if rep._declared_rank(name) == 0}
        self._dtypes: dict[int, np.dtype] = {}
        # Per input, the element type the rep declares, where ORT's inputs are exactly the rep's
        # feeds and none declares a shape (to_model(input_shapes=False)): a run whose inputs have
        # those types then skips the rep's input checks (BackendRep.run_normalized); else None.
        exact = sorted(inputs) == sorted(rep.feed_names)
        self._declared = ([rep._elem_dtype(n) for n in inputs]
                          if exact and all(declared_shape(rep.declared_types.get(n)) is None for n in inputs) else None)

    def run(self, inputs: list[tuple[Any, int, tuple[int, ...]]], alloc: Any) -> list[np.ndarray | None]:
        """ORT's inputs (a memoryview of host memory, or (Buffer, offset) in the device-memory
        variant's) in, its outputs out: `alloc(i, shape)` allocates ORT's output i and returns
        its memory the same way; an output written there comes back as None, any other is
        copied by ep_kernel.cc."""
        feeds = {}
        declared = self._declared
        normalized = declared is not None and not self.device_memory
        for i, (name, (data, elem_type, shape)) in enumerate(zip(self.inputs, inputs)):
            dtype = self._dtypes.get(elem_type)
            if dtype is None:
                dtype = self._dtypes[elem_type] = _np_dtype(elem_type)
            if isinstance(data, tuple) or data is None:
                feeds[name] = self._device_input(data, dtype, shape)
            else:
                feeds[name] = np.ndarray(shape, dtype, data)  # (half of frombuffer(...).reshape's host time)
                normalized = normalized and dtype == declared[i]  # type: ignore[index]
        if self.device_memory:
            return self._run_on_device(feeds, alloc)
        written: dict[int, np.ndarray] = {}
        ort_index = self._ort_index

        def out(k: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
            view = alloc(ort_index[k], shape)
            if view.nbytes != math.prod(shape) * dtype.itemsize:
                raise TypeError(f"output {k}: onnxruntime's type is not {dtype}")
            arr = written[k] = np.ndarray(shape, dtype, view)
            return arr

        results = self.rep.run_normalized(feeds, out=out) if normalized else self.rep.run(feeds, out=out)
        # None: written in ORT's buffer already; anything else ep_kernel.cc copies there
        return [None if i in written and results[i] is written[i] else np.asarray(results[i], order="C")  # (0-d stays 0-d)
                for i in self._order]

    def _device_input(self, at: tuple[Any, int] | None, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        """An input in device memory ((Buffer, offset)): a Tensor there where the model's device
        holds it and DirectML has its type; read to the host otherwise (bool, rank 0, empty,
        another device)."""
        if at is None or int(np.prod(shape)) == 0:
            return np.zeros(shape, dtype)
        buffer, offset = at
        nbytes = int(np.prod(shape)) * dtype.itemsize
        kept = deferred.at(buffer, offset, nbytes)
        if isinstance(kept, np.ndarray):  # a small input onnxruntime copied from the host: that host array
            return kept.view(dtype).reshape(shape).copy()
        if (kept is not None and kept.device is self.rep.device and kept.desc.data_type.numpy_dtype == dtype
                and tuple(kept.shape) == shape):
            return kept  # an output of ours (a present fed back as the next step's past): itself
        deferred.flush(buffer)
        if dtype in _DML_TYPES and shape and buffer.device is self.rep.device:
            desc = kompute_dml.TensorDesc(kompute_dml.DataType.from_numpy(dtype), shape)
            return kompute_dml.Tensor(buffer, desc, offset)
        host = np.empty(shape, dtype)
        buffer.read_into(host.reshape(-1).view(np.uint8), offset)
        return host

    def _run_on_device(self, feeds: dict[str, Any], alloc: Any) -> list[np.ndarray | None]:
        """Outputs left on the device, onnxruntime's device buffers standing for them (deferred.keep_output); those
        onnxruntime puts in host memory copied there."""
        results = self.rep.run(feeds, device_outputs=True)
        host: list[tuple[Any, Any]] = []  # (value, ORT's memory for it)
        for i, k in enumerate(self._order):
            value = results[k]
            if isinstance(value, kompute_dml.Tensor):
                dst = alloc(i, () if k in self._scalars else tuple(value.shape))  # rank 0 comes back as (1,)
                if isinstance(dst, tuple):  # by reference: written there when read (deferred.py)
                    deferred.keep_output(dst[0], dst[1], value)
                    continue
            else:
                dst = alloc(i, np.shape(value))
            host.append((value, dst))
        for value, dst in host:
            if isinstance(value, kompute_dml.Tensor):
                value = value.numpy()  # ORT put this output in host memory
            raw = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
            if isinstance(dst, tuple):
                deferred.flush(dst[0])
                dst[0].write(raw, dst[1])
            elif dst is not None and raw.nbytes:
                np.frombuffer(dst, np.uint8)[:] = raw
        return [None] * len(self._order)


_DML_TYPES = {np.dtype(t) for t in (np.float32, np.float16, np.uint32, np.uint16, np.uint8, np.int32, np.int16,
                                    np.int8, np.float64, np.uint64, np.int64)}
