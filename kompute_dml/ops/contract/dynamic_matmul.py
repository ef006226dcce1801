"""DYNAMIC_QUANTIZE_MATRIX_MULTIPLY's family of the contract (ops/dynamic_quantize_matmul.py), read as
`contract.dynamic_matmul.<NAME>`: shaders/matmul_coop.comp with QA=1, a FLOAT32 A (k contiguous)
quantized to uint8 as it is staged, from dql_minmax's keys. The integer product's kinds and B load
modes (contract/__init__.py's MMC), A's mode `r` alone. Imports nothing from kompute_dml (the
build loads the contract package by path)."""

from __future__ import annotations

from . import _COOP_B, _COOP_KIND, COOP_TARGET, MATMUL_PUSH
from .core import family

# tensor cores (""), their zero-point sums by OpSDot ("s"), or each cooperative-matrix operation as
# subgroup code ("x": no device feature, the tests' path on lavapipe)
_KINDS = ("", "s", "x")
MMCQ = family("mmcq", "matmul_coop.comp", "mmcq8{kind}_r{b}", MATMUL_PUSH, None, kind=_KINDS, b=tuple(_COOP_B),
              defines=lambda kind, b: {**_COOP_KIND[kind], "QA": 1, "AL": 1, "BL": _COOP_B[b]},
              target=lambda kind, b: None if "MMA" in _COOP_KIND[kind] else COOP_TARGET)
