// The three implementations of the kernel's cooperative-matrix operations (ACC_TYPE, A_FRAG,
// B_FRAG, ACC_ZERO, LOAD_A, LOAD_B, MULADD, STORE_ACC), on the shared tiles `smem` of
// matmul_coop.comp. Layouts and strides as coopMatLoad / coopMatStore take them: `element` and
// `stride` in uvec4 units, LAYOUT_ROW / LAYOUT_COL.
//   MMA 0: cooperative matrices (tensor cores).
//   MMA 1: each invocation sums elements lane + t * subgroup size of a 16 x 16 accumulator, one
//          byte product at a time (no device feature; compiles fast on lavapipe, where the tests
//          run it).
//   MMA 2: each invocation owns an RB x CB block of every accumulator, keeps its rows of A and
//          columns of B in registers as words of 4 k, and sums them with OpSDot (integer dot
//          product: GPUs without cooperative matrices).
// Every loop that runs per product is unrolled: lavapipe (gallivm) ends all loops of a shader once
// they have run 65535 iterations together per invocation (LP_MAX_TGSI_LOOP_ITERATIONS, one counter
// per function, silently), which a K loop of emulated products would reach at K of a few thousand.

#if MMA == 0
#define LAYOUT_ROW gl_CooperativeMatrixLayoutRowMajor
#define LAYOUT_COL gl_CooperativeMatrixLayoutColumnMajor
#define ACC_TYPE coopmat<int32_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define A_FRAG coopmat<int8_t, gl_ScopeSubgroup, 16, 32, gl_MatrixUseA>
#define B_FRAG coopmat<int8_t, gl_ScopeSubgroup, 32, 16, gl_MatrixUseB>
#define ACC_ZERO ACC_TYPE(0)
#define LOAD_A(f, element, stride) coopMatLoad(f, smem, element, stride, gl_CooperativeMatrixLayoutRowMajor)
#define LOAD_B(f, element, stride, order) coopMatLoad(f, smem, element, stride, order)
#define MULADD(a, b, c) coopMatMulAdd(a, b, c)
#define STORE_ACC(c, element, stride) coopMatStore(c, smem, element, stride, gl_CooperativeMatrixLayoutRowMajor)

#elif MMA == 1
#define LAYOUT_ROW 0
#define LAYOUT_COL 1
#define EMU_SLOTS 32                              // 256 elements / the smallest subgroup (8 lanes)
struct EmuFrag { uint base; uint stride; int order; };
struct EmuAcc { int v[EMU_SLOTS]; };              // element lane + t * subgroup size in v[t]
#define ACC_TYPE EmuAcc
#define A_FRAG EmuFrag
#define B_FRAG EmuFrag
#define LOAD_A(f, element, stride) f = EmuFrag(element, stride, LAYOUT_ROW)
#define LOAD_B(f, element, stride, order) f = EmuFrag(element, stride, order)
#define MULADD(a, b, c) emu_muladd(a, b, c)
#define STORE_ACC(c, element, stride) emu_store(c, element, stride)

EmuAcc emu_zero() {
    EmuAcc c;
    for (uint t = 0u; t < EMU_SLOTS; ++t) c.v[t] = 0;
    return c;
}
#define ACC_ZERO emu_zero()

int emu_byte(uint addr) {   // the signed byte at byte address addr of smem
    uint w = smem[addr >> 4u][(addr >> 2u) & 3u];
    return int(w << (24u - 8u * (addr & 3u))) >> 24;
}

// c + a (16 x 32, row-major) * b (32 x 16), both read from smem as coopMatLoad would. The k loop
// is unrolled: lavapipe (gallivm) ends every loop of a shader once all of them together have run
// 65535 iterations per invocation (LP_MAX_TGSI_LOOP_ITERATIONS, one counter per function, silently),
// which a K loop of emulated products would otherwise reach at K of a few thousand.
EmuAcc emu_muladd(EmuFrag a, EmuFrag b, EmuAcc c) {
    for (uint t = 0u; t < 256u / gl_SubgroupSize; ++t) {
        uint e = gl_SubgroupInvocationID + t * gl_SubgroupSize;
        uint r = e >> 4u, col = e & 15u;
        int s = 0;
        [[unroll]] for (uint k = 0u; k < 32u; ++k) {
            uint bb = (b.order == LAYOUT_COL) ? (b.base + col * b.stride) * 16u + k : (b.base + k * b.stride) * 16u + col;
            s += emu_byte((a.base + r * a.stride) * 16u + k) * emu_byte(bb);
        }
        c.v[t] += s;
    }
    return c;
}

