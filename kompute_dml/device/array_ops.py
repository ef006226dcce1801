"""Tensor operators (`+ - * / @ ** == != < <= > >= & | ~`, unary `-` / `+` / `abs`) and numpy's
`__array_ufunc__` / `__array_function__`, each running DirectML operators through the
functional helpers; registered onto `memory.Tensor` when kompute_dml is imported.
docs/tensor.md has the table of what maps to which operator, and the rules:

- **Promotion**: two typed operands (Tensors, numpy arrays and scalars) take numpy's
  `result_type`; an operand of another type is converted on the device (CAST) first, and a
  promoted type the operator does not take raises UnsupportedError naming the rule. Python
  numbers and lists take the Tensor's type (their values must survive: InvalidArgumentError
  otherwise), except a Python float with an integer Tensor, which numpy promotes to float64.
- **Comparisons** give UINT8 0 / 1 (DirectML has no bool type); `&`, `|`, `~` are the
  *logical* operations on such masks (LOGICAL_AND and what derives from it with
  LOGICAL_EQUALS), equal to numpy's on bool arrays, not numpy's bitwise ones on other values.
- Nothing computes on the host: an operation no operator covers raises TypeError or
  UnsupportedError naming it (`//`, `%`, `**` beyond small integer exponents, most ufuncs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.errors import UnsupportedError, invalid
from ..core.inputs import is_python_data
from ..functional import elementwise as ew
from ..functional.gemm import matmul
from ..ops import elementwise_unary as unary
from ..ops.cast import cast
from ..ops.identity import copy as device_copy
from .array_methods import as_0d, astype, reshape, transpose
from .memory import Tensor

_INTS = "iu"


def _typed(x: Any) -> bool:
    return isinstance(x, (Tensor, np.ndarray, np.generic))


def _shape_of(x: Any) -> tuple[int, ...]:
    return x.shape if _typed(x) else np.shape(x)


def _conform(x: Any, dt: np.dtype, dev: Any) -> Any:
    """`x` (an operand) in type `dt`: a Tensor cast on the device, a numpy value converted as it
    goes up (an upload, no computation on a Tensor), Python data as it is (the helper types it)."""
    if isinstance(x, Tensor):
        return x if x.dtype == dt else cast(x, dt)
    if isinstance(x, (np.ndarray, np.generic)):
        return dev.tensor(np.asarray(x).astype(dt))
    return x


def _promotion(name: str, a: Any, b: Any) -> tuple[np.dtype, str]:
    """The type (a, b) take by numpy's rules, and the rule applied (for error messages)."""
    if not (_typed(a) or is_python_data(a)) or not (_typed(b) or is_python_data(b)):
        raise TypeError(f"unsupported operand types for {name}: {type(a).__name__} and {type(b).__name__}")
    t = a if isinstance(a, Tensor) else b
    if _typed(a) and _typed(b):
        if isinstance(a, Tensor) and isinstance(b, Tensor) and a.device is not b.device:
            raise invalid("b", "belongs to another Device")
        dt = np.result_type(a.dtype, b.dtype)
        rule = f"numpy promotes {a.dtype} {name} {b.dtype} to {dt}"
    else:
        scalar = b if _typed(a) else a
        dt = t.dtype
        rule = f"a Python value takes the tensor's type {dt}"
        if t.dtype.kind in _INTS and isinstance(scalar, float):
            raise UnsupportedError(f"{t.dtype} tensor {name} Python float: numpy promotes it to float64, which "
                                   "DirectML's arithmetic operators do not take; convert the tensor first "
                                   "(.astype(np.float32))")
    return dt, rule


def _result(r: Tensor, *operands: Any) -> Tensor:
    """`r` as 0-d where numpy's result would be (every operand 0-d or a scalar)."""
    return as_0d(r) if np.broadcast_shapes(*(_shape_of(x) for x in operands)) == () else r


