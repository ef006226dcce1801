"""Independent references of the element-wise operators (docs/elementwise.md), from numpy and
Python integers only: integers exactly (Python ints, wrapped into the type), floats in float64
rounded once to the output type (correctly rounded for +, -, *, / since float64 has more than
2p + 2 bits for float32 and float16), comparisons with numpy's IEEE comparisons.

`check_float` accepts, for FLOAT32 ADD, SUBTRACT and MULTIPLY, the result of the same
computation with subnormal inputs and results flushed to signed zero (the device's float
controls may flush: Vulkan and D3D allow it). DIVIDE is correctly rounded on every device
(integer code, shaders/f32_exact.glsl): only the reference's bits pass, subnormals included."""

from __future__ import annotations

import numpy as np

import kompute_dml as kdml

DT = kdml.DataType


def wrap(values: np.ndarray, dt: DT) -> np.ndarray:
    """Python-int object array -> dt, two's complement wrap-around."""
    bits = 8 * dt.size
    out = np.array([int(v) % (1 << bits) for v in values.reshape(-1)], dtype=object)
    if dt.is_signed:
        out = np.array([v - (1 << bits) if v >= 1 << (bits - 1) else v for v in out], dtype=object)
    return out.astype(dt.numpy_dtype).reshape(values.shape)


def int_div(a: int, b: int, dt: DT) -> int:
    """Truncation toward zero; x / 0 has every bit set (wrapped by the caller)."""
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def integer_ref(op: str, a: np.ndarray, b: np.ndarray, dt: DT) -> np.ndarray:
    ai, bi = a.astype(object).reshape(-1), b.astype(object).reshape(-1)
    fn = {"add": lambda x, y: int(x) + int(y), "sub": lambda x, y: int(x) - int(y), "mul": lambda x, y: int(x) * int(y),
          "div": lambda x, y: int_div(int(x), int(y), dt)}[op]
    return wrap(np.array([fn(x, y) for x, y in zip(ai, bi)], dtype=object).reshape(a.shape), dt)


def _flush(x: np.ndarray, dt: DT) -> np.ndarray:
    tiny = np.finfo(dt.numpy_dtype).tiny
    return np.where(np.abs(x) < tiny, np.copysign(0.0, x), x)


def float_ref(op: str, a: np.ndarray, b: np.ndarray, dt: DT, flush: bool = False) -> np.ndarray:
    x, y = a.astype(np.float64), b.astype(np.float64)
    if flush:
        x, y = _flush(x, dt), _flush(y, dt)
    with np.errstate(all="ignore"):
        r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[op](x, y).astype(dt.numpy_dtype)
    return _flush(r, dt).astype(dt.numpy_dtype) if flush else r


def arith_ref(op: str, a: np.ndarray, b: np.ndarray, dt: DT) -> np.ndarray:
    return float_ref(op, a, b, dt) if dt.is_float else integer_ref(op, a, b, dt)


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}")


def check_float(op: str, got: np.ndarray, a: np.ndarray, b: np.ndarray, dt: DT) -> None:
    """got (dt) is the reference, elementwise, within the documented allowances."""
    ref = float_ref(op, a, b, dt)
    ok = (_bits(got) == _bits(ref)) | (np.isnan(got) & np.isnan(ref))
    if dt == DT.FLOAT32 and op != "div":
        flushed = float_ref(op, a, b, dt, flush=True)
        ok |= (_bits(got) == _bits(flushed)) | (np.isnan(got) & np.isnan(flushed))
    bad = np.argwhere(~ok)
    assert bad.size == 0, (f"{len(bad)} {dt.name} {op} results differ, first at {bad[:4].tolist()}: "
                           f"{a[tuple(bad[0])]!r} {op} {b[tuple(bad[0])]!r} gave {got[tuple(bad[0])]!r}, "
                           f"want {ref[tuple(bad[0])]!r}")


def compare_ref(op: str, a: np.ndarray, b: np.ndarray, out_dt: DT) -> np.ndarray:
    r = {"eq": np.equal, "ge": np.greater_equal, "and": lambda x, y: (x != 0) & (y != 0)}[op](a, b)
    return r.astype(out_dt.numpy_dtype)


__all__ = ["arith_ref", "check_float", "compare_ref", "float_ref", "int_div", "integer_ref", "wrap"]
