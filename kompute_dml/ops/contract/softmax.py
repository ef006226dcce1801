"""The row-activation families of the contract (kompute_dml/ops/contract/__init__.py re-exports
them): shaders/softmax.comp, whose MODE picks the function of a row (0 ACTIVATION_SOFTMAX1 in
ops/activation.py, 1 ACTIVATION_LOG_SOFTMAX / LOG_SOFTMAX1 and 2 ACTIVATION_HARDMAX / HARDMAX1 in
ops/activation_log_softmax.py). Imports nothing from kompute_dml (the build loads the contract
package by path)."""

from __future__ import annotations

from .core import PushBlock, ShaderFamily, block, family

_L256 = (256, 1, 1)
_BITS = {"f32": 32, "f16": 16}

# A row (the elements of the reduced dimensions at one coordinate of the others) per LANES
# invocations, 256 / LANES rows per work group. Offsets in elements, rows, elements per row (len);
# per merged dimension its size and the input's and output's strides: [0, nouter) the row
# dimensions, [nouter, 8) the reduced ones. *_fast: one reduced dimension (slot 7) of at most
# K * LANES * (32 / bits) elements, kept in registers; *_gen: any, read again per pass.
SMX_PUSH = block("x_off", "y_off", "rows", "len", "nouter", "size[8]", "x_str[8]", "y_str[8]")
# The fast variants' geometries, l{LANES}_k{K}: K elements (FLOAT16: K pairs) per lane. The plan
# (ops/softmax_geometry.py) gives a row the fewest lanes whose K = 32 holds it (8 lanes for rows of up
# to 4 * 8 words, 32 up to 32 * 32, 256, a row per work group, up to 32 * 256), and rows of at
# least VEC_FROM_BYTES the word geometries.
SMX_GEOMETRIES = {8: (1, 2, 4), 32: (2, 4, 8, 16, 32), 256: (8, 16, 32)}
# The word geometries, l{LANES}_k{K}v (VEC 1): K 16-byte words per lane (4 FLOAT32 / 8 FLOAT16
# consecutive elements each), read and written as one load / store where the row allows. A row of
# at least 1 KiB (64 words) takes the fewest lanes that hold it in at most 4 words each
# (ops/softmax_geometry.py), so only these are ever chosen (at 74dd870 the family also held K = 1
# to 4 words at every lane count from 8, timed in docs/softmax.md; kept out since: each is a
# pipeline the ONNX backend prepares ahead, onnx_backend/siblings.py).
SMX_VEC_GEOMETRIES = {16: (4,), 32: (3, 4), 64: (3, 4), 128: (3, 4), 256: (3, 4)}
SMX_FAST_GEOMETRIES = (tuple(f"l{lanes}_k{k}" for lanes, ks in SMX_GEOMETRIES.items() for k in ks)
                       + tuple(f"l{lanes}_k{k}v" for lanes, ks in SMX_VEC_GEOMETRIES.items() for k in ks))

def _fast(name: str, prefix: str, mode: int, ext: int, push: PushBlock = SMX_PUSH) -> ShaderFamily:
    def defines(t: str, g: str) -> dict[str, int]:
        vec = g.endswith("v")
        lanes, k = (int(part[1:]) for part in g.rstrip("v").split("_"))
        return {"BITS": _BITS[t], "LANES": lanes, "FAST": 1, "K": k, "EXT": ext, "MODE": mode, "VEC": int(vec)}

    return family(name, "softmax.comp", prefix + "_{t}_{g}", push, _L256, t=tuple(_BITS), g=SMX_FAST_GEOMETRIES, shape=("g",),
                  defines=defines)


def _gen(name: str, prefix: str, mode: int, ext: int, push: PushBlock = SMX_PUSH) -> ShaderFamily:
    return family(name, "softmax.comp", prefix + "_{t}_g{lanes}", push, _L256, t=tuple(_BITS), lanes=(32, 256),
                  shape=("lanes",),
                  defines=lambda t, lanes: {"BITS": _BITS[t], "LANES": lanes, "FAST": 0, "K": 1, "EXT": ext,
                                            "MODE": mode, "VEC": 0})


# ACTIVATION_SOFTMAX1 (ops/activation.py)
SMX_FAST = _fast("smx_fast", "smx", 0, 0)
SMX_GEN = _gen("smx_gen", "smx", 0, 0)
# kompute_dml's extension of ACTIVATION_SOFTMAX1 (an additive mask read with the input, rounded as
# ELEMENT_WISE_ADD rounds it; NaN results written as 0): the mask's offset and strides and the
# flags (1 mask bound, 2 NaN -> 0) leave room for 6 merged dimensions in 128 bytes, the row
# dimensions [0, nouter), the reduced ones [nouter, 6); the same lanes and K as SMX_FAST / SMX_GEN.
SMX_EXT_PUSH = block("x_off", "m_off", "y_off", "rows", "len", "nouter", "flags", "size[6]", "x_str[6]", "m_str[6]",
                     "y_str[6]")
SMX_EXT_DIMS = 6
SMX_EXT_FAST = _fast("smx_ext_fast", "smx_ext", 0, 1, SMX_EXT_PUSH)
SMX_EXT_GEN = _gen("smx_ext_gen", "smx_ext", 0, 1, SMX_EXT_PUSH)
# ACTIVATION_LOG_SOFTMAX / LOG_SOFTMAX1 (MODE 1) and ACTIVATION_HARDMAX / HARDMAX1 (MODE 2): the
# plans and push block of ACTIVATION_SOFTMAX1 (ops/activation_log_softmax.py)
LSM_FAST = _fast("lsm_fast", "lsm", 1, 0)
LSM_GEN = _gen("lsm_gen", "lsm", 1, 0)
HMX_FAST = _fast("hmx_fast", "hmx", 2, 0)
HMX_GEN = _gen("hmx_gen", "hmx", 2, 0)
