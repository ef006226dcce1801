// kompute_dml's extension of ACTIVATION_GELU (approximate "tanh", ops/activation.py): ONNX Gelu's
// tanh form 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) in the order torch.onnx.export writes
// it and the ONNX backend runs its nodes, each step rounded to the type (every product and sum in
// float32 first, tanh by unary_math.glsl): (x 0.5) (tanh((x + x^3 B) A) + 1), A and B the constants
// rounded to the type (float16: through float32), x^3 as the backend's Pow by 3 computes it:
// FLOAT32 (x x) x, FLOAT16 pow_math.glsl's pow(x, 3) rounded once. The includer defines GT_F16 (1:
// the steps round to FLOAT16); kdml_gelu_tanh maps float32 bits (the value the type holds) to the
// float32 bits of the last product, which a FLOAT16 caller rounds once more (f2h).
// Shared by float_unary.comp (FN_GELU_TANH) and fused_act.glsl (GEMM's fused GELU).
#ifndef KDML_GELU_TANH_GLSL
#define KDML_GELU_TANH_GLSL

#ifndef UM_LIB_ONLY
#define UM_LIB_ONLY 1
#endif
#include "unary_math.glsl"
#include "pow_math.glsl"
#if GT_F16
float gt_round(float v) { return uintBitsToFloat(h2f(f2h(floatBitsToUint(v)))); }  // rounded to float16
const float GT_A = 0.7978515625, GT_B = 0.044708251953125;  // the float16 constants
float gt_cube(uint xb) { return uintBitsToFloat(um_pow_f(xb, 0x40400000u)); }  // pow(x, 3.0)
#else
float gt_round(float v) { return v; }  // a step's result in the type: float32 as computed
const float GT_A = 0.7978845608028654, GT_B = 0.044715;
float gt_cube(uint xb) {
    float x = uintBitsToFloat(xb);
    precise float c = (x * x) * x;
    return c;
}
#endif
uint kdml_gelu_tanh(uint xb) {
    float x = uintBitsToFloat(xb);
    precise float half_x = gt_round(x * 0.5);
    precise float q = gt_round(gt_round(gt_cube(xb)) * GT_B);
    precise float arg = gt_round(gt_round(x + q) * GT_A);
    precise float u = gt_round(gt_round(uintBitsToFloat(um_tanh(floatBitsToUint(arg)))) + 1.0);
    precise float y = half_x * u;
    return floatBitsToUint(y);
}

#endif
