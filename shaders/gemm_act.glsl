// GEMM's FusedActivation (kompute_dml/ops/gemm.py; the families' ACT variants): the kind
// (fused_act.glsl's ACT_*, kompute_dml/ops/conv_fused.py writes it) a specialization constant (id
// GEMM_ACT_ID, default 0), so the driver keeps only that activation's code (with the kind in the push
// block every kind's code stayed in the kernel, and the products ran several times slower on the H100).
// Its two float32 parameters in act_p0 / act_p1, applied to each output as the output type holds it
// (FLOAT16: the rounded half, decoded exactly) by the standalone operators' own functions, then
// rounded to the type again: the fused output is the unfused chain's bits (GEMM, then the
// activation). The includer defines F16 and declares GEMM_PUSH (pc).
#ifndef KDML_GEMM_ACT_GLSL
#define KDML_GEMM_ACT_GLSL

#define UM_P0 pc.act_p0
#define UM_P1 pc.act_p1
#define FA_F16 F16
#define FA_GELU 1
#include "fused_act.glsl"

#ifndef GEMM_ACT_ID
#define GEMM_ACT_ID 0
#endif
layout(constant_id = GEMM_ACT_ID) const uint ACT_KIND = 0u;
uint gemm_act_kind() { return ACT_KIND; }

// float32 bits -> the activation's float32 bits (ReLU: -0 and negatives +0, NaN kept)
uint gemm_act(uint x, uint kind) {
    if (kind == ACT_NONE) return x;
    if (kind == ACT_RELU) return (x & 0x7FFFFFFFu) > 0x7F800000u ? x : ((x >> 31) != 0u ? 0u : x);
    return fused_act(x, kind);
}

// gemm_act's bits where `slow` stays false, without the exact forms' rarely taken code for the kinds
// that have a fast form (act_math.glsl: HardSwish, Swish); the caller runs gemm_act where it is set
uint gemm_act_fast(uint x, uint kind, inout bool slow) {
#if SWISH_ABL == 0  // (benchmarks/overlay_act.py's other forms: gemm_act in every output)
    if (kind == ACT_HARD_SWISH) return um_hard_swish_fast(x, slow);
    if (kind == ACT_SWISH) return um_swish_fast(x, slow);
#endif
    return gemm_act(x, kind);
}

// a FLOAT16 output's bits -> the activation's FLOAT16 bits. Where the includer binds a table
// (ACT_TABLE_BINDING: 65,536 halves, the standalone operator's result for every float16 input,
// ops/act_table.py), one lookup gives them for the kinds past ReLU: the same bits as the exact code,
// which inlined per output made the tensor-core kernel 1.8x as slow (H200, bench_conv --pointwise --half,
// device call 257: 133.8 against 73.0 us)
#ifdef ACT_TABLE_BINDING
layout(std430, binding = ACT_TABLE_BINDING) readonly buffer ActTable { uint act_table[]; };
#endif
uint gemm_act16(uint h, uint kind) {
    if (kind == ACT_NONE) return h;
#ifdef ACT_TABLE_BINDING
    if (kind != ACT_RELU) return (act_table[h >> 1] >> ((h & 1u) << 4)) & 0xFFFFu;
#endif
    return f2h(gemm_act(h2f(h), kind));
}

#endif
