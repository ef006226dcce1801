"""One input rule for every entry point: what becomes a host numpy array, and how strictly.

`as_host_array(obj, field)` is used by `dev.tensor`, the functional helpers, `Tensor.write_numpy`,
the ONNX backend's inputs and `kompute-dml run`. It takes

- numpy arrays and numpy scalars (as they are),
- Python numbers (bool, int, float) and (nested) lists or tuples of them,
- objects with `__dlpack__` whose `__dlpack_device__` is the CPU (a torch CPU tensor, a JAX CPU
  array, ...), read through `np.from_dlpack` (no copy),
- objects with `__array__` (read through `np.asarray`).

A DLPack object on another device (a torch CUDA tensor, a CuPy array) is refused with
InvalidArgumentError saying to move it to the CPU first: kompute_dml uploads from host memory.
With `dml=True` (the default) the element type must be one DirectML holds (float16/32/64,
(u)int8/16/32/64); bfloat16 (torch's or ml_dtypes'), complex, bool, strings, objects and the
rest raise UnsupportedError naming the field and the type.

`conform(arr, dtype, field, exact_python=...)` is the strict conversion of a write
(`write_numpy`, the ONNX inputs): the same dtype, or a *value-preserving* one. For a typed
source (numpy, DLPack, `__array__`), value-preserving means `np.can_cast(src, dst, "safe")`;
for Python numbers and lists (whose numpy type is only numpy's guess: int64, float64, bool)
it means every value survives: integers in the destination's range (and exactly representable
by a float destination), floats finite-to-finite within the destination's range (rounded to
the nearest destination value, as numpy does) and, for an integer destination, integral.
Anything else raises InvalidArgumentError naming the field and the rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import DataType
from .errors import InvalidArgumentError, UnsupportedError, invalid

KDL_CPU = 1  # DLDeviceType kDLCPU
KDL_CPU_PINNED = 3  # kDLCUDAHost: page-locked host memory, readable from the CPU
_DLPACK_DEVICES = {2: "CUDA", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm", 13: "CUDA managed",
                   14: "oneAPI"}
DML_TYPES = "float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64"


def _type_name(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ not in ("builtins", None) else t.__qualname__


def is_python_data(obj: Any) -> bool:
    """Python numbers and lists/tuples: values without a type of their own."""
    return isinstance(obj, (bool, int, float, list, tuple)) and not isinstance(obj, np.generic)


def _from_dlpack(obj: Any, field: str) -> np.ndarray:
    dev = None
    if hasattr(obj, "__dlpack_device__"):
        try:
            dev = tuple(obj.__dlpack_device__())
        except Exception:  # an exporter that cannot say: let from_dlpack decide
            dev = None
    if dev is not None and int(dev[0]) not in (KDL_CPU, KDL_CPU_PINNED):
        where = _DLPACK_DEVICES.get(int(dev[0]), f"DLPack device type {int(dev[0])}")
        raise invalid(field, f"{_type_name(obj)} lives on {where} device {int(dev[1])}; kompute_dml uploads from "
                             "host memory: move it to the CPU first (torch: .cpu(), CuPy: .get())")
    try:
        return np.from_dlpack(obj)
    except Exception as e:
        if hasattr(obj, "__array__"):
            return _from_array(obj, field)
        raise invalid(field, f"{_type_name(obj)} could not be read through DLPack: {e}") from None


def _from_array(obj: Any, field: str) -> np.ndarray:
    try:
        return np.asarray(obj)
    except Exception as e:
        raise invalid(field, f"{_type_name(obj)}.__array__ failed: {e}") from None


def _named_bfloat16(obj: Any) -> bool:
    """torch.bfloat16 and friends: numpy has no such type, so look at the exporter's dtype name."""
    return "bfloat16" in str(getattr(obj, "dtype", "")).lower()


def check_dml_dtype(dtype: np.dtype, field: str, what: str = "") -> DataType:
    """The DataType of a numpy dtype, or UnsupportedError naming the field and the type."""
    try:
        return DataType.from_numpy(dtype)
    except InvalidArgumentError:
        pass
    name = str(dtype)
    hint = ""
    if dtype.kind == "b":
        hint = " (convert it, e.g. .astype(np.uint8))"
    elif "bfloat16" in name:
        hint = " (convert it to float32 or float16 first)"
    raise UnsupportedError(f"{field}: {what or 'element type'} {name} is not a DirectML data type; "
                           f"DirectML tensors hold {DML_TYPES}{hint}")


