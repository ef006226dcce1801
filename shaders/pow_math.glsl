// ELEMENT_WISE_POW and ELEMENT_WISE_CONSTANT_POW (kompute_dml/ops/elementwise_pow.py) on float32
// bits, for unary_math.glsl (CONSTANT_POW) and elementwise.comp (POW): integer code and unfused
// float32 +, -, * only (pairs of float32s where 24 bits are not enough: df_math.glsl). Also the
// 2^(hi + lo) that hyp_math.glsl's SINH / COSH take. Constants from tools/fit_math.py; measured
// bounds: docs/elementwise_pow.md.
//
// |x|^y = 2^(y log2 |x|): log2 |x| as a pair (relative error about 2^-44: |x| = 2^k z, z in
// [OFF, 2 OFF), z = c (1 + r) with c from a 32-entry table of z's subintervals (1 / c a float32,
// 1 itself for the subinterval holding z = 1, log2 c as a pair), r = z / c - 1 exact as a pair,
// log(1 + r) = r - r^2 / 2 + r^3 P(r) (Taylor to r^7, |r| < 2^-5.4)), its product with y as a
// pair, then 2^t for t = th + tl: 2^k' 2^f, |f| <= 1/2, 2^f = 1 + f ln 2 + f^2 Q(f) (f ln 2 an
// exact pair), 2^k' applied in integer code (subnormal results rounded once more). Integral y
// with |y| <= 64 instead: the significand's power by squaring on pairs (relative error about
// 2^-40), one rounding at the end (ties on the subnormal grid broken by the low part), so every
// result a float32 holds (2^10, 3^5, 0.5^-3) comes out exact.
#ifndef KDML_POW_MATH_GLSL
#define KDML_POW_MATH_GLSL

#include "df_math.glsl"

const uint UM_POW_OFF = 0x3F330000u;  // z in [OFF, 2 OFF): z = 1 inside a subinterval
const float UM_POW_INVC[32] = float[](1.414364696e+00, 1.383783817e+00, 1.354497313e+00, 1.326424837e+00,
    1.299492359e+00, 1.273631811e+00, 1.248780489e+00, 1.224880338e+00, 1.201877952e+00, 1.179723501e+00,
    1.158371091e+00, 1.137777805e+00, 1.117903948e+00, 1.098712444e+00, 1.080168724e+00, 1.062240720e+00,
    1.044897914e+00, 1.028112411e+00, 1.011857748e+00, 1.000000000e+00, 9.624060392e-01, 9.343065619e-01,
    9.078013897e-01, 8.827586174e-01, 8.590604067e-01, 8.366013169e-01, 8.152866364e-01, 7.950310707e-01,
    7.757575512e-01, 7.573964596e-01, 7.398843765e-01, 7.231638432e-01);
const float UM_POW_LOGC_HI[32] = float[](-5.001541972e-01, -4.686185718e-01, -4.377575219e-01,
    -4.075429142e-01, -3.779481649e-01, -3.489482701e-01, -3.205198944e-01, -2.926408052e-01, -2.652904093e-01,
    -2.384487689e-01, -2.120974958e-01, -1.862188429e-01, -1.607962400e-01, -1.358138472e-01, -1.112566814e-01,
    -8.711074293e-02, -6.336199492e-02, -3.999801353e-02, -1.700648293e-02, -0.000000000e+00, 5.528239906e-02,
    9.803209454e-02, 1.395514011e-01, 1.799090952e-01, 2.191685140e-01, 2.573878169e-01, 2.946207225e-01,
    3.309168518e-01, 3.663222492e-01, 4.008794129e-01, 4.346282482e-01, 4.676055610e-01);
const float UM_POW_LOGC_LO[32] = float[](2.853924030e-08, -2.659393150e-09, -1.024370455e-08, -1.230218327e-08,
    1.395577520e-08, -5.148235616e-09, -7.476672614e-09, -9.601899720e-09, 8.726367184e-09, 2.642235097e-09,
    -7.292343174e-09, -8.529019158e-10, 5.227613009e-09, -5.474309450e-09, 1.488688062e-10, 3.242344171e-09,
    -3.597194542e-09, -6.611384218e-10, -1.521191784e-10, 0.000000000e+00, 1.652576687e-10, -1.569621516e-10,
    -3.056619846e-09, 2.212786065e-10, -2.692011059e-10, 8.991495548e-09, 4.861523628e-09, -5.166288508e-10,
    1.075459011e-08, 4.582101365e-09, 1.166875041e-08, -1.362222157e-08);
const float UM_LN2F_HI = 6.931471825e-01, UM_LN2F_LO = -1.904654212e-09;  // ln 2 = HI + LO
const float UM_INVLN2_HI = 1.442695022e+00, UM_INVLN2_LO = 1.925963034e-08;  // 1 / ln 2
// 2^f = 1 + f ln 2 + f^2 Q(f) on [-1/2, 1/2] (tools/fit_math.py)
const float UM_EXP2_Q[6] = float[](2.402265072e-01, 5.550410599e-02, 9.618037380e-03, 1.333371270e-03,
                                   1.546689309e-04, 1.524137679e-05);

