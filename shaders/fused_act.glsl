// DirectML's FusedActivation as the operators that take one apply it (CONVOLUTION's epilogue,
// conv_common.glsl; ELEMENT_WISE_ADD1, elementwise.comp's ACT variants): the kinds
// (kompute_dml/ops/conv_fused.py writes them) and the activation of a kind on float32 bits, by
// the standalone operators' own functions (act_math.glsl / unary_math.glsl), so a fused result is
// the unfused chain's bits. The includer defines UM_P0 / UM_P1 (the activation's two float32
// parameter words) and FA_F16 (1 where the output type is FLOAT16: SWISH's sigmoid is rounded as
// FLOAT16 SIGMOID's), and includes f32_exact.glsl's dependencies as unary_math.glsl needs them.
// FA_GELU (GEMM's epilogue, gemm_act.glsl): ACTIVATION_GELU's two forms too, by float_unary.comp's
// functions (gelu_math.glsl, gelu_tanh.glsl); other includers leave them out (no code for them).
#ifndef KDML_FUSED_ACT_GLSL
#define KDML_FUSED_ACT_GLSL

#define ACT_NONE 0u
#define ACT_RELU 1u
#define ACT_LEAKY_RELU 2u
#define ACT_CLIP 3u
#define ACT_SIGMOID 4u
#define ACT_HARD_SIGMOID 5u
#define ACT_HARD_SWISH 6u
#define ACT_TANH 7u
#define ACT_ELU 8u
#define ACT_SWISH 9u
#define ACT_GELU 10u
#define ACT_GELU_TANH 11u

#define UM_LIB_ONLY 1
#include "unary_math.glsl"
#if defined(FA_GELU) && FA_GELU
#define GT_F16 FA_F16
#include "gelu_tanh.glsl"
#endif

// The fused activation of `kind` (> ACT_RELU) on float32 bits
uint fused_act(uint x, uint kind) {
    switch (kind) {
        case ACT_LEAKY_RELU: return um_leaky_relu(x);
        case ACT_CLIP: return um_clip(x);
        case ACT_SIGMOID: return um_sigmoid(x);
        case ACT_HARD_SIGMOID: return um_hard_sigmoid(x);
        case ACT_HARD_SWISH: return um_hard_swish(x);
        case ACT_TANH: return um_tanh(x);
        case ACT_ELU: return um_elu(x);
        case ACT_SWISH: return um_swish(x, FA_F16 != 0);
#if defined(FA_GELU) && FA_GELU
        case ACT_GELU: return floatBitsToUint(kdml_gelu(uintBitsToFloat(x)));
        case ACT_GELU_TANH: return kdml_gelu_tanh(x);
#endif
        default: return x;
    }
}

#endif
