// ELEMENT_WISE_TAN, _ATAN, _ASIN, _ACOS and _ATAN_YX (kompute_dml/ops/elementwise_trig.py) for
// unary_math.glsl and elementwise.comp: integer code and unfused float32 +, -, * only, divisions
// and square roots correctly rounded in integer code (f32_exact.glsl, unary_math.glsl), so every
// device gives the same bits. Polynomials fitted by tools/fit_math.py (which prints them and
// their error alone); measured bounds: docs/elementwise_trig.md.
#ifndef KDML_INV_TRIG_MATH_GLSL
#define KDML_INV_TRIG_MATH_GLSL

#include "df_math.glsl"

const uint UM_PIO2_BITS = 0x3FC90FDBu;  // float32(pi / 2)
const uint UM_PI_BITS = 0x40490FDBu;    // float32(pi)
const float UM_PIO2_HI = 1.570796371e+00, UM_PIO2_LO = -4.371138829e-08;  // pi / 2 = HI + LO
const float UM_PI_HI = 3.141592741e+00, UM_PI_LO = -8.742277657e-08;

// tan(x): SIN / COS's reduction (trig_math.glsl), then sin(r) / cos(r) (even quadrants) or
// -cos(r) / sin(r) (odd), both as unrounded pairs divided as pairs (df_div), so the result is
// rounded once; |x| < 2^-12: x (x^3 / 3 is below half an ulp); odd; +-inf -> NaN
uint um_tan(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a == F32_INF) return F32_QNAN;
    if (a < 0x39800000u) return x;
    float yh, yl, s1, s2, c1, c2, sh, sl, ch, cl;
    uint q = um_trig_reduce(a, yh, yl);
    um_ksin_parts(yh, yl, s1, s2);
    um_kcos_parts(yh, yl, c1, c2);
    df_fast_two_sum(s1, s2, sh, sl);
    df_fast_two_sum(c1, c2, ch, cl);
    float y = (q & 1u) == 0u ? df_div(sh, sl, ch, cl) : -df_div(ch, cl, sh, sl);
    return floatBitsToUint(y) ^ (x & 0x80000000u);
}

// ---- atan ----------------------------------------------------------------------------------
// atan(t) = t + t (z P(z)), z = t^2, |t| <= 7/16 (tools/fit_math.py)
const float UM_ATAN_P[7] = float[](-3.333333433e-01, 1.999998987e-01, -1.428522915e-01, 1.110053733e-01,
                                   -8.965789527e-02, 6.854957342e-02, -3.559485078e-02);

float um_atan_corr(float t) {  // t (z P(z))
    precise float z = t * t;
    precise float r = t * (z * um_horner(z, UM_ATAN_P));
    return r;
}

// atan(v) for 2^-12 <= v < 2^26 (fdlibm's atanf scheme): below 7/16 the polynomial; else
// atan(c) + atan(t) with c = 1/2, 1, 3/2, inf by v's range and t = (v - c) / (1 + c v) (the
// differences exact, one correctly rounded division), atan(c) as hi + lo
float um_atan_pos(float v) {
    precise float t;
    float hi, lo;
    if (v < 0.4375) {
        return v + um_atan_corr(v);
    } else if (v < 0.6875) {
        precise float n = 2.0 * v - 1.0;
        precise float d = 2.0 + v;
        t = um_div(n, d);
        hi = 4.636476040e-01; lo = 5.012158688e-09;  // atan(1/2)
    } else if (v < 1.1875) {
        precise float n = v - 1.0;
        precise float d = v + 1.0;
        t = um_div(n, d);
        hi = 7.853981853e-01; lo = -2.185569414e-08;  // atan(1)
    } else if (v < 2.4375) {
        precise float n = v - 1.5;
        precise float d = 1.0 + 1.5 * v;
        t = um_div(n, d);
        hi = 9.827937484e-01; lo = -2.513142405e-08;  // atan(3/2)
    } else {
        t = -um_div(1.0, v);
        hi = UM_PIO2_HI; lo = UM_PIO2_LO;
    }
    precise float y = hi - ((-um_atan_corr(t) - lo) - t);  // hi + lo + t + corr(t)
    return y;
}

// atan(x): x below 2^-12 (x^3 / 3 below half an ulp), float32(pi / 2) from 2^26 and at inf; odd
uint um_atan(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a < 0x39800000u) return x;
    uint s = x & 0x80000000u;
    if (a >= 0x4C800000u) return s | UM_PIO2_BITS;
    return s | floatBitsToUint(um_atan_pos(uintBitsToFloat(a)));
}

