"""Backend (onnx.backend.base.Backend): device strings, model loading, prepare / run_model / run_node.

See the docstring of kompute_dml.onnx_backend for how a model is run."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend as _OnnxBackend

import kompute_dml as kdml

from ..runtime.selection import default_index, resolve_device
from . import file_weights
from .graph import _type_proto_of_value
from .rep import BackendRep

# ---------------------------------------------------------------------------------
# the backend
# ---------------------------------------------------------------------------------
_devices: dict[tuple[int, str], kdml.Device] = {}


def _parse_device(device: str, strict: bool = False) -> int | None:
    """Vulkan device index for an ONNX device string (-1: the default device, which KDML_DEVICE
    picks), or None if not ours. Ours: "CPU", "VULKAN", "VULKAN:<index>", "VULKAN:<uuid>",
    "GPU-<uuid>" (runtime/selection.py). `strict`: a VULKAN / GPU- string that names no device
    of this machine raises InvalidArgumentError naming `device` (else: None)."""
    text = str(device).strip()
    kind, _, idx = text.upper().partition(":")
    if kind == "CPU":
        return -1 if not idx or idx == "0" else None
    if kind == "VULKAN" and not idx:
        return -1
    if kind != "VULKAN" and not kind.startswith("GPU-"):
        return None
    try:
        return resolve_device(text, "device")
    except kdml.InvalidArgumentError:
        if strict:
            raise
        return None


def _kdml_device(device: str, feature_level: Any = None) -> kdml.Device:
    index = _parse_device(device, strict=True)
    if index is None:
        raise ValueError(f"device {device!r} is not supported; use 'CPU' (the default Vulkan device), "
                         "'VULKAN:<n>', 'VULKAN:<uuid>' or 'GPU-<uuid>'")
    if feature_level is None and index == -1:
        return kdml.default_device()
    key = (default_index() if index == -1 else index, str(feature_level))
    dev = _devices.get(key)
    if dev is None or dev.closed:
        dev = kdml.Device(key[0], feature_level)
        _devices[key] = dev
    return dev


def load_model(model: Any) -> onnx.ModelProto:
    """The model, refused with a ValueError naming its source and the field where it is no ONNX
    model this onnx package can read: empty, corrupt, an IR version or an ai.onnx opset newer
    than it knows (onnxruntime refuses those too)."""
    return load_model_and_weights(model)[0]


def load_model_and_weights(model: Any) -> tuple[onnx.ModelProto, file_weights.FileWeights | None]:
    """load_model's model, and its initializers' bytes as views of the bytes read (file_weights.py)."""
    weights = None
    if isinstance(model, onnx.ModelProto):
        proto, source = model, "the model"
    elif isinstance(model, (bytes, bytearray, str, os.PathLike)):
        data = bytes(model) if isinstance(model, (bytes, bytearray)) else None
        source = "the model bytes" if data is not None else str(model)
        if data is None and not Path(model).is_file():
            raise FileNotFoundError(f"{source}: no such model file")
        if (len(data) if data is not None else Path(model).stat().st_size) == 0:
            raise ValueError(f"{source}: empty (0 bytes), not an ONNX model")
        try:
            proto, weights = file_weights.load(data if data is not None else Path(model))
        except Exception as e:  # protobuf's DecodeError, a missing external-data file, ...
            raise ValueError(f"{source}: not a readable ONNX model ({str(e).splitlines()[0] if str(e) else e})") from e
    else:
        raise TypeError(f"model must be a ModelProto, bytes or a path, got {type(model).__name__}")
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise ValueError(f"{source}: ir_version is {proto.ir_version} and graph is "
                         f"{'set' if proto.HasField('graph') else 'missing'}: not an ONNX model")
    if proto.ir_version > onnx.IR_VERSION:
        raise ValueError(f"{source}: ir_version {proto.ir_version} is newer than this onnx package reads "
                         f"(up to {onnx.IR_VERSION})")
    newest = onnx.defs.onnx_opset_version()
    for op in proto.opset_import:
        if op.domain in ("", "ai.onnx") and op.version > newest:
            raise ValueError(f"{source}: opset_import ai.onnx version {op.version} is newer than this onnx package "
                             f"knows (up to {newest})")
    return proto, weights


class Backend(_OnnxBackend):
    """kompute_dml as an ONNX backend (see the module docstring)."""

    @classmethod
    def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """True for "CPU" and "VULKAN" (the default Vulkan device: KDML_DEVICE's, else 0) and
        for "VULKAN:<n>", "VULKAN:<uuid>" or "GPU-<uuid>" where this machine has that device
        (what `prepare` will then open)."""
        return _parse_device(device) is not None

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> BackendRep:
        """Options: feature_level (a kdml.FeatureLevel or its name), fallback ("auto":
        onnxruntime then the reference evaluator; "onnxruntime"; "reference"), exclude_ops
        (op types to keep on the CPU), cpu_threads (onnxruntime intra-op threads), fuse (default
        True: the node chains of onnx_backend/fusions.py run as one dispatch each), group_products
        (default True: integer and float products sharing their A run as one, onnx_backend/product_groups.py), kdml_device,
        warmup (a dict of input name -> shape, or a list of such dicts: the model runs once
        per dict on zero-filled inputs of those shapes, so the pipelines, descriptor sets and
        recorded submissions those shapes need exist before the first real run),
        allow_half_precision (default False: DirectML's DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION;
        True: float32 MatMul, Gemm, FusedMatMul and Conv compute in float16 with float32
        accumulation, onnx_backend/half_precision.py)."""
        proto, weights = load_model_and_weights(model)
        weights = kwargs.pop("kdml_weights", None) or weights  # (the plugin EP's: file_weights.FileWeights.of)
        dev = kwargs.pop("kdml_device", None) or _kdml_device(device, kwargs.pop("feature_level", None))
        kwargs.pop("feature_level", None)
        allowed = {"fallback", "exclude_ops", "cpu_threads", "fuse", "group_products", "allow_half_precision"}
        rep = BackendRep(proto, dev, file_weights=weights, **{k: v for k, v in kwargs.items() if k in allowed})
        warm = kwargs.get("warmup")
        for shapes in [warm] if isinstance(warm, dict) else (warm or []):
            rep.warmup(shapes)
        return rep

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> Any:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None, **kwargs: Any) -> Any:
        """Run one node on inputs given in its input order (None for an absent optional input)."""
        if isinstance(inputs, dict):
            inputs = [inputs.get(n) for n in node.input]
        inputs = list(inputs)
        g_inputs, feeds = [], {}
        for name, v in zip(node.input, inputs):
            if not name or v is None:
                continue
            g_inputs.append(helper.make_value_info(name, _type_proto_of_value(np.asarray(v) if not isinstance(
                v, list) else v, None)))
            feeds[name] = v
        g_outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
        graph = helper.make_graph([node], "kdml_run_node", g_inputs, g_outputs)
        opsets = [helper.make_opsetid("", kwargs.pop("opset_version", onnx.defs.onnx_opset_version()))]
        if node.domain and node.domain != "ai.onnx":
            opsets.append(helper.make_opsetid(node.domain, 1))
        model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
        return cls.prepare(model, device, **kwargs).run(feeds)


prepare = Backend.prepare
run_model = Backend.run_model
run_node = Backend.run_node
supports_device = Backend.supports_device
