// Float32 pairs hi + lo ("double-float") in unfused float32 +, -, * only (`precise`: Vulkan rounds
// them correctly; no fused multiply-add is assumed), for the functions that need more than 24
// bits in an intermediate (shaders/inv_trig_math.glsl's TAN, ASIN, ACOS; pow_math.glsl's POW):
// Veltkamp's split, Dekker's exact product, Knuth's and Dekker's exact sums. Exact as long as no
// product or sum overflows or falls below 2^-100 (the callers' ranges keep them there).
#ifndef KDML_DF_MATH_GLSL
#define KDML_DF_MATH_GLSL

// c[0] + z (c[1] + z (... + z c[N - 1])): Horner's rule from the highest coefficient, as written
#define DF_HORNER(N)                                  \
    float um_horner(float z, float c[N]) {            \
        precise float p = c[N - 1];                   \
        for (int i = N - 2; i >= 0; --i) p = p * z + c[i]; \
        return p;                                     \
    }
DF_HORNER(5)
DF_HORNER(7)
#undef DF_HORNER

// a = hi + lo, 12 significant bits each (Veltkamp, 2^12 + 1)
void df_split(float a, out float hi, out float lo) {
    precise float c = a * 4097.0;
    precise float h = c - (c - a);
    hi = h;
    precise float l = a - h;
    lo = l;
}

// a b = p + e exactly (Dekker)
void df_two_prod(float a, float b, out float p, out float e) {
    float ah, al, bh, bl;
    df_split(a, ah, al);
    df_split(b, bh, bl);
    precise float pp = a * b;
    precise float ee = (((ah * bh - pp) + ah * bl) + al * bh) + al * bl;
    p = pp;
    e = ee;
}

// a + b = s + e exactly for |a| >= |b| (or a = 0) (Dekker's Fast2Sum)
void df_fast_two_sum(float a, float b, out float s, out float e) {
    precise float ss = a + b;
    precise float ee = b - (ss - a);
    s = ss;
    e = ee;
}

// a + b = s + e exactly, any order (Knuth's 2Sum)
void df_two_sum(float a, float b, out float s, out float e) {
    precise float ss = a + b;
    precise float bb = ss - a;
    precise float ee = (a - (ss - bb)) + (b - bb);
    s = ss;
    e = ee;
}

// (ah + al)(bh + bl) as a normalized pair, relative error about 2^-44
void df_mul(float ah, float al, float bh, float bl, out float h, out float l) {
    float p, e;
    df_two_prod(ah, bh, p, e);
    precise float t = e + (ah * bl + al * bh);
    df_fast_two_sum(p, t, h, l);
}

// (nh + nl) / (dh + dl) rounded once to float32: q = nh / dh correctly rounded, then the
// remainder nh + nl - q (dh + dl) (nh - q dh exact: q dh is within an ulp of nh) divided by dh
float df_div(float nh, float nl, float dh, float dl) {
    float q = uintBitsToFloat(f32_div_bits(floatBitsToUint(nh), floatBitsToUint(dh)));
    float p, e;
    df_two_prod(q, dh, p, e);
    precise float r = (((nh - p) - e) + nl) - q * dl;
    precise float y = q + uintBitsToFloat(f32_div_bits(floatBitsToUint(r), floatBitsToUint(dh)));
    return y;
}

#endif
