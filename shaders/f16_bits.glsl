// float16 <-> float32 conversions on bit patterns, in integer code (exact whatever the device's
// float controls; no packHalf2x16): shared by elementwise.comp and cast.comp.
#ifndef KDML_F16_BITS_GLSL
#define KDML_F16_BITS_GLSL

// the magnitude of float16 bits with a zero exponent field, m 2^-24: exact (a normal float32, or zero)
float f16_subnormal(uint h) { return float(h & 0x3FFu) * 5.9604644775390625e-08; }

// float16 bits -> float32 bits, exact (float16 subnormals are float32 normals; a NaN keeps its
// payload). Branch-free: a select of three forms, the subnormal one by one float32 product whose
// result is a normal float32 (exact on every device: no flush). H100, `python -m benchmarks.bench_se
// --dtype float16`: SQUEEZE_EXCITATION's gate at 1 x 576 -> 144 x 7 x 7 took 98.4 us with the form with
// branches (device call 237), 38.0 with this one (call 239).
uint h2f(uint h) {
    uint em = h & 0x7FFFu;
    uint normal = (em << 13) + 0x38000000u;  // exponent + 112
    uint special = (em << 13) | 0x7F800000u;  // exponent 31: infinity or NaN, the payload kept
    uint subnormal = floatBitsToUint(f16_subnormal(h));
    uint v = em >= 0x7C00u ? special : (em < 0x400u ? subnormal : normal);
    return ((h & 0x8000u) << 16) | v;
}

// float16 bits -> its float32 value, exact except a NaN's payload (any NaN stays a NaN): the device's
// conversion (UnpackHalf2x16, correctly rounded: exact), except subnormals, which a device may flush,
// by one float32 product (exact: a normal result). For operands whose NaNs need no payload (the
// convolution's loads). H100, `encoder_profile --family efficientnet-b0-fp16 --shape 8x128`: the
// depthwise layers took 897 us with h2f (device call 241) and 595 with UnpackHalf2x16 alone (call 242,
// f595a2b, kept in main's history by a merge); this form (the subnormal select added) was not timed
float h2f_value(uint h) {
    float v = unpackHalf2x16(h).x;
    float sub = f16_subnormal(h);
    return (h & 0x7C00u) == 0u ? ((h & 0x8000u) != 0u ? -sub : sub) : v;
}

// float32 bits -> float16 bits, rounded to nearest even (a NaN -> the quiet NaN 0x7E00 of its
// sign). Branch-free, integer code: a select of the normal, subnormal, infinite and NaN results
// (each computed for every input; the subnormal one shifts the significand right by 14 .. 31
// places and rounds the remainder, which also gives +-0 below half the smallest subnormal)
uint f2h(uint x) {
    uint s = (x >> 16) & 0x8000u;
    uint ax = x & 0x7FFFFFFFu;
    uint normal = ((ax + 0xFFFu + ((ax >> 13) & 1u)) >> 13) - (112u << 10);  // rounded at bit 13, rebiased
    uint m = (ax & 0x7FFFFFu) | 0x800000u;  // value = m * 2^(e - 150), e the biased exponent
    uint shift = uint(clamp(126 - int(ax >> 23), 1, 31));  // result units of 2^-24
    uint rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
    uint v = m >> shift;
    uint subnormal = v + uint(rem > half_ || (rem == half_ && (v & 1u) != 0u));
    uint r = ax < 0x38800000u ? subnormal : normal;  // below 2^-14: a subnormal (or zero) result
    r = ax >= 0x477FF000u ? 0x7C00u : r;  // >= 65520 (infinity included): rounds to infinity
    r = ax > 0x7F800000u ? 0x7E00u : r;
    return s | r;
}

// float16 bits -> float32, exact, for bits that are no infinity or NaN: branch-free (the
// tensor-core attention's weights, float16 as the device converted them)
float h2f_finite(uint h) {
    float denormal = f16_subnormal(h);
    float normal = uintBitsToFloat(((h & 0x7FFFu) << 13) + 0x38000000u);  // exponent + 112
    float v = (h & 0x7C00u) == 0u ? denormal : normal;
    return (h & 0x8000u) != 0u ? -v : v;
}

// float32 -> float16 bits rounded to nearest even, for |x| < 65520 (no infinity, no NaN): f2h's
// result without its branches; subnormal results by one float32 addition (Vulkan rounds it
// correctly: |x| + 0.5 keeps |x| to the nearest multiple of 2^-24)
uint f2h_finite(float x) {
    uint ax = floatBitsToUint(x) & 0x7FFFFFFFu;
    uint normal = (ax + 0xFFFu + ((ax >> 13) & 1u)) >> 13;  // rounded at bit 13, exponent still + 127
    normal -= 112u << 10;
    uint denormal = floatBitsToUint(abs(x) + 0.5) - 0x3F000000u;
    return ((floatBitsToUint(x) >> 16) & 0x8000u) | (ax < 0x38800000u ? denormal : normal);
}

#endif