// 2^(th + tl) = (h + l) 2^k, h + l a normalized pair in [0.7, 1.42] (|tl| <= ulp(th), |th| <= 400)
void um_exp2_pair(float th, float tl, out float h, out float l, out int k) {
    precise float kf = roundEven(th);
    precise float f0 = th - kf;  // exact
    float f, fl, ph, pl, hh, e;
    df_two_sum(f0, tl, f, fl);
    df_two_prod(f, UM_LN2F_HI, ph, pl);
    df_fast_two_sum(1.0, ph, hh, e);
    precise float q = UM_EXP2_Q[5];
    q = q * f + UM_EXP2_Q[4];
    q = q * f + UM_EXP2_Q[3];
    q = q * f + UM_EXP2_Q[2];
    q = q * f + UM_EXP2_Q[1];
    q = q * f + UM_EXP2_Q[0];
    precise float small = e + ((pl + f * UM_LN2F_LO) + (f * f) * q);
    precise float y0 = hh + small;
    precise float ll = small + (fl * UM_LN2F_HI) * y0;  // 2^(f + fl) = 2^f (1 + fl ln 2)
    df_fast_two_sum(hh, ll, h, l);  // normalized: h the rounded value
    k = int(kf);
}

// 2^(th + tl) 2^sc as float32 bits (|tl| <= ulp(th); the power of two in integer code:
// infinity above the range, rounded to the subnormal grid below it)
uint um_exp2_df(float th, float tl, int sc) {
    if (th > 400.0) return F32_INF;
    if (th < -400.0) return 0u;
    float h, l;
    int k;
    um_exp2_pair(th, tl, h, l, k);
    precise float y = h + l;
    return um_ldexp(y, k + sc);
}

// log2(x) = lh + ll for a positive, finite, nonzero float32 x (its bits; subnormals normalized)
void um_log2_df(uint a, out float lh, out float ll) {
    uint m;
    int ex;
    f32_unpack(a, m, ex);
    uint ix = (m & 0x7FFFFFu) | 0x3F800000u;  // [1, 2)
    uint tmp = ix - UM_POW_OFF;
    uint top = tmp & 0xFF800000u;  // 0, or 2^23 (z = the significand halved)
    int k = ex + int(top >> 23);
    uint i = (tmp >> 18) & 31u;
    float z = uintBitsToFloat(ix - top);
    float p, e, r1, r2, q1, q2, s, se, Lh, Ll, Mh, Ml, s1, e1, s2, e2;
    df_two_prod(z, UM_POW_INVC[i], p, e);
    precise float r0 = p - 1.0;  // exact: p within [1/2, 2]
    df_two_sum(r0, e, r1, r2);
    df_two_prod(r1, r1, q1, q2);
    precise float q2b = q2 + 2.0 * (r1 * r2);
    df_two_sum(r1, -0.5 * q1, s, se);
    precise float P = 1.428571492e-01;  // 1/7, -1/6, 1/5, -1/4, 1/3
    P = P * r1 - 1.666666716e-01;
    P = P * r1 + 2.000000030e-01;
    P = P * r1 - 2.500000000e-01;
    P = P * r1 + 3.333333433e-01;
    precise float lo = ((se + r2) - 0.5 * q2b) + (r1 * q1) * P;
    df_fast_two_sum(s, lo, Lh, Ll);  // log(1 + r)
    df_mul(Lh, Ll, UM_INVLN2_HI, UM_INVLN2_LO, Mh, Ml);
    df_two_sum(float(k), UM_POW_LOGC_HI[i], s1, e1);
    df_two_sum(s1, Mh, s2, e2);
    precise float tail = ((e1 + e2) + UM_POW_LOGC_LO[i]) + Ml;
    df_two_sum(s2, tail, lh, ll);
}

// log(xh + xl) = h + l for a positive, finite, normal pair (|xl| <= ulp(xh)): log2(xh) ln 2 + xl / xh
void um_log_df(float xh, float xl, out float h, out float l) {
    float lh, ll, mh, ml;
    um_log2_df(floatBitsToUint(xh), lh, ll);
    df_mul(lh, ll, UM_LN2F_HI, UM_LN2F_LO, mh, ml);
    precise float c = ml + uintBitsToFloat(f32_div_bits(floatBitsToUint(xl), floatBitsToUint(xh)));
    df_two_sum(mh, c, h, l);
}

// (h + l) 2^k rounded once to float32 bits, h > 0 normal with h = fl(h + l): infinity above the
// range; on the subnormal grid a tie is broken by l's sign
uint um_ldexp_df(float h, float l, int k) {
    uint hb = floatBitsToUint(h);
    int e = int((hb >> 23) & 0xFFu) + k;
    if (e >= 255) return F32_INF;
    if (e >= 1) return (uint(e) << 23) | (hb & 0x7FFFFFu);
    int sh = 1 - e;
    if (sh > 25) return 0u;
    uint m = (hb & 0x7FFFFFu) | 0x800000u;
    uint q = m >> uint(sh), rem = m & ((1u << uint(sh)) - 1u), half_ = 1u << uint(sh - 1);
    bool up = rem > half_ || (rem == half_ && (l > 0.0 || (l == 0.0 && (q & 1u) != 0u)));
    return up ? q + 1u : q;
}

