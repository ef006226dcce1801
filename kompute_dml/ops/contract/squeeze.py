"""kompute_dml's SQUEEZE_EXCITATION family of the contract (kompute_dml/ops/contract/__init__.py
re-exports it): shaders/squeeze_excitation.comp, planned by ops/squeeze_excitation.py. Imports
nothing from kompute_dml (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

# A work group per image and 64 channels; the image's means and hidden values in shared memory (at
# most SE_MAX_C and SE_MAX_R floats), SE_PARTS partial sums (a mean's 2^mp per channel; a round's
# 64 x 33). Offsets in elements, strides (b: batch, c: channel, s: spatial, r: hidden), each
# activation's kind and two parameter words (conv_fused.fused_words), flags (1 Bias1, 2 Bias2, 4 x's
# quad loads, 8 the scaled output), mp: log2 of the invocations per channel's mean, z_off: the packed
# scaled output's offset.
SE_MAX_C, SE_MAX_R, SE_PARTS = 2048, 1024, 64 * 33
SE_PUSH = block("x_off", "w1_off", "b1_off", "w2_off", "b2_off", "y_off", "c", "r", "hw", "x_b", "x_c", "x_s", "w1_r",
                "w1_c", "w2_c", "w2_r", "b1_s", "b2_s", "y_b", "y_c", "act1", "act1_p0", "act1_p1", "act2", "act2_p0",
                "act2_p1", "flags", "mp", "z_off")
SE = family("squeeze_excitation", "squeeze_excitation.comp", "se_{t}", SE_PUSH, (256, 1, 1), t=("f32", "f16"),
            defines=lambda t: {"F16": int(t == "f16"), "SE_MAX_C": SE_MAX_C, "SE_MAX_R": SE_MAX_R,
                                     "SE_PARTS": SE_PARTS})