void emu_store(EmuAcc c, uint base, uint stride) {   // row-major int32 rows, stride in uvec4
    for (uint t = 0u; t < 256u / gl_SubgroupSize; ++t) {
        uint e = gl_SubgroupInvocationID + t * gl_SubgroupSize;
        uint r = e >> 4u, col = e & 15u;
        smem[base + r * stride + (col >> 2u)][col & 3u] = uint(c.v[t]);
    }
}

#else  // MMA == 2
#define LAYOUT_ROW 0
#define LAYOUT_COL 1
// This invocation's block of a 16 x 16 accumulator: LR x LC invocations, RB rows x CB columns each.
const uint LC = (SG >= 64u) ? 8u : ((SG >= 16u) ? 4u : 2u);
const uint LR = SG / LC;                          // SG 8: 4 x 2 (blocks 4 x 8); 32: 8 x 4 (2 x 4)
const uint RB = 16u / LR, CB = 16u / LC;
struct FragA { uint w[32]; };                     // RB rows x 8 words (32 k): RB <= 4
struct FragB { uint w[64]; };                     // CB columns x 8 words: CB <= 8
struct Acc { int v[32]; };                        // RB x CB sums
#define ACC_TYPE Acc
#define A_FRAG FragA
#define B_FRAG FragB
#define LOAD_A(f, element, stride) f = frag_a(element, stride)
#define LOAD_B(f, element, stride, order) f = frag_b(element, stride, order)
#define MULADD(a, b, c) frag_muladd(a, b, c)
#define STORE_ACC(c, element, stride) frag_store(c, element, stride)

// OpSDot (SPV_KHR_integer_dot_product): signed 4 x 8-bit dot product of packed words
// (operand 0 = PackedVectorFormat4x8Bit); glslang 13 has no GL_EXT_integer_dot_product.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(uint a, uint b, spirv_literal int packed_format);
int dot4(uint a, uint b) { return sdot4(a, b, 0); }

Acc acc_zero() {
    Acc c;
    [[unroll]] for (uint t = 0u; t < 32u; ++t) c.v[t] = 0;
    return c;
}
#define ACC_ZERO acc_zero()

// Rows of a row-major 16 x 32 A fragment at smem[element], `stride` uvec4 per row.
FragA frag_a(uint element, uint stride) {
    FragA f;
    const uint r0 = (gl_SubgroupInvocationID / LC) * RB;
    [[unroll]] for (uint r = 0u; r < RB; ++r)
        [[unroll]] for (uint q = 0u; q < 2u; ++q) {
            uvec4 v = smem[element + (r0 + r) * stride + q];
            [[unroll]] for (uint j = 0u; j < 4u; ++j) f.w[8u * r + 4u * q + j] = v[j];
        }
    return f;
}

// Columns of a 32 x 16 B fragment: column-major (k contiguous, as A) or row-major (bytes of 4
// rows gathered into each word).
FragB frag_b(uint element, uint stride, int order) {
    FragB f;
    const uint c0 = (gl_SubgroupInvocationID % LC) * CB;
    [[unroll]] for (uint c = 0u; c < CB; ++c) {
        if (order == LAYOUT_COL) {
            [[unroll]] for (uint q = 0u; q < 2u; ++q) {
                uvec4 v = smem[element + (c0 + c) * stride + q];
                [[unroll]] for (uint j = 0u; j < 4u; ++j) f.w[8u * c + 4u * q + j] = v[j];
            }
        } else {
            [[unroll]] for (uint w = 0u; w < 8u; ++w) {
                uint word = 0u;
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    uint addr = (element + (4u * w + j) * stride) * 16u + c0 + c;   // byte address
                    word |= bitfieldExtract(smem[addr >> 4u][(addr >> 2u) & 3u], int(8u * (addr & 3u)), 8) << (8u * j);
                }
                f.w[8u * c + w] = word;
            }
        }
    }
    return f;
}

Acc frag_muladd(FragA a, FragB b, Acc c) {
    [[unroll]] for (uint r = 0u; r < RB; ++r)
        [[unroll]] for (uint col = 0u; col < CB; ++col) {
            int s = c.v[r * CB + col];
            [[unroll]] for (uint w = 0u; w < 8u; ++w) s += dot4(a.w[8u * r + w], b.w[8u * col + w]);
            c.v[r * CB + col] = s;
        }
    return c;
}

void frag_store(Acc c, uint base, uint stride) {   // row-major int32 rows, stride in uvec4
    const uint r0 = (gl_SubgroupInvocationID / LC) * RB, c0 = (gl_SubgroupInvocationID % LC) * CB;
    [[unroll]] for (uint r = 0u; r < RB; ++r)
        [[unroll]] for (uint col = 0u; col < CB; ++col)
            smem[base + (r0 + r) * stride + ((c0 + col) >> 2u)][(c0 + col) & 3u] = uint(c.v[r * CB + col]);
}
#endif