// atan2(y, x) (ATAN_YX: A the y, B the x), C99's special values: a NaN gives NaN; y = +-0 gives
// +-0 for x > 0 or x = +0 and +-pi for x < 0 or x = -0; x = +-0 gives +-pi/2; infinities +-pi/4,
// +-3pi/4, +-0, +-pi, +-pi/2 as C99's atan2 has them. Else z = atan(|y| / |x|) (the quotient
// correctly rounded, subnormal or infinite included), then +-z for x > 0, +-(pi - z) for x < 0
uint um_atan2(uint y, uint x) {
    uint ay = y & 0x7FFFFFFFu, ax = x & 0x7FFFFFFFu, sy = y & 0x80000000u;
    if (ay > F32_INF) return um_quiet(y);
    if (ax > F32_INF) return um_quiet(x);
    bool xneg = (x >> 31) != 0u;
    if (ay == 0u) return xneg ? (sy | UM_PI_BITS) : sy;
    if (ax == 0u) return sy | UM_PIO2_BITS;
    if (ax == F32_INF) {
        if (ay == F32_INF) return sy | (xneg ? 0x4016CBE4u : 0x3F490FDBu);  // 3 pi / 4, pi / 4
        return xneg ? (sy | UM_PI_BITS) : sy;
    }
    if (ay == F32_INF) return sy | UM_PIO2_BITS;
    uint q = f32_div_bits(ay, ax);
    if (q >= 0x4C800000u) return sy | UM_PIO2_BITS;  // |y / x| >= 2^26: pi/2 -+ |x / y| rounds to float32(pi/2)
    float z = uintBitsToFloat(um_atan(q));
    if (!xneg) return sy | floatBitsToUint(z);
    precise float r = UM_PI_HI - (z - UM_PI_LO);
    return sy | floatBitsToUint(r);
}

// ---- asin, acos ----------------------------------------------------------------------------
// asin(s) = s + s (z P(z)), z = s^2, s <= 1/2 (tools/fit_math.py)
const float UM_ASIN_P[7] = float[](1.666666716e-01, 7.499949634e-02, 4.465971515e-02, 3.011588939e-02,
                                   2.458323352e-02, 7.575757336e-03, 3.456719592e-02);

float um_asin_poly(float z) {  // P(z)
    return um_horner(z, UM_ASIN_P);
}

// For 1/2 <= v < 1: 2 asin(sqrt(t)) = A + B with t = (1 - v) / 2 (exact), s = sqrt(t)
// correctly rounded, A = 2 s and B = 2 (c + s t P(t)), c = (t - s^2) / (2 s) the square root's
// own rounding error (s^2 exact as a pair)
void um_asin_half(float v, out float A, out float B) {
    precise float t = (1.0 - v) * 0.5;
    float s = uintBitsToFloat(um_sqrt(floatBitsToUint(t)));
    float p, e;
    df_two_prod(s, s, p, e);
    precise float d = (t - p) - e;
    precise float s2 = 2.0 * s;
    precise float c = um_div(d, s2);
    A = s2;
    precise float b = 2.0 * (c + s * (t * um_asin_poly(t)));
    B = b;
}

// asin(x): x below 2^-12; below 1/2 the polynomial; above, pi/2 - 2 asin(sqrt((1 - |x|) / 2))
// with pi/2 - A an exact sum (Fast2Sum) before the small terms; +-1 -> +-pi/2, |x| > 1 -> NaN; odd
uint um_asin(uint x) {
    uint a = x & 0x7FFFFFFFu, s = x & 0x80000000u;
    if (a > F32_INF) return um_quiet(x);
    if (a > 0x3F800000u) return F32_QNAN;
    if (a == 0x3F800000u) return s | UM_PIO2_BITS;
    if (a < 0x39800000u) return x;
    float v = uintBitsToFloat(a);
    if (v < 0.5) {
        precise float z = v * v;
        precise float y = v + v * (z * um_asin_poly(z));
        return s | floatBitsToUint(y);
    }
    float A, B, h, e;
    um_asin_half(v, A, B);
    df_fast_two_sum(UM_PIO2_HI, -A, h, e);
    precise float y = h + ((e + UM_PIO2_LO) - B);
    return s | floatBitsToUint(y);
}

// acos(x): below 1/2 in magnitude pi/2 - asin(x) (pi/2 - x an exact sum); from 1/2 2 asin(s)
// (x > 0) or pi - 2 asin(s) (x < 0, pi - A an exact sum); acos(1) = +0, acos(-1) = pi, |x| > 1 -> NaN
uint um_acos(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a > 0x3F800000u) return F32_QNAN;
    if (x == 0x3F800000u) return 0u;
    if (x == 0xBF800000u) return UM_PI_BITS;
    float v = uintBitsToFloat(x);
    float h, e;
    if (a < 0x3F000000u) {
        precise float z = v * v;
        precise float r = v * (z * um_asin_poly(z));
        df_fast_two_sum(UM_PIO2_HI, -v, h, e);
        precise float y = h + ((e + UM_PIO2_LO) - r);
        return floatBitsToUint(y);
    }
    float A, B;
    um_asin_half(abs(v), A, B);
    if ((x >> 31) == 0u) {
        precise float y = A + B;
        return floatBitsToUint(y);
    }
    df_fast_two_sum(UM_PI_HI, -A, h, e);
    precise float y = h + ((e + UM_PI_LO) - B);
    return floatBitsToUint(y);
}

#endif
