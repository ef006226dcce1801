"""The element types an ONNX node must have to run on its operator, declared with the node type
(`OnnxOp.check`) and decided at `prepare` from the model's declared types: a node whose types
the operator cannot take stays on the CPU, with the rule's message as the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

DML_NUMPY = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.uint32, np.uint16, np.uint8, np.int32,
                                            np.int16, np.int8, np.float64, np.uint64, np.int64))
FLOAT_NUMPY = frozenset({np.dtype(np.float32), np.dtype(np.float16)})
QUANT_NUMPY = frozenset({np.dtype(np.int8), np.dtype(np.uint8)})
FLOAT32_NUMPY = frozenset({np.dtype(np.float32)})


class NodeTypes(Protocol):
    """What a rule reads of one node (onnx_backend/analysis.py gives it)."""

    inputs: int  # the node's input count
    outputs: int  # the node's output count (optional outputs left empty not counted)

    def elem(self, i: int) -> np.dtype | None: ...  # input i's declared element type (None: unknown)

    def declared(self, i: int) -> Any: ...  # input i's declared onnx.TypeProto, or None

    def attr_dtype(self, name: str) -> np.dtype | None: ...  # an attribute naming an ONNX element type

    def dtype_of(self, elem_type: int) -> np.dtype | None: ...  # an ONNX element type as numpy's

    def constant(self, i: int) -> np.ndarray | None: ...  # input i's value where no feed can change it

    def attr(self, name: str, default: Any = None) -> Any: ...  # an attribute's value (default: absent)

    def given(self, i: int) -> bool: ...  # input i is named (an optional input left empty is not)

    def has_output(self, i: int) -> bool: ...  # output i is named


Rule = Callable[[NodeTypes], str]  # "" where the node may run on the operator, else why not


def float_input(t: NodeTypes) -> str:
    dt = t.elem(0) if t.inputs else None
    return f"type {dt} is not float32/float16" if dt is not None and dt not in FLOAT_NUMPY else ""


def float_inputs(t: NodeTypes) -> str:
    """Every input float32 / float16, all of one type (ONNX Sum / Mean: any count of inputs)."""
    types = {t.elem(i) for i in range(t.inputs)} - {None}
    if len(types) > 1:
        return f"input types differ: {sorted(str(d) for d in types)}"
    bad = [d for d in types if d not in FLOAT_NUMPY]
    return f"type {bad[0]} is not float32/float16" if bad else ""


def float_or_signed_input(t: NodeTypes) -> str:
    """float32 / float16 or a signed integer of 8 to 64 bits (ELEMENT_WISE_NEGATE's rows)."""
    dt = t.elem(0) if t.inputs else None
    ok = FLOAT_NUMPY | {np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64)}
    return f"type {dt} is not float32/float16 or a signed integer" if dt is not None and dt not in ok else ""


def float32_input(t: NodeTypes) -> str:
    dt = t.elem(0) if t.inputs else None
    return f"input type {dt} is not float32" if dt is not None and dt != np.float32 else ""


def dml_input(t: NodeTypes) -> str:
    dt = t.elem(0) if t.inputs else None
    return f"type {dt} is not a DirectML type" if dt is not None and dt not in DML_NUMPY else ""


def dml_or_bool_input(t: NodeTypes) -> str:
    dt = t.elem(0) if t.inputs else None
    return dml_input(t) if dt != np.bool_ else ""


def dml_output_dtype(attr: str) -> Rule:
    """The output type an attribute names (else input 0's) is a DirectML type."""
    def rule(t: NodeTypes) -> str:
        dt = t.attr_dtype(attr) or (t.elem(0) if t.inputs else None)
        return f"output type {dt} is not a DirectML type" if dt is not None and dt not in DML_NUMPY else ""
    return rule


def dml_tensor_value(t: NodeTypes) -> str:
    """Input 0 a tensor of a DirectML type (a sequence or optional of tensors stays on the CPU)."""
    tp = t.declared(0) if t.inputs else None
    while tp is not None and tp.WhichOneof("value") in ("sequence_type", "optional_type"):
        tp = tp.sequence_type.elem_type if tp.WhichOneof("value") == "sequence_type" else tp.optional_type.elem_type
    if tp is not None and tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.elem_type:
        dt = t.dtype_of(tp.tensor_type.elem_type)
        if dt is None or dt not in DML_NUMPY:
            return f"type {dt or tp.tensor_type.elem_type} is not a DirectML type"
    elif tp is not None and tp.WhichOneof("value") not in (None, "tensor_type"):
        return f"{tp.WhichOneof('value')} values stay on the CPU"
    return ""


def quantized_product(quantized: tuple[int, ...], scale: int, outputs: frozenset[np.dtype]) -> Rule:
    """Inputs `quantized` int8/uint8; input `scale`'s type (the output's) in `outputs`."""
    def rule(t: NodeTypes) -> str:
        for i in quantized:
            dt = t.elem(i) if t.inputs > i else None
            if dt is not None and dt not in QUANT_NUMPY:
                return f"input {i} type {dt} is not int8/uint8"
        dt = t.elem(scale) if t.inputs > scale else None
        return f"output type {dt} is not supported" if dt is not None and dt not in outputs else ""
    return rule


KIND_RULES: dict[str, Rule] = {"float_unary": float_input}  # a kind's rule where the OnnxOp names none
