"""The gradient (training) operators' families of the contract: shaders/grad_elementwise.comp
(ACTIVATION_RELU_GRAD, ELEMENT_WISE_CLIP_GRAD / _GRAD1: ops/grad_activation.py) and
shaders/grad_pooling.comp (AVERAGE_POOLING_GRAD, MAX_POOLING_GRAD: ops/grad_pooling.py). The
operators read `contract.grad.NAME`. Imports nothing from kompute_dml (the build loads the contract
package by path)."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)

# ---- element-wise gradients (ops/grad_activation.py, shaders/grad_elementwise.comp) on the
# element-wise plans (ops/elementwise_plan.py: a = InputTensor, b = InputGradientTensor, o = the
# output; offsets in elements, bases for the dimensions the host enumerates, GRAD_EW_RANK walked
# dimensions). prm: the bounds as order keys (CLIP: Min low / high word, Max low / high word).
GRAD_EW_RANK = 5
GRAD_EW_PUSH = block("a_off", "b_off", "o_off", "a_base", "b_base", "o_base", "count", f"size[{GRAD_EW_RANK}]",
                     f"a_str[{GRAD_EW_RANK}]", f"b_str[{GRAD_EW_RANK}]", f"o_str[{GRAD_EW_RANK}]", "prm[4]")
# element type -> (bits, kind: 0 unsigned, 1 signed, 2 float)
GRAD_EW_TYPES = {"f32": (32, 2), "f16": (16, 2), "i8": (8, 1), "u8": (8, 0), "i16": (16, 1), "u16": (16, 0),
                 "i32": (32, 1), "u32": (32, 0), "i64": (64, 1), "u64": (64, 0)}


def _ew(op: int, t: str) -> dict[str, object]:
    bits, kind = GRAD_EW_TYPES[t]
    return {"OP": op, "BITS": bits, "KIND": kind}


GRAD_RELU = family("grad_relu", "grad_elementwise.comp", "grad_relu_{t}", GRAD_EW_PUSH, _L256, t=("f32", "f16"),
                   defines=lambda t: _ew(1, t))
GRAD_CLIP = family("grad_clip", "grad_elementwise.comp", "grad_clip_{t}", GRAD_EW_PUSH, _L256, t=tuple(GRAD_EW_TYPES),
                   defines=lambda t: _ew(2, t))

# ---- pooling gradients (ops/grad_pooling.py, shaders/grad_pooling.comp): an output-gradient element
# per invocation, summing the windows that cover it (no scatter, no atomics); offsets in elements
# (x: MAX's InputTensor, g: InputGradientTensor, y: OutputGradientTensor), the geometry in the
# operator's constant. A variant per function and type.
GRAD_POOL_PUSH = block("x_off", "g_off", "y_off")
GRAD_POOL = family("grad_pool", "grad_pooling.comp", "grad_pool_{fn}_{t}", GRAD_POOL_PUSH, _L256, fn=("avg", "max"),
                   t=("f32", "f16"), defines=lambda fn, t: {"MAX": int(fn == "max"), "F16": int(t == "f16")})