def as_host_array(obj: Any, field: str, *, dml: bool = True) -> np.ndarray:
    """`obj` as a numpy array on the host (see the module docstring); with `dml`, of a DirectML type."""
    if isinstance(obj, np.ndarray):
        arr = obj
    elif isinstance(obj, np.generic):
        arr = np.asarray(obj)
    elif is_python_data(obj):
        try:
            arr = np.asarray(obj)
        except (OverflowError, ValueError) as e:
            raise invalid(field, f"Python data that is no rectangular array of numbers: {e}") from None
        if arr.dtype.kind == "O" and dml:
            raise invalid(field, "Python data that is no rectangular array of numbers of one kind "
                                 "(ragged lists, or integers beyond 64 bits)")
    elif hasattr(obj, "__dlpack__") or hasattr(obj, "__array__"):
        if dml and _named_bfloat16(obj):
            raise UnsupportedError(f"{field}: {_type_name(obj)} of type {obj.dtype} is not a DirectML data type; "
                                   f"DirectML tensors hold {DML_TYPES} (convert it to float32 or float16 first)")
        arr = _from_dlpack(obj, field) if hasattr(obj, "__dlpack__") else _from_array(obj, field)
    elif isinstance(obj, (str, bytes, bytearray, complex)) and dml:
        raise UnsupportedError(f"{field}: {_type_name(obj)} is not a DirectML data type; DirectML tensors hold "
                               f"{DML_TYPES}")
    else:
        raise invalid(field, f"must be a numpy array, a Python number or list, or an object with __array__ or "
                             f"__dlpack__ (a CPU torch tensor, ...), got {_type_name(obj)}")
    if dml:
        check_dml_dtype(arr.dtype, field)
    return arr


# ---- strict conversion ---------------------------------------------------------------------
def _python_values_fit(arr: np.ndarray, dst: np.dtype) -> str:
    """'' if every value of `arr` (numpy's reading of Python data) survives conversion to dst,
    else why not."""
    if arr.dtype.kind == "b":
        return ""  # True/False are 1/0 in every numeric type
    if dst.kind in "iu":
        info = np.iinfo(dst)
        if arr.dtype.kind == "f":
            finite = np.isfinite(arr)
            if not finite.all() or not (arr == np.round(arr)).all():
                return "non-integral or non-finite values cannot become integers"
        lo, hi = arr.min(initial=0), arr.max(initial=0)
        if arr.size and (int(lo) < info.min or int(hi) > info.max):
            return f"values in [{lo}, {hi}] do not fit {dst} [{info.min}, {info.max}]"
        return ""
    # a float destination
    if arr.dtype.kind in "iu":
        back = arr.astype(dst).astype(arr.dtype) if arr.size else arr
        same = (back == arr).all() and np.isfinite(arr.astype(dst)).all()
        return "" if same else f"integers that {dst} cannot represent exactly"
    finite = np.isfinite(arr)
    with np.errstate(over="ignore"):
        converted = arr.astype(dst)
    if (np.isfinite(converted) != finite).any():
        return f"finite values beyond {dst}'s range (largest {np.finfo(dst).max}) would become inf"
    return ""


def conform(arr: np.ndarray, dtype: np.dtype, field: str, *, python: bool, cast: bool = False) -> np.ndarray:
    """`arr` as `dtype` if the conversion preserves values (module docstring), else
    InvalidArgumentError; `cast=True` converts whatever the values (numpy's astype)."""
    dst = np.dtype(dtype)
    if arr.dtype == dst:
        return arr
    if cast:
        with np.errstate(all="ignore"):
            return arr.astype(dst)
    if python:
        why = _python_values_fit(arr, dst)
        if not why and arr.dtype.kind in "biuf":
            return arr.astype(dst)
        why = why or f"{arr.dtype} data is no number"
        raise invalid(field, f"the values would change in the conversion to {dst}: {why}; pass cast=True to "
                             "convert anyway")
    if np.can_cast(arr.dtype, dst, "safe"):
        return arr.astype(dst)
    raise invalid(field, f"{arr.dtype} does not convert to {dst} without changing values (numpy's 'safe' casting "
                         f"rule); convert it first (.astype) or pass cast=True")


__all__ = ["as_host_array", "check_dml_dtype", "conform", "is_python_data"]
