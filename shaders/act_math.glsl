// The parameterized activations and ELEMENT_WISE_CLIP of kompute_dml/ops/activation_params.py
// (FN_LEAKY_RELU, FN_ELU, ..., FN_CLIP): um_f on an element's float32 bits, included by
// unary_math.glsl (whose ScaleBias, exp, log1p, tanh and exact division it uses). The operator's
// float32 parameters are in the element-wise block's unused b_str words: b_str[3] the first
// (Alpha, Bias, Min), b_str[4] the second (Beta, Gamma, Threshold, Max), in the descriptor's order.
// Products are correctly rounded (um_mul: the device's product where operands and result are normal,
// else integer code, subnormal results included); sums and
// differences are the device's float32 + and - (correctly rounded; `precise` keeps them
// unfused); comparisons are on the bits (um_key), so none depends on a denormal mode.
// Measured error bounds: docs/activation_params.md.
#ifndef KDML_ACT_MATH_GLSL
#define KDML_ACT_MATH_GLSL

#ifndef UM_P0  // (convolution's epilogue defines them: conv_common.glsl)
#define UM_P0 UM_PARAM_WORDS[3]
#define UM_P1 UM_PARAM_WORDS[4]
#endif
#define UM_ONE 0x3F800000u

// the IEEE-754 product a * b, correctly rounded (NaN operands: the first NaN quieted; 0 * inf: NaN)
uint um_mul(uint a, uint b) {
    uint aa = a & 0x7FFFFFFFu, ab = b & 0x7FFFFFFFu;
    if (aa > F32_INF) return um_quiet(a);
    if (ab > F32_INF) return um_quiet(b);
    uint s = (a ^ b) & 0x80000000u;
    if (aa == F32_INF || ab == F32_INF) return (aa == 0u || ab == 0u) ? F32_QNAN : (s | F32_INF);
    if (aa == 0u || ab == 0u) return s;
    return f32_mul_bits(a, b);
}

// a non-NaN float32 as an unsigned key in value order (-0 and +0 the same key)
uint um_key(uint x) {
    if ((x & 0x7FFFFFFFu) == 0u) return 0x80000000u;
    return (x >> 31) != 0u ? ~x : (x | 0x80000000u);
}

// exp(x) - 1: below 2^-25 in magnitude x itself (x^2 / 2 is below half an ulp of x); below 1
// x + x (x Q(x)), Q the Taylor coefficients 1/2!, ..., 1/13! rounded to float32 (the series'
// remainder is below 2^-32 relative); beyond, exp(x) - 1 (the result at least 0.63 in
// magnitude, so the subtraction loses at most a factor 1.6 of exp's error)
const float UM_EM1_C[12] = float[](5.000000000e-01, 1.666666716e-01, 4.166666791e-02, 8.333333768e-03,
                                   1.388888923e-03, 1.984127011e-04, 2.480158764e-05, 2.755731884e-06,
                                   2.755731998e-07, 2.505210794e-08, 2.087675588e-09, 1.605904437e-10);
uint um_expm1(uint x) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a < 0x33000000u) return x;
    precise float v = uintBitsToFloat(x);
    if (a < UM_ONE) {
        precise float q = UM_EM1_C[11];
        for (int i = 10; i >= 0; --i) q = q * v + UM_EM1_C[i];
        precise float y = v + v * (v * q);
        return floatBitsToUint(y);
    }
    precise float y = uintBitsToFloat(um_exp(x)) - 1.0;
    return floatBitsToUint(y);
}

// log(1 + exp(t)) for float32 t: max(t, 0) + log1p(exp(-|t|)), t itself from 16 on (the
// ACTIVATION_SOFTPLUS scheme of unary_math.glsl without its steepness)
uint um_softplus_of(uint t) {
    if (um_nan(t)) return um_quiet(t);
    precise float tf = uintBitsToFloat(t);
    if (tf >= 16.0) return t;
    uint l = um_log1p(um_exp(t | 0x80000000u));
    precise float tl = tf + uintBitsToFloat(l);
    return tf > 0.0 ? floatBitsToUint(tl) : l;
}

