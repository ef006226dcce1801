"""DML_BUFFER_TENSOR_DESC: the descriptor dataclass, its size formula and its rules.

Construction only normalises types (lists become tuples); the rules are checked by
`validate_desc`, which every operator runs at compile time, so a bad descriptor is
reported by `Device.compile` with the name of the operator field it sits in.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .dtypes import DataType
from .errors import InvalidArgumentError, invalid
from .ints import as_int, as_int_tuple, is_int_tuple

MAX_DIMENSIONS = 8  # DML_TENSOR_DIMENSION_COUNT_MAX1
MAX_ELEMENTS = 2**32 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
TENSOR_FLAG_NONE = 0
TENSOR_FLAG_OWNED_BY_DML = 1
MINIMUM_BUFFER_TENSOR_ALIGNMENT = 16  # DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT


def _tupleable(values: object) -> bool:
    """A container to keep as a tuple for the error report (not a string: its characters are no sizes)."""
    return hasattr(values, "__iter__") and not isinstance(values, (str, bytes, bytearray))


def packed_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides in elements, last dimension fastest."""
    strides = [1] * len(sizes)
    acc = 1
    for i in range(len(sizes) - 1, -1, -1):
        strides[i] = acc
        acc *= sizes[i]
    return tuple(strides)


def calc_buffer_tensor_size(data_type: DataType | int, sizes: Sequence[int], strides: Sequence[int] | None = None) -> int:
    """DMLCalcBufferTensorSize in exact integer arithmetic (DirectMLX overflows in 32 bits)."""
    if data_type is None:
        raise invalid("data_type", "None is not a DML_TENSOR_DATA_TYPE (1..11)")
    dt = DataType.coerce(data_type)
    sizes_t = as_int_tuple(sizes, "sizes")
    if strides is None:
        count = math.prod(sizes_t)
    else:
        strides_t = as_int_tuple(strides, "strides")
        if len(strides_t) != len(sizes_t):
            raise invalid("strides", f"has {len(strides_t)} entries but sizes has {len(sizes_t)}")
        count = sum((s - 1) * st for s, st in zip(sizes_t, strides_t)) + 1
    nbytes = count * dt.size
    return (nbytes + 3) & ~3


T = TypeVar("T")


class _cached(Generic[T]):
    """functools.cached_property without the lock Python 3.11's takes on every first read
    (a third of the binding checks of an execution on new tensors, whose descs are read for
    the first time). The value goes into the instance's __dict__, which later reads find
    first."""

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, owner: Any = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


class _Interned(type):
    """Descriptors of the common form (a DataType, tuples of plain ints, no total size, alignment
    or flags) are made once and shared: they are immutable, and a plan of an encoder builds
    hundreds of them, mostly the same few (their checks cost ~10 us each); one the rules refuse is
    shared too, still invalid. Anything else (lists, numpy integers, the other fields given) is
    constructed, and checked, every time."""

    _cache: dict[tuple[Any, ...], Any] = {}
    _CAPACITY = 4096

    def __call__(cls, data_type: Any, sizes: Any, strides: Any = None, *rest: Any, **kw: Any) -> Any:
        if rest or kw or type(data_type) is not DataType or not is_int_tuple(sizes) or not (
                strides is None or is_int_tuple(strides)):
            return super().__call__(data_type, sizes, strides, *rest, **kw)
        key = (cls, data_type, sizes, strides)
        hit = _Interned._cache.get(key)
        if hit is None:
            hit = _valid_common(cls, data_type, sizes, strides) or super().__call__(data_type, sizes, strides)
            if len(_Interned._cache) >= _Interned._CAPACITY:
                _Interned._cache.clear()
            _Interned._cache[key] = hit
        return hit


