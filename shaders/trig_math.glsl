// ELEMENT_WISE_SIN / _COS (kompute_dml/ops/elementwise_unary.py) for unary_math.glsl: integer
// code and unfused float32 +, -, * only (GLSL's sin / cos are loose: NVIDIA's have 2^-11
// absolute error), so every device gives the same bits.
//
// Reduction (Payne-Hanek, in integer code, for every finite float32): |x| = m 2^E (m 24 bits),
// |x| 2 / pi = m W 2^-94 mod 4, W the 96 bits of 2 / pi from bit E - 1 on (the bits before
// only add multiples of 4; those after add < 2^-70). The product m W mod 2^96 gives the
// quadrant q (rounded to nearest) and the remainder f in [-1/2, 1/2] to 94 bits, normalized and
// cut into hi + lo (24 bits each), then r = f pi / 2 as yh + yl by exact products (the 24-bit
// values split into 12-bit halves, pi / 2 = H1 + H2 + L). Float32 inputs come no closer than
// about 2^-30 |x| to a multiple of pi / 2, so r keeps >= 48 good bits where the result needs 24.
// Then fdlibm's k_sinf / k_cosf polynomials on [-pi/4, pi/4] with the yl correction, cos with
// z = yh^2 exact (Veltkamp) and 1 - z / 2 as an exact sum, so its error is one final rounding.
// |x| < 2^-12: sin x = x, cos x = 1 (x^2 / 6 < 2^-26: both round there), no subnormal arithmetic.
#ifndef KDML_TRIG_MATH_GLSL
#define KDML_TRIG_MATH_GLSL

// 2 / pi in bits, T[j] = bits 32 (j - 1) + 1 ... 32 j (T[0]: the integer bits, 0)
const uint UM_2OPI[8] = uint[](0u, 0xA2F9836Eu, 0x4E441529u, 0xFC2757D1u, 0xF534DDC0u, 0xDB629599u,
                               0x3C439041u, 0xFE5163ABu);
const float UM_PIO2_H1 = 1.5703125;               // 0xC90 2^-11: the top 12 bits of float32(pi / 2)
const float UM_PIO2_H2 = 4059.0 / 8388608.0;      // 0xFDB 2^-23: its low 12 bits
const float UM_PIO2_L = -4.37113900018624283e-08; // pi / 2 - float32(pi / 2), rounded
const float UM_S[6] = float[](-1.6666667163e-01, 8.3333337680e-03, -1.9841270114e-04, 2.7557314297e-06,
                              -2.5050759689e-08, 1.5896910177e-10);
const float UM_C[6] = float[](4.1666667908e-02, -1.3888889225e-03, 2.4801587642e-05, -2.7557314297e-07,
                              2.0875723372e-09, -1.1359647598e-11);

uint um_shl(uint a, uint b, uint o) { return o == 0u ? a : (a << o) | (b >> (32u - o)); }  // (a:b) << o, top word

// sin(yh + yl) = hi + lo (unrounded: TAN divides it as a pair), |yh| <= pi / 4, |yl| <= 2^-23 |yh|
void um_ksin_parts(float yh, float yl, out float hi, out float lo) {
    precise float z = yh * yh;
    precise float v = z * yh;
    precise float p = UM_S[5];
    p = p * z + UM_S[4];
    p = p * z + UM_S[3];
    p = p * z + UM_S[2];
    p = p * z + UM_S[1];
    precise float small = yl * (1.0 - 0.5 * z) + v * (UM_S[0] + z * p);
    hi = yh;
    lo = small;
}

float um_ksin(float yh, float yl) {
    float h, l;
    um_ksin_parts(yh, yl, h, l);
    precise float y = h + l;
    return y;
}

// cos(yh + yl) = 1 - z / 2 + z^2 C(z) = hi + lo: z = yh^2 = zh + zl exactly, 1 - zh / 2 = t + tl exactly
void um_kcos_parts(float yh, float yl, out float hi, out float lo) {
    precise float c = yh * 4097.0;
    precise float hh = c - (c - yh);
    precise float ll = yh - hh;
    precise float zh = yh * yh;
    precise float zl = ((hh * hh - zh) + 2.0 * hh * ll) + ll * ll;
    precise float w = 0.5 * zh;
    precise float t = 1.0 - w;
    precise float tl = (1.0 - t) - w;
    precise float p = UM_C[5];
    p = p * zh + UM_C[4];
    p = p * zh + UM_C[3];
    p = p * zh + UM_C[2];
    p = p * zh + UM_C[1];
    p = p * zh + UM_C[0];
    precise float small = (tl - (0.5 * zl + yh * yl)) + (zh * zh) * p;
    hi = t;
    lo = small;
}

float um_kcos(float yh, float yl) {
    float h, l;
    um_kcos_parts(yh, yl, h, l);
    precise float y = h + l;
    return y;
}

