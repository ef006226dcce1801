"""The normalization training operators' families of the contract: shaders/bn_training.comp
(BATCH_NORMALIZATION_TRAINING, BATCH_NORMALIZATION_GRAD, BATCH_NORMALIZATION_TRAINING_GRAD:
ops/batch_normalization_training.py, ops/grad_normalization.py) and shaders/lrn_grad.comp
(LOCAL_RESPONSE_NORMALIZATION_GRAD: ops/grad_normalization.py). The operators read
`contract.grad_norm.NAME`. Imports nothing from kompute_dml (the build loads the contract package by
path)."""

from __future__ import annotations

from .core import block, family

# ---- batch normalization, training and gradients: two dispatches per operator, `stats` (an
# invocation per channel: the element of the per-channel tensors' shape, its reduced elements walked
# in row-major order) then `apply` (an invocation per input element). Offsets in elements, one per
# shader slot (x: InputTensor, g: InputGradientTensor, m / v: MeanTensor / VarianceTensor, s: Scale,
# b: Bias, a: FusedAdd, y: Output / OutputGradient, o1: OutputMean / OutputScaleGradient, o2:
# OutputVariance / OutputBiasGradient); the geometry in the operator's constant. op: train (OP 0),
# grad (OP 1, BATCH_NORMALIZATION_GRAD), tgrad (OP 2, BATCH_NORMALIZATION_TRAINING_GRAD).
BN_TRAIN_PUSH = block("x_off", "g_off", "m_off", "v_off", "s_off", "b_off", "a_off", "y_off", "o1_off", "o2_off")
BN_OPS = ("train", "grad", "tgrad")
BN_TRAIN = family("bn_train", "bn_training.comp", "bn_{op}_{stage}_{t}", BN_TRAIN_PUSH, (64, 1, 1), op=BN_OPS,
                  stage=("stats", "apply"), t=("f32", "f16"),
                  defines=lambda op, stage, t: {"OP": BN_OPS.index(op), "STATS": int(stage == "stats"),
                                                "F16": int(t == "f16")})

# ---- LOCAL_RESPONSE_NORMALIZATION_GRAD: `terms` (an invocation per element i: the forward's
# denominator D_i = Bias + Alpha / LocalSize * S_i, P_i = D_i^Beta and T_i = dY_i X_i / P_i / D_i
# into the operator's scratch, packed, 2 words per element) then `sum` (an invocation per element j:
# dX_j = dY_j / P_j - c2 X_j * sum of T_i over the regions that hold j). Offsets in elements.
LRN_GRAD_PUSH = block("x_off", "g_off", "o_off", "total", "cross", "lo", "hi", "size[4]", "xs[4]", "gs[4]", "os[4]",
                      "alpha:f32", "beta:f32", "bias:f32", "c2:f32")
LRN_GRAD = family("lrn_grad", "lrn_grad.comp", "lrn_grad_{stage}_{t}", LRN_GRAD_PUSH, (256, 1, 1),
                  stage=("terms", "sum"), t=("f32", "f16"),
                  defines=lambda stage, t: {"SUM": int(stage == "sum"), "F16": int(t == "f16")})
