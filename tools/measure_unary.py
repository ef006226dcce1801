#!/usr/bin/env python3
"""Measure kompute_dml/ops/elementwise_unary.py's and ops/elementwise_trig.py's operators on the default device against the
float64 numpy reference (tests/unary_reference.py): every float16 input, and 2^20 float32
inputs (special values, random bit patterns, random values in [-100, 100]) plus, per operator,
2^20 values from its interesting range (SIN, COS, TAN: and the values nearest multiples of pi / 2).
Prints, per operator and type, the largest error in ulps and the share of results that are the
correctly rounded one (docs/elementwise_unary.md). `--params`: ops/activation_params.py's ELU,
CELU, SCALED_ELU, SCALED_TANH and PARAMETRIC_SOFTPLUS against tests/act_reference.py
(docs/activation_params.md). `--pow`: ELEMENT_WISE_POW by input class (docs/elementwise_pow.md); `--atan2`:
ELEMENT_WISE_ATAN_YX (docs/elementwise_trig.md)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from unary_reference import (  # noqa: E402
    every_float16,
    float32_inputs,
    near_half_pi_multiples,
    reference64,
    rounded,
    ulp_error,
)

import kompute_dml as kdml  # noqa: E402
from kompute_dml.ops import elementwise_trig, elementwise_unary  # noqa: E402

OPS = elementwise_unary.OPS + elementwise_trig.OPS

# values where each function is hardest: near its overflow / underflow and cancellation points
RANGES = {"exp": (-104.0, 89.0), "log": (0.0, 4.0), "sigmoid": (-90.0, 20.0), "softsign": (-4.0, 4.0), "tanh": (-1.0, 1.0),
          "elementwise_tanh": (-10.0, 10.0), "erf": (-4.5, 4.5), "softplus": (-110.0, 20.0),
          "sin": (-8192.0, 8192.0), "cos": (-8192.0, 8192.0),  # rotary angles: positions up to 8192
          "tan": (-8192.0, 8192.0), "asin": (-1.0, 1.0), "acos": (-1.0, 1.0), "atan": (-4.0, 4.0), "sinh": (-20.0, 20.0),
          "cosh": (-20.0, 20.0), "asinh": (-8.0, 8.0), "acosh": (1.0, 8.0), "atanh": (-1.0, 1.0)}


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def fit_odd(name: str, top: float, deg: int) -> None:
    """The small-|x| polynomial of tanh (x + x^3 P(x^2)) or erf (x + x Q(x^2)), fitted to the
    float64 function at Chebyshev nodes in x^2, coefficients rounded to float32, then evaluated
    in float32 as the shader does (Horner, then the sum) over 2^21 points of [2^-13, top]."""
    fn = {"tanh": np.tanh, "erf": _erf64}[name]
    x3 = name == "tanh"  # tanh's correction is x^3 P, erf's x Q
    k = np.arange(4000)
    s = top * top * (1 - np.cos(np.pi * (k + 0.5) / 4000)) / 2
    x = np.sqrt(s)
    g = (fn(x) - x) / (x**3 if x3 else x)
    c = np.polynomial.polynomial.polyfit(s, g, deg, w=np.sqrt(s) if x3 else None).astype(np.float32)
    t = np.linspace(2.0**-13, top, 1 << 21).astype(np.float32)
    z = t * t
    p = c[deg]
    for j in range(deg - 1, -1, -1):
        p = np.float32(p * z + c[j])
    y = np.float32(t + np.float32(t * np.float32(z * p))) if x3 else np.float32(t + np.float32(t * p))
    ref = fn(t.astype(np.float64))
    ulp = np.exp2(np.floor(np.log2(ref)) - 23)
    print(", ".join(f"{v:.9e}" for v in c), f"(max {np.max(np.abs(y - ref) / ulp):.3f} ulp)")


def scan(helpers: list[str]) -> None:
    """Every positive float32 from 2^-12 to the largest, 2^24 at a time (SIN / COS: 1.3e9 inputs,
    minutes on lavapipe): the largest error in ulps and where."""
    dev = kdml.Device()
    lo, hi = int(np.float32(2.0**-12).view(np.uint32)), 0x7F800000
    worst = {h: (0.0, 0.0) for h in helpers}
    for start in range(lo, hi, 1 << 24):
        x = np.arange(start, min(start + (1 << 24), hi), dtype=np.uint32).view(np.float32)
        for h in helpers:
            err = ulp_error(getattr(kdml, h)(x, device=dev).numpy(), reference64(h, x))
            i = int(np.argmax(err))
            if err[i] > worst[h][0]:
                worst[h] = (float(err[i]), float(x[i]))
    for h, (e, at) in worst.items():
        print(f"{h}: {e:.3f} ulp at {at!r}")


# ops/activation_params.py's transcendental operators and the parameter sets measured
PARAM_SETS = {"elu": ({}, {"alpha": 0.3}), "celu": ({}, {"alpha": 0.7}, {"alpha": 2.0}),
              "selu": ({},), "scaled_tanh": ({}, {"alpha": 1.7159, "beta": 0.6667}),
              "parametric_softplus": ({}, {"alpha": 0.5, "beta": 3.0})}


def measure_params(rng: np.random.Generator, dev: kdml.Device) -> None:
    """`--params`: the bounds of docs/activation_params.md (every float16 input, 2^20 float32
    inputs and 2^20 values in [-20, 5]) against tests/act_reference.py."""
    import act_reference
    print("| operator | parameters | type | inputs | max error (ulp) | correctly rounded |")
    print("| --- | --- | --- | --- | --- | --- |")
    x32 = np.concatenate([float32_inputs(rng), rng.uniform(-20, 5, 1 << 20).astype(np.float32)])
    for helper, sets in PARAM_SETS.items():
        for kw in sets:
            for x in (every_float16(), x32):
                got = getattr(kdml, helper)(x, device=dev, **kw).numpy()
                ref = act_reference.reference64(helper, x, **kw)
                err = ulp_error(got, ref)
                want = rounded(ref, x.dtype)
                same = np.isnan(want) | (got == want)
                print(f"| {helper} | {kw or 'defaults'} | {x.dtype} | {x.size} | {err.max():.3f} | {same.mean():.6f} |")


def measure_pow(rng: np.random.Generator, dev: kdml.Device) -> None:
    """`--pow`: ELEMENT_WISE_POW's bound (docs/elementwise_pow.md) against float64 numpy.power, by
    input class (2^20 pairs each; float16: a 1024 x 1024 grid of its values)."""
    n = 1 << 20
    f32 = np.float32
    cases = {
        "random bit patterns": (float32_inputs(rng, n), rng.permutation(float32_inputs(rng, n))),
        "x in [0, 10], y in [-30, 30]": (rng.uniform(0, 10, n).astype(f32), rng.uniform(-30, 30, n).astype(f32)),
        "x within 1e-3 of 1, y in [-1e5, 1e5]": ((1 + rng.uniform(-1e-3, 1e-3, n)).astype(f32), rng.uniform(-1e5, 1e5, n).astype(f32)),
        "x over every binade, y in [-2, 2]": (np.exp2(rng.uniform(-149, 128, n)).astype(f32), rng.uniform(-2, 2, n).astype(f32)),
        "integral y in [-64, 64]": ((rng.standard_normal(n) * 4).astype(f32), rng.integers(-64, 65, n).astype(f32)),
        "integral y in [-5000, 5000], x near 1": ((1 + rng.uniform(-1e-2, 1e-2, n)).astype(f32),
                                              rng.integers(-5000, 5000, n).astype(f32)),
        "results near overflow / underflow": (rng.uniform(1.5, 2.5, n).astype(f32), rng.uniform(-155, 130, n).astype(f32)),
    }
    h = every_float16()
    cases["float16 grid"] = (np.repeat(h[::64], 1024), np.tile(h[::64], 1024))
    binary_table({f"{k} ({x.dtype})": (x, y) for k, (x, y) in cases.items()},
                 lambda x, y: kdml.pow(x, y, device=dev).numpy(), np.power)


def binary_table(cases: dict, run, ref_fn) -> None:
    """The markdown table of a binary function's errors: ref_fn in float64 per pair of inputs."""
    print("| inputs | pairs | max error (ulp) | correctly rounded |")
    print("| --- | --- | --- | --- |")
    for name, (a, b) in cases.items():
        a, b = a[: min(a.size, b.size)], b[: min(a.size, b.size)]
        got = run(a, b)
        with np.errstate(all="ignore"):
            ref = ref_fn(a.astype(np.float64), b.astype(np.float64))
        want = rounded(ref, a.dtype)
        same = np.isnan(want) | (got == want)
        print(f"| {name} | {a.size} | {ulp_error(got, ref).max():.3f} | {same.mean():.6f} |")


