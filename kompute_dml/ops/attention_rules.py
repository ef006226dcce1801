"""The ai.onnx Attention / RotaryEmbedding node types' rules (OnnxOp.check, ops/onnx_types.py):
what onnx_backend/handlers_onnx_attention.py takes, decided at prepare from the declared types and
attributes; a node it does not take stays on onnxruntime's CPU provider with the rule's message."""

from __future__ import annotations

import numpy as np

from .onnx_types import FLOAT_NUMPY, NodeTypes

_BOOL = np.dtype(np.bool_)


def _one_float_type(t: NodeTypes, inputs: tuple[int, ...], what: str) -> tuple[str, np.dtype | None]:
    types = {t.elem(i) for i in inputs if t.given(i)} - {None}
    if len(types) > 1:
        return f"{what} types differ: {sorted(str(d) for d in types)}", None
    dt = next(iter(types), None)
    if dt is not None and dt not in FLOAT_NUMPY:
        return f"type {dt} is not float32/float16", None
    return "", dt


def attention_rule(t: NodeTypes) -> str:
    """ai.onnx Attention (opset 23, 24) on MULTIHEAD_ATTENTION: one float32 / float16 type for Q, K,
    V and the past, a bool mask or one of that type (softcap and the qk_matmul_output output as
    the reference's chain of operators); sliding windows (opset 25); softmax precision float32 or float16 (the
    kernel's softmax is float32 either way)."""
    why, dt = _one_float_type(t, (0, 1, 2, 4, 5), "Q / K / V / past")
    if why:
        return why
    m = t.elem(3) if t.given(3) else None
    if m is not None and m != _BOOL and m != dt:
        return f"attn_mask type {m} is neither bool nor the inputs' type ({dt})"
    if float(t.attr("softcap", 0.0)) < 0.0:
        return f"softcap {t.attr('softcap')}: must be >= 0"
    if t.given(6) and t.elem(6) not in (None, np.dtype(np.int64)):
        return f"nonpad_kv_seqlen type {t.elem(6)} is not int64"
    for w in ("left_window_size", "right_window_size"):
        if int(t.attr(w, -1)) < -1:
            return f"{w} {t.attr(w)}: must be -1 or nonnegative"
    sp = t.attr("softmax_precision")
    if sp is not None and t.dtype_of(int(sp)) not in FLOAT_NUMPY:  # the kernel's softmax is float32
        return f"softmax_precision {sp}: the kernel's softmax is float32"
    return ""


def rotary_rule(t: NodeTypes) -> str:
    """ai.onnx RotaryEmbedding: X, cos_cache and sin_cache of one float32 / float16 type."""
    return _one_float_type(t, (0, 1, 2), "X / cos_cache / sin_cache")[0]
