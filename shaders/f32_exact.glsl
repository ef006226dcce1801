// float32 arithmetic on bit patterns in integer code, correctly rounded (round to nearest, ties
// to even), with IEEE-754 special values and subnormal operands and results: the same bits on
// every device, whatever its float controls (Vulkan lets OpFDiv be 2.5 ulp off and lets a device
// flush subnormals). Shared by elementwise.comp (ELEMENT_WISE_DIVIDE) and dynamic_quantize.comp.
#ifndef KDML_F32_EXACT_GLSL
#define KDML_F32_EXACT_GLSL

#define F32_QNAN 0x7FC00000u
#define F32_INF 0x7F800000u

// a finite non-zero magnitude's significand m in [2^23, 2^24) and exponent x: |value| = m * 2^(x - 23)
void f32_unpack(uint a, out uint m, out int x) {
    uint e = (a >> 23) & 0xFFu;
    uint f = a & 0x7FFFFFu;
    if (e == 0u) {  // subnormal: f * 2^-149
        int top = findMSB(f);
        m = f << uint(23 - top);
        x = top - 149;
    } else {
        m = f | 0x800000u;
        x = int(e) - 127;
    }
}

// a / b by long division of the significands (every case). A NaN result is 0x7FC00000.
uint f32_div_long(uint a, uint b) {
    uint s = (a ^ b) & 0x80000000u;
    uint aa = a & 0x7FFFFFFFu, ab = b & 0x7FFFFFFFu;
    if (aa > F32_INF || ab > F32_INF) return F32_QNAN;
    if (aa == F32_INF) return ab == F32_INF ? F32_QNAN : (s | F32_INF);
    if (ab == F32_INF) return s;
    if (ab == 0u) return aa == 0u ? F32_QNAN : (s | F32_INF);
    if (aa == 0u) return s;
    uint ma, mb;
    int xa, xb;
    f32_unpack(aa, ma, xa);
    f32_unpack(ab, mb, xb);
    int e = xa - xb;
    if (ma < mb) {  // ma / mb in [1, 2) from here on (ma < 2^25)
        ma <<= 1;
        e -= 1;
    }
    // q = floor(ma * 2^24 / mb) in [2^24, 2^25), r the remainder: three 8-bit steps of long
    // division (r < mb < 2^24, so r << 8 fits 32 bits)
    uint r = ma - mb;
    uint q = 1u;
    for (int i = 0; i < 3; ++i) {
        r <<= 8;
        q = (q << 8) | (r / mb);
        r = r % mb;
    }
    bool sticky = r != 0u;
    int be = e + 127;  // the biased exponent of a normal result
    if (be >= 255) return s | F32_INF;
    if (be >= 1) {
        uint mant = q >> 1;  // 24 bits, the implicit one included: it carries into the exponent
        uint bits = (uint(be - 1) << 23) + mant;
        if ((q & 1u) != 0u && (sticky || (mant & 1u) != 0u)) bits += 1u;  // 254 + carry gives infinity
        return s | bits;
    }
    // subnormal result: q * 2^(be - 2) units of 2^-149
    uint sh = uint(2 - be);
    if (sh > 25u) return s;  // below half the smallest subnormal
    uint mant = q >> sh;
    uint rem = q & ((1u << sh) - 1u);
    uint half_ = 1u << (sh - 1u);
    bool up = rem > half_ || (rem == half_ && (sticky || (mant & 1u) != 0u));
    return s | (mant + (up ? 1u : 0u));  // may carry into the smallest normal
}

// a / b, correctly rounded. Where a and b are normal and the quotient's exponent is well inside
// the normal range (nearly always), the device divides the significands (1.f / 1.g in [1, 2):
// Vulkan's OpFDiv is within 2.5 ulp there; any error is caught) and the result is corrected to
// the correctly rounded one in integer code: with fx = mx 2^-23, fy = my 2^-23 and the estimate
// q = mq 2^(eq - 23) (eq -1 or 0), the residual R = mx 2^(23 - eq) - mq my is exact (48-bit
// products) and q is the correctly rounded quotient iff |2 R| <= my (ties: mq even; below a power
// of two, where the spacing halves, -4 R <= my). Estimates more than 4 ulps off, corrections
// that leave [2^23, 2^24) and the other edge cases take f32_div_long.
uint f32_div_bits(uint a, uint b) {
    uint ea = (a >> 23) & 0xFFu, eb = (b >> 23) & 0xFFu;
    int e = int(ea) - int(eb);
    if (ea - 1u < 254u && eb - 1u < 254u && e > -125 && e < 126) {
        precise float fx = uintBitsToFloat((a & 0x7FFFFFu) | 0x3F800000u);
        precise float fy = uintBitsToFloat((b & 0x7FFFFFu) | 0x3F800000u);
        precise float fq = fx / fy;
        uint qb = floatBitsToUint(fq);
        int eq = int((qb >> 23) & 0xFFu) - 127;
        if (eq == 0 || eq == -1) {
            uint mx = (a & 0x7FFFFFu) | 0x800000u, my = (b & 0x7FFFFFu) | 0x800000u;
            uint mq = (qb & 0x7FFFFFu) | 0x800000u;
            uint phi, plo;
            umulExtended(mq, my, phi, plo);
            uint sh = uint(23 - eq);
            uint alo = mx << sh, ahi = mx >> (32u - sh);
            uint rlo = alo - plo;
            uint rhi = ahi - phi - (alo < plo ? 1u : 0u);
            int r = int(rlo);
            int m = int(my);
            // R must fit in 29 bits (an estimate within 16 ulps): else the long division
            bool near = rhi == ((r < 0) ? 0xFFFFFFFFu : 0u) && r < (1 << 28) && r > -(1 << 28);
            for (int it = 0; it < 4 && near; ++it) {
                if (2 * r > m || (2 * r == m && (mq & 1u) != 0u)) {
                    mq += 1u;
                    r -= m;
                } else if (2 * r < -m || (2 * r == -m && (mq & 1u) != 0u)) {
                    mq -= 1u;
                    r += m;
                } else {
                    break;
                }
            }
            // below a power of two the spacing halves: there |R| <= my / 4 (ties go up, to the even
            // one). Unreachable for float32 operands (mx < my gives my - mx >= 1 > my / 4: q = 1 is
            // refused by the range test first), kept for estimates from elsewhere.
            bool exact = near && 2 * r <= m && 2 * r >= -m && mq >= 0x800000u && mq < 0x1000000u
                         && !(mq == 0x800000u && -4 * r > m);
            if (exact) return ((a ^ b) & 0x80000000u) | (uint(e + eq + 127) << 23) | (mq & 0x7FFFFFu);
        }
    }
    return f32_div_long(a, b);
}

