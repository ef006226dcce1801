"""The element-wise families of the contract (kompute_dml/ops/contract/__init__.py re-exports
them): shaders/elementwise.comp's operators (ops/elementwise.py, ops/elementwise_logic.py) and
shaders/cumulative.comp's (ops/cumulative.py). Imports nothing from kompute_dml (the build loads
the contract package by path)."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)

# ---- element-wise operators (ops/elementwise.py, shaders/elementwise.comp) ------------------
# One source; a variant per operation and element type. Offsets (the runtime's, in elements of
# each tensor) and bases (the host's, for dimensions it enumerates beyond EW_RANK) per tensor;
# `count` elements over the merged sizes; per-tensor strides in elements (0 broadcasts).
EW_RANK, EW_IF_RANK = 6, 4
EW_PUSH = block("a_off", "b_off", "o_off", "a_base", "b_base", "o_base", "count", f"size[{EW_RANK}]",
                f"a_str[{EW_RANK}]", f"b_str[{EW_RANK}]", f"o_str[{EW_RANK}]")
EW_IF_PUSH = block("c_off", "a_off", "b_off", "o_off", "c_base", "a_base", "b_base", "o_base", "count",
                   f"size[{EW_IF_RANK}]", f"c_str[{EW_IF_RANK}]", f"a_str[{EW_IF_RANK}]", f"b_str[{EW_IF_RANK}]",
                   f"o_str[{EW_IF_RANK}]")
# element type -> (bits, kind: 0 unsigned, 1 signed, 2 float); b<n>: where signedness does not matter
EW_TYPES = {"f32": (32, 2), "f16": (16, 2), "i8": (8, 1), "u8": (8, 0), "i16": (16, 1), "u16": (16, 0),
            "i32": (32, 1), "u32": (32, 0), "i64": (64, 1), "u64": (64, 0), "b8": (8, 0), "b16": (16, 0),
            "b32": (32, 0), "b64": (64, 0)}
EW_OPS = {"add": 1, "sub": 2, "mul": 3, "div": 4, "eq": 5, "ge": 6, "and": 7, "isnan": 8, "if": 9, "isinf": 10,
          "min": 11, "max": 12, "prelu": 13, "gt": 14, "lt": 15, "le": 16, "not": 17, "or": 18, "xor": 19, "band": 20,
          "bor": 21, "bxor": 22, "bnot": 23, "clip": 24, "pow": 25, "atan2": 26, "modt": 27, "modf": 28, "shl": 29,
          "shr": 30, "popcnt": 31, "dsq": 32}
_EW_WRAP = ("b8", "b16", "b32", "b64", "f16", "f32")  # two's complement wraps alike in both signednesses
_EW_SIGNED = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16", "f32")


def _ew(op: str, t: str, ob: object = None, nin: int = 2) -> dict[str, object]:
    bits, kind = EW_TYPES[t]
    return {"OP": EW_OPS[op], "IN_BITS": bits, "IN_KIND": kind, "OUT_BITS": bits if ob is None else ob, "NIN": nin,
            "RANK": EW_IF_RANK if op == "if" else EW_RANK}


EW_ADD = family("ew_add", "elementwise.comp", "ew_add_{t}", EW_PUSH, _L256, t=_EW_WRAP, defines=lambda t: _ew("add", t))
# ELEMENT_WISE_ADD1 with a FusedActivation (floats): the block's prm = the activation's kind and two
# float32 parameter words (ops/conv_fused.py's fused_words); one dimension fewer walked by the shader
# (the host enumerates the rest, elementwise_plan.py), so the block keeps within 128 bytes
EW_ACT_RANK = EW_RANK - 1
EW_ACT_PUSH = block("a_off", "b_off", "o_off", "a_base", "b_base", "o_base", "count", f"size[{EW_ACT_RANK}]",
                    f"a_str[{EW_ACT_RANK}]", f"b_str[{EW_ACT_RANK}]", f"o_str[{EW_ACT_RANK}]", "prm[3]")
EW_ADD1 = family("ew_add1", "elementwise.comp", "ew_add1_{t}", EW_ACT_PUSH, _L256, t=("f16", "f32"),
                 defines=lambda t: {**_ew("add", t), "ACT": 1, "RANK": EW_ACT_RANK})
EW_SUB = family("ew_sub", "elementwise.comp", "ew_sub_{t}", EW_PUSH, _L256, t=_EW_WRAP, defines=lambda t: _ew("sub", t))
EW_MUL = family("ew_mul", "elementwise.comp", "ew_mul_{t}", EW_PUSH, _L256, t=_EW_WRAP, defines=lambda t: _ew("mul", t))
EW_DIV = family("ew_div", "elementwise.comp", "ew_div_{t}", EW_PUSH, _L256, t=_EW_SIGNED, defines=lambda t: _ew("div", t))
EW_EQ = family("ew_eq", "elementwise.comp", "ew_eq_{t}_o{ob}", EW_PUSH, _L256, t=_EW_WRAP, ob=(8, 32),
               defines=lambda t, ob: _ew("eq", t, ob))
EW_GE = family("ew_ge", "elementwise.comp", "ew_ge_{t}_o{ob}", EW_PUSH, _L256, t=_EW_SIGNED, ob=(8, 32),
               defines=lambda t, ob: _ew("ge", t, ob))
EW_AND = family("ew_and", "elementwise.comp", "ew_and_{t}", EW_PUSH, _L256, t=("b8", "b32"), defines=lambda t: _ew("and", t))
EW_ISNAN = family("ew_isnan", "elementwise.comp", "ew_isnan_{t}_o{ob}", EW_PUSH, _L256, t=("f16", "f32"), ob=(8, 32),
                  defines=lambda t, ob: _ew("isnan", t, ob, nin=1))
# IS_INFINITY (ops/elementwise_unary.py): its InfinityMode in the block's unused b_str[0]; UINT8 output
EW_ISINF = family("ew_isinf", "elementwise.comp", "ew_isinf_{t}_o{ob}", EW_PUSH, _L256, t=("f16", "f32"), ob=(8,),
                  defines=lambda t, ob: _ew("isinf", t, ob, nin=1))
# MIN, MAX, PRELU (input A) and integer CLIP (one input; Min, Max in b_str; ew_clip_f16 / _f32 unused)
EW_EXT = family("ew_ext", "elementwise.comp", "ew_{op}_{t}", EW_PUSH, _L256, op=("min", "max", "prelu", "clip"), t=_EW_SIGNED,
                defines=lambda op, t: {**_ew("add", t, nin=1 + (op != "clip")), "OP": EW_OPS[op]})
# ---- ELEMENT_WISE_POW (ops/elementwise_pow.py): a block of 5 dimensions and 4 parameter words (prm: ScaleBias
# flags, scale, bias; the exponent's element type at run time, bits | kind << 8, kind as EW_TYPES')
EW_MATH_RANK = 5
EW_MATH_PUSH = block("a_off", "b_off", "o_off", "a_base", "b_base", "o_base", "count", f"size[{EW_MATH_RANK}]",
                     f"a_str[{EW_MATH_RANK}]", f"b_str[{EW_MATH_RANK}]", f"o_str[{EW_MATH_RANK}]", "prm[4]")
EW_POW = family("ew_pow", "elementwise.comp", "ew_pow_{t}", EW_MATH_PUSH, _L256,
                t=("f32", "f16", "i8", "u8", "i16", "u16", "i32", "u32"),
                defines=lambda t: {**_ew("pow", t), "RANK": EW_MATH_RANK})
# ELEMENT_WISE_ATAN_YX (ops/elementwise_trig.py); MODULUS_TRUNCATE / _FLOOR, BIT_SHIFT_LEFT / _RIGHT, BIT_COUNT
# (UINT8 / UINT32 outputs) and DIFFERENCE_SQUARE (ops/elementwise_integer.py)
EW_ATAN2 = family("ew_atan2", "elementwise.comp", "ew_atan2_{t}", EW_PUSH, _L256, t=("f32", "f16"),
                  defines=lambda t: _ew("atan2", t))
EW_MOD = family("ew_mod", "elementwise.comp", "ew_{op}_{t}", EW_PUSH, _L256, op=("modt", "modf"), t=_EW_SIGNED,
                defines=lambda op, t: _ew(op, t))
EW_SHIFT = family("ew_shift", "elementwise.comp", "ew_{op}_{t}", EW_PUSH, _L256, op=("shl", "shr"),
                  t=("b8", "b16", "b32", "b64"), defines=lambda op, t: _ew(op, t))
EW_POPCNT = family("ew_popcnt", "elementwise.comp", "ew_popcnt_{t}_o{ob}", EW_PUSH, _L256, t=("b8", "b16", "b32", "b64"),
                   ob=(8, 32), defines=lambda t, ob: _ew("popcnt", t, ob, nin=1))
EW_DSQ = family("ew_dsq", "elementwise.comp", "ew_dsq_{t}", EW_PUSH, _L256, t=("f32", "f16", "b32"),
                defines=lambda t: _ew("dsq", t))
EW_IF = family("ew_if", "elementwise.comp", "ew_if_{t}", EW_IF_PUSH, _L256, t=("b8", "b16", "b32", "b64"),
               defines=lambda t: _ew("if", t, nin=3))

# ---- the rest of the comparisons and logic (ops/elementwise_logic.py): LOGICAL_GREATER_THAN /
# LESS_THAN / LESS_THAN_OR_EQUAL (UINT8 or UINT32 outputs), LOGICAL_NOT / OR / XOR (UINT8 / UINT32)
EW_GT = family("ew_gt", "elementwise.comp", "ew_gt_{t}_o{ob}", EW_PUSH, _L256, t=_EW_SIGNED, ob=(8, 32),
               defines=lambda t, ob: _ew("gt", t, ob))
EW_LT = family("ew_lt", "elementwise.comp", "ew_lt_{t}_o{ob}", EW_PUSH, _L256, t=_EW_SIGNED, ob=(8, 32),
               defines=lambda t, ob: _ew("lt", t, ob))
EW_LE = family("ew_le", "elementwise.comp", "ew_le_{t}_o{ob}", EW_PUSH, _L256, t=_EW_SIGNED, ob=(8, 32),
               defines=lambda t, ob: _ew("le", t, ob))
EW_NOT = family("ew_not", "elementwise.comp", "ew_not_{t}", EW_PUSH, _L256, t=("b8", "b32"),
                defines=lambda t: _ew("not", t, nin=1))
EW_OR = family("ew_or", "elementwise.comp", "ew_or_{t}", EW_PUSH, _L256, t=("b8", "b32"), defines=lambda t: _ew("or", t))
EW_XOR = family("ew_xor", "elementwise.comp", "ew_xor_{t}", EW_PUSH, _L256, t=("b8", "b32"),
                defines=lambda t: _ew("xor", t))

# ---- ELEMENT_WISE_BIT_AND / OR / XOR / NOT (ops/elementwise_bit.py): bit patterns by width
_BIT_WIDTHS = ("b8", "b16", "b32", "b64")
EW_BAND = family("ew_band", "elementwise.comp", "ew_band_{t}", EW_PUSH, _L256, t=_BIT_WIDTHS,
                 defines=lambda t: _ew("band", t))
EW_BOR = family("ew_bor", "elementwise.comp", "ew_bor_{t}", EW_PUSH, _L256, t=_BIT_WIDTHS, defines=lambda t: _ew("bor", t))
EW_BXOR = family("ew_bxor", "elementwise.comp", "ew_bxor_{t}", EW_PUSH, _L256, t=_BIT_WIDTHS,
                 defines=lambda t: _ew("bxor", t))
EW_BNOT = family("ew_bnot", "elementwise.comp", "ew_bnot_{t}", EW_PUSH, _L256, t=_BIT_WIDTHS,
                 defines=lambda t: _ew("bnot", t, nin=1))

# ---- CUMULATIVE_SUMMATION / CUMULATIVE_PRODUCT (ops/cumulative.py, shaders/cumulative.comp): an
# invocation per line along the axis. Offsets in elements (the runtime's); `lines` lines over the
# other dimensions (merged, at most CUM_RANK: size, x_str, y_str per dimension); `n` elements along
# the axis, the first at x_first / y_first from a line's start, then x_step / y_step (the axis's
# strides, negated for DECREASING); excl: the exclusive form.
CUM_RANK = 7
CUM_PUSH = block("x_off", "y_off", "lines", "n", "x_first", "y_first", "x_step:i32", "y_step:i32", "excl",
                 f"size[{CUM_RANK}]", f"x_str[{CUM_RANK}]", f"y_str[{CUM_RANK}]")
CUM = family("cum", "cumulative.comp", "cum_{op}_{t}", CUM_PUSH, (64, 1, 1), op=("sum", "prod"),
             t=("f32", "f16", "b32", "b64"),
             defines=lambda op, t: {"OP_PROD": int(op == "prod"), "BITS": EW_TYPES[t][0],
                                    "FLOAT": int(EW_TYPES[t][1] == 2), "RANK": CUM_RANK, "WG": 0})
# long axes: a work group of 256 per line, chunks scanned in shared memory
CUM_WG = family("cum_wg", "cumulative.comp", "cum_wg_{op}_{t}", CUM_PUSH, _L256, op=("sum", "prod"),
                t=("f32", "f16", "b32", "b64"),
                defines=lambda op, t: {"OP_PROD": int(op == "prod"), "BITS": EW_TYPES[t][0],
                                       "FLOAT": int(EW_TYPES[t][1] == 2), "RANK": CUM_RANK, "WG": 1})

# ---- ACTIVATION_GELU with kompute_dml's keys_output_tensor (ops/activation.py, shaders/float_unary.comp
# KEYS): FLOAT32 over one run of unit strides (VEC), each work group also writing the order keys of its
# outputs' range with +0 at words b_off + 2 g, b_off + 2 g + 1 of binding 2 (DYNAMIC_QUANTIZE_LINEAR's
# input_keys_tensor); the block's B members are unused by a unary operator, b_off carries the keys' offset
GELU_KEYS = family("gelu_keys", "float_unary.comp", "{fn}_f32_vq", EW_PUSH, _L256, fn=("gelu", "gelu_tab", "gelu_tanh"),
                   defines=lambda fn: {"BITS": 32, "RANK": EW_RANK, f"FN_{fn.upper()}": 1, "VEC": 1, "KEYS": 1})