// max(0, min(Alpha x + Beta, 1)): p = Alpha x rounded, s = p + Beta rounded, then the clamp
// (comparisons strict: an s of -0 stays -0); NaN from a NaN x or a NaN s (0 * inf, inf - inf)
uint um_hard_sigmoid(uint x) {
    if (um_nan(x)) return um_quiet(x);
    uint p = um_mul(UM_P0, x);
    if (um_nan(p)) return p;
    precise float s = uintBitsToFloat(p) + uintBitsToFloat(UM_P1);
    uint sb = floatBitsToUint(s);
    if (um_nan(sb)) return F32_QNAN;
    if (um_key(sb) > um_key(UM_ONE)) sb = UM_ONE;
    if (um_key(sb) < um_key(0u)) sb = 0u;
    return sb;
}

// The activations CONVOLUTION fuses too (shaders/conv_common.glsl), one function each so that the
// fused epilogue runs the very code of the standalone operator (the same bits):
// x for x >= 0 (-0 included), else Alpha x
uint um_leaky_relu(uint x) {
    if (um_nan(x)) return um_quiet(x);
    return ((x >> 31) == 0u || x == 0x80000000u) ? x : um_mul(UM_P0, x);
}

// x for x >= 0 (-0 included), else Alpha (exp(x) - 1) as Alpha expm1(x)
uint um_elu(uint x) {
    if (um_nan(x)) return um_quiet(x);
    return ((x >> 31) == 0u || x == 0x80000000u) ? x : um_mul(UM_P0, um_expm1(x));
}

#ifndef SWISH_ABL  // benchmark overlay only (benchmarks/overlay_act.py, FORMS: HardSwish and Swish)
#define SWISH_ABL 0
#endif
// The fast forms of HardSwish and Swish (GEMM's epilogue, gemm_act.glsl): the exact forms' bits
// wherever `slow` stays false, with none of their rarely taken integer code (f32_mul_bits' subnormal and
// overflowing products, um_ldexp's subnormal results, NaN). Inlined in each output of a register block,
// the exact forms took up to 2x the float32 formula's time (H100, `bench_conv --swish-forms`, call 232:
// 8 x 24 -> 96 x 28 x 28 HardSwish 46.8 against 23.0 us; the fast forms 35.9). Where `slow` is set the
// caller runs the exact form.

// um_mul(a, b) where a and b are normal or zero and the device's product is normal, or an operand is
// zero (the zero of the signs' product, as IEEE's product of a zero and a finite number)
uint um_mul_fast(uint a, uint b, inout bool slow) {
    precise float r = uintBitsToFloat(a) * uintBitsToFloat(b);
    uint rb = floatBitsToUint(r);
    bool za = (a & 0x7FFFFFFFu) == 0u, zb = (b & 0x7FFFFFFFu) == 0u;
    bool na = ((a >> 23) & 0xFFu) - 1u < 254u, nb = ((b >> 23) & 0xFFu) - 1u < 254u;
    slow = slow || !((na || za) && (nb || zb) && (za || zb || ((rb >> 23) & 0xFFu) - 1u < 254u));
    return rb;
}

// um_hard_sigmoid: the clamp's comparisons as floats, equal to um_key's for a normal, zero or infinite s
// (-0 stays -0); a NaN x or s, or a subnormal s (which a device may compare as zero) is slow
uint um_hard_sigmoid_fast(uint x, inout bool slow) {
    uint p = um_mul_fast(UM_P0, x, slow);
    precise float s = uintBitsToFloat(p) + uintBitsToFloat(UM_P1);
    uint sb = floatBitsToUint(s);
    slow = slow || um_nan(x) || um_nan(sb) || ((sb & 0x7F800000u) == 0u && (sb & 0x7FFFFFu) != 0u);
    return s > 1.0 ? UM_ONE : (s < 0.0 ? 0u : sb);
}

