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

from typing import Any

import numpy as np
import onnx

import kompute_dml
from kompute_dml.core.errors import invalid
from kompute_dml.onnx_backend.analysis import kind_runs
from kompute_dml.onnx_backend.backend import Backend, _kdml_device
from kompute_dml.onnx_backend.values import CPU

from .graph import tensor_elem_types, to_model

EP_NAME = "KomputeDmlExecutionProvider"
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


class Factory:
    """One per registration of the library (onnxruntime.register_execution_provider_library)."""

    ep_name = EP_NAME
    vendor = "kompute_dml"
    version = kompute_dml.__version__

    def __init__(self, registered_name: str) -> None:
        self.registered_name = registered_name

    def devices(self, hardware: list[tuple[int, int, int, str, dict[str, str]]]) -> list[tuple[int, dict, dict]]:
        """(hardware index, metadata, default options) per Vulkan device offered. A Vulkan device
        sits on the GPU entry ORT lists with its PCI vendor and device id; a device ORT does not
        list (a software rasterizer such as lavapipe, or a GPU ORT's discovery missed) sits on
        the CPU entry, since its memory is host memory to ORT either way."""
        gpu_type, cpu_type = 1, 0  # OrtHardwareDeviceType
        cpu = next((i for i, h in enumerate(hardware) if h[0] == cpu_type), None)
        taken: set[int] = set()
        out = []
        for vk in kompute_dml.list_devices():
            match = next((i for i, h in enumerate(hardware) if h[0] == gpu_type and i not in taken
                          and (h[1], h[2]) == (vk["vendor_id"], vk["device_id"])), None)
            if match is None and cpu is not None and cpu not in taken:
                match = cpu
            if match is None:
                continue
            taken.add(match)
            meta = {METADATA_DEVICE: str(vk["index"]), "kdml.device_name": str(vk["name"])}
            out.append((match, meta, {}))
        return out

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
        return Ep(index, options)


class Ep:
    """The EP of one session: a Vulkan device and the backend options."""

    def __init__(self, index: str, options: dict[str, str]) -> None:
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
        model = to_model(desc)
        rep = Backend.prepare(model, kdml_device=self.device, **self.prepare_options)
        return Kernel(fused_name, rep, list(io[0]), list(io[1]))


class Kernel:
    """One compiled sub-graph: ORT's inputs (zero-copy views of its memory) in, numpy outputs out."""

    def __init__(self, name: str, rep: Any, inputs: list[str], outputs: list[str]) -> None:
        self.name, self.rep, self.inputs = name, rep, inputs
        self._order = [rep.output_names.index(o) for o in outputs]  # ORT's output order in the rep's
        self._ort_index = {k: i for i, k in enumerate(self._order)}
        self._dtypes: dict[int, np.dtype] = {}

    def run(self, inputs: list[tuple[memoryview, int, tuple[int, ...]]], alloc: Any) -> list[np.ndarray]:
        """`alloc(i, shape)`: ORT's output i, allocated, as a writable memoryview (ep_main.cc)."""
        feeds = {}
        for name, (data, elem_type, shape) in zip(self.inputs, inputs):
            dtype = self._dtypes.get(elem_type)
            if dtype is None:
                dtype = self._dtypes[elem_type] = _np_dtype(elem_type)
            feeds[name] = np.frombuffer(data, dtype=dtype).reshape(shape)
        def out(k: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
            view = alloc(self._ort_index[k], shape)
            if view.nbytes != int(np.prod(shape)) * np.dtype(dtype).itemsize:
                raise TypeError(f"output {k}: onnxruntime's type is not {np.dtype(dtype)}")
            return np.frombuffer(view, dtype=dtype).reshape(shape)

        results = self.rep.run(feeds, out=out)
        return [np.ascontiguousarray(results[i]) for i in self._order]