def measure_atan2(rng: np.random.Generator, dev: kdml.Device) -> None:
    """`--atan2`: ELEMENT_WISE_ATAN_YX against float64 numpy.arctan2 (docs/elementwise_trig.md)."""
    n = 1 << 20
    spread = [(rng.standard_normal(n) * np.exp2(rng.integers(-140, 120, n))).astype(np.float32) for _ in range(2)]
    h = every_float16()
    cases = {"random bit patterns (float32)": (float32_inputs(rng, n), rng.permutation(float32_inputs(rng, n))),
             "y, x in [-10, 10] (float32)": tuple(rng.uniform(-10, 10, (2, n)).astype(np.float32)),
             "magnitudes 2^-140 to 2^120 (float32)": tuple(spread),
             "float16 grid": (np.repeat(h[::64], 1024), np.tile(h[::64], 1024))}
    binary_table(cases, lambda y, x: kdml.atan2(y, x, device=dev).numpy(), np.arctan2)


def main() -> None:
    if "--atan2" in sys.argv:
        measure_atan2(np.random.default_rng(2024), kdml.Device())
        return
    if "--pow" in sys.argv:
        measure_pow(np.random.default_rng(2024), kdml.Device())
        return
    if "--params" in sys.argv:
        measure_params(np.random.default_rng(2024), kdml.Device())
        return
    if "--scan" in sys.argv:  # e.g. --scan sin,cos
        scan(sys.argv[sys.argv.index("--scan") + 1].split(","))
        return
    if "--fit-tanh" in sys.argv:
        fit_odd("tanh", 0.5625, 6)
        return
    if "--fit-erf" in sys.argv:
        fit_odd("erf", 0.75, 6)
        return
    rng = np.random.default_rng(2024)
    dev = kdml.Device()
    print("| operator | type | inputs | max error (ulp) | correctly rounded |")
    print("| --- | --- | --- | --- | --- |")
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    for op in OPS:
        if op.exact or op.rounding_mode or (only and op.helper not in only):
            continue
        fn = getattr(kdml, op.helper)
        lo, hi = RANGES.get(op.helper, (-100.0, 100.0))
        x32 = np.concatenate([float32_inputs(rng), rng.uniform(lo, hi, 1 << 20).astype(np.float32)])
        if op.helper in ("sin", "cos", "tan"):  # + 3 (2^20 + 101) values nearest multiples of pi / 2
            x32 = np.concatenate([x32, near_half_pi_multiples(1 << 20)])
        for s in (1.0, 2.0, 3.0) if op.steepness else (1.0,):  # SOFTPLUS: s x exact, then rounded
            kw = {"steepness": s} if op.steepness else {}
            name = f"{op.name} (steepness {s:g})" if op.steepness else op.name
            for x in (every_float16(), x32):
                got = fn(x, device=dev, **kw).numpy()
                ref = reference64(op.helper, x, steepness=s)
                err = ulp_error(got, ref)
                want = rounded(ref, x.dtype)
                same = np.isnan(want) | (got == want)
                print(f"| {name} | {x.dtype} | {x.size} | {err.max():.3f} | {same.mean():.6f} |")


if __name__ == "__main__":
    main()
