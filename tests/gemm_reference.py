"""The float64 reference of DML_GEMM and the error bound of docs/gemm.md ("Error bound").

`expected` computes Output = alpha * op(A) x op(B) + beta * C in float64 from the operands' float
values (float32 / float16 values are exact in float64, and so is every product of two of them);
`bound` is the bound docs/gemm.md derives for kompute_dml's float32 evaluation:

    |computed - exact| <= gamma(K + 2) * (|alpha| * sum_k |a_k b_k| + |beta c|)      (float32)
                          + the underflow allowance (below),
    gamma(n) = n u / (1 - n u), u = 2^-24,

(kernel "tiled", shaders/gemm.comp, and the emulated cooperative-matrix family, whose sums are the
same); for the tensor cores (kernel "coopmat", docs/gemm.md "FLOAT16 on cooperative matrices"), whose
order and adders are the device's, gamma(5K + 2) in its place. Then,
for a FLOAT16 output, the final rounding: u16 = 2^-11 of the float32 result and half the
float16 subnormal spacing (2^-25). The underflow allowance covers what Vulkan lets a device do
with float32 subnormals (flush them to zero): each rounding may lose up to 2^-126 absolutely
(2K of them in the accumulation, scaled by |alpha|, and 3 in the epilogue), and a product whose
float32 operand is subnormal may be lost entirely. The float64 reference's own error (at most
gamma_64(K + 2) of the same sum, u_64 = 2^-53) is added too, so the check is rigorous.

`check` compares a result with the reference: NaN where the reference is NaN, the same infinity
where it is infinite, and within the bound elsewhere; where the float32 evaluation could
overflow (its partial sums' envelope reaches float32's range, or a FLOAT16 output's reaches
65520), a non-finite result is accepted too.
"""

from __future__ import annotations

import numpy as np

U32 = 2.0 ** -24
U64 = 2.0 ** -53
U16 = 2.0 ** -11
TINY32 = 2.0 ** -126  # float32's smallest normal
HALF_SUB16 = 2.0 ** -25  # half float16's subnormal spacing
F32_MAX = float(np.finfo(np.float32).max)
F16_OVERFLOW = 65520.0  # float32 values from here round to float16 infinity


def gamma(n: int | np.ndarray, u: float = U32) -> float | np.ndarray:
    return n * u / (1 - n * u)


def op(x: np.ndarray, transpose: bool) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if transpose else x


def products_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum_k a[.., m, k] * b[.., k, n] in float64 with IEEE semantics for every element (inf * 0
    = NaN, inf - inf = NaN): elementwise products and a plain sum, no BLAS shortcuts."""
    return (a[..., :, :, None] * b[..., None, :, :]).sum(axis=-2)


def expected(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_a: bool, trans_b: bool, alpha: float,
             beta: float) -> np.ndarray:
    """alpha * op(a) x op(b) (+ beta * c) in float64; the operands as stored (op applied here)."""
    a64, b64 = op(a.astype(np.float64), trans_a), op(b.astype(np.float64), trans_b)
    with np.errstate(all="ignore"):
        finite = np.isfinite(a64).all() and np.isfinite(b64).all()
        s = np.matmul(a64, b64) if finite else products_sum(a64, b64)
        r = np.float64(alpha) * s
        if c is not None:
            r = r + np.float64(beta) * c.astype(np.float64)
    return r


def _subnormal32(x: np.ndarray) -> np.ndarray:
    return (x != 0) & (np.abs(x) < TINY32)


KERNELS = ("tiled", "coopmat")


def terms(k: int, kernel: str = "tiled") -> int:
    """n of the gamma(n) that bounds the float32 evaluation (sum and epilogue) for K = k: every
    term's rounding factors (docs/gemm.md, "Error bound" and "FLOAT16 on cooperative matrices")."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel {kernel!r} is not one of {KERNELS}")
    return k + 2 if kernel == "tiled" else 5 * k + 2