def _promoted(name: str, fn: Callable[[Any, Any], Tensor], a: Any, b: Any) -> Tensor:
    """fn on the operands in their promoted type; UnsupportedError naming the rule where an
    operator (CAST or fn's) does not take that type."""
    dt, rule = _promotion(name, a, b)
    dev = (a if isinstance(a, Tensor) else b).device
    try:
        return fn(_conform(a, dt, dev), _conform(b, dt, dev))
    except UnsupportedError as e:
        raise UnsupportedError(f"{name}: {rule}; {e}") from None


def _binary(name: str, fn: Callable[[Any, Any], Tensor]) -> Callable[[Any, Any], Tensor]:
    def run(a: Any, b: Any) -> Tensor:
        if not all(_typed(x) or is_python_data(x) for x in (a, b)):
            return NotImplemented  # Python's protocol: the other operand's method, else TypeError (== : identity)
        return _result(_promoted(name, fn, a, b), a, b)
    return run


def _not(x: Tensor) -> Tensor:
    return ew.equal(x, 0)  # LOGICAL_EQUALS with 0: 1 where x is 0 (a logical not of a 0 / 1 mask)


def _ne(a: Any, b: Any) -> Tensor:
    return _not(ew.equal(a, b))  # NaN != NaN is 1, as numpy's


def _gt(a: Any, b: Any) -> Tensor:
    # a >= b and not a == b: NaN gives 0 as numpy's (not (b >= a) would give 1), 0 > -0 gives 0
    return ew.logical_and(ew.greater_equal(a, b), _not(ew.equal(a, b)))


def _or(a: Any, b: Any) -> Tensor:
    for x in (a, b):
        if isinstance(x, Tensor) and x.dtype not in (np.uint8, np.uint32):
            raise UnsupportedError(f"| on {x.dtype}: the logical or of UINT8 / UINT32 0 / 1 masks only (derived from "
                                   "LOGICAL_AND and LOGICAL_EQUALS; DirectML has no bitwise or in kompute_dml)")
    return _not(ew.logical_and(_not(a), _not(b)))  # De Morgan on 0 / 1 masks


def _truediv(a: Any, b: Any) -> Tensor:
    for x in (a, b):
        if isinstance(x, Tensor) and x.dtype.kind in _INTS:
            raise UnsupportedError(f"/ on {x.dtype}: numpy's true division gives float64, which DIVIDE does not take "
                                   "(DirectML's integer DIVIDE truncates, not numpy's /); convert first "
                                   "(.astype(np.float32))")
    return ew.div(a, b)


def _neg(x: Tensor) -> Tensor:
    if x.desc.data_type.is_float:
        return unary.neg(x)  # ELEMENT_WISE_NEGATE
    return ew.sub(_zero(x), x)  # SUBTRACT from 0: integers wrap, as numpy's negative does


def _zero(x: Tensor) -> Tensor:
    return x.device.tensor(np.zeros(1, x.dtype))


def _abs(x: Tensor) -> Tensor:
    if x.desc.data_type.is_float:
        return unary.abs(x)  # ELEMENT_WISE_ABS
    if x.dtype.kind == "u":
        return device_copy(x)
    return ew.where(ew.greater_equal(x, 0), x, _neg(x))  # IF on x >= 0: the minimum wraps, as numpy's


