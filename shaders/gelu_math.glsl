// float32 exp and GELU in basic arithmetic only (+, -, *, integer bit operations: operations
// Vulkan rounds correctly), so that their error bounds hold on every device, whatever its exp /
// erf built-ins or its denormal mode do. Derivation and measured errors: tools/fit_gelu.py
// (which prints the constants below); bounds: docs/gelu.md, docs/softmax.md.
// Shared by float_unary.comp (ACTIVATION_GELU) and softmax.comp (ACTIVATION_SOFTMAX1).
#ifndef KDML_GELU_MATH_GLSL
#define KDML_GELU_MATH_GLSL

// ---- constants (tools/fit_gelu.py) -----------------------------------------------------------
// R(a) = exp(a^2 / 2) erfc(a / sqrt 2) on [0,1), [1,2), [2,4), [4,8), [8,14.5]: degree 9 in
// a - KDML_ERFCX_MID[piece]
const float KDML_ERFCX_C[50] = float[50](  // piece-major: piece p's coefficient j at 10 p + j
    6.992376447e-01, -4.482657313e-01, 2.375523746e-01, -1.098298579e-01, 4.566004872e-02, -1.739984192e-02, 6.152243353e-03, -2.045645146e-03, 6.770621985e-04, -1.975861232e-04,
    4.115613401e-01, -1.805425584e-01, 7.037374377e-02, -2.499398030e-02, 8.220735937e-03, -2.532582963e-03, 7.365021738e-04, -2.038440871e-04, 5.602089732e-05, -1.403325405e-05,
    2.430278957e-01, -6.880086660e-02, 1.831263117e-02, -4.620984197e-03, 1.112508471e-03, -2.567400807e-04, 5.679886453e-05, -1.221296134e-05, 2.806127441e-06, -5.524392463e-07,
    1.295586377e-01, -2.053278871e-02, 3.180932254e-03, -4.823692434e-04, 7.171593461e-05, -1.045216413e-05, 1.474890041e-06, -2.087723487e-07, 3.507370039e-08, -4.633339046e-09,
    7.037547976e-02, -6.160436664e-03, 5.352793378e-04, -4.617443483e-05, 3.956336059e-06, -3.364327767e-07, 2.803545129e-08, -2.362941620e-09, 2.388815257e-10, -1.933945018e-11);
const float KDML_EXP_C[8] = float[](1.000000000e+00, -1.000000000e+00, 5.000000000e-01, -1.666666418e-01, 4.166626930e-02, -8.333659731e-03, 1.394608524e-03, -1.972811879e-04);
const float KDML_ERFCX_MID[5] = float[](0.5, 1.5, 3.0, 6.0, 11.25);
const float KDML_GELU_AMAX = 14.5;  // beyond: GELU(x) = x (x > 0) or -0 (|GELU| < 2^-150)
const float KDML_LOG2E = 1.44269502;
const float KDML_LN2_HI = 0.693145751953125;  // ln 2 to 15 bits: k * KDML_LN2_HI exact for |k| < 512
const float KDML_LN2_LO = 1.42860677e-06;  // ln 2 - KDML_LN2_HI

bool kdml_is_nan(float x) { return (floatBitsToUint(x) & 0x7FFFFFFFu) > 0x7F800000u; }

// exp(-(hi + lo)) * 2^scale for hi >= 0, |lo| <= 2^-10 hi, and k = roundEven(hi / ln 2) with
// 1 <= 127 + scale - k <= 254 (the result's power of two normal). Cody-Waite: hi + lo = k ln 2 + r,
// |r| <= ln 2 / 2 (+ rounding), hi - k KDML_LN2_HI exact; exp(-r) = 1 + r P(r).
float kdml_exp_neg(float hi, float lo, int scale) {
    precise float k = roundEven(hi * KDML_LOG2E);
    precise float r = ((hi - k * KDML_LN2_HI) - k * KDML_LN2_LO) + lo;
    // Horner, unrolled by hand: constant indices fold into literals (a loop would index the
    // array dynamically, which compilers may copy into per-invocation memory)
    precise float p = KDML_EXP_C[7];
    p = p * r + KDML_EXP_C[6];
    p = p * r + KDML_EXP_C[5];
    p = p * r + KDML_EXP_C[4];
    p = p * r + KDML_EXP_C[3];
    p = p * r + KDML_EXP_C[2];
    p = p * r + KDML_EXP_C[1];
    p = 1.0 + r * p;
    return p * uintBitsToFloat(uint(127 + scale - int(k)) << 23);
}

