// The element-wise unary math operators of kompute_dml/ops/elementwise_unary.py (FN_ABS, FN_SQRT,
// ...): fn32 / fn16 on an element's bits for float_unary.comp. Everything is integer code or
// float32 +, -, * (which Vulkan rounds correctly; `precise` keeps them unfused), so the results
// are the same on every device: the built-ins' loose Vulkan precision (exp 3 + 2|x| ulp, log
// 3 ulp, sqrt and division 2.5 ulp) and denormal flushing are never relied on. Error bounds,
// measured against float64: docs/elementwise_unary.md.
//
// The element-wise block's b_str words, unused by one-input operators, carry the parameters:
// [0] flags (1: ScaleBias present), [1] scale, [2] bias (float32 bits), [3] the operator's
// parameter (ROUND's RoundingMode, SOFTPLUS's Steepness, CONSTANT_POW's Exponent); act_math.glsl's
// operators: [3], [4]. A shader whose block has them elsewhere defines UM_PARAM_WORDS first
// (elementwise.comp's POW: pc.prm), and UM_FUNCTIONS_ONLY where it takes the functions and ScaleBias
// without float_unary.comp's FN_<NAME> selection; UM_LIB_ONLY: the functions alone, no parameter
// words (lrn.comp, pooling.comp; convolution's epilogue sets UM_P0 / UM_P1 for act_math.glsl's).
#ifndef KDML_UNARY_MATH_GLSL
#define KDML_UNARY_MATH_GLSL

#ifndef UM_PARAM_WORDS
#define UM_PARAM_WORDS pc.b_str
#endif

#include "f32_exact.glsl"
#include "gelu_math.glsl"

// UM_LIB_ONLY: another shader's use of the functions below (um_exp, um_log, um_sqrt, ...) without
// the element-wise block's parameters (pc.b_str) and the variant's fn32 / fn16
#ifndef UM_LIB_ONLY
// DML_SCALE_BIAS: g(x) = x * scale + bias, a float32 product then a float32 sum (not fused)
uint um_scale_bias(uint x) {
    if ((UM_PARAM_WORDS[0] & 1u) == 0u) return x;
    precise float t = uintBitsToFloat(x) * uintBitsToFloat(UM_PARAM_WORDS[1]);
    precise float r = t + uintBitsToFloat(UM_PARAM_WORDS[2]);
    return floatBitsToUint(r);
}
#endif

bool um_nan(uint x) { return (x & 0x7FFFFFFFu) > F32_INF; }
uint um_quiet(uint x) { return x | 0x00400000u; }  // a NaN input goes out quiet, payload and sign kept

// x rounded to an integer: mode 0 halves to even, 1 toward zero, 2 halves away from zero
// (DML_ROUNDING_MODE's order), 3 toward -inf (FLOOR), 4 toward +inf (CEIL); on the bits, so
// subnormals round like any other value. -0 and the sign of a zero result are kept.
uint um_round(uint x, uint mode) {
    uint e = (x >> 23) & 0xFFu;
    uint s = x & 0x80000000u;
    if (e >= 150u) return um_nan(x) ? um_quiet(x) : x;  // integral, infinite or NaN
    if ((x & 0x7FFFFFFFu) == 0u) return x;
    bool up;
    if (e < 127u) {  // 0 < |x| < 1: the result is 0 or 1 in magnitude
        if (mode == 0u) up = e == 126u && (x & 0x7FFFFFu) != 0u;
        else if (mode == 2u) up = e == 126u;
        else if (mode == 3u) up = s != 0u;
        else if (mode == 4u) up = s == 0u;
        else up = false;
        return up ? (s | 0x3F800000u) : s;
    }
    uint sh = 150u - e;  // fraction bits, 1 to 23
    uint mask = (1u << sh) - 1u;
    uint frac = x & mask, half_ = 1u << (sh - 1u);
    uint t = x & ~mask;
    // (t >> sh) & 1 is the integer part's lowest bit (for e = 127 the exponent's, odd like the 1)
    if (mode == 0u) up = frac > half_ || (frac == half_ && ((t >> sh) & 1u) != 0u);
    else if (mode == 2u) up = frac >= half_;
    else if (mode == 3u) up = s != 0u && frac != 0u;
    else if (mode == 4u) up = s == 0u && frac != 0u;
    else up = false;
    return up ? t + (1u << sh) : t;  // a carry moves into the exponent
}