def _valid_common(cls: Any, data_type: DataType, sizes: tuple[int, ...], strides: tuple[int, ...] | None) -> Any:
    """A descriptor of the common form (already normalised: a DataType, tuples of ints) made
    without the dataclass's construction, where it keeps every rule (_check's, in a few
    comparisons: a plan of a new input shape makes dozens of new ones); None otherwise, to be
    constructed and checked in full (and kept invalid where a rule is broken)."""
    n = len(sizes)
    if not 1 <= n <= MAX_DIMENSIONS or min(sizes) < 1 or max(sizes) > UINT32_MAX:
        return None
    if math.prod(sizes) > MAX_ELEMENTS:
        return None
    if strides is not None and (len(strides) != n or min(strides) < 0 or max(strides) > UINT32_MAX):
        return None
    desc = object.__new__(cls)
    desc.__dict__.update(data_type=data_type, sizes=sizes, strides=strides,
                         total_tensor_size_in_bytes=calc_buffer_tensor_size(data_type, sizes, strides),
                         guaranteed_base_offset_alignment=0, flags=0, _valid=True)
    return desc


@dataclass(frozen=True)
class TensorDesc(metaclass=_Interned):
    """DML_BUFFER_TENSOR_DESC. Strides are in elements; None means packed."""

    data_type: DataType
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    total_tensor_size_in_bytes: int | None = None
    guaranteed_base_offset_alignment: int = 0
    flags: int = 0
    _valid: bool = field(default=False, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Normalise what can be normalised; remember whether the rules hold so that
        # validate_desc can report the first broken one later with its field name.
        dt = self.data_type
        if dt is not None:  # np.dtype(None) is float64: None must stay an error, not FLOAT64
            with contextlib.suppress(InvalidArgumentError):
                dt = DataType.coerce(dt)
        object.__setattr__(self, "data_type", dt)
        try:
            object.__setattr__(self, "sizes", as_int_tuple(self.sizes, "sizes"))
        except InvalidArgumentError:
            if _tupleable(self.sizes):
                object.__setattr__(self, "sizes", tuple(self.sizes))
        if self.strides is not None:
            try:
                object.__setattr__(self, "strides", as_int_tuple(self.strides, "strides"))
            except InvalidArgumentError:
                if _tupleable(self.strides):
                    object.__setattr__(self, "strides", tuple(self.strides))
        try:
            minimum = _check(self, "tensor")
            ok = True
        except InvalidArgumentError:
            ok = False
        object.__setattr__(self, "_valid", ok)
        if ok and self.total_tensor_size_in_bytes is None:
            object.__setattr__(self, "total_tensor_size_in_bytes", minimum)

    def __hash__(self) -> int:
        # The dataclass's own hash over the compared fields, computed once: descriptors are
        # immutable, and operator descriptors holding them are cache keys on every call of
        # a functional helper (functional.compile_cached). (dataclass keeps a __hash__ the
        # class defines.)
        h: int | None = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.data_type, self.sizes, self.strides, self.total_tensor_size_in_bytes,
                      self.guaranteed_base_offset_alignment, self.flags))
            self.__dict__["_hash"] = h
        return h

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_hash", None)  # string hashes differ between processes
        state.pop("_tag", None)  # and tags are this process's (core/tags.py)
        return state

    # -- derived values (only meaningful for a valid descriptor) --------------------
    @property
    def dimension_count(self) -> int:
        return len(self.sizes)

    @property
    def element_count(self) -> int:
        return math.prod(self.sizes)

    @_cached
    def effective_strides(self) -> tuple[int, ...]:  # cached: read on every binding check
        return self.strides if self.strides is not None else packed_strides(self.sizes)

    @_cached
    def layout(self) -> tuple[DataType, tuple[int, ...], tuple[int, ...]]:
        """(type, sizes, strides): equal for descriptors that address the same elements
        (cached: compared on every binding check)."""
        return (self.data_type, self.sizes, self.effective_strides)

    @property
    def minimum_size_in_bytes(self) -> int:
        return calc_buffer_tensor_size(self.data_type, self.sizes, self.strides)

    @property
    def byte_size(self) -> int:
        """Bytes a binding of this descriptor covers (TotalTensorSizeInBytes)."""
        assert self.total_tensor_size_in_bytes is not None
        return self.total_tensor_size_in_bytes

    def same_layout(self, other: TensorDesc) -> bool:
        """Same type, sizes and element addresses (None strides == packed strides)."""
        return self.layout == other.layout

    @classmethod
    def packed(cls, data_type: DataType | int, sizes: Sequence[int]) -> TensorDesc:
        return cls(DataType.coerce(data_type), tuple(sizes))


