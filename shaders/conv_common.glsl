// What every CONVOLUTION kernel shares (convolution.comp's tiled, direct and split-K variants,
// conv_coop.comp's tensor-core ones): the words of the operator's constant, which
// kompute_dml/ops/convolution.py `_params` writes in this order, and the epilogue: the sum + the
// bias, the fused activation, the output element's bits. The includer declares `p` (the constant,
// binding 4), `b_buf` (the bias, binding 2), the push block (CONV_PUSH: b_off) and F16 (the bias
// and the output are FLOAT16), and includes f16_bits.glsl.
#ifndef KDML_CONV_COMMON_GLSL
#define KDML_CONV_COMMON_GLSL

#define P_CING 0
#define P_COUTG 1
#define P_IN 2      // D, H, W
#define P_OUT 5     // OD, OH, OW
#define P_K 8       // KD, KH, KW
#define P_STRIDE 11
#define P_DIL 14
#define P_PAD 17    // start padding D, H, W
#define P_XS 20     // input strides b, c, d, h, w
#define P_WS 25     // filter strides o, i, d, h, w
#define P_YS 30     // output strides b, c, d, h, w
#define P_BS 35     // the bias's channel stride
#define P_FLAGS 36  // 1: reverse the window (CONVOLUTION), 4: bias, 8: BACKWARD (tiled only),
                    // 16: the filter's k table offsets are k (conv_coop.comp's 16-byte filter loads)
#define P_NPIX 37   // batch * OD * OH * OW
#define P_KLEN 38   // CinG * KD * KH * KW
#define P_KVOL 39   // KD * KH * KW
#define P_KHW 40    // KH * KW
#define P_OHW 41    // OH * OW
#define P_ODHW 42   // OD * OH * OW
#define P_COUT 43   // all output channels (GroupCount * CoutG)
#define P_WM 44     // the filter's step per output channel (stride 0, BACKWARD: stride 1)
#define P_WG 45     // the filter's step per group
#define P_SPLIT 46  // split-K: the reduction in this many parts (1: none; > 1: the SPLIT variant)
#define P_KCHUNK 47 // k per part (a multiple of the kernel's K step; without split KLEN rounded up)
#define P_ACT 48    // the fused activation (ACT_* below), then its float32 parameters (2 words)
#define P_TAB 52    // the k table: per k < KLEN, TAB_W words (below)
#define TAB_W 5     // input offset of (ci, kd*dd, kh*dh, kw*dw); filter offset of (ci, window
                    // position, reversed in CONVOLUTION mode); kd*dd; kh*dh; kw*dw

#define CONV_F_FLIP 1u
#define CONV_F_BIAS 4u
#define CONV_F_BACKWARD 8u
#define CONV_F_W_KCONTIG 16u

// the fused activation's parameters, which fused_act.glsl reads (its kinds ACT_*): set by
// conv_finish_with from the epilogue's words
uint g_act_p0 = 0u, g_act_p1 = 0u;  // Alpha / Min, Beta / Max
#define UM_P0 g_act_p0
#define UM_P1 g_act_p1
#define FA_F16 F16
#include "fused_act.glsl"

float conv_load_b(uint e) {
#if F16
    return uintBitsToFloat(h2f((b_buf[e >> 1] >> ((e & 1u) * 16u)) & 0xFFFFu));
#else
    return uintBitsToFloat(b_buf[e]);
#endif
}

// The epilogue's words: the fused activation, its two parameters, whether a bias is bound. A kernel
// that finishes many outputs per invocation reads them (and its channels' biases) once before its
// loop, which then waits for no load per output (the tiled kernel's epilogue).
struct ConvEpilogue {
    uint kind;
    uint p0;
    uint p1;
    bool bias;
};

// The kind as a specialization constant where the includer names its id (CONV_ACT_ID; the plan's
// last constant, ops/act_table.py conv_act), so the driver keeps that activation's code alone:
// with the kind read from the constant every kind's code stays in the kernel, inlined once per output
// of the row variants (H200: docs/convolution.md; GEMM too: gemm_act.glsl). CONV_ACT_ANY (no constant given): the
// constant's word.
#define CONV_ACT_ANY 0xFFFFFFFFu
#ifdef CONV_TABLE_BINDING
layout(std430, binding = CONV_TABLE_BINDING) readonly buffer ActTable { uint act_table[]; };
#endif
#ifdef CONV_ACT_ID
layout(constant_id = CONV_ACT_ID) const uint CONV_ACT_KIND = CONV_ACT_ANY;
#else
const uint CONV_ACT_KIND = CONV_ACT_ANY;
#endif

ConvEpilogue conv_epilogue() {
    uint kind = CONV_ACT_KIND != CONV_ACT_ANY ? CONV_ACT_KIND : p[P_ACT];
    return ConvEpilogue(kind, p[P_ACT + 1], p[P_ACT + 2], (p[P_FLAGS] & CONV_F_BIAS) != 0u);
}

// output channel co's bias (0.0, unused, without one)
float conv_bias(ConvEpilogue ep, uint co) { return ep.bias ? conv_load_b(pc.b_off + co * p[P_BS]) : 0.0; }

// An output element from its float32 sum and its channel's bias: + the bias (rounded), ReLU
// (ACTIVATION_RELU's bits: -0 and negatives +0, NaN kept; it commutes with the FLOAT16 rounding),
// or another fused activation applied to the value the output type holds (FLOAT16: the sum rounded
// to float16 first, as the standalone operator reads the unfused output), then rounded to the
// output type. So a fused result is bit for bit the unfused chain's. Returns the element's bits.
uint conv_finish_with(ConvEpilogue ep, float sum, float bias) {
    precise float v = sum;
    if (ep.bias) v = v + bias;
    // ReLU on the bits (gemm_act's form): with the kind a specialization constant NVIDIA's compiler
    // (H200) turned `v <= 0.0 ? 0.0 : v` into a maximum, which made NaN +0 (tests/test_conv_fused.py)
    if (ep.kind == ACT_RELU) {
        uint b = floatBitsToUint(v);
        v = uintBitsToFloat((b & 0x7FFFFFFFu) > 0x7F800000u ? b : ((b >> 31) != 0u ? 0u : b));
    }
    g_act_p0 = ep.p0;
    g_act_p1 = ep.p1;
#if F16
    uint h = f2h(floatBitsToUint(v));
#ifdef CONV_TABLE_BINDING  // the FLOAT16 activation's table (ops/act_table.py, as GEMM's: gemm_act.glsl)
    return ep.kind > ACT_RELU ? (act_table[h >> 1] >> ((h & 1u) << 4)) & 0xFFFFu : h;
#else
    return ep.kind > ACT_RELU ? f2h(fused_act(h2f(h), ep.kind)) : h;
#endif
#else
    uint x = floatBitsToUint(v);
    return ep.kind > ACT_RELU ? fused_act(x, ep.kind) : x;
#endif
}

// output channel co's element from its float32 sum (conv_finish_with)
uint conv_finish(float sum, uint co) {
    ConvEpilogue ep = conv_epilogue();
    return conv_finish_with(ep, sum, conv_bias(ep, co));
}

#endif