// DirectML's SIGN: -1 for x < 0, 1 for x > 0, else +0 (its page: -0 included; NaN, neither, too)
uint um_sign(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a == 0u || a > F32_INF) return 0u;
    return (x & 0x80000000u) | 0x3F800000u;
}

// ---- square root, correctly rounded ------------------------------------------------------------
// M - q^2 as an int (false where it does not fit), M = hi 2^32 + lo
bool um_sqrt_rem(uint hi, uint lo, uint q, out int r) {
    uint phi, plo;
    umulExtended(q, q, phi, plo);
    uint rlo = lo - plo;
    uint rhi = hi - phi - (lo < plo ? 1u : 0u);
    r = int(rlo);
    return rhi == (r < 0 ? 0xFFFFFFFFu : 0u);
}

// q moved to round(sqrt(M)): q is it iff (q - 1/2)^2 <= M < (q + 1/2)^2, i.e. -q < M - q^2 <= q
// (no ties: the root of an integer is never a half-integer). False if 4 steps do not get there.
bool um_sqrt_fix(uint hi, uint lo, inout uint q) {
    for (int it = 0; it < 4; ++it) {
        int r;
        if (!um_sqrt_rem(hi, lo, q, r)) return false;
        if (r > int(q)) q += 1u;
        else if (r <= -int(q)) q -= 1u;
        else return true;
    }
    return false;
}

// floor(sqrt(M)) for M < 2^48, digit by digit
uint um_isqrt(uint hi, uint lo) {
    uint q = 0u;
    for (int b = 23; b >= 0; --b) {
        uint c = q | (1u << uint(b));
        uint phi, plo;
        umulExtended(c, c, phi, plo);
        if (phi < hi || (phi == hi && plo <= lo)) q = c;
    }
    return q;
}

// sqrt(x) = sqrt(M) 2^h with M = m 2^23 or m 2^24 (the exponent left even), M in [2^46, 2^48):
// the 24-bit significand is round(sqrt(M)), found from the device's sqrt (any accuracy: it is
// checked and corrected in integer code, else computed digit by digit). -0 -> -0, x < 0 -> NaN.
uint um_sqrt(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a == 0u) return x;
    if ((x >> 31) != 0u) return F32_QNAN;
    if (a == F32_INF) return x;
    uint m;
    int ex;
    f32_unpack(a, m, ex);  // a = m 2^(ex - 23)
    bool odd = (ex & 1) != 0;
    uint sh = odd ? 24u : 23u;
    uint hi = m >> (32u - sh), lo = m << sh;
    int h = (ex - 23 - int(sh)) / 2;  // even, so exact
    precise float f = uintBitsToFloat((m & 0x7FFFFFu) | 0x3F800000u) * (odd ? 2.0 : 1.0);
    precise float est = sqrt(f);  // sqrt(M) 2^-23
    uint q = uint(clamp(est, 1.0, 2.0) * 8388608.0);
    if (!um_sqrt_fix(hi, lo, q)) {
        q = um_isqrt(hi, lo);
        um_sqrt_fix(hi, lo, q);
    }
    return (uint(h + 149) << 23) + q;  // q in [2^23, 2^24]: its top bit carries into the exponent
}