def bound(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_a: bool, trans_b: bool, alpha: float,
          beta: float, out_f16: bool, kernel: str = "tiled") -> tuple[np.ndarray, np.ndarray]:
    """(the bound on |computed - exact| per output element, the envelope of every value the
    float32 evaluation forms: where it reaches float32's range an overflow is possible)."""
    # non-finite operands make their whole row / column of the output non-finite, checked apart
    # (`check`): the bound and the envelope are those of the finite values
    a64, b64 = (op(np.nan_to_num(np.abs(x.astype(np.float64)), nan=0, posinf=0), t) for x, t in ((a, trans_a), (b, trans_b)))
    k = a64.shape[-1]
    with np.errstate(all="ignore"):
        p = np.matmul(a64, b64) * (1 + gamma(k + 2, U64))  # sum |a||b|, rounded up for its own float64 error
        flushed = (np.matmul(np.where(_subnormal32(a64), a64, 0), b64)
                   + np.matmul(a64, np.where(_subnormal32(b64), b64, 0)))
        pa = abs(alpha) * p
        c64 = np.nan_to_num(np.abs(c.astype(np.float64)), nan=0, posinf=0) if c is not None else None
        pc = abs(beta) * c64 if c64 is not None else np.zeros_like(pa)
        g = gamma(terms(k, kernel))
        err = (g + gamma(k + 2, U64)) * (pa + pc) + abs(alpha) * flushed * (1 + g) + 2 * (2 * k * abs(alpha) + 3) * TINY32
        if c64 is not None:
            err = err + abs(beta) * np.where(_subnormal32(c64), c64, 0)
        envelope = np.maximum(np.maximum(p, pa), pa + pc) * (1 + gamma(terms(k, kernel) + 1))
        if out_f16:
            exact = expected(a, b, c, trans_a, trans_b, alpha, beta)
            err = err + U16 * (np.abs(exact) + err) + HALF_SUB16
    return err, envelope


def check(got: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_a: bool, trans_b: bool,
          alpha: float, beta: float, kernel: str = "tiled") -> None:
    """Assert `got` (the output's values, float32 or float16) against the reference and the bound of
    `kernel` ("tiled", "coopmat")."""
    f16 = got.dtype == np.float16
    ref = expected(a, b, c, trans_a, trans_b, alpha, beta)
    err, envelope = bound(a, b, c, trans_a, trans_b, alpha, beta, f16, kernel)
    g = got.astype(np.float64)
    # The reference is NaN or infinite only through NaN / infinite operands (float64 cannot
    # overflow here); the float32 evaluation sees the same ones and gives the same NaN or the same
    # infinity, unless its own finite partial sums can overflow (`overflow`: then any non-finite
    # result is accepted as well).
    overflow = envelope >= F32_MAX
    nonfinite_ok = ~np.isfinite(g)
    if f16:
        overflow = overflow | (np.abs(ref) + err >= F16_OVERFLOW)
    nan_ref, inf_ref, fin = np.isnan(ref), np.isinf(ref), np.isfinite(ref)
    bad = nan_ref & ~np.isnan(g)
    bad |= inf_ref & (g != ref) & ~(overflow & nonfinite_ok)
    with np.errstate(invalid="ignore"):
        bad |= fin & ~(np.abs(g - ref) <= err) & ~(overflow & nonfinite_ok)
        if f16:  # certain float16 overflow (no float32 one): the infinity of the reference's sign
            certain = fin & (np.abs(ref) - err >= F16_OVERFLOW) & (envelope < F32_MAX)
            bad |= certain & (g != np.copysign(np.inf, ref))
    idx = np.argwhere(bad)
    if idx.size:
        i = tuple(idx[0])
        raise AssertionError(f"{len(idx)} of {bad.size} elements outside the bound, first at {list(i)}: got {g[i]!r}, "
                             f"reference {ref[i]!r}, bound {err[i]!r} (|diff| {abs(g[i] - ref[i])!r})")


def worst_ratio(got: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_a: bool, trans_b: bool,
                alpha: float, beta: float, kernel: str = "tiled") -> float:
    """max |got - exact| / bound over finite elements (how much of the bound is used)."""
    ref = expected(a, b, c, trans_a, trans_b, alpha, beta)
    err, _ = bound(a, b, c, trans_a, trans_b, alpha, beta, got.dtype == np.float16, kernel)
    fin = np.isfinite(ref) & np.isfinite(got.astype(np.float64)) & (err > 0)
    if not fin.any():
        return 0.0
    return float((np.abs(got.astype(np.float64) - ref)[fin] / err[fin]).max())
