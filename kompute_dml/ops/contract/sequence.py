"""The families of REVERSE_SUBSEQUENCES (ops/reverse_subsequences.py), LP_NORMALIZATION
(ops/lp_normalization.py), NONZERO_COORDINATES (ops/nonzero_coordinates.py) and RANDOM_GENERATOR
(ops/random_generator.py), each on a shader of its own; the operators read `contract.sequence.<NAME>`
(the package finds every module's families). Imports nothing from kompute_dml (the build loads
the contract package by path)."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)
SEQ_RANK = 6  # merged dimensions besides the axis (REVERSE_SUBSEQUENCES, LP_NORMALIZATION)

# ---- REVERSE_SUBSEQUENCES (shaders/reverse_subsequences.comp): an output element per invocation;
# offsets in elements (input, lengths, output), the element count, the axis' length and the input's
# and output's axis strides, then per merged other dimension its size and the three tensors' strides.
# A variant per element width (FLOAT16 is 16 bits copied).
REVSEQ_PUSH = block("x_off", "l_off", "y_off", "total", "n", "x_ax", "y_ax", f"size[{SEQ_RANK}]", f"xs[{SEQ_RANK}]",
                    f"ys[{SEQ_RANK}]", f"ls[{SEQ_RANK}]")
REVSEQ = family("revseq", "reverse_subsequences.comp", "revseq_b{bits}", REVSEQ_PUSH, _L256, bits=(8, 16, 32),
                defines=lambda bits: {"BITS": int(bits)})

# ---- LP_NORMALIZATION (shaders/lp_normalization.comp): a line along the axis per invocation;
# offsets in elements, the line count, the axis' length and strides, P (1 or 2), Epsilon, then per
# merged other dimension its size and the two tensors' strides. A variant per type.
LPNORM_PUSH = block("x_off", "y_off", "lines", "n", "x_ax", "y_ax", "p", "eps:f32", f"size[{SEQ_RANK}]",
                    f"xs[{SEQ_RANK}]", f"ys[{SEQ_RANK}]")
LPNORM = family("lpnorm", "lp_normalization.comp", "lpnorm_{t}", LPNORM_PUSH, (64, 1, 1), t=("f32", "f16"),
                defines=lambda t: {"F16": int(t == "f16")})

# ---- NONZERO_COORDINATES (shaders/nonzero_coordinates.comp): one work group of 256 scanning the
# input in chunks of 256 in row-major order; offsets in elements (input, count, coordinates), the
# element count, the coordinates' column count N and its row and column strides, the input's sizes
# and strides (leading dimensions padded to 5 with size 1). A variant per element kind.
NZ_RANK = 5
NZ_PUSH = block("x_off", "c_off", "y_off", "total", "ncols", "y_row", "y_col", f"size[{NZ_RANK}]", f"xs[{NZ_RANK}]")
NZ = family("nonzero", "nonzero_coordinates.comp", "nonzero_{t}", NZ_PUSH, _L256, t=("f32", "f16", "b32", "b16", "b8"),
            defines=lambda t: {"BITS": int(t[1:]), "FLOAT": int(t[0] == "f")})

# ---- RANDOM_GENERATOR (shaders/random_generator.comp): a Philox 4x32-10 block (4 outputs) per
# invocation; offsets in elements (input state, output, output state), the output's element count,
# whether the output state is written, the input and output states' element strides, the output's
# 4-D sizes and strides.
RNG_PUSH = block("s_off", "y_off", "o_off", "total", "state_out", "s_str", "o_str", "size[4]", "ys[4]")
RNG = family("rng", "random_generator.comp", "rng_philox", RNG_PUSH, _L256)
