"""A prepared model's inputs: names, the one input rule (kompute_dml/core/inputs.py), types and
declared shapes.

Each tensor input may be anything `kompute_dml.core.inputs.as_host_array` takes (numpy, Python
numbers and lists, CPU objects with __array__ / __dlpack__ such as torch CPU tensors; a CUDA
tensor is refused with the advice to move it to the CPU), of any ONNX type (strings and bools
too: the CPU fallback runs those). Its type must be the declared one or convert to it without
changing values (the rule of `Tensor.write_numpy`); its shape must match the declared shape
where a dimension is a number (symbolic and unknown dimensions take any size). A kompute_dml
Tensor on the model's device is fed as it is, without a host round trip: its element type must be
the declared one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.core.errors import InvalidArgumentError, invalid
from kompute_dml.core.inputs import as_host_array, conform, is_python_data

from .values import DeviceValue, _is_tensor_value

if TYPE_CHECKING:
    from .rep import BackendRep


def declared_shape(tp: onnx.TypeProto | None) -> tuple[int | None, ...] | None:
    """A tensor type's shape, None for a free dimension; None if the rank is not declared."""
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim)


def _is_tensor_typed(rep: BackendRep, name: str) -> bool:
    tp = rep.declared_types.get(name)
    return tp is None or tp.WhichOneof("value") in (None, "tensor_type")


def _device_value(rep: BackendRep, name: str, t: kdml.Tensor) -> DeviceValue:
    """A kompute_dml Tensor fed as it is (no host round trip): on the model's device, of the
    declared element type exactly (no conversion on the device)."""
    field = f"input {name!r}"
    if t.device is not rep.device:
        raise invalid(field, f"is a Tensor of {t.device.name!r}; the model runs on {rep.device.name!r} "
                             "(move it with .numpy() or prepare the model there)")
    exp = rep._elem_dtype(name)
    if exp is not None and t.dtype != exp:
        raise invalid(field, f"expected {exp}, got a Tensor of {t.dtype} (a device input is not converted: "
                             "kdml.cast it first)")
    return DeviceValue(t, t.shape, t.dtype)


def _host_value(rep: BackendRep, name: str, v: Any) -> Any:
    field = f"input {name!r}"
    if isinstance(v, kdml.Tensor) and _is_tensor_typed(rep, name):
        return _device_value(rep, name, v)
    if v is None or isinstance(v, (DeviceValue, np.ndarray)):
        return v
    if isinstance(v, (list, tuple)) and not _is_tensor_typed(rep, name):  # a sequence of tensors
        return [e if isinstance(e, np.ndarray) else as_host_array(e, f"{field}[{i}]", dml=False) for i, e in enumerate(v)]
    return as_host_array(v, field, dml=False)


def _rule(rep: BackendRep, name: str) -> tuple[np.dtype | None, tuple[int | None, ...] | None]:
    """An input's declared element type and shape, read from its TypeProto once per model (a run
    of a small model spends its time here otherwise)."""
    rule = rep.feed_rules.get(name)
    if rule is None:
        rule = rep.feed_rules[name] = (rep._elem_dtype(name), declared_shape(rep.declared_types.get(name)))
    return rule


def _typed(rep: BackendRep, name: str, given: Any, arr: np.ndarray, cast: bool) -> np.ndarray:
    exp = _rule(rep, name)[0]
    if exp is None or arr.dtype == exp or arr.dtype.kind == "O":
        return arr
    try:
        return conform(arr, exp, f"input {name!r}", python=is_python_data(given), cast=cast)
    except InvalidArgumentError as e:
        rule = str(e).split(": ", 1)[1]
        raise invalid(f"input {name!r}", f"expected {exp}, got {arr.dtype} ({rule})") from None


def _check_shape(rep: BackendRep, name: str, arr: Any) -> None:
    want = _rule(rep, name)[1]
    if want is None:
        return
    got = tuple(arr.shape)
    if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got)):
        text = "(" + ", ".join("?" if w is None else str(w) for w in want) + ("," if len(want) == 1 else "") + ")"
        raise invalid(f"input {name!r}", f"has shape {got}; the model declares {text} (? = any size)")


def normalize_inputs(rep: BackendRep, inputs: Any, cast: bool = False) -> dict[str, Any]:
    """{name: value} for a run: names checked, values converted and checked (module docstring);
    `cast`: host arrays of another type are converted to the declared one whatever their values."""
    if isinstance(inputs, dict):
        feeds = dict(inputs)
        unknown = [k for k in feeds if k not in rep.input_names]
        if unknown:
            raise InvalidArgumentError(f"unknown input(s) {unknown}; the model's inputs are {rep.feed_names}")
    else:
        if _is_tensor_value(inputs) and not isinstance(inputs, DeviceValue):
            inputs = [inputs]
        elif not isinstance(inputs, (list, tuple)) and (hasattr(inputs, "__array__") or hasattr(inputs, "__dlpack__")):
            inputs = [inputs]  # one array-like input (a torch tensor), as one numpy array is taken
        seq = list(inputs)
        names = rep.feed_names if len(seq) <= len(rep.feed_names) else rep.input_names
        if len(seq) > len(names):
            raise InvalidArgumentError(f"{len(seq)} inputs given; the model takes {len(rep.feed_names)}: {rep.feed_names}")
        feeds = dict(zip(names, seq))
    missing = [n for n in rep.feed_names if n not in feeds]
    if missing:
        raise InvalidArgumentError(f"missing input(s) {missing}; the model's inputs are {rep.feed_names}")
    for name, given in list(feeds.items()):
        v = _host_value(rep, name, given)
        if isinstance(v, np.ndarray):
            v = _typed(rep, name, given, v, cast)
        if isinstance(v, (np.ndarray, DeviceValue)):
            _check_shape(rep, name, v)
        feeds[name] = v
    return feeds