// ---- exp, log ------------------------------------------------------------------------------------
// p 2^k as float32 bits for a normal p: infinity above the range, rounded (to nearest even) to the
// subnormal grid below it, in integer code
uint um_ldexp(float p, int k) {
    uint pb = floatBitsToUint(p);
    int e = int((pb >> 23) & 0xFFu) + k;
    if (e >= 255) return F32_INF;
    if (e >= 1) return (uint(e) << 23) | (pb & 0x7FFFFFu);
    uint m = (pb & 0x7FFFFFu) | 0x800000u;
    int sh = 1 - e;  // |p 2^k| = m 2^(e - 1) units of 2^-149
    if (sh > 24) return 0u;
    uint q = m >> uint(sh), rem = m & ((1u << uint(sh)) - 1u), half_ = 1u << uint(sh - 1);
    if (rem > half_ || (rem == half_ && (q & 1u) != 0u)) q += 1u;
    return q;
}

// exp(a) = 2^-k exp(-r), a = -(k ln 2 + r) (Cody-Waite with gelu_math.glsl's constants and
// polynomial); a is clamped to [-110, 100], beyond which the result is 0 or infinity anyway.
// um_exp_parts: p and k_ for a non-NaN x (exp(x) = p 2^k_); um_exp: p 2^k_ in integer code (um_ldexp)
float um_exp_parts(uint x, out int k_) {
    precise float hi = -clamp(uintBitsToFloat(x), -110.0, 100.0);
    precise float k = roundEven(hi * KDML_LOG2E);
    precise float r = (hi - k * KDML_LN2_HI) - k * KDML_LN2_LO;
    precise float p = KDML_EXP_C[7];
    p = p * r + KDML_EXP_C[6];
    p = p * r + KDML_EXP_C[5];
    p = p * r + KDML_EXP_C[4];
    p = p * r + KDML_EXP_C[3];
    p = p * r + KDML_EXP_C[2];
    p = p * r + KDML_EXP_C[1];
    p = 1.0 + r * p;
    k_ = -int(k);
    return p;
}

uint um_exp(uint x) {
    if (um_nan(x)) return um_quiet(x);
    int k;
    float p = um_exp_parts(x, k);
    return um_ldexp(p, k);
}

// um_exp's bits for an x that is not NaN and whose exp is normal (or infinite); `slow` set where that
// does not hold (a subnormal or zero result: um_ldexp's rounding), the result then not um_exp's
uint um_exp_fast(uint x, inout bool slow) {
    int k;
    uint pb = floatBitsToUint(um_exp_parts(x, k));
    int e = int((pb >> 23) & 0xFFu) + k;
    slow = slow || e < 1;
    return e >= 255 ? F32_INF : (uint(e) << 23) | (pb & 0x7FFFFFu);
}

float um_div(float a, float b) { return uintBitsToFloat(f32_div_bits(floatBitsToUint(a), floatBitsToUint(b))); }

// log(x) = k ln 2 + log(1 + f), 1 + f in [sqrt(1/2), sqrt(2)), log(1 + f) = 2 atanh(s) with
// s = f / (2 + f) (correctly rounded division), fdlibm's e_logf.c scheme and constants;
// log(+-0) = -inf, x < 0 -> NaN, log(+inf) = +inf
const float UM_LN2_HI = 6.931381226e-01;  // 17 significant bits: k UM_LN2_HI exact for |k| < 256
const float UM_LN2_LO = 9.058000614e-06;
const float UM_LG1 = 6.666666269e-01, UM_LG2 = 4.000097215e-01, UM_LG3 = 2.849878669e-01, UM_LG4 = 2.427907884e-01;
uint um_log(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a == 0u) return 0xFF800000u;
    if ((x >> 31) != 0u) return F32_QNAN;
    if (a == F32_INF) return x;
    uint m;
    int ex;
    f32_unpack(a, m, ex);  // a = (m 2^-23) 2^ex
    precise float v = uintBitsToFloat((m & 0x7FFFFFu) | 0x3F800000u);
    if ((m & 0x7FFFFFu) > 0x3504F3u) {  // above sqrt 2: halve (exact)
        v = v * 0.5;
        ex += 1;
    }
    precise float f = v - 1.0;  // exact (Sterbenz)
    precise float s = um_div(f, 2.0 + f);
    precise float z = s * s;
    precise float w = z * z;
    precise float t1 = w * (UM_LG2 + w * UM_LG4);
    precise float t2 = z * (UM_LG1 + w * UM_LG3);
    precise float rr = t2 + t1;
    precise float hfsq = 0.5 * f * f;
    precise float dk = float(ex);
    precise float y = dk * UM_LN2_HI - ((hfsq - (s * (hfsq + rr) + dk * UM_LN2_LO)) - f);
    return floatBitsToUint(y);
}

// sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0, e = exp(-|x|) (no overflow, no
// cancellation). The quotient is the device's division (Vulkan: within 2.5 ulp; normal operands, the
// divisor in [1, 2]), where 1 + e rounds to 1 the numerator itself (exact, subnormal e included, which
// a division might flush). The correctly rounded division (f32_div_bits) took 2.6x as long in a
// convolution's fused SiLU on the H100: 127 against 49 us at 8 x 16 -> 96 x 112 x 112
// (`python -m benchmarks.bench_conv --swish-forms` at 4c05f3c, device call 229; benchmarks/RESULTS.md).
uint um_sigmoid(uint x) {
    if (um_nan(x)) return um_quiet(x);
    uint e = um_exp(x | 0x80000000u);
    precise float d = 1.0 + uintBitsToFloat(e);  // a subnormal e (flushed or not) leaves 1
    uint n = (x >> 31) != 0u ? e : 0x3F800000u;
    if (d == 1.0) return n;
    precise float q = uintBitsToFloat(n) / d;
    return floatBitsToUint(q);
}

// softsign(x) = x / (1 + |x|): +-inf -> +-1
uint um_softsign(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a == F32_INF) return (x & 0x80000000u) | 0x3F800000u;
    precise float d = 1.0 + uintBitsToFloat(a);
    return f32_div_bits(x, floatBitsToUint(d));
}

// tanh(x): below 0.5625 x + x^3 P(x^2) (P fitted to float64 tanh, coefficients rounded to
// float32: tools/measure_unary.py --fit-tanh), else 1 - 2 / (exp(2|x|) + 1) (no cancellation
// beyond a factor 2 there); tiny |x| (< 2^-13, where tanh(x) rounds to x) returned as it came,
// |x| >= 9.5 -> +-1; odd
const float UM_TANH_C[7] = float[](-3.333333433e-01, 1.333333254e-01, -5.396781862e-02, 2.186280861e-02,
                                   -8.810109459e-03, 3.361415118e-03, -9.205469396e-04);
uint um_tanh(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a < 0x39000000u) return x;
    precise float v = uintBitsToFloat(a);
    precise float y;
    if (v < 0.5625) {
        precise float z = v * v;
        precise float p = UM_TANH_C[6];
        p = p * z + UM_TANH_C[5];
        p = p * z + UM_TANH_C[4];
        p = p * z + UM_TANH_C[3];
        p = p * z + UM_TANH_C[2];
        p = p * z + UM_TANH_C[1];
        p = p * z + UM_TANH_C[0];
        y = v + v * (z * p);
    } else if (v >= 9.5) {
        y = 1.0;
    } else {
        precise float d = uintBitsToFloat(um_exp(floatBitsToUint(2.0 * v))) + 1.0;
        y = 1.0 - uintBitsToFloat(f32_div_bits(0x40000000u, floatBitsToUint(d)));
    }
    return (x & 0x80000000u) | floatBitsToUint(y);
}

