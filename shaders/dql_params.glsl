// DYNAMIC_QUANTIZE_LINEAR's arithmetic (ONNX Runtime's CPU kernel, bit for bit), shared by
// dynamic_quantize.comp (dql_minmax / dql_quant) and matmul_coop.comp's QA variants (mmcq8*: A
// quantized as it is staged, from dql_minmax's keys). Needs f32_exact.glsl and QMIN / QMAX.
#ifndef KDML_DQL_PARAMS_GLSL
#define KDML_DQL_PARAMS_GLSL

#define KEY_ZERO 0x80000000u  // +0's key

// order-preserving unsigned key of a non-NaN float32 (-0 below +0) and its inverse
uint f_key(uint x) { return (x & 0x80000000u) != 0u ? ~x : (x | 0x80000000u); }
uint f_unkey(uint k) { return (k & 0x80000000u) != 0u ? (k & 0x7FFFFFFFu) : ~k; }

#ifdef QMAX  // (dql_minmax has no range: the keys alone)
#define NEEDS_EXACT 0x100u

// (scale bits, zero point, 1 / scale or 0) of the range [lo, hi] given by its keys (lo <= +0 <= hi):
// the header's arithmetic; 1 / scale is the fast path's (quantize_fast), 0 unless normal
uvec3 quant_params(uint lo_key, uint hi_key) {
    uint lo_bits = f_unkey(lo_key), hi_bits = f_unkey(hi_key);
    uint scale = 0x3F800000u;  // 1.0 where hi == lo (both are zeros)
    if (((lo_bits | hi_bits) & 0x7FFFFFFFu) != 0u) {
        scale = f32_div_bits(f32_add_abs_bits(hi_bits, lo_bits), floatBitsToUint(float(QMAX - QMIN)));
    }
    uint t = f32_div_bits(lo_bits, scale);  // <= 0, -infinity (scale 0) or NaN (-inf / inf)
    int zp = QMAX;
    if ((t & 0x7FFFFFFFu) <= F32_INF) {
        precise float zf = float(QMIN) - uintBitsToFloat(t);  // one float32 subtraction, as ONNX Runtime's
        zp = int(roundEven(clamp(zf, float(QMIN), float(QMAX))));
    }
    uint rcp = f32_div_bits(0x3F800000u, scale);
    uint re = (rcp >> 23) & 0xFFu;
    return uvec3(scale, uint(zp), (re != 0u && re != 0xFFu) ? rcp : 0u);
}

// round_half_even(x / scale) clamped to [qmin - zp, qmax - zp], + zp (the low byte), or
// NEEDS_EXACT. t = x * rcp (rcp = 1 / scale correctly rounded, normal; x normal or zero) is within
// 2^-13.5 of the correctly rounded quotient q where |q| < 300 (two roundings of 2^-24 relative
// each, q's own half ulp <= 2^-15), so where t is further than 2^-12 from a half-integer, or
// beyond +-300 (clamped either way), t rounds as q does. Elsewhere (near ties, subnormal or
// non-finite x, scales without a normal reciprocal) quantize_exact computes q.
uint quantize_fast(uint bits, uint rcp, int zp) {
    uint e = (bits >> 23) & 0xFFu;
    if (rcp != 0u && e != 0xFFu && (e != 0u || (bits & 0x7FFFFFFFu) == 0u)) {
        precise float t = uintBitsToFloat(bits) * uintBitsToFloat(rcp);
        precise float f = t - floor(t);
        if (abs(t) >= 300.0 || abs(f - 0.5) > 2.44140625e-4) {
            float c = clamp(t, float(QMIN - zp), float(QMAX - zp));
            return uint(int(roundEven(c)) + zp) & 0xFFu;
        }
    }
    return NEEDS_EXACT;
}

uint quantize_exact(uint bits, uint scale, int zp) {
    uint q = f32_div_bits(bits, scale);
    if ((q & 0x7FFFFFFFu) > F32_INF) return uint(QMIN) & 0xFFu;  // NaN: qmin
    float c = clamp(uintBitsToFloat(q), float(QMIN - zp), float(QMAX - zp));
    return uint(int(roundEven(c)) + zp) & 0xFFu;
}

uint quantize(uint bits, uint scale, uint rcp, int zp) {
    uint v = quantize_fast(bits, rcp, zp);
    return v != NEEDS_EXACT ? v : quantize_exact(bits, scale, zp);
}

#endif  // QMAX
#endif