// exp(d) for d <= 0 (a NaN passes through): 0 below d = -87.5, where exp(d) < 2^-126 (softmax.comp,
// attention.comp)
float kdml_exp_le0(float d) {
    if (kdml_is_nan(d)) return d;
    if (d < -87.5) return 0.0;
    return kdml_exp_neg(-d, 0.0, 0);
}

// R(a) = exp(a^2 / 2) erfc(a / sqrt 2) for 0 <= a <= 14.5, the piece chosen by a's exponent
// (shared by GELU here and ERF in unary_math.glsl). The piece's coefficients either by index into
// the constant table (KDML_ERFCX_TABLE: float_unary.comp's gelu_tab_* variants, which the device
// policy gives GPUs) or by a chain of selects per coefficient (constant indices: literals). The same
// constants and arithmetic either way: the same bits. H200, `python -m benchmarks.encoder_profile
// --family whisper-encoder-fp16 --size small --shape 8x128`: the four feed-forward GELU dispatches
// 265.1 us with the table (device call 329) against 327.6 with the selects (call 323); lavapipe took
// about 100 times as long with the table (tests/test_gelu.py without a shader cache: 171 s against 1.5)
float kdml_erfcx(float a) {
    int piece = clamp(int(floatBitsToUint(a) >> 23) - 126, 0, 4);
#ifdef KDML_ERFCX_TABLE
    precise float u = a - KDML_ERFCX_MID[piece];
    int c = 10 * piece;
#define KDML_RC(j) KDML_ERFCX_C[c + (j)]
#else
    bool p1 = piece == 1, p2 = piece == 2, p3 = piece == 3, p4 = piece == 4;
    precise float u = a - (p4 ? KDML_ERFCX_MID[4] : p3 ? KDML_ERFCX_MID[3] : p2 ? KDML_ERFCX_MID[2]
                           : p1 ? KDML_ERFCX_MID[1] : KDML_ERFCX_MID[0]);
#define KDML_RC(j) (p4 ? KDML_ERFCX_C[40 + (j)] : p3 ? KDML_ERFCX_C[30 + (j)] : p2 ? KDML_ERFCX_C[20 + (j)] \
                    : p1 ? KDML_ERFCX_C[10 + (j)] : KDML_ERFCX_C[j])
#endif
    precise float p = KDML_RC(9);
    p = p * u + KDML_RC(8);
    p = p * u + KDML_RC(7);
    p = p * u + KDML_RC(6);
    p = p * u + KDML_RC(5);
    p = p * u + KDML_RC(4);
    p = p * u + KDML_RC(3);
    p = p * u + KDML_RC(2);
    p = p * u + KDML_RC(1);
    p = p * u + KDML_RC(0);
#undef KDML_RC
    return p;
}

// GELU(x) = x * 0.5 * (1 + erf(x / sqrt 2)) = x * Phi(x), Phi the normal CDF, through
// erfc(a / sqrt 2) = exp(-x^2 / 2) R(a) (a = |x|): x Phi(x) = x erfc(a / sqrt 2) / 2 for x < 0,
// x (1 - erfc(a / sqrt 2) / 2) for x >= 0, without the cancellation of 1 + erf in the negative tail.
// x^2 / 2 = hi + lo exactly enough: xh (x's top 12 significand bits) squared is exact. erfc is
// carried scaled by 2^64, so no intermediate is subnormal while the result is normal.
// -0 -> -0, +inf -> +inf, -inf -> -0, NaN -> NaN.
float kdml_gelu(float x) {
    float a = abs(x);
    if (kdml_is_nan(x)) return x;
    if (a > KDML_GELU_AMAX) return x < 0.0 ? -0.0 : x;
    precise float xh = uintBitsToFloat(floatBitsToUint(x) & 0xFFFFF000u);
    precise float xl = x - xh;
    precise float hi = (xh * xh) * 0.5;
    precise float lo = (xl * (x + xh)) * 0.5;
    precise float e = kdml_exp_neg(hi, lo, 64);  // 2^64 exp(-x^2 / 2)
    precise float p = kdml_erfcx(a);
    precise float t = e * p;  // 2^64 erfc(a / sqrt 2)
    precise float y;
    if (x < 0.0) {
        y = ((x * 0.5) * t) * 5.42101086e-20;  // * 2^-64
    } else {
        y = x * (1.0 - t * 2.71050543e-20);  // 2^-65
    }
    return y;
}

#endif