def _check(desc: TensorDesc, name: str) -> int:
    """Raise InvalidArgumentError for the first broken rule; else DMLCalcBufferTensorSize."""
    if not isinstance(desc.data_type, DataType):
        raise invalid(f"{name}.data_type", f"{desc.data_type!r} is not a DML_TENSOR_DATA_TYPE (1..11)")
    sizes = as_int_tuple(desc.sizes, f"{name}.sizes")
    if not 1 <= len(sizes) <= MAX_DIMENSIONS:
        raise invalid(f"{name}.sizes", f"dimension count must be 1 to {MAX_DIMENSIONS}, got {len(sizes)}")
    for i, s in enumerate(sizes):
        if s < 1:
            raise invalid(f"{name}.sizes[{i}]", f"every size must be at least 1, got {s}")
        if s > UINT32_MAX:
            raise invalid(f"{name}.sizes[{i}]", f"sizes are UINT32, got {s}")
    if math.prod(sizes) > MAX_ELEMENTS:
        raise invalid(f"{name}.sizes", f"a tensor may hold at most 2^32-1 elements, got {math.prod(sizes)}")
    if desc.strides is not None:
        strides = as_int_tuple(desc.strides, f"{name}.strides")
        if len(strides) != len(sizes):
            raise invalid(f"{name}.strides", f"must have one entry per dimension ({len(sizes)}), got {len(strides)}")
        for i, st in enumerate(strides):
            if st < 0 or st > UINT32_MAX:
                raise invalid(f"{name}.strides[{i}]", f"strides are UINT32 element counts, got {st}")
    minimum = calc_buffer_tensor_size(desc.data_type, sizes, desc.strides)
    if desc.total_tensor_size_in_bytes is not None:
        total = as_int(desc.total_tensor_size_in_bytes, f"{name}.total_tensor_size_in_bytes")
        if total < minimum:
            raise invalid(
                f"{name}.total_tensor_size_in_bytes",
                f"must be at least DMLCalcBufferTensorSize = {minimum}, got {total}",
            )
        if total > UINT64_MAX:
            raise invalid(f"{name}.total_tensor_size_in_bytes", "must fit in UINT64")
    align = as_int(desc.guaranteed_base_offset_alignment, f"{name}.guaranteed_base_offset_alignment")
    if align != 0:
        if align < 0 or align & (align - 1):
            raise invalid(f"{name}.guaranteed_base_offset_alignment", f"must be 0 or a power of two, got {align}")
        if align < desc.data_type.size:
            raise invalid(
                f"{name}.guaranteed_base_offset_alignment",
                f"must be at least the element size ({desc.data_type.size} bytes), got {align}",
            )
    flags = as_int(desc.flags, f"{name}.flags")
    if flags not in (TENSOR_FLAG_NONE, TENSOR_FLAG_OWNED_BY_DML):
        raise invalid(f"{name}.flags", f"must be DML_TENSOR_FLAG_NONE (0) or OWNED_BY_DML (1), got {flags}")
    return minimum


def validate_desc(desc: object, name: str, *, output: bool = False) -> TensorDesc:
    """Check every DML_BUFFER_TENSOR_DESC rule; `name` is the operator field (e.g. 'input_tensor')."""
    if not isinstance(desc, TensorDesc):
        raise invalid(name, f"must be a TensorDesc, got {type(desc).__name__}")
    if not desc._valid:
        _check(desc, name)  # raises with the precise rule
    if output and desc.flags & TENSOR_FLAG_OWNED_BY_DML:
        raise invalid(f"{name}.flags", "DML_TENSOR_FLAG_OWNED_BY_DML is valid on inputs only")
    return desc