// |x| = q pi / 2 + (yh + yl), |yh + yl| <= pi / 4 (the quadrant's low bits in q), for a = |x|'s
// bits, finite and >= 2^-12; shared by SIN, COS and TAN
uint um_trig_reduce(uint a, out float yh, out float yl) {
    yh = uintBitsToFloat(a);
    yl = 0.0;
    uint q = 0u;
    if (a > 0x3F490FDBu) {  // |x| > pi / 4: reduce
        uint m = (a & 0x7FFFFFu) | 0x800000u;
        int s = int(a >> 23) - 150 - 1;  // E - 1, E = exponent - 23 (>= -25 here)
        uint u0 = uint(s + 31), j = u0 >> 5, o = u0 & 31u;
        uint w0 = um_shl(UM_2OPI[j], UM_2OPI[j + 1u], o);
        uint w1 = um_shl(UM_2OPI[j + 1u], UM_2OPI[j + 2u], o);
        uint w2 = um_shl(UM_2OPI[j + 2u], j + 3u < 8u ? UM_2OPI[j + 3u] : 0u, o);
        uint h2, l2, h1, l1;
        umulExtended(m, w2, h2, l2);
        umulExtended(m, w1, h1, l1);
        uint p1 = h2 + l1;
        uint p2 = h1 + m * w0 + (p1 < l1 ? 1u : 0u);
        q = p2 >> 30;
        // the remainder's 94 bits, shifted to the top of f2:f1:f0 (value f / 2^96)
        uint f2 = (p2 << 2) | (p1 >> 30), f1 = (p1 << 2) | (l2 >> 30), f0 = l2 << 2;
        bool neg = (f2 >> 31) != 0u;
        if (neg) {  // f >= 1/2: the next quadrant, remainder 1 - f
            q += 1u;
            f0 = ~f0 + 1u;
            uint c0 = f0 == 0u ? 1u : 0u;
            f1 = ~f1 + c0;
            f2 = ~f2 + ((c0 == 1u && f1 == 0u) ? 1u : 0u);
        }
        int n = 0;  // f = (f2 2^-32 + f1 2^-64) 2^-n after normalizing
        if (f2 == 0u) { f2 = f1; f1 = f0; f0 = 0u; n += 32; }
        if (f2 == 0u) { f2 = f1; f1 = f0; n += 32; }
        if (f2 == 0u) { yh = 0.0; return q; }  // unreachable for float32 inputs
        uint lz = uint(31 - findMSB(f2));
        uint top = um_shl(f2, f1, lz), nxt = um_shl(f1, f0, lz);
        n += int(lz);
        uint hint = top >> 8, lint = ((top & 0xFFu) << 16) | (nxt >> 16);
        // r = (hint 2^-24 + lint 2^-48) pi / 2, then 2^-n; hint = hh + hl, 12 bits each
        precise float hh = float(hint & 0xFFF000u) * (1.0 / 16777216.0);
        precise float hl = float(hint & 0xFFFu) * (1.0 / 16777216.0);
        precise float rh = hh + hl;
        precise float rl = float(lint) * (1.0 / 281474976710656.0);
        precise float ph = rh * (UM_PIO2_H1 + UM_PIO2_H2);
        precise float e = (((hh * UM_PIO2_H1 - ph) + hh * UM_PIO2_H2) + hl * UM_PIO2_H1) + hl * UM_PIO2_H2;
        precise float lo = e + (rh * UM_PIO2_L + rl * (UM_PIO2_H1 + UM_PIO2_H2));
        precise float th = ph + lo;
        precise float tl = lo - (th - ph);
        float sc = uintBitsToFloat(uint(127 - n) << 23);  // 2^-n, n <= 96
        yh = th * sc;
        yl = tl * sc;
        if (neg) { yh = -yh; yl = -yl; }
    }
    return q;
}

// sin(x) (cos_shift 0) or cos(x) = sin(|x| + pi / 2) (cos_shift 1) on float32 bits
uint um_trig(uint x, uint cos_shift) {
    uint a = x & 0x7FFFFFFFu;
    if (a > F32_INF) return um_quiet(x);
    if (a == F32_INF) return F32_QNAN;
    if (a < 0x39800000u) return cos_shift == 1u ? 0x3F800000u : x;  // |x| < 2^-12
    float yh, yl;
    uint q = um_trig_reduce(a, yh, yl);
    uint k = (q + cos_shift) & 3u;
    uint y = floatBitsToUint((k & 1u) != 0u ? um_kcos(yh, yl) : um_ksin(yh, yl));
    if ((k & 2u) != 0u) y ^= 0x80000000u;
    return cos_shift == 1u ? y : y ^ (x & 0x80000000u);
}

#endif
