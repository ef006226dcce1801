// ELEMENT_WISE_SINH, _COSH, _ASINH, _ACOSH, _ATANH (kompute_dml/ops/elementwise_trig.py) for
// unary_math.glsl: integer code and unfused float32 +, -, * only, divisions and square roots
// correctly rounded in integer code; exp and log as pow_math.glsl's pairs (2^(hi + lo) of
// x / ln 2, log2 times ln 2), so that e +- 1 / e and the logarithms' arguments keep their low
// parts and the result is rounded once. Polynomials fitted by tools/fit_math.py; measured
// bounds: docs/elementwise_trig.md.
#ifndef KDML_HYP_MATH_GLSL
#define KDML_HYP_MATH_GLSL

#include "pow_math.glsl"

const float UM_SINH_P[5] = float[](1.666666716e-01, 8.333332837e-03, 1.984129631e-04, 2.755211426e-06,
                                   2.552765466e-08);
const float UM_COSH_P[5] = float[](4.166666791e-02, 1.388888923e-03, 2.480161311e-05, 2.755272703e-07,
                                   2.124951548e-09);
const float UM_ASINH_P[7] = float[](-1.666666716e-01, 7.499991357e-02, -4.463970289e-02, 3.032895923e-02,
                                    -2.188725583e-02, 1.482743397e-02, -6.564299110e-03);
const float UM_ATANH_P[7] = float[](3.333333731e-01, 1.999973208e-01, 1.429469883e-01, 1.096918955e-01,
                                    1.026990861e-01, 2.491569519e-02, 1.754728854e-01);

// exp(v) 2^sc as float32 bits for 0 <= v <= 100: 2^(v / ln 2), v (1 / ln 2) a pair
uint um_exp_sc(float v, int sc) {
    float th, tl;
    df_mul(v, 0.0, UM_INVLN2_HI, UM_INVLN2_LO, th, tl);
    return um_exp2_df(th, tl, sc);
}

// (e +- 1 / e) / 2 rounded once, e = exp(v) for 1 <= v < 16 as a pair (eh + el), 1 / e as a pair
// (q + ql: q correctly rounded, ql from the exact remainder)
float um_exp_sym(float v, float sgn) {
    float th, tl, h, l, p, pe, s, se;
    int k;
    df_mul(v, 0.0, UM_INVLN2_HI, UM_INVLN2_LO, th, tl);
    um_exp2_pair(th, tl, h, l, k);
    float sc = uintBitsToFloat(uint(127 + k) << 23);  // exact: k <= 24
    precise float eh = h * sc;
    precise float el = l * sc;
    float q = uintBitsToFloat(f32_div_bits(0x3F800000u, floatBitsToUint(eh)));
    df_two_prod(q, eh, p, pe);
    precise float ql = (((1.0 - p) - pe) - q * el) * q;
    df_two_sum(eh, sgn * q, s, se);
    precise float y = 0.5 * (s + (se + (el + sgn * ql)));
    return y;
}

// sqrt(ah + al) = sh + sl for a positive normal pair: sh correctly rounded, sl from the exact remainder
void um_sqrt_df(float ah, float al, out float sh, out float sl) {
    float s = uintBitsToFloat(um_sqrt(floatBitsToUint(ah)));
    float p, pe;
    df_two_prod(s, s, p, pe);
    precise float d = ((ah - p) - pe) + al;
    precise float two_s = 2.0 * s;
    sh = s;
    sl = uintBitsToFloat(f32_div_bits(floatBitsToUint(d), floatBitsToUint(two_s)));
}

// log(v + sqrt(ah + al)) rounded once (ASINH, ACOSH): the square root and the sum as pairs, then um_log_df
float um_log_v_sqrt(float v, float ah, float al) {
    float sh, sl, wh, we, h, l;
    um_sqrt_df(ah, al, sh, sl);
    df_two_sum(v, sh, wh, we);
    precise float wl = we + sl;
    float nh, nl;
    df_fast_two_sum(wh, wl, nh, nl);
    um_log_df(nh, nl, h, l);
    precise float y = h + l;
    return y;
}

// log(2 v) rounded once for v >= 2^12 (beyond 2^126: log(v) + ln 2 as pairs)
float um_log2v(float v) {
    float h, l, s, se;
    if (v < 8.507059173e+37) {
        um_log_df(2.0 * v, 0.0, h, l);
        precise float y = h + l;
        return y;
    }
    um_log_df(v, 0.0, h, l);
    df_two_sum(h, UM_LN2F_HI, s, se);
    precise float y = s + ((se + l) + UM_LN2F_LO);
    return y;
}

// v + v (z P(z)), z = v^2, for the odd polynomials of degree 6 in z (ASINH, ATANH)
float um_odd7(float v, float c[7]) {
    precise float z = v * v;
    precise float y = v + v * (z * um_horner(z, c));
    return y;
}

