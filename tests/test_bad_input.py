"""Hostile input, table-driven: every documented rule broken once, for every operator and
for the runtime (Device, Buffer, Tensor, TensorDesc, record()).

Each case asserts
- the documented error class (InvalidArgumentError / UnsupportedError / OutOfMemoryError /
  DeviceError, all DMLError),
- that the message starts with the field and states the rule (a regex per case),
- that nothing was written: every buffer the case involves is snapshotted before the call
  and compared byte for byte after it,
- that the device still works: a real ACTIVATION_IDENTITY runs and its result is checked.

The module owns its Devices (it does not share the session `dev`), so it can be run in a
process of its own: `.venv/bin/python -m pytest -q tests/test_bad_input.py`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
IAE = kdml.InvalidArgumentError
UNS = kdml.UnsupportedError

F32 = TD(DT.FLOAT32, (2, 3))
F32_4D = TD(DT.FLOAT32, (1, 2, 3, 4))


@dataclass
class Ctx:
    dev: kdml.Device
    other: kdml.Device  # a second device (buffers of "another Device")
    fl10: kdml.Device  # a device at feature level 1_0
    rng: np.random.Generator
    buffers: list[kdml.Buffer]
    cleanup: list[kdml.Device]

    def buf(self, nbytes: int, device: kdml.Device | None = None) -> kdml.Buffer:
        """A buffer of random bytes, snapshotted by the harness."""
        b = (device or self.dev).buffer(self.rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
        self.buffers.append(b)
        return b

    def tensor(self, desc: TD, offset: int = 0, guard: int = 48, device: kdml.Device | None = None) -> kdml.Tensor:
        return kdml.Tensor(self.buf(offset + desc.byte_size + guard, device), desc, offset)

    def op(self, op_desc: Any, device: kdml.Device | None = None) -> Any:
        return (device or self.dev).compile(op_desc)


@dataclass
class Case:
    id: str
    error: type[Exception]
    field: str  # the message starts with this
    rule: str  # regex searched in the message
    build: Callable[[Ctx], Callable[[], object]]


CASES: list[Case] = []


def case(id: str, error: type[Exception], field: str, rule: str) -> Callable[[Callable[[Ctx], Any]], None]:
    def deco(fn: Callable[[Ctx], Callable[[], object]]) -> None:
        CASES.append(Case(id, error, field, rule, fn))

    return deco


def simple(id: str, error: type[Exception], field: str, rule: str, thunk: Callable[[Ctx], object]) -> None:
    """A case whose whole action is one call (nothing to prepare)."""
    CASES.append(Case(id, error, field, rule, lambda c: lambda: thunk(c)))


def identity_with(inp: Any, out: Any) -> Callable[[Ctx], object]:
    return lambda c: c.dev.compile(kdml.ActivationIdentityDesc(inp, out))


def copy_with(inp: Any, out: Any) -> Callable[[Ctx], object]:
    return lambda c: c.dev.compile(kdml.CopyDesc(inp, out))


# ---- DML_BUFFER_TENSOR_DESC rules, reported at compile with the operator field ----------------
simple("desc-zero-size", IAE, "input_tensor.sizes[1]", "at least 1", identity_with(TD(DT.FLOAT32, (2, 0)), F32))
simple("desc-negative-size", IAE, "input_tensor.sizes[0]", "at least 1", identity_with(TD(DT.FLOAT32, (-3, 3)), F32))
simple("desc-no-dims", IAE, "input_tensor.sizes", "dimension count must be 1 to 8", identity_with(TD(DT.FLOAT32, ()), F32))
simple("desc-nine-dims", IAE, "input_tensor.sizes", "dimension count must be 1 to 8",
       copy_with(TD(DT.FLOAT32, (1,) * 9), TD(DT.FLOAT32, (1,) * 9)))
simple("desc-strides-short", IAE, "input_tensor.strides", "one entry per dimension",
       identity_with(TD(DT.FLOAT32, (2, 3), (1,)), F32))
simple("desc-strides-long", IAE, "output_tensor.strides", "one entry per dimension",
       identity_with(F32, TD(DT.FLOAT32, (2, 3), (3, 1, 1))))
simple("desc-negative-stride", IAE, "input_tensor.strides[0]", "UINT32",
       identity_with(TD(DT.FLOAT32, (2, 3), (-3, 1)), F32))
simple("desc-stride-above-uint32", IAE, "input_tensor.strides[1]", "UINT32",
       identity_with(TD(DT.FLOAT32, (2, 3), (3, 2**32)), F32))
simple("desc-total-too-small", IAE, "input_tensor.total_tensor_size_in_bytes", "at least DMLCalcBufferTensorSize = 24",
       identity_with(TD(DT.FLOAT32, (2, 3), None, 20), F32))
simple("desc-total-too-small-strided", IAE, "output_tensor.total_tensor_size_in_bytes",
       "at least DMLCalcBufferTensorSize = 32", identity_with(TD(DT.FLOAT32, (2, 3), (5, 1)), TD(DT.FLOAT32, (2, 3), (5, 1), 28)))
simple("desc-total-above-uint64", IAE, "input_tensor.total_tensor_size_in_bytes", "UINT64",
       identity_with(TD(DT.FLOAT32, (2, 3), None, 2**64), F32))
simple("desc-align-not-pow2", IAE, "input_tensor.guaranteed_base_offset_alignment", "power of two",
       identity_with(TD(DT.FLOAT32, (2, 3), guaranteed_base_offset_alignment=24), F32))
simple("desc-align-negative", IAE, "input_tensor.guaranteed_base_offset_alignment", "power of two",
       identity_with(TD(DT.FLOAT32, (2, 3), guaranteed_base_offset_alignment=-16), F32))
simple("desc-align-below-element", IAE, "output_tensor.guaranteed_base_offset_alignment", r"at least the element size \(8",
       copy_with(TD(DT.INT64, (4,)), TD(DT.INT64, (4,), guaranteed_base_offset_alignment=4)))
simple("desc-too-many-elements", IAE, "input_tensor.sizes", r"at most 2\^32-1 elements",
       copy_with(TD(DT.UINT8, (65536, 65536)), TD(DT.UINT8, (65536, 65536))))
simple("desc-size-above-uint32", IAE, "input_tensor.sizes[0]", "UINT32",
       copy_with(TD(DT.UINT8, (2**32,)), TD(DT.UINT8, (2**32,))))
simple("desc-bad-flags", IAE, "input_tensor.flags", "DML_TENSOR_FLAG_NONE", identity_with(TD(DT.FLOAT32, (2, 3), flags=2), F32))
simple("desc-owned-by-dml-output", IAE, "output_tensor.flags", "inputs only",
       identity_with(F32, TD(DT.FLOAT32, (2, 3), flags=1)))
simple("desc-data-type-zero", IAE, "input_tensor.data_type", "DML_TENSOR_DATA_TYPE", identity_with(TD(0, (2, 3)), F32))
simple("desc-data-type-12", IAE, "output_tensor.data_type", "DML_TENSOR_DATA_TYPE", copy_with(F32, TD(12, (2, 3))))
simple("desc-data-type-string", IAE, "input_tensor.data_type", "DML_TENSOR_DATA_TYPE", identity_with(TD("FLOAT128", (2, 3)), F32))
simple("desc-data-type-none", IAE, "input_tensor.data_type", "DML_TENSOR_DATA_TYPE", identity_with(TD(None, (2, 3)), F32))
simple("desc-sizes-string", IAE, "input_tensor.sizes", "sequence of integers", identity_with(TD(DT.FLOAT32, "23"), F32))
simple("desc-sizes-int", IAE, "input_tensor.sizes", "sequence of integers", identity_with(TD(DT.FLOAT32, 6), F32))
simple("desc-sizes-float", IAE, "input_tensor.sizes[0]", "integer", identity_with(TD(DT.FLOAT32, (2.0, 3)), F32))
simple("desc-sizes-nan", IAE, "input_tensor.sizes[1]", "integer", identity_with(TD(DT.FLOAT32, (2, math.nan)), F32))
simple("desc-sizes-none", IAE, "input_tensor.sizes[0]", "integer", identity_with(TD(DT.FLOAT32, (None, 3)), F32))
simple("desc-sizes-bool", IAE, "input_tensor.sizes[0]", "integer", identity_with(TD(DT.FLOAT32, (True, 3)), F32))
simple("desc-strides-float", IAE, "input_tensor.strides[0]", "integer", identity_with(TD(DT.FLOAT32, (2, 3), (3.0, 1)), F32))
simple("desc-strides-int", IAE, "input_tensor.strides", "sequence of integers", identity_with(TD(DT.FLOAT32, (2, 3), 3), F32))
simple("desc-total-float", IAE, "input_tensor.total_tensor_size_in_bytes", "integer",
       identity_with(TD(DT.FLOAT32, (2, 3), None, 24.0), F32))
simple("desc-total-nan", IAE, "input_tensor.total_tensor_size_in_bytes", "integer",
       identity_with(TD(DT.FLOAT32, (2, 3), None, math.nan), F32))
simple("desc-align-string", IAE, "input_tensor.guaranteed_base_offset_alignment", "integer",
       identity_with(TD(DT.FLOAT32, (2, 3), guaranteed_base_offset_alignment="16"), F32))
simple("desc-flags-none", IAE, "input_tensor.flags", "integer", identity_with(TD(DT.FLOAT32, (2, 3), flags=None), F32))
simple("calc-size-strides-length", IAE, "strides", "has 1 entries but sizes has 2",
       lambda c: kdml.calc_buffer_tensor_size(DT.FLOAT32, (2, 3), (1,)))
simple("calc-size-bad-type", IAE, "data_type", "DML_TENSOR_DATA_TYPE", lambda c: kdml.calc_buffer_tensor_size(99, (2, 3)))

# ---- ACTIVATION_IDENTITY / COPY: operator rules and the feature-level tables ----------------
simple("identity-type-mismatch", IAE, "output_tensor.data_type", r"must equal input_tensor's \(FLOAT32\)",
       identity_with(F32, TD(DT.FLOAT16, (2, 3))))
simple("identity-rank-mismatch", IAE, "output_tensor.sizes", "dimension count must equal input_tensor's",
       identity_with(F32, TD(DT.FLOAT32, (1, 2, 3))))
simple("identity-size-mismatch", IAE, "output_tensor.sizes", "must equal input_tensor's", identity_with(F32, TD(DT.FLOAT32, (3, 2))))
simple("identity-output-overlap", IAE, "output_tensor.strides", "share one address|non-overlapping",
       identity_with(F32, TD(DT.FLOAT32, (2, 3), (1, 1))))
simple("identity-output-broadcast", IAE, "output_tensor.strides", "may not broadcast",
       identity_with(F32, TD(DT.FLOAT32, (2, 3), (0, 1))))
simple("identity-unsupported-type", UNS, "input_tensor", "does not support INT32",
       identity_with(TD(DT.INT32, (2, 3)), TD(DT.INT32, (2, 3))))
simple("identity-unsupported-rank-fl10", UNS, "input_tensor", r"supports 4 dimensions at feature level 1_0, got 2",
       lambda c: c.fl10.compile(kdml.ActivationIdentityDesc(F32, F32)))
simple("identity-input-none", IAE, "input_tensor", "is required", identity_with(None, F32))
simple("identity-input-ndarray", IAE, "input_tensor", "must be a TensorDesc", identity_with(np.zeros((2, 3), np.float32), F32))
simple("copy-type-mismatch-signedness", IAE, "output_tensor.data_type", "must equal input_tensor's",
       copy_with(TD(DT.INT64, (4,)), TD(DT.UINT64, (4,))))
simple("copy-output-none", IAE, "output_tensor", "is required", copy_with(F32, None))
simple("compile-not-a-descriptor", IAE, "op_desc", "not an operator descriptor", lambda c: c.dev.compile("identity"))
simple("compile-none", IAE, "op_desc", "not an operator descriptor", lambda c: c.dev.compile(None))


# ---- bindings at execute ------------------------------------------------------------------
def _identity_pair(c: Ctx, desc: TD = F32) -> tuple[Any, kdml.Tensor, kdml.Tensor]:
    return c.op(kdml.ActivationIdentityDesc(desc, desc)), c.tensor(desc), c.tensor(desc, offset=16)


@case("exec-two-inputs", IAE, "inputs", "takes 1")
def _(c):
    op, x, y = _identity_pair(c)
    return lambda: op.execute([x, x], [y])


@case("exec-no-outputs", IAE, "outputs", "takes 1")
def _(c):
    op, x, _y = _identity_pair(c)
    return lambda: op.execute([x], [])


@case("exec-inputs-not-a-list", IAE, "inputs", "must be a list")
def _(c):
    op, x, y = _identity_pair(c)
    return lambda: op.execute(x, [y])


@case("exec-outputs-none", IAE, "outputs", "must be a list")
def _(c):
    op, x, _y = _identity_pair(c)
    return lambda: op.execute([x], None)


@case("exec-required-input-none", IAE, "input_tensor", "is required")
def _(c):
    op, _x, y = _identity_pair(c)
    return lambda: op.execute([None], [y])


@case("exec-output-none", IAE, "output_tensor", "is required")
def _(c):
    op, x, _y = _identity_pair(c)
    return lambda: op.execute([x], [None])


@case("exec-binding-sizes-differ", IAE, "output_tensor", "differs from the compiled one")
def _(c):
    op, x, _y = _identity_pair(c)
    return lambda: op.execute([x], [c.tensor(TD(DT.FLOAT32, (3, 2)))])


@case("exec-binding-strides-differ", IAE, "input_tensor", "differs from the compiled one")
def _(c):
    op, _x, y = _identity_pair(c)
    return lambda: op.execute([c.tensor(TD(DT.FLOAT32, (2, 3), (4, 1)))], [y])


@case("exec-binding-type-differs", IAE, "input_tensor", "differs from the compiled one")
def _(c):
    op, _x, y = _identity_pair(c)
    return lambda: op.execute([c.tensor(TD(DT.FLOAT16, (2, 3)))], [y])


@case("exec-binding-ndarray", IAE, "input_tensor", "must be a kompute_dml Tensor")
def _(c):
    op, _x, y = _identity_pair(c)
    return lambda: op.execute([np.zeros((2, 3), np.float32)], [y])


@case("exec-binding-string", IAE, "output_tensor", "must be a kompute_dml Tensor")
def _(c):
    op, x, _y = _identity_pair(c)
    return lambda: op.execute([x], ["y"])


@case("exec-buffer-of-other-device", IAE, "output_tensor", "another Device")
def _(c):
    op, x, _y = _identity_pair(c)
    return lambda: op.execute([x], [c.tensor(F32, device=c.other)])


@case("exec-output-overlaps-input", IAE, "output_tensor", "overlaps input_tensor")
def _(c):
    d = TD(DT.FLOAT32, (8,))
    op = c.op(kdml.ActivationIdentityDesc(d, d))
    b = c.buf(96)
    return lambda: op.execute([kdml.Tensor(b, d, 0)], [kdml.Tensor(b, d, 16)])


@case("exec-copy-output-overlaps-interleaved", IAE, "output_tensor", "overlaps input_tensor")
def _(c):
    di = TD(DT.INT16, (4,), (2,))
    do = TD(DT.INT16, (4,), (3,))
    op = c.op(kdml.CopyDesc(di, do))
    b = c.buf(64)
    return lambda: op.execute([kdml.Tensor(b, di, 0)], [kdml.Tensor(b, do, 0)])


@case("exec-binding-too-small-for-total", IAE, "input_tensor.buffer", "exceeds the buffer")
def _(c):
    # The compiled desc has a larger TotalTensorSizeInBytes than the bound one's buffer holds.
    big = TD(DT.FLOAT32, (2, 3), None, 4096)
    op = c.op(kdml.ActivationIdentityDesc(big, F32))
    x = c.tensor(F32)  # same layout (same_layout ignores the total), buffer of 72 bytes
    return lambda: op.execute([x], [c.tensor(F32)])


@case("record-op-of-other-device", IAE, "op", "another Device")
def _(c):
    op = c.op(kdml.ActivationIdentityDesc(F32, F32), device=c.other)
    x, y = c.tensor(F32), c.tensor(F32)

    def go():
        with c.dev.record() as rec:
            rec.execute(op, [x], [y])

    return go


@case("record-not-an-op", IAE, "op", "compiled operator")
def _(c):
    x, y = c.tensor(F32), c.tensor(F32)

    def go():
        with c.dev.record() as rec:
            rec.execute("identity", [x], [y])

    return go


@case("record-second-call-bad-nothing-submitted", IAE, "output_tensor", "differs from the compiled one")
def _(c):
    op, x, y = _identity_pair(c)

    def go():
        with c.dev.record() as rec:
            rec.execute(op, [x], [y])  # valid, but must never be submitted
            rec.execute(op, [x], [c.tensor(TD(DT.FLOAT32, (6,)))])

    return go


# ---- Tensor (binding) creation -------------------------------------------------------------
@case("tensor-offset-unaligned", IAE, "tensor.offset", "multiple of 16")
def _(c):
    b = c.buf(128)
    return lambda: kdml.Tensor(b, F32, 8)


@case("tensor-offset-guaranteed-alignment", IAE, "tensor.offset", r"guaranteed_base_offset_alignment \(64\)")
def _(c):
    b = c.buf(256)
    return lambda: kdml.Tensor(b, TD(DT.FLOAT32, (2, 3), guaranteed_base_offset_alignment=64), 32)


@case("tensor-buffer-too-small", IAE, "tensor.buffer", r"offset 16 \+ total_tensor_size_in_bytes 24 exceeds")
def _(c):
    b = c.buf(32)
    return lambda: kdml.Tensor(b, F32, 16)


@case("tensor-total-exceeds-buffer", IAE, "tensor.buffer", "total_tensor_size_in_bytes 1024 exceeds")
def _(c):
    b = c.buf(512)
    return lambda: kdml.Tensor(b, TD(DT.FLOAT32, (2, 3), None, 1024))


@case("tensor-negative-offset", IAE, "tensor.offset", "must not be negative")
def _(c):
    b = c.buf(128)
    return lambda: kdml.Tensor(b, F32, -16)


@case("tensor-offset-float", IAE, "offset", "integer")
def _(c):
    b = c.buf(128)
    return lambda: kdml.Tensor(b, F32, 16.0)


@case("tensor-offset-nan", IAE, "offset", "integer")
def _(c):
    b = c.buf(128)
    return lambda: kdml.Tensor(b, F32, math.nan)


@case("tensor-offset-bool", IAE, "offset", "integer")
def _(c):
    b = c.buf(128)
    return lambda: kdml.Tensor(b, F32, True)


@case("tensor-offset-string", IAE, "offset", "integer")
def _(c):
    b = c.buf(128)
    return lambda: kdml.Tensor(b, F32, "16")


simple("tensor-buffer-bytes", IAE, "buffer", "must be a kompute_dml Buffer", lambda c: kdml.Tensor(b"\0" * 64, F32))
simple("tensor-buffer-none", IAE, "buffer", "must be a kompute_dml Buffer", lambda c: kdml.Tensor(None, F32))


@case("tensor-invalid-desc", IAE, "desc.sizes[0]", "at least 1")
def _(c):
    b = c.buf(128)
    return lambda: kdml.Tensor(b, TD(DT.FLOAT32, (0,)))


@case("tensor-desc-not-a-desc", IAE, "desc", "must be a TensorDesc")
def _(c):
    b = c.buf(128)
    return lambda: kdml.Tensor(b, (2, 3))


@case("tensor-write-numpy-strided", IAE, "desc.strides", "packed")
def _(c):
    t = c.tensor(TD(DT.FLOAT32, (2, 3), (4, 1)))
    return lambda: t.write_numpy(np.ones((2, 3), np.float32))


# ---- Buffer creation, read, write -----------------------------------------------------------
simple("buffer-zero", IAE, "nbytes", "at least 1", lambda c: c.dev.buffer(0))
simple("buffer-negative", IAE, "nbytes", "at least 1", lambda c: c.dev.buffer(-5))
simple("buffer-float", IAE, "nbytes", "integer", lambda c: c.dev.buffer(1.5))
simple("buffer-nan", IAE, "nbytes", "integer", lambda c: c.dev.buffer(math.nan))
simple("buffer-string", IAE, "nbytes", "integer", lambda c: c.dev.buffer("64"))
simple("buffer-none", IAE, "nbytes", "integer", lambda c: c.dev.buffer(None))
simple("buffer-bool", IAE, "nbytes", "integer", lambda c: c.dev.buffer(True))
simple("buffer-empty-bytes", IAE, "data", "must not be empty", lambda c: c.dev.buffer(b""))
simple("buffer-empty-array", IAE, "data", "must not be empty", lambda c: c.dev.buffer(np.zeros(0, np.float32)))
simple("buffer-object-array", IAE, "data", "object", lambda c: c.dev.buffer(np.array([object(), 1], dtype=object)))
simple("buffer-above-max-allocation", IAE, "nbytes", "maxMemoryAllocationSize",
       lambda c: c.dev.buffer(4 * 2**30))


@case("buffer-write-past-end", IAE, "data", r"range \[62, 66\) runs past the buffer's end \(64 bytes\)")
def _(c):
    b = c.buf(64)
    return lambda: b.write(b"\x01\x02\x03\x04", offset=62)


@case("buffer-write-negative-offset", IAE, "data", "must not be negative")
def _(c):
    b = c.buf(64)
    return lambda: b.write(b"\x01", offset=-1)


@case("buffer-write-float-offset", IAE, "data", "integers")
def _(c):
    b = c.buf(64)
    return lambda: b.write(b"\x01", offset=1.0)


@case("buffer-write-string", IAE, "data", "must be bytes")
def _(c):
    b = c.buf(64)
    return lambda: b.write("abcd")


@case("buffer-write-list", IAE, "data", "must be bytes")
def _(c):
    b = c.buf(64)
    return lambda: b.write([1, 2, 3])


@case("buffer-write-none", IAE, "data", "must be bytes")
def _(c):
    b = c.buf(64)
    return lambda: b.write(None)


@case("buffer-read-past-end", IAE, "read", "past the buffer's end")
def _(c):
    b = c.buf(64)
    return lambda: b.read(60, 8)


@case("buffer-read-negative", IAE, "read", "must not be negative")
def _(c):
    b = c.buf(64)
    return lambda: b.read(0, -1)


@case("buffer-read-string-offset", IAE, "read", "integers")
def _(c):
    b = c.buf(64)
    return lambda: b.read("0")


# ---- dev.tensor / dev.empty ---------------------------------------------------------------------
simple("dev-tensor-empty-array", IAE, "array.shape", "no empty dimensions", lambda c: c.dev.tensor(np.zeros((0, 3), np.float32)))
simple("dev-tensor-complex", UNS, "array", "complex64 is not a DirectML data type", lambda c: c.dev.tensor(np.zeros(3, np.complex64)))
simple("dev-tensor-bool", UNS, "array", "bool is not a DirectML data type", lambda c: c.dev.tensor(np.zeros(3, np.bool_)))
simple("dev-tensor-strings", UNS, "array", "<U1 is not a DirectML data type", lambda c: c.dev.tensor(np.array(["a", "b"])))
simple("dev-tensor-objects", UNS, "array", "object is not a DirectML data type", lambda c: c.dev.tensor(np.array([None, 1], dtype=object)))
simple("dev-empty-not-a-desc", IAE, "shape", "must be an integer", lambda c: c.dev.empty("x"))  # (2, 3) is a shape
simple("dev-empty-invalid-desc", IAE, "desc.strides", "one entry per dimension", lambda c: c.dev.empty(TD(DT.FLOAT32, (2, 3), (1,))))

# ---- Device construction ------------------------------------------------------------------------
simple("device-index-out-of-range", IAE, "device_index", r"must be in \[0, ", lambda c: kdml.Device(99))
simple("device-index-negative", IAE, "device_index", r"must be in \[0, ", lambda c: kdml.Device(-1))
simple("device-index-string", IAE, "device_index", "integer", lambda c: kdml.Device("0"))
simple("device-index-float", IAE, "device_index", "integer", lambda c: kdml.Device(0.0))
simple("device-index-none", IAE, "device_index", "integer", lambda c: kdml.Device(None))
simple("device-level-unknown", IAE, "feature_level", "not a DML_FEATURE_LEVEL", lambda c: kdml.Device(feature_level=0x1234))
simple("device-level-above-the-highest", IAE, "feature_level", "not a DML_FEATURE_LEVEL",
       lambda c: kdml.Device(feature_level=0x6500))
simple("device-level-float", IAE, "feature_level", "must be a FeatureLevel", lambda c: kdml.Device(feature_level=6.2))
simple("device-level-bad-string", IAE, "feature_level", "not a DML_FEATURE_LEVEL", lambda c: kdml.Device(feature_level="7_1"))
simple("device-budget-negative", IAE, "memory_budget", "at least", lambda c: kdml.Device(memory_budget=-1))
simple("device-budget-string", IAE, "memory_budget", "number of bytes", lambda c: kdml.Device(memory_budget="1G"))


@case("device-budget-exhausted", kdml.OutOfMemoryError, "could not allocate", "memory budget")
def _(c):
    small = kdml.Device(memory_budget=64 << 10)
    c.cleanup.append(small)
    c.buffers.append(small.buffer(b"\x07" * 1024))  # its content must survive the failed allocation
    return lambda: small.buffer(64 << 10)


# ---- a closed Device -----------------------------------------------------------------------------
def _closed(c: Ctx) -> tuple[kdml.Device, Any, kdml.Tensor, kdml.Tensor]:
    d = kdml.Device()
    x = d.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = d.empty(F32)
    op = d.compile(kdml.ActivationIdentityDesc(F32, F32))
    d.close()
    return d, op, x, y


def _closed_case(action: Callable[..., object]) -> Callable[[Ctx], Callable[[], object]]:
    def build(c: Ctx) -> Callable[[], object]:
        args = _closed(c)
        return lambda: action(*args)

    return build


for _name, _action in [
    ("execute", lambda d, op, x, y: op.execute([x], [y])),
    ("record", lambda d, op, x, y: d.record().__enter__().execute(op, [x], [y])),
    ("compile", lambda d, op, x, y: d.compile(kdml.ActivationIdentityDesc(F32, F32))),
    ("buffer", lambda d, op, x, y: d.buffer(64)),
    ("tensor", lambda d, op, x, y: d.tensor(np.ones(3, np.float32))),
    ("read", lambda d, op, x, y: x.buffer.read()),
    ("write", lambda d, op, x, y: x.buffer.write(b"\0" * 4)),
    ("numpy", lambda d, op, x, y: y.numpy()),
]:
    CASES.append(Case(f"closed-device-{_name}", kdml.DeviceError, "the device has been closed", "", _closed_case(_action)))


# ---- DIAGONAL_MATRIX / DIAGONAL_MATRIX1 --------------------------------------------------------
D2 = TD(DT.FLOAT32, (3, 4))


def diag(out: Any = D2, offset: Any = 0, value: Any = 1.0) -> Callable[[Ctx], object]:
    return lambda c: c.dev.compile(kdml.DiagonalMatrixDesc(out, offset, value))


def diag1(inp: Any = None, out: Any = D2, vdt: Any = DT.FLOAT32, value: Any = 0.0, begin: Any = 0, end: Any = 1,
          device: str = "dev") -> Callable[[Ctx], object]:
    return lambda c: getattr(c, device).compile(kdml.DiagonalMatrix1Desc(inp, out, vdt, value, begin, end))


simple("diag-offset-above-int32", IAE, "offset", r"INT in \[-2147483648, 2147483647\]", diag(offset=2**31))
simple("diag-offset-below-int32", IAE, "offset", "INT", diag(offset=-(2**31) - 1))
simple("diag-offset-float", IAE, "offset", r"must be an INT \(int32\)", diag(offset=1.5))
simple("diag-offset-nan", IAE, "offset", r"must be an INT \(int32\)", diag(offset=math.nan))
simple("diag-offset-none", IAE, "offset", "INT", diag(offset=None))
simple("diag-offset-bool", IAE, "offset", "INT", diag(offset=True))
simple("diag-offset-string", IAE, "offset", "INT", diag(offset="1"))
simple("diag-value-out-of-float32", IAE, "value", "out of FLOAT32's range", diag(value=1e39))
simple("diag-value-string", IAE, "value", "real number", diag(value="1"))
simple("diag-value-none", IAE, "value", "real number", diag(value=None))
simple("diag-output-none", IAE, "output_tensor", "is required", diag(out=None))
simple("diag-output-1d", UNS, "output_tensor", "supports 2 to 4 dimensions", diag(out=TD(DT.FLOAT32, (4,))))
simple("diag-output-5d", UNS, "output_tensor", "supports 2 to 4 dimensions", diag(out=TD(DT.FLOAT32, (1, 1, 1, 3, 4))))
simple("diag-output-overlap", IAE, "output_tensor.strides", "share one address|non-overlapping",
       diag(out=TD(DT.FLOAT32, (3, 4), (2, 1))))
simple("diag-output-invalid-desc", IAE, "output_tensor.sizes[0]", "at least 1", diag(out=TD(DT.FLOAT32, (0, 4))))
simple("diag-not-at-fl10", UNS, "DIAGONAL_MATRIX", "introduced at DML_FEATURE_LEVEL_2_0",
       lambda c: c.fl10.compile(kdml.DiagonalMatrixDesc(D2)))


@case("diag-exec-takes-no-inputs", IAE, "inputs", "takes 0")
def _(c):
    op = c.op(kdml.DiagonalMatrixDesc(D2))
    y = c.tensor(D2)
    return lambda: op.execute([y], [y])


simple("diag1-vdt-differs", IAE, "value_data_type", r"must equal output_tensor's data type \(FLOAT32\), got INT32",
       diag1(vdt=DT.INT32, value=1))
simple("diag1-vdt-unknown", IAE, "value_data_type", "not a DML_TENSOR_DATA_TYPE", diag1(vdt=99))
simple("diag1-vdt-string", IAE, "value_data_type", "must be a DML_TENSOR_DATA_TYPE", diag1(vdt="FLOAT32"))
simple("diag1-value-nan-int", IAE, "value", "integers have no NaN",
       diag1(out=TD(DT.INT32, (3, 4)), vdt=DT.INT32, value=math.nan))
simple("diag1-value-inf-int", IAE, "value", "integers have no NaN or infinity",
       diag1(out=TD(DT.INT64, (3, 4)), vdt=DT.INT64, value=math.inf))
simple("diag1-value-fraction-int", IAE, "value", "not an integer", diag1(out=TD(DT.INT8, (3, 4)), vdt=DT.INT8, value=1.5))
simple("diag1-value-above-uint8", IAE, "value", r"out of UINT8's range \[0, 255\]",
       diag1(out=TD(DT.UINT8, (3, 4)), vdt=DT.UINT8, value=256))
simple("diag1-value-negative-uint64", IAE, "value", "out of UINT64's range",
       diag1(out=TD(DT.UINT64, (3, 4)), vdt=DT.UINT64, value=-1))
simple("diag1-value-above-uint64", IAE, "value", "out of UINT64's range",
       diag1(out=TD(DT.UINT64, (3, 4)), vdt=DT.UINT64, value=2**64))
simple("diag1-value-below-int64", IAE, "value", "out of INT64's range",
       diag1(out=TD(DT.INT64, (3, 4)), vdt=DT.INT64, value=-(2**63) - 1))
simple("diag1-value-out-of-float16", IAE, "value", "out of FLOAT16's range",
       diag1(out=TD(DT.FLOAT16, (3, 4)), vdt=DT.FLOAT16, value=1e6))
simple("diag1-value-string", IAE, "value", "real number", diag1(value="0"))
simple("diag1-begin-above-int32", IAE, "diagonal_fill_begin", "INT", diag1(begin=2**31))
simple("diag1-end-below-int32", IAE, "diagonal_fill_end", "INT", diag1(end=-(2**31) - 1))
simple("diag1-begin-float", IAE, "diagonal_fill_begin", "INT", diag1(begin=0.5))
simple("diag1-end-none", IAE, "diagonal_fill_end", "INT", diag1(end=None))
simple("diag1-end-nan", IAE, "diagonal_fill_end", "INT", diag1(end=math.nan))
simple("diag1-type-mismatch", IAE, "output_tensor.data_type", "must equal input_tensor's",
       diag1(inp=TD(DT.FLOAT16, (3, 4)), out=D2))
simple("diag1-size-mismatch", IAE, "output_tensor.sizes", "must equal input_tensor's", diag1(inp=TD(DT.FLOAT32, (4, 3)), out=D2))
simple("diag1-rank-mismatch", IAE, "output_tensor.sizes", "dimension count must equal",
       diag1(inp=TD(DT.FLOAT32, (1, 3, 4)), out=D2))
simple("diag1-output-1d", UNS, "output_tensor", "supports 2 to 4 dimensions", diag1(out=TD(DT.FLOAT32, (4,))))
simple("diag1-input-5d", UNS, "input_tensor", "supports 2 to 4 dimensions",
       diag1(inp=TD(DT.FLOAT32, (1, 1, 1, 3, 4)), out=TD(DT.FLOAT32, (1, 1, 1, 3, 4))))
simple("diag1-not-at-fl10", UNS, "DIAGONAL_MATRIX1", "introduced at DML_FEATURE_LEVEL_5_1", diag1(device="fl10"))
simple("diag1-output-none", IAE, "output_tensor", "is required", diag1(out=None))


@case("diag1-exec-bind-absent-input", IAE, "input_tensor", "was absent")
def _(c):
    op = c.op(kdml.DiagonalMatrix1Desc(None, D2, DT.FLOAT32, 0.0, 0, 1))
    x, y = c.tensor(D2), c.tensor(D2)
    return lambda: op.execute([x], [y])


@case("diag1-exec-output-is-input-alias", IAE, "output_tensor", "overlaps input_tensor")
def _(c):
    op = c.op(kdml.DiagonalMatrix1Desc(D2, D2, DT.FLOAT32, 0.0, 0, 1))
    x = c.tensor(D2)
    return lambda: op.execute([x], [x])


# ---- MATRIX_MULTIPLY_INTEGER_TO_FLOAT ------------------------------------------------------------
A8 = TD(DT.INT8, (3, 4))  # M = 3, K = 4
B8 = TD(DT.INT8, (4, 5))  # K = 4, N = 5
SCALE = TD(DT.FLOAT32, (1, 1))
OUT = TD(DT.FLOAT32, (3, 5))


def mmi(a: Any = A8, a_scale: Any = SCALE, a_zp: Any = None, b: Any = B8, b_scale: Any = SCALE, b_zp: Any = None,
        bias: Any = None, out: Any = OUT, device: str = "dev") -> Callable[[Ctx], object]:
    return lambda c: getattr(c, device).compile(
        kdml.MatrixMultiplyIntegerToFloatDesc(a, a_scale, a_zp, b, b_scale, b_zp, bias, out)
    )


simple("mmi-k-mismatch", IAE, "b_tensor.sizes", r"must equal a_tensor's K \(4\), got 6", mmi(b=TD(DT.INT8, (6, 5))))
simple("mmi-batch-mismatch", IAE, "b_tensor.sizes", "batch and channel sizes must equal a_tensor's",
       mmi(a=TD(DT.INT8, (2, 3, 4)), b=TD(DT.INT8, (3, 4, 5)), out=TD(DT.FLOAT32, (2, 3, 5))))
simple("mmi-rank-mismatch", IAE, "b_tensor.sizes", "dimension count must equal a_tensor's", mmi(b=TD(DT.INT8, (1, 4, 5))))
simple("mmi-a-b-width-mismatch", IAE, "b_tensor.data_type", "must have a_tensor's width", mmi(b=TD(DT.INT16, (4, 5))))
simple("mmi-a-scale-output-type", IAE, "a_scale_tensor.data_type", r"must equal output_tensor's \(FLOAT32\)",
       mmi(a_scale=TD(DT.FLOAT16, (1, 1))))
simple("mmi-b-scale-output-type", IAE, "b_scale_tensor.data_type", "must equal output_tensor's",
       mmi(b_scale=TD(DT.FLOAT32, (1, 1)), a_scale=TD(DT.FLOAT16, (1, 1)), out=TD(DT.FLOAT16, (3, 5))))
simple("mmi-bias-type", IAE, "bias_tensor.data_type", "must equal output_tensor's", mmi(bias=TD(DT.FLOAT16, (3, 5))))
simple("mmi-a-scale-shape", IAE, "a_scale_tensor.sizes", r"per row\).*M = 3", mmi(a_scale=TD(DT.FLOAT32, (1, 3))))
simple("mmi-b-scale-shape", IAE, "b_scale_tensor.sizes", r"per column\).*N = 5", mmi(b_scale=TD(DT.FLOAT32, (5, 1))))
simple("mmi-a-zero-point-shape", IAE, "a_zero_point_tensor.sizes", "M = 3", mmi(a_zp=TD(DT.INT8, (2, 1))))
simple("mmi-b-zero-point-shape", IAE, "b_zero_point_tensor.sizes", "N = 5", mmi(b_zp=TD(DT.INT8, (1, 4))))
simple("mmi-a-zero-point-type", IAE, "a_zero_point_tensor.data_type", r"must equal a_tensor's \(INT8\)",
       mmi(a_zp=TD(DT.UINT8, (1, 1))))
simple("mmi-b-zero-point-type", IAE, "b_zero_point_tensor.data_type", "must equal b_tensor's", mmi(b_zp=TD(DT.UINT8, (1, 1))))
simple("mmi-zero-point-rank", IAE, "a_zero_point_tensor.sizes", "dimension count must equal a_scale_tensor's",
       mmi(a_zp=TD(DT.INT8, (1, 1, 1))))
simple("mmi-output-sizes", IAE, "output_tensor.sizes", r"must be \(3, 5\)", mmi(out=TD(DT.FLOAT32, (3, 6))))
simple("mmi-bias-sizes", IAE, "bias_tensor.sizes", "must equal output_tensor's", mmi(bias=TD(DT.FLOAT32, (1, 5))))
simple("mmi-output-overlap", IAE, "output_tensor.strides", "share one address|non-overlapping",
       mmi(out=TD(DT.FLOAT32, (3, 5), (1, 1))))
simple("mmi-output-int", UNS, "output_tensor", "does not support INT32", mmi(out=TD(DT.INT32, (3, 5))))
simple("mmi-a-float", UNS, "a_tensor", "does not support FLOAT32", mmi(a=TD(DT.FLOAT32, (3, 4))))
simple("mmi-a-64-bit", UNS, "a_tensor", "does not support INT64", mmi(a=TD(DT.INT64, (3, 4)), b=TD(DT.INT64, (4, 5))))
simple("mmi-a-1d", UNS, "a_tensor", "supports 2 to 4 dimensions", mmi(a=TD(DT.INT8, (4,))))
simple("mmi-a-5d", UNS, "a_tensor", "supports 2 to 4 dimensions",
       mmi(a=TD(DT.INT8, (1, 1, 1, 3, 4)), b=TD(DT.INT8, (1, 1, 1, 4, 5)), out=TD(DT.FLOAT32, (1, 1, 1, 3, 5))))
simple("mmi-a-scale-none", IAE, "a_scale_tensor", "is required", mmi(a_scale=None))
simple("mmi-b-none", IAE, "b_tensor", "is required", mmi(b=None))
simple("mmi-not-at-fl10", UNS, "MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "introduced at DML_FEATURE_LEVEL_6_2", mmi(device="fl10"))


def _mmi_bound(c: Ctx, bias: bool = False) -> tuple[Any, list[Any], kdml.Tensor]:
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(A8, SCALE, None, B8, SCALE, None, OUT if bias else None, OUT)
    op = c.op(desc)
    ins = [c.tensor(A8), c.tensor(SCALE), None, c.tensor(B8), c.tensor(SCALE), None, c.tensor(OUT) if bias else None]
    return op, ins, c.tensor(OUT)


@case("mmi-exec-too-few-inputs", IAE, "inputs", "takes 7")
def _(c):
    op, ins, out = _mmi_bound(c)
    return lambda: op.execute(ins[:3], [out])


@case("mmi-exec-bind-absent-bias", IAE, "bias_tensor", "was absent")
def _(c):
    op, ins, out = _mmi_bound(c)
    ins[6] = c.tensor(OUT)
    return lambda: op.execute(ins, [out])


@case("mmi-exec-missing-bias", IAE, "bias_tensor", "is required")
def _(c):
    op, ins, out = _mmi_bound(c, bias=True)
    ins[6] = None
    return lambda: op.execute(ins, [out])


@case("mmi-exec-scale-desc-differs", IAE, "b_scale_tensor", "differs from the compiled one")
def _(c):
    op, ins, out = _mmi_bound(c)
    ins[4] = c.tensor(TD(DT.FLOAT32, (1, 5)))
    return lambda: op.execute(ins, [out])


@case("mmi-exec-output-aliases-bias", IAE, "output_tensor", "overlaps bias_tensor")
def _(c):
    op, ins, _out = _mmi_bound(c, bias=True)
    return lambda: op.execute(ins, [ins[6]])


# ---- functional helpers -------------------------------------------------------------------------
Z33 = np.zeros((3, 3), np.float32)
simple("fn-identity-string", UNS, "x", "str is not a DirectML data type", lambda c: kdml.identity("abc", device=c.dev))
simple("fn-identity-int32", UNS, "input_tensor", "does not support INT32", lambda c: kdml.identity(np.zeros(3, np.int32), device=c.dev))
simple("fn-copy-none", IAE, "x", "must be a numpy array, a Python number or list", lambda c: kdml.copy(None, device=c.dev))
simple("fn-copy-bool-array", UNS, "x", "bool is not a DirectML data type", lambda c: kdml.copy(np.zeros(3, bool), device=c.dev))
simple("fn-triu-1d", IAE, "x", "at least 2 dimensions", lambda c: kdml.triu(np.zeros(3, np.float32), device=c.dev))
simple("fn-tril-k-nan", IAE, "k", "integer", lambda c: kdml.tril(Z33, k=math.nan, device=c.dev))
simple("fn-triu-k-string", IAE, "k", "integer", lambda c: kdml.triu(Z33, k="1", device=c.dev))
simple("fn-eye-like-3d", IAE, "x", "2-D", lambda c: kdml.eye_like(np.zeros((2, 3, 4)), device=c.dev))
simple("fn-eye-like-k-float", IAE, "k", "integer", lambda c: kdml.eye_like((2, 3), 1.5, device=c.dev))
simple("fn-diagonal-matrix1-end-int64", IAE, "diagonal_fill_end", "INT",
       lambda c: kdml.diagonal_matrix1(Z33, diagonal_fill_begin=0, diagonal_fill_end=2**40, device=c.dev))
simple("fn-matmul-shapes", IAE, "b", "does not multiply",
       lambda c: kdml.matmul_integer_to_float(np.zeros((2, 3), np.int8), np.zeros((4, 2), np.int8), 1.0, 1.0, device=c.dev))


@case("fn-identity-out-of-other-device", IAE, "output_tensor", "belongs to another Device")
def _(c):
    out = c.tensor(F32, device=c.other)
    return lambda: kdml.identity(np.zeros((2, 3), np.float32), out=out, device=c.dev)


# ---- the harness ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def devices():
    dev = kdml.Device()
    other = kdml.Device()
    fl10 = kdml.Device(feature_level=FL.FL_1_0)
    yield dev, other, fl10
    for d in (dev, other, fl10):
        d.close()


def _device_works(dev: kdml.Device, rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 5)).astype(np.float32)
    desc = TD(DT.FLOAT32, (3, 5))
    out = dev.empty(desc)
    dev.compile(kdml.ActivationIdentityDesc(desc, desc)).execute([dev.tensor(x)], [out])
    assert np.array_equal(out.numpy(), x)


def test_table_size():
    assert len(CASES) >= 60
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, devices, rng):
    dev, other, fl10 = devices
    ctx = Ctx(dev, other, fl10, rng, [], [])
    action = case.build(ctx)
    before = [b.read() for b in ctx.buffers]
    with pytest.raises(kdml.DMLError) as excinfo:
        action()
    err = excinfo.value
    assert isinstance(err, case.error), f"{type(err).__name__}: {err}"
    msg = str(err)
    assert msg.startswith(case.field), f"message does not start with {case.field!r}: {msg!r}"
    assert re.search(case.rule, msg), f"message does not state the rule /{case.rule}/: {msg!r}"
    after = [b.read() for b in ctx.buffers]
    for i, (a, b) in enumerate(zip(before, after)):
        assert a == b, f"buffer {i} changed although the call failed"
    _device_works(dev, rng)
    for d in ctx.cleanup:
        _device_works(d, rng)
        d.close()
