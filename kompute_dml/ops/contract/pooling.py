"""The pooling families of the contract (re-exported by kompute_dml/ops/contract/__init__.py):
shaders/pooling.comp (ops/pooling.py). Imports nothing from kompute_dml (the build loads the contract
package by path)."""

from __future__ import annotations

from .core import block, family

# ---- MAX_POOLING2 / AVERAGE_POOLING (ops/pooling.py, pooling.comp): an output per invocation (k "_group": per group,
# "_team": per team of POOL_TEAM invocations, 256 / POOL_TEAM outputs per group)
POOL_PUSH = block("x_off", "y_off", "i_off")
POOL_TEAM = 32
POOL = family("pool", "pooling.comp", "pool_{fn}_{t}{k}", POOL_PUSH, (256, 1, 1), fn=("max", "avg"), t=("f32", "f16"),
              k=("", "_group", "_team"),
              defines=lambda fn, t, k: {"MAX": int(fn == "max"), "F16": int(t == "f16"), "GROUP": int(k != ""),
                                        **({"TS": f"{POOL_TEAM}u"} if k == "_team" else {})})
POOL_Q8 = family("pool_q8", "pooling.comp", "pool_max_{t}{k}", POOL_PUSH, (256, 1, 1), t=("i8", "u8"), k=("", "_group"),  # 8-bit
                 defines=lambda t, k: {"MAX": 1, "F16": 0, "Q8": 1 + int(t == "u8"), "GROUP": int(k != "")})
# LP_POOLING / LP_POOLING1: AVERAGE's sums of |x|^P, then the P-th root (P: the constant's word 38)
POOL_LP = family("pool_lp", "pooling.comp", "pool_lp_{t}{k}", POOL_PUSH, (256, 1, 1), t=("f32", "f16"), k=("", "_group"),
                 defines=lambda t, k: {"MAX": 0, "LP": 1, "F16": int(t == "f16"), "GROUP": int(k != "")})