uint um_hard_swish_fast(uint x, inout bool slow) { return um_mul_fast(x, um_hard_sigmoid_fast(x, slow), slow); }

// um_swish(x, false): its sigmoid's exp normal, its scaled input as um_mul_fast's
uint um_swish_fast(uint x, inout bool slow) {
    uint t = UM_P0 == UM_ONE ? x : um_mul_fast(UM_P0, x, slow);
    slow = slow || um_nan(t);
    uint e = um_exp_fast(t | 0x80000000u, slow);
    precise float d = 1.0 + uintBitsToFloat(e);
    uint n = (t >> 31) != 0u ? e : UM_ONE;
    precise float q = uintBitsToFloat(n) / d;
    uint sg = d == 1.0 ? n : floatBitsToUint(q);
    precise float r = uintBitsToFloat(x) * uintBitsToFloat(sg);
    return floatBitsToUint(r);
}

// x HardSigmoid(x, Alpha, Beta): the hard sigmoid as above, then the product rounded
uint um_hard_swish(uint x) {
#if SWISH_ABL == 4
    return x;
#elif SWISH_ABL == 3
    precise float hs = uintBitsToFloat(x) * clamp(uintBitsToFloat(UM_P0) * uintBitsToFloat(x) + uintBitsToFloat(UM_P1), 0.0, 1.0);
    return floatBitsToUint(hs);
#else
    return um_mul(x, um_hard_sigmoid(x));
#endif
}

// x Sigmoid(SigmoidInputScale x) (ACTIVATION_SWISH), built from the unfused pair's own steps so
// that a scale of 1 gives the bits of ELEMENT_WISE_MULTIPLY(x, ACTIVATION_SIGMOID(x)): the scaled
// input rounded in integer code (exactly x for a scale of 1, subnormals included, whatever the
// denormal mode), unary_math.glsl's sigmoid, rounded to float16 where `f16` (the value a FLOAT16
// SIGMOID writes and MULTIPLY reads back), then the device's float32 product as MULTIPLY computes
// it (`precise`: no fusing into anything around it); the caller rounds that to the element type
uint um_swish(uint x, bool f16) {
#if SWISH_ABL == 3
    return floatBitsToUint(uintBitsToFloat(x) / (1.0 + exp(-uintBitsToFloat(x))));
#elif SWISH_ABL == 4
    return x;
#elif SWISH_ABL == 2
    // the form before device call 229: the scaled input always through um_mul, the quotient correctly rounded
    if (um_nan(x)) return um_quiet(x);
    uint t = um_mul(UM_P0, x), e = um_exp(t | 0x80000000u);
    precise float d = 1.0 + uintBitsToFloat(e);
    uint s2 = f32_div_bits((t >> 31) != 0u ? e : 0x3F800000u, floatBitsToUint(d));
    precise float r2 = uintBitsToFloat(x) * uintBitsToFloat(s2);
    return floatBitsToUint(r2);
#endif
    // a scale of 1 (SiLU) leaves x: um_mul(1, x) is x, or x quieted where it is a NaN, which the sigmoid
    // quiets anyway (skipping it: 125 -> 107 us, `bench_conv --swish-forms` at da3dd79, device call 227)
    uint s = um_sigmoid(UM_P0 == 0x3F800000u ? x : um_mul(UM_P0, x));
    if (f16) s = h2f(f2h(s));
    precise float r = uintBitsToFloat(x) * uintBitsToFloat(s);
    return floatBitsToUint(r);
}

// max(Min, min(x, Max)) on the (ScaleBias-transformed) input; NaN stays NaN
uint um_clip(uint x) {
    if (um_nan(x)) return um_quiet(x);
    uint y = um_key(x) > um_key(UM_P1) ? UM_P1 : x;
    return um_key(y) < um_key(UM_P0) ? UM_P0 : y;
}