// |x|^n for |x| positive, finite, nonzero (bits) and 1 <= |n| <= 64: |x| = b 2^ex (b in [1, 2)),
// b^|n| by squaring on pairs (below 2^64), its reciprocal as a pair for n < 0, then 2^(ex n)
uint um_pow_int(uint ax, int n) {
    uint m;
    int ex;
    f32_unpack(ax, m, ex);
    float bh = uintBitsToFloat((m & 0x7FFFFFu) | 0x3F800000u), bl = 0.0, ph = 1.0, pl = 0.0;
    uint k = uint(abs(n));
    for (int it = 0; it < 7; ++it) {
        if ((k & 1u) != 0u) df_mul(ph, pl, bh, bl, ph, pl);
        k >>= 1;
        if (k == 0u) break;
        df_mul(bh, bl, bh, bl, bh, bl);
    }
    if (n < 0) {
        float q = uintBitsToFloat(f32_div_bits(0x3F800000u, floatBitsToUint(ph)));
        float p, e;
        df_two_prod(q, ph, p, e);
        precise float r = ((1.0 - p) - e) - q * pl;
        precise float q2 = r * q;
        df_fast_two_sum(q, q2, ph, pl);
    }
    return um_ldexp_df(ph, pl, ex * n);
}

// pow(x, y) on float32 bits with y = yh + yl (a pair: an integer exponent may need 32 bits),
// y_int / y_odd: y an integer / an odd one. C99's special values: y = +-0 or x = 1 gives 1 (NaN
// or not); else a NaN gives NaN; y = +-inf gives 1 (|x| = 1), +0 or +inf by |x| against 1;
// x = +-0 or +-inf: +-0 or +-inf by y's sign, negative only for an odd y; x < 0 with a
// non-integral y: NaN (DirectML's "negative bases ... otherwise NaN"); else |x|^y, negated for
// x < 0 and an odd y
uint um_pow(uint x, float yh, float yl, bool y_int, bool y_odd) {
    uint yb = floatBitsToUint(yh), ay = yb & 0x7FFFFFFFu, ax = x & 0x7FFFFFFFu;
    if ((ay == 0u && yl == 0.0) || x == 0x3F800000u) return 0x3F800000u;
    if (ax > F32_INF) return um_quiet(x);
    if (ay > F32_INF) return um_quiet(yb);
    bool yneg = (yb >> 31) != 0u;
    if (ay == F32_INF) {
        if (ax == 0x3F800000u) return 0x3F800000u;
        return (ax < 0x3F800000u) != yneg ? 0u : F32_INF;
    }
    uint sign = ((x >> 31) != 0u && y_odd) ? 0x80000000u : 0u;
    if (ax == 0u) return sign | (yneg ? F32_INF : 0u);
    if (ax == F32_INF) return sign | (yneg ? 0u : F32_INF);
    if ((x >> 31) != 0u && !y_int) return F32_QNAN;
    if (ax == 0x3F800000u) return sign | 0x3F800000u;  // (-1)^y: +-1 by y's parity (log2 1 = 0 times any y)
    if (y_int && ay <= 0x42800000u && yl == 0.0) return sign | um_pow_int(ax, int(yh));  // |y| <= 64
    float lh, ll, th, tl;
    um_log2_df(ax, lh, ll);
    precise float t0 = yh * lh;
    if (abs(t0) > 512.0) return sign | (t0 > 0.0 ? F32_INF : 0u);
    df_mul(yh, yl, lh, ll, th, tl);
    return sign | um_exp2_df(th, tl, 0);
}

// a float32 exponent's integer / odd flags from its bits
void um_pow_flags(uint y, out bool y_int, out bool y_odd) {
    uint e = (y >> 23) & 0xFFu;
    if (e >= 151u && e < 255u) { y_int = true; y_odd = false; return; }  // |y| >= 2^24 (even)
    if (e < 127u || e == 255u) { y_int = (y & 0x7FFFFFFFu) == 0u; y_odd = false; return; }
    uint unit = 150u - e;  // the bit of the 1s place (23: the implicit bit)
    uint frac = (y & 0x7FFFFFu) | 0x800000u;
    y_int = (frac & ((1u << unit) - 1u)) == 0u;
    y_odd = y_int && ((frac >> unit) & 1u) != 0u;
}

// pow with a float32 exponent's bits
uint um_pow_f(uint x, uint y) {
    bool y_int, y_odd;
    um_pow_flags(y, y_int, y_odd);
    return um_pow(x, uintBitsToFloat(y), 0.0, y_int, y_odd);
}

#endif