// erf(x): below 0.75 x + x Q(x^2) (Q fitted to float64 erf, coefficients rounded to float32:
// tools/measure_unary.py --fit-erf); else 1 - erfc(|x|) with erfc(|x|) = exp(-x^2) R(|x| sqrt 2)
// (gelu_math.glsl's exp and R(a) = exp(a^2 / 2) erfc(a / sqrt 2): x^2 = hi + lo split exactly
// as GELU's, so only R, slowly varying, sees the rounded |x| sqrt 2); +-1 from 4 (erfc(4) <
// 2^-25). Below 2^-13 x + x Q(0), scaled by 2^64 and rounded to the subnormal grid in integer
// code (subnormal inputs read from their bits), so no result depends on denormal handling; odd.
const float UM_ERF_C[7] = float[](1.283791661e-01, -3.761263788e-01, 1.128377840e-01, -2.686478011e-02,
                                  5.216816440e-03, -8.357356419e-04, 9.472998499e-05);
uint um_erf(uint x) {
    uint a = x & 0x7FFFFFFFu;
    uint s = x & 0x80000000u;
    if (a > F32_INF) return um_quiet(x);
    if (a >= 0x40800000u) return s | 0x3F800000u;  // |x| >= 4, infinities included
    precise float v = uintBitsToFloat(a);
    if (a < 0x39000000u) {
        // w = |x| 2^64: a subnormal |x| from its integer significand (a 2^-149 2^64 = a 2^-85)
        precise float w = a < 0x00800000u ? float(a) * uintBitsToFloat(42u << 23) : v * 18446744073709551616.0;
        precise float y = w + w * UM_ERF_C[0];
        return a == 0u ? x : s | um_ldexp(y, -64);
    }
    precise float y;
    if (v < 0.75) {
        precise float z = v * v;
        precise float p = UM_ERF_C[6];
        p = p * z + UM_ERF_C[5];
        p = p * z + UM_ERF_C[4];
        p = p * z + UM_ERF_C[3];
        p = p * z + UM_ERF_C[2];
        p = p * z + UM_ERF_C[1];
        p = p * z + UM_ERF_C[0];
        y = v + v * p;
    } else {
        precise float xh = uintBitsToFloat(a & 0xFFFFF000u);
        precise float xl = v - xh;
        precise float e = kdml_exp_neg(xh * xh, xl * (v + xh), 0);  // exp(-x^2), x^2 <= 16
        y = 1.0 - e * kdml_erfcx(v * 1.41421354);
    }
    return s | floatBitsToUint(y);
}

// log(1 + u) for u = float32 bits in [0, 1]: log(w) + c / w with w = 1 + u rounded and c = u -
// (w - 1) its exact rounding error (Fast2Sum: |u| <= 1); u below 2^-24 returned as it came
// (log1p(u) = u (1 - u / 2 + ...) rounds to u), so a subnormal u is never added
uint um_log1p(uint u) {
    if (u < 0x33800000u) return u;
    precise float uf = uintBitsToFloat(u);
    precise float w = 1.0 + uf;
    precise float c = uf - (w - 1.0);
    return floatBitsToUint(uintBitsToFloat(um_log(floatBitsToUint(w))) + um_div(c, w));
}

#ifndef UM_LIB_ONLY
// softplus(x) = log(1 + exp(s x)) / s, s = b_str[3] (Steepness >= 1, float32): t = s x rounded
// to float32 (exact for s = 1 or a power of two), then max(t, 0) + log1p(exp(-|t|)) (no
// overflow, no cancellation), divided by s (correctly rounded; skipped for s = 1). From t >= 16
// the result is x itself (log1p(exp(-t)) / (s x) < 2^-25); -inf -> +0, +inf -> +inf.
uint um_softplus(uint x) {
    if (um_nan(x)) return um_quiet(x);
    float s = uintBitsToFloat(UM_PARAM_WORDS[3]);
    precise float t = uintBitsToFloat(x) * s;
    if (t >= 16.0) return x;
    uint l = um_log1p(um_exp(floatBitsToUint(t) | 0x80000000u));  // log1p(exp(-|t|))
    // for t <= 0 l itself: a subnormal l is never added (a flushing device would lose it)
    precise float tl = t + uintBitsToFloat(l);
    uint y = t > 0.0 ? floatBitsToUint(tl) : l;
    return s == 1.0 ? y : f32_div_bits(y, UM_PARAM_WORDS[3]);
}