// a * b for finite non-zero a and b, correctly rounded, subnormal operands and results included
// (the 48-bit product of the significands by umulExtended, one rounding to the result's precision).
// Normal operands whose product the device rounds to a normal number take the device's product:
// Vulkan's OpFMul is correctly rounded, and a flush-to-zero mode can only turn a tiny result into a
// zero, never into another normal number (as dequantize.comp's product). The integer code is about
// 40 dependent instructions per product, and a convolution's fused HardSwish takes two per element.
uint f32_mul_bits(uint a, uint b) {
    if (((a >> 23) & 0xFFu) - 1u < 254u && ((b >> 23) & 0xFFu) - 1u < 254u) {
        precise float r = uintBitsToFloat(a) * uintBitsToFloat(b);
        uint rb = floatBitsToUint(r);
        if (((rb >> 23) & 0xFFu) - 1u < 254u) return rb;
    }
    uint s = (a ^ b) & 0x80000000u;
    uint ma, mb;
    int xa, xb;
    f32_unpack(a & 0x7FFFFFFFu, ma, xa);
    f32_unpack(b & 0x7FFFFFFFu, mb, xb);
    uint hi, lo;
    umulExtended(ma, mb, hi, lo);  // P = ma * mb in [2^46, 2^48): hi holds bits 32..47
    int top = hi >= 0x8000u ? 47 : 46;
    int e = xa + xb + top - 46;  // |a * b| = P * 2^(e - top)
    int shift = top - 23;  // keep 24 significant bits ...
    if (e < -126) shift += -126 - e;  // ... or the subnormal grid's
    if (shift > 49) return s;  // below half the smallest subnormal
    uint q, rem_hi, rem_lo, half_hi, half_lo;
    if (shift >= 32) {
        uint k = uint(shift - 32);
        q = hi >> k;
        rem_hi = hi & ((1u << k) - 1u);
        rem_lo = lo;
    } else {
        q = (hi << uint(32 - shift)) | (lo >> uint(shift));
        rem_hi = 0u;
        rem_lo = lo & ((1u << uint(shift)) - 1u);
    }
    if (shift >= 33) {
        half_hi = 1u << uint(shift - 33);
        half_lo = 0u;
    } else {
        half_hi = 0u;
        half_lo = 1u << uint(shift - 1);
    }
    bool above = rem_hi > half_hi || (rem_hi == half_hi && rem_lo > half_lo);
    bool tie = rem_hi == half_hi && rem_lo == half_lo;
    if (above || (tie && (q & 1u) != 0u)) q += 1u;
    // normal: the exponent field plus the significand with its implicit one (a carry to 2^24
    // moves into the exponent); subnormal: the significand alone (2^23 is the smallest normal)
    uint bits = e >= -126 ? (uint(e + 126) << 23) + q : q;
    return s | min(bits, F32_INF);
}

// |a| + |b| (neither a NaN)
uint f32_add_abs_bits(uint a, uint b) {
    a &= 0x7FFFFFFFu;
    b &= 0x7FFFFFFFu;
    if (a < b) {  // a >= b from here on (bit order is value order for magnitudes)
        uint t = a;
        a = b;
        b = t;
    }
    if (a >= F32_INF || b == 0u) return a;
    uint ea = a >> 23, eb = b >> 23;
    uint ma = ((a & 0x7FFFFFu) | (ea != 0u ? 0x800000u : 0u)) << 3;  // three guard bits
    uint mb = ((b & 0x7FFFFFu) | (eb != 0u ? 0x800000u : 0u)) << 3;
    uint xa = max(ea, 1u), xb = max(eb, 1u);  // subnormals: exponent 1 without the implicit one
    uint d = xa - xb;
    if (d >= 27u) {
        mb = 1u;  // only its sticky bit is left
    } else if (d > 0u) {
        mb = (mb >> d) | ((mb & ((1u << d) - 1u)) != 0u ? 1u : 0u);
    }
    uint sum = ma + mb;  // < 2^28
    if (sum >= (1u << 27)) {
        sum = (sum >> 1) | (sum & 1u);
        xa += 1u;
    }
    uint mant = sum >> 3, low = sum & 7u;
    uint bits = ((xa - 1u) << 23) + mant;
    if (low > 4u || (low == 4u && (mant & 1u) != 0u)) bits += 1u;
    return min(bits, F32_INF);
}

#endif