def _unary(name: str, fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    def run(x: Tensor) -> Tensor:
        try:
            r = fn(x)
        except UnsupportedError as e:
            raise UnsupportedError(f"{name} on {x.dtype}: {e}") from None
        return as_0d(r) if x.ndim == 0 else r
    return run


def power(x: Tensor, e: Any) -> Tensor:
    """x ** e for a Python integer e by products (MULTIPLY), as the ONNX backend's Pow: floats
    e = 1, 2, 3 (x * x, (x * x) * x: onnxruntime's roundings; float16 1 and 2), integers any
    e >= 0 (wrapping as numpy's); anything else UnsupportedError."""
    if not isinstance(x, Tensor):
        raise TypeError("** needs the tensor as its base")
    if isinstance(e, float) and e.is_integer():
        e = int(e)
    floats = (1, 2) if x.dtype == np.float16 else (1, 2, 3)
    ok = isinstance(e, (int, np.integer)) and not isinstance(e, bool) and (
        e in floats if x.desc.data_type.is_float else 0 <= e <= 64)
    if not ok:
        raise UnsupportedError(f"{x.dtype} tensor ** {e!r}: DirectML has no POW operator in kompute_dml; only "
                               f"exponents {'1, 2, 3' if floats == (1, 2, 3) else '1, 2'} run (as products) for "
                               "floats, 0 to 64 for integers")
    e = int(e)
    result = None
    square = x
    while e:  # square-and-multiply: for floats only 1, 2, 3 reach here, giving x, x*x, (x*x)*x
        if e & 1:
            result = square if result is None else ew.mul(result, square)
        e >>= 1
        if e:
            square = ew.mul(square, square)
    r = device_copy(x) if result is x else (result if result is not None else _full_one(x))
    return as_0d(r) if x.ndim == 0 else r


def _full_one(x: Tensor) -> Tensor:
    from .creation import full_like  # creation sits beside this module and uses its operators
    return full_like(x, 1)


def _matmul(a: Any, b: Any) -> Tensor:
    if not all(_typed(x) or is_python_data(x) for x in (a, b)):
        return NotImplemented
    r = _promoted("@", matmul, a, b)
    return as_0d(r) if len(_shape_of(a)) == 1 and len(_shape_of(b)) == 1 else r  # numpy: a vector dot is 0-d


def _invert(x: Tensor) -> Tensor:
    if x.dtype not in (np.uint8, np.uint32):
        raise TypeError(f"~ on a {x.dtype} tensor: kompute_dml's ~ is the logical not of a UINT8 / UINT32 0 / 1 mask "
                        "(LOGICAL_EQUALS with 0), not numpy's bitwise not")
    return _not(x)


def _refuse(name: str, why: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{name} on kompute_dml Tensors: {why}; download with .numpy() to compute it on the host")
    return refuse


_ADD, _SUB, _MUL = _binary("+", ew.add), _binary("-", ew.sub), _binary("*", ew.mul)
_DIV, _MATMUL = _binary("/", _truediv), _matmul
_EQ, _NE, _GE = _binary("==", ew.equal), _binary("!=", _ne), _binary(">=", ew.greater_equal)
_GT = _binary(">", _gt)
_AND, _OR = _binary("&", ew.logical_and), _binary("|", _or)
_LE = _binary("<=", lambda a, b: ew.greater_equal(b, a))
_LT = _binary("<", lambda a, b: _gt(b, a))
_NEG, _ABS, _INVERT = _unary("-", _neg), _unary("abs", _abs), _unary("~", _invert)


def _swap(fn: Callable[[Any, Any], Tensor]) -> Callable[[Any, Any], Tensor]:
    return lambda a, b: fn(b, a)


OPERATORS: dict[str, Any] = {
    "__add__": _ADD, "__radd__": _swap(_ADD), "__sub__": _SUB, "__rsub__": _swap(_SUB),
    "__mul__": _MUL, "__rmul__": _swap(_MUL), "__truediv__": _DIV, "__rtruediv__": _swap(_DIV),
    "__matmul__": _MATMUL, "__rmatmul__": _swap(_MATMUL), "__pow__": power,
    "__eq__": _EQ, "__ne__": _NE, "__ge__": _GE, "__gt__": _GT, "__le__": _LE, "__lt__": _LT,
    "__and__": _AND, "__rand__": _swap(_AND), "__or__": _OR, "__ror__": _swap(_OR),
    "__neg__": _NEG, "__abs__": _ABS, "__invert__": _INVERT,
    "__pos__": lambda x: x,
    "__floordiv__": _refuse("//", "DirectML's DIVIDE truncates toward zero (numpy floors) and has no modulus"),
    "__rfloordiv__": _refuse("//", "DirectML's DIVIDE truncates toward zero (numpy floors) and has no modulus"),
    "__mod__": _refuse("%", "DirectML has no modulus operator in kompute_dml"),
    "__rmod__": _refuse("%", "DirectML has no modulus operator in kompute_dml"),
    "__rpow__": _refuse("** with a tensor exponent", "DirectML has no POW operator in kompute_dml"),
    "__xor__": _refuse("^", "DirectML has no LOGICAL_XOR operator in kompute_dml"),
    "__rxor__": _refuse("^", "DirectML has no LOGICAL_XOR operator in kompute_dml"),
    "__lshift__": _refuse("<<", "DirectML has no shift operator in kompute_dml"),
    "__rshift__": _refuse(">>", "DirectML has no shift operator in kompute_dml"),
    # hashable by identity (CuPy's arrays are not): the library keys caches and weak maps by
    # Tensor objects, and a dict finds a key by identity before it compares
    "__hash__": object.__hash__,
}

# numpy ufuncs with a DirectML operator (called as np.add(a, b), no out= / where=)
UFUNCS: dict[Any, Callable[..., Tensor]] = {
    np.add: _ADD, np.subtract: _SUB, np.multiply: _MUL, np.true_divide: _DIV, np.matmul: _MATMUL,
    np.equal: _EQ, np.not_equal: _NE, np.greater_equal: _GE, np.greater: _GT, np.less_equal: _LE, np.less: _LT,
    np.logical_and: _AND, np.logical_or: _OR, np.logical_not: _INVERT, np.negative: _NEG, np.absolute: _ABS,
    np.positive: lambda x: x, np.power: power,
    **{getattr(np, n): _unary(n, getattr(unary, h)) for n, h in (
        ("sqrt", "sqrt"), ("exp", "exp"), ("log", "log"), ("tanh", "tanh"), ("floor", "floor"),
        ("ceil", "ceil"), ("sign", "sign"), ("reciprocal", "reciprocal"))},
}


def array_ufunc(self: Tensor, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """numpy's ufunc protocol: the ufuncs of UFUNCS on the device, TypeError for the rest."""
    fn = UFUNCS.get(ufunc)
    if fn is None or method != "__call__" or any(v is not None for v in kwargs.values()):
        what = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        extra = f" with {', '.join(kwargs)}" if kwargs else ""
        raise TypeError(f"{what}{extra} has no DirectML operator in kompute_dml (docs/tensor.md lists the ufuncs that "
                        "run on the device); download with .numpy() to compute it on the host")
    return fn(*inputs)


# numpy functions with a device form (np.reshape(t, ...) etc.); every other one is refused
FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.reshape: lambda a, shape, **kw: reshape(a, shape), np.transpose: lambda a, axes=None: (
        transpose(a) if axes is None else transpose(a, axes)),
    np.where: lambda c, a, b: ew.where(c, a, b), np.matmul: _MATMUL, np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim, np.size: lambda a: a.size, np.result_type: lambda *a: np.result_type(
        *(x.dtype if isinstance(x, Tensor) else x for x in a)),
    np.copy: lambda a, **kw: a.copy(), np.astype: lambda a, dtype, copy=True: astype(a, dtype, copy),
    **{f: (lambda name: lambda a, axis=None, keepdims=False: getattr(a, name)(axis=axis, keepdims=keepdims))(n)
       for f, n in ((np.sum, "sum"), (np.mean, "mean"), (np.max, "max"), (np.amax, "max"), (np.min, "min"),
                    (np.amin, "min"), (np.prod, "prod"))},
    **{f: (lambda name: lambda a, axis=None: getattr(a, name)(axis=axis))(n)
       for f, n in ((np.argmax, "argmax"), (np.argmin, "argmin"))},
}


def array_function(self: Tensor, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    fn = FUNCTIONS.get(func)
    if fn is None:
        raise TypeError(f"numpy.{func.__name__} has no DirectML operator in kompute_dml; download with "
                        ".numpy() to compute it on the host")
    return fn(*args, **kwargs)


for _name, _value in {**OPERATORS, "__array_ufunc__": array_ufunc, "__array_function__": array_function}.items():
    setattr(Tensor, _name, _value)

__all__ = ["FUNCTIONS", "OPERATORS", "UFUNCS", "power"]
