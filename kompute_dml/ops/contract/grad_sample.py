"""The training operators' sampling families of the contract: shaders/adam_optimizer.comp
(ADAM_OPTIMIZER: ops/adam_optimizer.py) and shaders/grad_resample.comp (RESAMPLE_GRAD,
RESAMPLE_GRAD1: ops/grad_resample.py). The operators read `contract.grad_sample.NAME`. Imports
nothing from kompute_dml (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)
_TYPES = ("f32", "f16")


def _f16(t: str) -> dict[str, object]:
    return {"F16": int(t == "f16")}


# ---- ADAM_OPTIMIZER: an element per invocation; offsets in elements of the seven tensors and the
# training step's (its own type: words of the constant say which); sizes, strides and the
# hyperparameters in the operator's constant (too many for 128 bytes of push constants).
ADAM_PUSH = block("x_off", "m_off", "v_off", "g_off", "t_off", "xo_off", "mo_off", "vo_off")
ADAM = family("adam", "adam_optimizer.comp", "adam_{t}", ADAM_PUSH, _L256, t=_TYPES, defines=_f16)

# ---- RESAMPLE_GRAD / RESAMPLE_GRAD1: an output-gradient element (the forward input's) per invocation,
# gathering from the host's inverse tap tables (no scatter, no atomics); offsets in elements
# (g: InputGradientTensor, y: OutputGradientTensor).
GRAD_RESAMPLE_PUSH = block("g_off", "y_off")
GRAD_RESAMPLE = family("grad_resample", "grad_resample.comp", "grad_resample_{t}", GRAD_RESAMPLE_PUSH, _L256,
                       t=_TYPES, defines=_f16)
