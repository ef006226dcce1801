"""Support tables: what an operator's table is made of, and the type sets the tables share.

Each operator's module (kompute_dml/ops/<op>.py) declares its own table: per feature level at
which its support changed, the dimension counts and data types of every tensor field
(transcribed from the "Tensor support" table of its DirectML page), its tensor fields in the
descriptor's (= binding) order: inputs, then outputs. The binding order, validation
(UnsupportedError), `kompute-dml info` and the README matrix come from it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from .dtypes import DataType, FeatureLevel
from .errors import UnsupportedError
from .tensor_desc import TensorDesc

D = DataType
FL = FeatureLevel
FLOATS = frozenset({D.FLOAT32, D.FLOAT16})
INTS_8_32 = frozenset({D.INT32, D.INT16, D.INT8, D.UINT32, D.UINT16, D.UINT8})
ALL_TYPES = frozenset(DataType)
INTS_32 = frozenset({D.INT32, D.UINT32})
INTS_64 = frozenset({D.INT64, D.UINT64})
NUMERIC = FLOATS | INTS_8_32 | INTS_64  # every type but FLOAT64
BOOL_OUT = frozenset({D.UINT32, D.UINT8})  # DirectML's boolean outputs
F32 = frozenset({D.FLOAT32})


@dataclass(frozen=True)
class TensorSupport:
    field: str  # the descriptor field, snake_case
    kind: str  # "input", "optional input", "output" or "optional output"
    dims: tuple[int, int]  # inclusive range of dimension counts
    types: frozenset[DataType]


@dataclass(frozen=True)
class LevelSupport:
    level: FeatureLevel
    tensors: tuple[TensorSupport, ...]

    @functools.cached_property
    def _by_field(self) -> dict[str, TensorSupport]:
        return {t.field: t for t in self.tensors}  # made once: every operator compile looks its fields up

    def tensor(self, field: str) -> TensorSupport:
        return self._by_field[field]


@dataclass(frozen=True)
class OperatorSupport:
    name: str  # DML_OPERATOR_<name>, or a kompute_dml extension
    op_type: int | None  # DML_OPERATOR_TYPE value (None for extensions)
    levels: tuple[LevelSupport, ...]  # ascending by level

    def __post_init__(self) -> None:
        first = [(t.field, t.kind.endswith("output")) for t in self.levels[0].tensors]
        for row in self.levels:
            if [(t.field, t.kind.endswith("output")) for t in row.tensors] != first:
                raise ValueError(f"{self.name}: the tensor fields at level {row.level.label} differ from level "
                                 f"{self.introduced.label}'s")
        kinds = [is_out for _, is_out in first]
        if kinds != sorted(kinds):
            raise ValueError(f"{self.name}: inputs must precede outputs (the binding order)")
        if [row.level for row in self.levels] != sorted(row.level for row in self.levels):
            raise ValueError(f"{self.name}: levels must ascend")

    # the field lists, made once (cached_property writes the instance's __dict__, which a frozen
    # dataclass allows): every operator compile reads them
    @functools.cached_property
    def inputs(self) -> tuple[str, ...]:
        """The input fields, in binding order (optional ones included)."""
        return tuple(t.field for t in self.levels[0].tensors if not t.kind.endswith("output"))

    @functools.cached_property
    def outputs(self) -> tuple[str, ...]:
        return tuple(t.field for t in self.levels[0].tensors if t.kind.endswith("output"))

    @functools.cached_property
    def fields(self) -> tuple[str, ...]:
        """Every tensor field, in binding order (inputs then outputs)."""
        return self.inputs + self.outputs

    @property
    def introduced(self) -> FeatureLevel:
        return self.levels[0].level

    def at(self, level: FeatureLevel) -> LevelSupport | None:
        """The table in force at `level` (the highest row not above it)."""
        found = None
        for row in self.levels:
            if row.level <= level:
                found = row
        return found

    def require(self, level: FeatureLevel) -> LevelSupport:
        row = self.at(level)
        if row is None:
            raise UnsupportedError(
                f"{self.name}: introduced at DML_FEATURE_LEVEL_{self.introduced.label}, "
                f"the device's feature level is {level.label}"
            )
        return row

    def check_tensor(self, level: FeatureLevel, field: str, desc: TensorDesc, name: str | None = None) -> None:
        """UnsupportedError unless desc's data type and dimension count are in the table (the
        message names `name`, default `field`: an array field's element `field[i]`)."""
        t = self.require(level).tensor(field)
        field = name or field
        lo, hi = t.dims
        n = desc.dimension_count
        if not lo <= n <= hi:
            raise UnsupportedError(
                f"{field}: {self.name} supports {lo}" + (f" to {hi}" if hi != lo else "")
                + f" dimensions at feature level {level.label}, got {n}"
            )
        if desc.data_type not in t.types:
            names = ", ".join(sorted(d.name for d in t.types))
            raise UnsupportedError(
                f"{field}: {self.name} does not support {desc.data_type.name} at feature level "
                f"{level.label} (supported: {names})"
            )


def row(level: FeatureLevel, *tensors: tuple[str, str, tuple[int, int], frozenset[DataType]]) -> LevelSupport:
    return LevelSupport(level, tuple(TensorSupport(*t) for t in tensors))


def _dims_text(dims: tuple[int, int]) -> str:
    return str(dims[0]) if dims[0] == dims[1] else f"{dims[0]}-{dims[1]}"


def types_text(types: frozenset[DataType]) -> str:
    return ", ".join(d.name for d in sorted(types, key=lambda d: d.value))


def support_matrix(level: FeatureLevel, operators: Sequence[OperatorSupport]) -> list[dict[str, str]]:
    """Rows (operator, tensor, kind, dimension counts, data types) in force at `level`."""
    rows = []
    for op in operators:
        row = op.at(level)
        if row is None:
            rows.append({"operator": op.name, "tensor": "-", "kind": "-", "dims": "-",
                         "types": f"needs feature level {op.introduced.label}"})
            continue
        for t in row.tensors:
            rows.append({"operator": op.name, "tensor": t.field, "kind": t.kind, "dims": _dims_text(t.dims),
                         "types": types_text(t.types)})
    return rows