uint um_act(uint x) {
#if defined(FN_LEAKY_RELU)
    return um_leaky_relu(x);
#elif defined(FN_ELU)
    return um_elu(x);
#elif defined(FN_CELU)
    // max(0, x) + min(0, Alpha (exp(x / Alpha) - 1)): for x >= 0 the second term is 0 and the
    // result x (-0 included); for x < 0 the first is 0 and the result Alpha expm1(x / Alpha), the
    // quotient correctly rounded. The page's sum max(0, x) + min(0, ...) is never -0 (x = -0 and
    // a product that underflows to -0 give 0 + -0 = +0), so neither is the result
    if (um_nan(x)) return um_quiet(x);
    uint r = ((x >> 31) == 0u || x == 0x80000000u) ? x : um_mul(UM_P0, um_expm1(f32_div_bits(x, UM_P0)));
    return r == 0x80000000u ? 0u : r;
#elif defined(FN_SELU)
    // Gamma x for x > 0, else Gamma (Alpha exp(x) - Alpha) as Gamma (Alpha expm1(x)) (two roundings);
    // a zero inner term is +0, as the page's difference Alpha exp(x) - Alpha is (x = +-0 gives
    // Gamma * +0)
    if (um_nan(x)) return um_quiet(x);
    if ((x >> 31) == 0u && x != 0u) return um_mul(UM_P1, x);
    uint d = um_mul(UM_P0, um_expm1(x));
    return um_mul(UM_P1, (d & 0x7FFFFFFFu) == 0u ? 0u : d);
#elif defined(FN_HARD_SIGMOID)
    return um_hard_sigmoid(x);
#elif defined(FN_HARD_SWISH)
    return um_hard_swish(x);
#elif defined(FN_SWISH)
    return um_swish(x, BITS == 16);
#elif defined(FN_THRESHOLDED_RELU)
    // x for x > Alpha, else +0 (NaN: +0, the comparison being false)
    if (um_nan(x)) return 0u;
    return um_key(x) > um_key(UM_P0) ? x : 0u;
#elif defined(FN_SHRINK)
    // x - Bias for x > Threshold, x + Bias for x < -Threshold, else +0 (NaN: +0); rounded sums
    if (um_nan(x)) return 0u;
    precise float v = uintBitsToFloat(x);
    precise float b = uintBitsToFloat(UM_P0);
    precise float r;
    if (um_key(x) > um_key(UM_P1)) r = v - b;
    else if (um_key(x) < um_key(UM_P1 ^ 0x80000000u)) r = v + b;
    else return 0u;
    return floatBitsToUint(r);
#elif defined(FN_LINEAR)
    // Alpha x + Beta: the product rounded, then the sum
    uint p = um_mul(UM_P0, x);
    if (um_nan(p)) return p;
    precise float r = uintBitsToFloat(p) + uintBitsToFloat(UM_P1);
    return floatBitsToUint(r);
#elif defined(FN_SCALED_TANH)
    // Alpha tanh(Beta x): Beta x rounded, unary_math.glsl's tanh, the product rounded
    return um_mul(UM_P0, um_tanh(um_mul(UM_P1, x)));
#elif defined(FN_PARAMETRIC_SOFTPLUS)
    // Alpha log(1 + exp(Beta x)): Beta x rounded, softplus of it, the product rounded
    return um_mul(UM_P0, um_softplus_of(um_mul(UM_P1, x)));
#elif defined(FN_THRESHOLD)
    // max(x, Min) on the (ScaleBias-transformed) input; NaN stays NaN (CLIP's rule)
    if (um_nan(x)) return um_quiet(x);
    return um_key(x) < um_key(UM_P0) ? UM_P0 : x;
#elif defined(FN_CLIP)
    return um_clip(x);
#else
    return x;
#endif
}

#endif