// sinh(x): x below 2^-12; below 1 x + x (z P(z)); below 16 (e - 1 / e) / 2 (e = exp |x|, pairs: um_exp_sym);
// beyond, exp(|x|) / 2 (infinity from 89.42); odd
uint um_sinh(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a == F32_INF || a < 0x39800000u) return x;
    precise float v = uintBitsToFloat(a);
    precise float y;
    if (v < 1.0) {
        precise float z = v * v;
        y = v + v * (z * um_horner(z, UM_SINH_P));
    } else if (v < 16.0) {
        y = um_exp_sym(v, -1.0);
    } else {
        y = uintBitsToFloat(um_exp_sc(min(v, 100.0), -1));
    }
    return (x & 0x80000000u) | floatBitsToUint(y);
}

// cosh(x): 1 below 2^-12; below 1 1 + z / 2 + z^2 P(z) with z = x^2 an exact pair and 1 + zh / 2
// an exact sum; below 16 (e + 1 / e) / 2 (um_exp_sym); beyond, exp(|x|) / 2; even
uint um_cosh(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a == F32_INF) return F32_INF;
    if (a < 0x39800000u) return 0x3F800000u;
    precise float v = uintBitsToFloat(a);
    precise float y;
    if (v < 1.0) {
        float zh, zl, h, e;
        df_two_prod(v, v, zh, zl);
        df_fast_two_sum(1.0, 0.5 * zh, h, e);
        y = h + (e + (0.5 * zl + (zh * zh) * um_horner(zh, UM_COSH_P)));
    } else if (v < 16.0) {
        y = um_exp_sym(v, 1.0);
    } else {
        y = uintBitsToFloat(um_exp_sc(min(v, 100.0), -1));
    }
    return floatBitsToUint(y);
}

// asinh(x): x below 2^-12; below 1/2 the polynomial; below 2^12 log(v + sqrt(v^2 + 1)) with
// v^2 + 1 an exact pair (um_log_v_sqrt); beyond, log(2 v) (the rest is below 2^-26 relative); odd
uint um_asinh(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a == F32_INF || a < 0x39800000u) return x;
    precise float v = uintBitsToFloat(a);
    precise float y;
    if (v < 0.5) {
        y = um_odd7(v, UM_ASINH_P);
    } else if (v < 4096.0) {
        float zh, zl, ah, ae, nh, nl;
        df_two_prod(v, v, zh, zl);
        df_two_sum(zh, 1.0, ah, ae);
        precise float al = ae + zl;
        df_fast_two_sum(ah, al, nh, nl);
        y = um_log_v_sqrt(v, nh, nl);
    } else {
        y = um_log2v(v);
    }
    return (x & 0x80000000u) | floatBitsToUint(y);
}

// acosh(x): NaN below 1 (-0 and -inf included), +0 at 1; below 2^12 log(v + sqrt(v^2 - 1)),
// v^2 - 1 = t^2 + 2 t (t = v - 1, exact) an exact pair; beyond, log(2 v)
uint um_acosh(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if ((x >> 31) != 0u || x < 0x3F800000u) return F32_QNAN;
    if (x == 0x3F800000u) return 0u;
    if (x == F32_INF) return x;
    precise float v = uintBitsToFloat(x);
    precise float y;
    if (v < 4096.0) {
        precise float t = v - 1.0;
        float th, tl, ah, ae, nh, nl;
        df_two_prod(t, t, th, tl);
        df_two_sum(th, 2.0 * t, ah, ae);
        precise float al = ae + tl;
        df_fast_two_sum(ah, al, nh, nl);
        y = um_log_v_sqrt(v, nh, nl);
    } else {
        y = um_log2v(v);
    }
    return floatBitsToUint(y);
}

// atanh(x): x below 2^-12; below 1/2 the polynomial; then (log(1 + v) - log(1 - v)) / 2 with 1 + v
// an exact pair, 1 - v exact and both logarithms pairs (um_log_df); +-1 -> +-inf, |x| > 1 -> NaN; odd
uint um_atanh(uint x) {
    uint a = x & 0x7FFFFFFFu, s = x & 0x80000000u;
    if (a > F32_INF) return um_quiet(x);
    if (a > 0x3F800000u) return F32_QNAN;
    if (a == 0x3F800000u) return s | F32_INF;
    if (a < 0x39800000u) return x;
    precise float v = uintBitsToFloat(a);
    precise float y;
    if (v < 0.5) {
        y = um_odd7(v, UM_ATANH_P);
    } else {
        float ph, pl, p1, p2, m1, m2, dh, de;
        df_fast_two_sum(1.0, v, ph, pl);
        precise float m = 1.0 - v;
        um_log_df(ph, pl, p1, p2);
        um_log_df(m, 0.0, m1, m2);
        df_two_sum(p1, -m1, dh, de);
        y = 0.5 * (dh + (de + (p2 - m2)));
    }
    return s | floatBitsToUint(y);
}

#endif
