// What QUANTIZED_LINEAR_CONVOLUTION's kernels share (qconv.comp's one output per invocation,
// qconv_tiled.comp's tiles and split-K): the words of the operator's constant, which
// kompute_dml/ops/quantized_convolution.py geometry_words writes in this order, the byte reads and
// the requantization. The includer declares `p` (the constant), the scale, zero-point and bias
// buffers and the push block (QCONV_PUSH), and includes f32_exact.glsl.
#ifndef KDML_QCONV_COMMON_GLSL
#define KDML_QCONV_COMMON_GLSL

// the constant's words (ops/quantized_convolution.py geometry_words writes them in this order)
#define P_TOTAL 0
#define P_FLAGS 1   // 1 x signed, 2 w signed, 4 y signed, 8 x_zp, 16 w_zp, 32 bias, 64 y_zp bound, 128 quads
#define P_M 2       // output channels
#define P_IH 3
#define P_IW 4
#define P_OH 5
#define P_OW 6
#define P_KH 7
#define P_KW 8
#define P_CPG 9     // input channels per group
#define P_MPG 10    // output channels per group
#define P_STRIDE 11 // h, w
#define P_DIL 13
#define P_PAD 15    // start padding h, w
#define P_XS 17     // input strides n, c, h, w
#define P_WS 21     // filter strides m, c, h, w
#define P_YS 25     // output strides
#define P_CH 29     // per output channel: the strides of w_scale, w_zp, bias along it (0: per tensor)

int byte_at(uint buf_word, uint e, bool signed_) {
    int off = int((e & 3u) * 8u);
    return signed_ ? bitfieldExtract(int(buf_word), off, 8) : int(bitfieldExtract(buf_word, off, 8));
}

// acc as the nearest float32: hi * 2^16 and lo exact, one correctly rounded addition
float to_float(int acc) {
    uint mag = acc < 0 ? uint(-(acc + 1)) + 1u : uint(acc);
    precise float f = float(mag >> 16) * 65536.0 + float(mag & 0xFFFFu);
    return acc < 0 ? -f : f;
}

// the tiled kernels' words after the geometry: pixels (N * OH * OW), OH * OW, terms (CPG * KH * KW),
// split-K's parts and the terms per part, then per term k = (c, kh, kw) TAB_W words: the input
// offset of (c, kh * dil, kw * dil), the filter offset of (c, kh, kw), kh * dil, kw * dil
#define P_NPIX 32
#define P_OHW 33
#define P_KLEN 34
#define P_SPLIT 35
#define P_KCHUNK 36
#define P_TAB 37
#define TAB_W 4

// y = clamp(roundEven(float32(acc + bias[m]) * ((x_scale * w_scale[m]) / y_scale)) + y_zp, Min, Max),
// each float32 step rounded once: the output byte of channel m's sum `acc`
uint requant(int acc, uint m) {
    uint flags = p[P_FLAGS];
    bool ysg = (flags & 4u) != 0u;
    int bias = (flags & 32u) != 0u ? int(b_buf[pc.b_off + m * p[P_CH + 2]]) : 0;
    precise float sc = uintBitsToFloat(xs_buf[pc.xs_off]) * uintBitsToFloat(ws_buf[pc.ws_off + m * p[P_CH]]);
    float mult = uintBitsToFloat(f32_div_bits(floatBitsToUint(sc), ys_buf[pc.ys_off]));
    float yz = (flags & 64u) != 0u ? float(byte_at(yz_buf[pc.yz_off >> 2], pc.yz_off, ysg)) : 0.0;
    precise float v = to_float(acc + bias) * mult;
    precise float q = roundEven(v) + yz;
    q = isnan(q) ? (ysg ? -128.0 : 0.0) : clamp(q, ysg ? -128.0 : 0.0, ysg ? 127.0 : 255.0);
    return uint(int(q)) & 0xFFu;
}

#endif
