"""DirectML data types and feature levels, with DirectML's numeric values."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from .errors import InvalidArgumentError


class DataType(IntEnum):
    FLOAT32 = 1
    FLOAT16 = 2
    UINT32 = 3
    UINT16 = 4
    UINT8 = 5
    INT32 = 6
    INT16 = 7
    INT8 = 8
    FLOAT64 = 9
    UINT64 = 10
    INT64 = 11

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(_TO_NUMPY[self])

    @property
    def size(self) -> int:
        """Element size in bytes."""
        return _TO_NUMPY[self].itemsize

    @property
    def is_float(self) -> bool:
        return self in (DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64)

    @property
    def is_signed(self) -> bool:
        return self.is_float or self in (DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64)

    @classmethod
    def from_numpy(cls, dtype: object) -> DataType:
        try:
            dt = np.dtype(dtype)  # type: ignore[call-overload]
        except TypeError as e:
            raise InvalidArgumentError(f"dtype: {dtype!r} is not a numpy dtype") from e
        for member, npd in _TO_NUMPY.items():
            if npd == dt:
                return member
        raise InvalidArgumentError(f"dtype: numpy {dt} has no DirectML data type")

    @classmethod
    def coerce(cls, value: object, field: str = "data_type") -> DataType:
        """Accept a DataType, its integer value, its name, or a numpy dtype."""
        if isinstance(value, DataType):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            try:
                return cls(int(value))
            except ValueError:
                raise InvalidArgumentError(f"{field}: {value} is not a DML_TENSOR_DATA_TYPE (1..11)") from None
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        try:
            return cls.from_numpy(value)
        except InvalidArgumentError:
            raise InvalidArgumentError(f"{field}: {value!r} is not a DML_TENSOR_DATA_TYPE") from None


_TO_NUMPY: dict[DataType, np.dtype] = {
    DataType.FLOAT32: np.dtype(np.float32),
    DataType.FLOAT16: np.dtype(np.float16),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT16: np.dtype(np.int16),
    DataType.INT8: np.dtype(np.int8),
    DataType.FLOAT64: np.dtype(np.float64),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.INT64: np.dtype(np.int64),
}


class FeatureLevel(IntEnum):
    FL_1_0 = 0x1000
    FL_2_0 = 0x2000
    FL_2_1 = 0x2100
    FL_3_0 = 0x3000
    FL_3_1 = 0x3100
    FL_4_0 = 0x4000
    FL_4_1 = 0x4100
    FL_5_0 = 0x5000
    FL_5_1 = 0x5100
    FL_5_2 = 0x5200
    FL_6_0 = 0x6000
    FL_6_1 = 0x6100
    FL_6_2 = 0x6200
    FL_6_3 = 0x6300  # MULTIHEAD_ATTENTION1 (the only operator of this level kompute_dml implements)
    FL_6_4 = 0x6400  # FOLD (the only operator of this level kompute_dml implements)

    @property
    def label(self) -> str:
        return f"{self.value >> 12}_{(self.value >> 8) & 0xF}"


HIGHEST_FEATURE_LEVEL = FeatureLevel.FL_6_4
