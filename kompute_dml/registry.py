"""The support tables of the specification, in one place.

Each operator lists, per feature level at which its support changed, the dimension
counts and data types of every tensor field (transcribed from the "Tensor support"
tables of seeds 000-004), its tensor fields in the descriptor's (= binding) order: inputs,
then outputs. Each operator's spec (kompute_dml/ops/<op>.py, `SPEC`) refers to its table;
the binding order, validation (UnsupportedError), `kompute-dml info` and the README matrix
come from it.
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


@dataclass(frozen=True)
class TensorSupport:
    field: str  # the descriptor field, snake_case
    kind: str  # "input", "optional input" or "output"
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
        first = [(t.field, t.kind == "output") for t in self.levels[0].tensors]
        for row in self.levels:
            if [(t.field, t.kind == "output") for t in row.tensors] != first:
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
        return tuple(t.field for t in self.levels[0].tensors if t.kind != "output")

    @functools.cached_property
    def outputs(self) -> tuple[str, ...]:
        return tuple(t.field for t in self.levels[0].tensors if t.kind == "output")

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


def _row(level: FeatureLevel, *tensors: tuple[str, str, tuple[int, int], frozenset[DataType]]) -> LevelSupport:
    return LevelSupport(level, tuple(TensorSupport(*t) for t in tensors))


ACTIVATION_IDENTITY = OperatorSupport(
    "ACTIVATION_IDENTITY", 38,
    (
        _row(FL.FL_1_0, ("input_tensor", "input", (4, 4), FLOATS), ("output_tensor", "output", (4, 4), FLOATS)),
        _row(FL.FL_2_0, ("input_tensor", "input", (4, 5), FLOATS), ("output_tensor", "output", (4, 5), FLOATS)),
        _row(FL.FL_3_0, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), FLOATS)),
    ),
)

DIAGONAL_MATRIX = OperatorSupport(
    "DIAGONAL_MATRIX", 93,
    (
        _row(FL.FL_2_0, ("output_tensor", "output", (4, 4), FLOATS)),
        _row(FL.FL_2_1, ("output_tensor", "output", (4, 4), FLOATS | INTS_8_32)),
        _row(FL.FL_4_0, ("output_tensor", "output", (2, 4), FLOATS | INTS_8_32)),
        _row(FL.FL_5_1, ("output_tensor", "output", (2, 4), ALL_TYPES)),
    ),
)

DIAGONAL_MATRIX1 = OperatorSupport(
    "DIAGONAL_MATRIX1", 163,
    (
        _row(
            FL.FL_5_1,
            ("input_tensor", "optional input", (2, 4), ALL_TYPES),
            ("output_tensor", "output", (2, 4), ALL_TYPES),
        ),
    ),
)

MATRIX_MULTIPLY_INTEGER_TO_FLOAT = OperatorSupport(
    "MATRIX_MULTIPLY_INTEGER_TO_FLOAT", 170,
    (
        _row(
            FL.FL_6_2,
            ("a_tensor", "input", (2, 4), INTS_8_32),
            ("a_scale_tensor", "input", (1, 4), FLOATS),
            ("a_zero_point_tensor", "optional input", (1, 4), INTS_8_32),
            ("b_tensor", "input", (2, 4), INTS_8_32),
            ("b_scale_tensor", "input", (1, 4), FLOATS),
            ("b_zero_point_tensor", "optional input", (1, 4), INTS_8_32),
            ("bias_tensor", "optional input", (2, 4), FLOATS),
            ("output_tensor", "output", (2, 4), FLOATS),
        ),
    ),
)

# kompute_dml's own strided copy (ONNX Identity): every type, 1-8 dimensions, all levels.
COPY = OperatorSupport(
    "COPY", None,
    (_row(FL.FL_1_0, ("input_tensor", "input", (1, 8), ALL_TYPES), ("output_tensor", "output", (1, 8), ALL_TYPES)),),
)


# ---- element-wise operators (kompute_dml/ops/elementwise.py), from their DirectML pages ------
# FLOAT64 is left out of the arithmetic and comparison tables (DirectML lists it for IF only,
# which selects bit patterns: exact); every other listed type is implemented exactly.
INTS_32 = frozenset({D.INT32, D.UINT32})
INTS_64 = frozenset({D.INT64, D.UINT64})
NUMERIC = FLOATS | INTS_8_32 | INTS_64  # every type but FLOAT64
BOOL_OUT = frozenset({D.UINT32, D.UINT8})


def _binary(name: str, op_type: int, rows: Sequence[tuple[FeatureLevel, tuple[int, int], frozenset[DataType]]],
            out_types: frozenset[DataType] | None = None, first: LevelSupport | None = None) -> OperatorSupport:
    """A, B, Output (the output's types: the inputs', or `out_types` for the logical operators);
    `first`: a row of its own before `rows`."""
    return OperatorSupport(name, op_type, (*((first,) if first else ()), *(
        _row(level, ("a_tensor", "input", dims, types), ("b_tensor", "input", dims, types),
             ("output_tensor", "output", dims, out_types if out_types is not None else types))
        for level, dims, types in rows)))


_ARITH_ROWS = ((FL.FL_1_0, (4, 5), FLOATS), (FL.FL_2_1, (4, 5), FLOATS | INTS_32), (FL.FL_3_0, (1, 8), FLOATS | INTS_32),
               (FL.FL_4_1, (1, 8), FLOATS | INTS_32 | INTS_64), (FL.FL_5_1, (1, 8), NUMERIC))
ELEMENT_WISE_ADD = _binary("ELEMENT_WISE_ADD", 4, _ARITH_ROWS)
ELEMENT_WISE_ADD1 = _binary("ELEMENT_WISE_ADD1", 89, ((FL.FL_2_0, (4, 5), FLOATS), (FL.FL_3_0, (1, 8), FLOATS)))
# SUBTRACT's pages list 4 dimensions (not 4 to 5) at 1_0 and 2_1; MULTIPLY's 4 to 5
ELEMENT_WISE_SUBTRACT = _binary("ELEMENT_WISE_SUBTRACT", 30, ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_32),
                                                              *_ARITH_ROWS[2:]))
ELEMENT_WISE_MULTIPLY = _binary("ELEMENT_WISE_MULTIPLY", 24, _ARITH_ROWS)
ELEMENT_WISE_DIVIDE = _binary("ELEMENT_WISE_DIVIDE", 10, (
    (FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_32), (FL.FL_3_0, (1, 8), FLOATS | INTS_32),
    (FL.FL_5_1, (1, 8), FLOATS | INTS_8_32), (FL.FL_6_0, (1, 8), NUMERIC)))
_COMPARE_ROWS = ((FL.FL_3_0, (1, 8), FLOATS | INTS_8_32), (FL.FL_4_1, (1, 8), NUMERIC))
ELEMENT_WISE_LOGICAL_EQUALS = _binary(
    "ELEMENT_WISE_LOGICAL_EQUALS", 15, ((FL.FL_2_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_8_32), *_COMPARE_ROWS),
    BOOL_OUT, _row(FL.FL_1_0, ("a_tensor", "input", (4, 4), FLOATS), ("b_tensor", "input", (4, 4), FLOATS),
                   ("output_tensor", "output", (4, 4), frozenset({D.UINT32}))))
ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL = _binary("ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL", 126, _COMPARE_ROWS,
                                                     BOOL_OUT)
ELEMENT_WISE_LOGICAL_AND = _binary("ELEMENT_WISE_LOGICAL_AND", 14, (
    (FL.FL_1_0, (4, 4), frozenset({D.UINT32})), (FL.FL_2_0, (4, 4), BOOL_OUT), (FL.FL_3_0, (1, 8), BOOL_OUT)))
ELEMENT_WISE_IS_NAN = OperatorSupport("ELEMENT_WISE_IS_NAN", 80, tuple(
    _row(level, ("input_tensor", "input", dims, FLOATS), ("output_tensor", "output", dims, BOOL_OUT))
    for level, dims in ((FL.FL_2_0, (4, 4)), (FL.FL_3_0, (1, 8)))))
_U8 = frozenset({D.UINT8})
ELEMENT_WISE_IF = OperatorSupport("ELEMENT_WISE_IF", 88, tuple(
    _row(level, ("condition_tensor", "input", dims, _U8), ("a_tensor", "input", dims, types),
         ("b_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_2_0, (4, 4), frozenset({D.FLOAT16})), (FL.FL_3_0, (1, 8), FLOATS | INTS_8_32),
                               (FL.FL_5_0, (1, 8), ALL_TYPES))))


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


# ---- CAST (kompute_dml/ops/cast.py), from DML_CAST_OPERATOR_DESC's page -----------------------
# kompute_dml implements the 8- to 32-bit types: the page's INT64 / UINT64 (from 3_0) and FLOAT64
# (from 4_1) are left out. At 1_0 the page's type list is kept to FLOAT32 and FLOAT16: the rest
# of that row could not be read in the copies of the page consulted (docs/cast.md).
CAST = OperatorSupport("CAST", 61, tuple(
    _row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_3_0, (4, 4), FLOATS | INTS_8_32),
                               (FL.FL_3_1, (1, 8), FLOATS | INTS_8_32))))

# ---- ELEMENT_WISE_DEQUANTIZE_LINEAR (kompute_dml/ops/dequantize.py), from
# DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC's page: ZeroPointTensor is a required input
# up to 6_0 and an optional one from 6_2; ScaleTensor / OutputTensor gain FLOAT16 at 6_0.
_F32 = frozenset({D.FLOAT32})


def _dq_row(level: FeatureLevel, dims: tuple[int, int], ints: frozenset[DataType], floats: frozenset[DataType],
            zp_kind: str) -> LevelSupport:
    return _row(level, ("input_tensor", "input", dims, ints), ("scale_tensor", "input", dims, floats),
                ("zero_point_tensor", zp_kind, dims, ints), ("output_tensor", "output", dims, floats))


ELEMENT_WISE_DEQUANTIZE_LINEAR = OperatorSupport("ELEMENT_WISE_DEQUANTIZE_LINEAR", 34, (
    _dq_row(FL.FL_1_0, (4, 4), frozenset({D.UINT8}), _F32, "input"),
    _dq_row(FL.FL_2_1, (4, 4), INTS_8_32, _F32, "input"),
    _dq_row(FL.FL_3_0, (1, 8), INTS_8_32, _F32, "input"),
    _dq_row(FL.FL_6_0, (1, 8), INTS_8_32, FLOATS, "input"),
    _dq_row(FL.FL_6_2, (1, 8), INTS_8_32, FLOATS, "optional input"),
))

# ---- GATHER (kompute_dml/ops/gather.py), from DML_GATHER_OPERATOR_DESC's page ------------------
# The page's four rows, every type of them (elements moved as bit patterns: FLOAT64 / INT64 /
# UINT64 as word pairs; INT64 / UINT64 indices as word pairs, range-checked).
_GATHER_DATA_2_1 = FLOATS | INTS_8_32
GATHER = OperatorSupport("GATHER", 67, tuple(
    _row(level, ("input_tensor", "input", dims, data), ("indices_tensor", "input", dims, idx),
         ("output_tensor", "output", dims, data))
    for level, dims, data, idx in (
        (FL.FL_1_0, (4, 4), FLOATS, frozenset({D.UINT32})),
        (FL.FL_2_1, (4, 4), _GATHER_DATA_2_1, frozenset({D.UINT32})),
        (FL.FL_3_0, (1, 8), _GATHER_DATA_2_1, frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})),
        (FL.FL_4_1, (1, 8), _GATHER_DATA_2_1 | INTS_64 | frozenset({D.FLOAT64}),
         frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})))))

# ---- GATHER_ELEMENTS (kompute_dml/ops/gather.py), from DML_GATHER_ELEMENTS_OPERATOR_DESC's page --
# The rows of 2_1 and 3_0. The copies of the page consulted list a 4_1 row whose contents could
# not be read: it is left out (docs/gather.md).
GATHER_ELEMENTS = OperatorSupport("GATHER_ELEMENTS", 107, tuple(
    _row(level, ("input_tensor", "input", dims, _GATHER_DATA_2_1), ("indices_tensor", "input", dims, idx),
         ("output_tensor", "output", dims, _GATHER_DATA_2_1))
    for level, dims, idx in ((FL.FL_2_1, (4, 4), frozenset({D.UINT32})),
                             (FL.FL_3_0, (1, 8), frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})))))

# ---- ACTIVATION_GELU, ACTIVATION_SOFTMAX1 (kompute_dml/ops/activation.py), from
# DML_ACTIVATION_GELU_OPERATOR_DESC's and DML_ACTIVATION_SOFTMAX1_OPERATOR_DESC's pages: both
# introduced at 5_1, one table each (1 to 8 dimensions, FLOAT32 and FLOAT16).
ACTIVATION_GELU = OperatorSupport("ACTIVATION_GELU", 157, (
    _row(FL.FL_5_1, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), FLOATS)),))
ACTIVATION_SOFTMAX1 = OperatorSupport("ACTIVATION_SOFTMAX1", 158, (
    _row(FL.FL_5_1, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), FLOATS)),))
# ---- DYNAMIC_QUANTIZE_LINEAR (kompute_dml/ops/dynamic_quantize.py), from
# DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC's page: one row, from 4_0; the four tensors share a
# DimensionCount (1 to 8), OutputTensor and OutputZeroPointTensor a DataType.
_Q8 = frozenset({D.INT8, D.UINT8})
DYNAMIC_QUANTIZE_LINEAR = OperatorSupport("DYNAMIC_QUANTIZE_LINEAR", 148, (
    _row(FL.FL_4_0, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), _Q8),
         ("output_scale_tensor", "output", (1, 8), _F32), ("output_zero_point_tensor", "output", (1, 8), _Q8)),
))
# ---- MEAN_VARIANCE_NORMALIZATION1 (kompute_dml/ops/mean_variance_normalization.py), from
# DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC's page: introduced at 2_1 (4 dimensions), 1 to 8
# from 3_1, FLOAT32 / FLOAT16 throughout. Scale and bias are optional at every level; below 5_2
# they are present together (a rule of the page's members, checked when the operator compiles).
MEAN_VARIANCE_NORMALIZATION1 = OperatorSupport("MEAN_VARIANCE_NORMALIZATION1", 115, tuple(
    _row(level, ("input_tensor", "input", dims, FLOATS), ("scale_tensor", "optional input", dims, FLOATS),
         ("bias_tensor", "optional input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS))
    for level, dims in ((FL.FL_2_1, (4, 4)), (FL.FL_3_1, (1, 8)))))
# ---- GEMM (kompute_dml/ops/gemm.py), from DML_GEMM_OPERATOR_DESC's page ------------------------
# The page's two rows: 4 dimensions from 1_0, 2 to 4 from 4_0 ({[BatchCount], [ChannelCount], ...});
# FLOAT32 and FLOAT16 for every tensor.
GEMM = OperatorSupport("GEMM", 54, tuple(
    _row(level, ("a_tensor", "input", dims, FLOATS), ("b_tensor", "input", dims, FLOATS),
         ("c_tensor", "optional input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS))
    for level, dims in ((FL.FL_1_0, (4, 4)), (FL.FL_4_0, (2, 4)))))

# ---- JOIN, SLICE1 (kompute_dml/ops/join.py), from DML_JOIN_OPERATOR_DESC's and
# DML_SLICE1_OPERATOR_DESC's pages: every row of each (InputTensors is an "Array of inputs";
# 64-bit elements are moved as word pairs).
_MOVE_2_1 = FLOATS | INTS_8_32
_MOVE_4_1 = _MOVE_2_1 | INTS_64 | frozenset({D.FLOAT64})
JOIN = OperatorSupport("JOIN", 63, tuple(
    _row(level, ("input_tensors", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in (
        (FL.FL_1_0, (4, 4), FLOATS | frozenset({D.INT32, D.INT16, D.UINT32, D.UINT16})),
        (FL.FL_2_1, (4, 4), _MOVE_2_1), (FL.FL_3_0, (4, 5), _MOVE_2_1), (FL.FL_4_1, (1, 8), _MOVE_4_1))))
SLICE1 = OperatorSupport("SLICE1", 111, tuple(
    _row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_2_1, (4, 5), _MOVE_2_1), (FL.FL_3_0, (1, 8), _MOVE_2_1),
                               (FL.FL_4_1, (1, 8), _MOVE_4_1))))
