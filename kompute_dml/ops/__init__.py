"""Operator registry: descriptor class -> compile function."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import invalid
from .diagonal import DiagonalMatrix1Desc, DiagonalMatrixDesc, compile_diagonal_matrix, compile_diagonal_matrix1
from .identity import ActivationIdentityDesc, CopyDesc, compile_copy, compile_identity
from .matmul_integer import MatrixMultiplyIntegerToFloatDesc, compile_matmul_integer

if TYPE_CHECKING:
    from ..device import Device

COMPILERS: dict[type, Callable[[Device, Any], Any]] = {
    ActivationIdentityDesc: compile_identity,
    CopyDesc: compile_copy,
    DiagonalMatrixDesc: compile_diagonal_matrix,
    DiagonalMatrix1Desc: compile_diagonal_matrix1,
    MatrixMultiplyIntegerToFloatDesc: compile_matmul_integer,
}


def register(desc_type: type, compiler: Callable[[Device, Any], Any]) -> None:
    COMPILERS[desc_type] = compiler


def compile_operator(device: Device, op_desc: Any) -> Any:
    fn = COMPILERS.get(type(op_desc))
    if fn is None:
        raise invalid("op_desc", f"{type(op_desc).__name__} is not an operator descriptor of kompute_dml")
    return fn(device, op_desc)


__all__ = ["ActivationIdentityDesc", "CopyDesc", "DiagonalMatrix1Desc", "DiagonalMatrixDesc",
    "MatrixMultiplyIntegerToFloatDesc", "compile_operator", "register"]