#include "trig_math.glsl"  // um_trig: SIN, COS
#include "inv_trig_math.glsl"  // TAN, ATAN, ASIN, ACOS, ATAN_YX
#include "hyp_math.glsl"  // SINH, COSH, ASINH, ACOSH, ATANH (pow_math.glsl: POW, CONSTANT_POW)

#ifndef UM_FUNCTIONS_ONLY
// ---- the function of this variant --------------------------------------------------------------
#if defined(FN_ABS)
uint um_f(uint x) { return x & 0x7FFFFFFFu; }
#elif defined(FN_NEG)
uint um_f(uint x) { return x ^ 0x80000000u; }
#elif defined(FN_CEIL)
uint um_f(uint x) { return um_round(x, 4u); }
#elif defined(FN_FLOOR)
uint um_f(uint x) { return um_round(x, 3u); }
#elif defined(FN_ROUND)
uint um_f(uint x) { return um_round(x, UM_PARAM_WORDS[3]); }
#elif defined(FN_SIGN)
uint um_f(uint x) { return um_sign(x); }
#elif defined(FN_RECIP)
uint um_f(uint x) { return f32_div_bits(0x3F800000u, x); }
#elif defined(FN_SQRT)
uint um_f(uint x) { return um_sqrt(x); }
#elif defined(FN_EXP)
uint um_f(uint x) { return um_exp(x); }
#elif defined(FN_LOG)
uint um_f(uint x) { return um_log(x); }
#elif defined(FN_SIGMOID)
uint um_f(uint x) { return um_sigmoid(x); }
#elif defined(FN_SOFTSIGN)
uint um_f(uint x) { return um_softsign(x); }
#elif defined(FN_TANH)
uint um_f(uint x) { return um_tanh(x); }
#elif defined(FN_ERF)
uint um_f(uint x) { return um_erf(x); }
#elif defined(FN_SOFTPLUS)
uint um_f(uint x) { return um_softplus(x); }
#elif defined(FN_SIN)
uint um_f(uint x) { return um_trig(x, 0u); }
#elif defined(FN_COS)
uint um_f(uint x) { return um_trig(x, 1u); }
#elif defined(FN_TAN)
uint um_f(uint x) { return um_tan(x); }
#elif defined(FN_ATAN)
uint um_f(uint x) { return um_atan(x); }
#elif defined(FN_ASIN)
uint um_f(uint x) { return um_asin(x); }
#elif defined(FN_ACOS)
uint um_f(uint x) { return um_acos(x); }
#elif defined(FN_SINH)
uint um_f(uint x) { return um_sinh(x); }
#elif defined(FN_COSH)
uint um_f(uint x) { return um_cosh(x); }
#elif defined(FN_ASINH)
uint um_f(uint x) { return um_asinh(x); }
#elif defined(FN_ACOSH)
uint um_f(uint x) { return um_acosh(x); }
#elif defined(FN_ATANH)
uint um_f(uint x) { return um_atanh(x); }
#elif defined(FN_CONSTANT_POW)
uint um_f(uint x) { return um_pow_f(x, UM_PARAM_WORDS[3]); }
#else  // the parameterized activations and CLIP (ops/activation_params.py)
#include "act_math.glsl"
uint um_f(uint x) { return um_act(x); }
#endif

// FLOAT16: decoded exactly, computed in float32, rounded once to float16 (f16_bits.glsl)
uint fn32(uint x) { return um_f(um_scale_bias(x)); }
uint fn16(uint h) { return f2h(fn32(h2f(h))); }
#endif  // UM_FUNCTIONS_ONLY
#elif defined(UM_P0)  // a library user that sets the activations' parameters (convolution's epilogue)
#include "act_math.glsl"
#endif  // UM_LIB_ONLY

#endif
