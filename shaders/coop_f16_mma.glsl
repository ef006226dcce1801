// The f16 x f16 -> f32 16 x 16 x 16 cooperative-matrix operations of gemm_coop.comp and
// conv_coop.comp, or (MMA=1, the `coopmat-emulated` families) their replacements by plain subgroup
// code on the same shared tiles. The includer declares `shared uvec4 smem[]` (the fragments' tiles
// and the accumulators' staging), the specialization constant SG (subgroup size) and ACC_ZERO_BITS
// (the accumulators' starting value: -0 for GEMM, +0 for CONVOLUTION), and includes f16_bits.glsl.
//
// LOAD_A / LOAD_B (fragment, first uvec4, row stride in uvec4, layout), MULADD, STORE_ACC and
// LOAD_ACC (row-major float32 rows of `stride` uvec4). The emulated operations: each invocation owns an RB x CB block
// of every 16 x 16 accumulator, decodes its rows of A and columns of B exactly (h2f) and sums with
// fma over k in increasing order.
#ifndef KDML_COOP_F16_MMA_GLSL
#define KDML_COOP_F16_MMA_GLSL

#if MMA == 0
#define LAYOUT_ROW gl_CooperativeMatrixLayoutRowMajor
#define LAYOUT_COL gl_CooperativeMatrixLayoutColumnMajor
#define ACC_TYPE coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define A_FRAG coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define B_FRAG coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define ACC_ZERO ACC_TYPE(uintBitsToFloat(ACC_ZERO_BITS))
#define LOAD_A(f, element, stride, order) coopMatLoad(f, smem, element, stride, order)
#define LOAD_B(f, element, stride, order) coopMatLoad(f, smem, element, stride, order)
#define MULADD(a, b, c) c = coopMatMulAdd(a, b, c)
#define STORE_ACC(c, element, stride) coopMatStore(c, smem, element, stride, gl_CooperativeMatrixLayoutRowMajor)
#define LOAD_ACC(c, element, stride) coopMatLoad(c, smem, element, stride, gl_CooperativeMatrixLayoutRowMajor)
#define FRAG_LOOP [[unroll]]                       // constant fragment indices: registers
#define ACC_ADD_SCALED(c, d, s) c = c + d * (s)     // c += d s, element by element
#else
#define LAYOUT_ROW 0
#define LAYOUT_COL 1
// This invocation's block of a 16 x 16 accumulator: LR x LC invocations, RB rows x CB columns each
const uint LC = (SG >= 64u) ? 8u : ((SG >= 16u) ? 4u : 2u);
const uint LR = SG / LC;                          // SG 8: 4 x 2 (blocks 4 x 8); 32: 8 x 4 (2 x 4)
const uint RB = 16u / LR, CB = 16u / LC;
struct EmuA { float v[64]; };                     // RB rows x 16 k (RB <= 4)
struct EmuB { float v[128]; };                    // CB columns x 16 k (CB <= 8)
struct EmuAcc { float v[32]; };                   // RB x CB sums
#define ACC_TYPE EmuAcc
#define A_FRAG EmuA
#define B_FRAG EmuB
#define ACC_ZERO emu_zero()
#define LOAD_A(f, element, stride, order) f = emu_load_a(element, stride, order)
#define LOAD_B(f, element, stride, order) f = emu_load_b(element, stride, order)
#define MULADD(a, b, c) c = emu_muladd(a, b, c)
#define STORE_ACC(c, element, stride) emu_store(c, element, stride)
#define LOAD_ACC(c, element, stride) c = emu_load_acc(element, stride)
// Rolled fragment loops (lavapipe's compile time); everything per element is unrolled: gallivm ends
// all loops of a shader once they have run 65535 iterations together per invocation (see
// matmul_coop_mma.glsl), which only the K loop and these short loops count against.
#define FRAG_LOOP [[dont_unroll]]

#define ACC_ADD_SCALED(c, d, s) c = emu_add_scaled(c, d, s)

EmuAcc emu_add_scaled(EmuAcc c, EmuAcc d, float s) {
    [[unroll]] for (uint t = 0u; t < 32u; ++t) c.v[t] = c.v[t] + d.v[t] * s;
    return c;
}

EmuAcc emu_zero() {
    EmuAcc c;
    [[unroll]] for (uint t = 0u; t < 32u; ++t) c.v[t] = uintBitsToFloat(ACC_ZERO_BITS);
    return c;
}

// Element (row, col) of a 16 x 16 float16 fragment at smem[element], `stride` uvec4 per row
// (LAYOUT_ROW) or per column (LAYOUT_COL), decoded exactly.
float emu_half(uint element, uint stride, int order, uint row, uint col) {
    const uint outer = (order == LAYOUT_ROW) ? row : col, inner = (order == LAYOUT_ROW) ? col : row;
    const uint w = smem[element + outer * stride + (inner >> 3)][(inner >> 1) & 3u];
    return uintBitsToFloat(h2f(bitfieldExtract(w, int((inner & 1u) << 4), 16)));
}

EmuA emu_load_a(uint element, uint stride, int order) {   // rows r0 .. r0 + RB - 1, every k
    EmuA f;
    const uint r0 = (gl_SubgroupInvocationID / LC) * RB;
    [[unroll]] for (uint r = 0u; r < RB; ++r)
        [[unroll]] for (uint k = 0u; k < 16u; ++k) f.v[r * 16u + k] = emu_half(element, stride, order, r0 + r, k);
    return f;
}

EmuB emu_load_b(uint element, uint stride, int order) {   // columns c0 .. c0 + CB - 1, every k
    EmuB f;
    const uint c0 = (gl_SubgroupInvocationID % LC) * CB;
    [[unroll]] for (uint c = 0u; c < CB; ++c)
        [[unroll]] for (uint k = 0u; k < 16u; ++k) f.v[c * 16u + k] = emu_half(element, stride, order, k, c0 + c);
    return f;
}

EmuAcc emu_muladd(EmuA a, EmuB b, EmuAcc c) {   // c + a b, each sum over k = 0 .. 15 in order
    [[unroll]] for (uint r = 0u; r < RB; ++r)
        [[unroll]] for (uint col = 0u; col < CB; ++col) {
            precise float s = c.v[r * CB + col];
            [[unroll]] for (uint k = 0u; k < 16u; ++k) s = fma(a.v[r * 16u + k], b.v[col * 16u + k], s);
            c.v[r * CB + col] = s;
        }
    return c;
}

EmuAcc emu_load_acc(uint base, uint stride) {   // emu_store's inverse
    EmuAcc c;
    const uint r0 = (gl_SubgroupInvocationID / LC) * RB, c0 = (gl_SubgroupInvocationID % LC) * CB;
    [[unroll]] for (uint r = 0u; r < RB; ++r)
        [[unroll]] for (uint col = 0u; col < CB; ++col)
            c.v[r * CB + col] = uintBitsToFloat(smem[base + (r0 + r) * stride + ((c0 + col) >> 2)][(c0 + col) & 3u]);
    return c;
}

void emu_store(EmuAcc c, uint base, uint stride) {
    const uint r0 = (gl_SubgroupInvocationID / LC) * RB, c0 = (gl_SubgroupInvocationID % LC) * CB;
    [[unroll]] for (uint r = 0u; r < RB; ++r)
        [[unroll]] for (uint col = 0u; col < CB; ++col)
            smem[base + (r0 + r) * stride + ((c0 + col) >> 2)][(c0 + col) & 3u] = floatBitsToUint(c.v[r * CB + col]);
}
#endif

#endif
