#version 450
// DML_GEMM_OPERATOR_DESC for FLOAT16 tensors on cooperative matrices (VK_KHR_cooperative_matrix:
// tensor cores), the `gemm_coop` family (kompute_dml/ops/gemm_coop.py, docs/gemm.md):
//   Output = alpha * op(A) x op(B) + beta * C   (C optional: then alpha * op(A) x op(B))
// over `nmat` matrices (batch x channel) of M x K by K x N, every tensor through its own strides
// and offset (GEMM_PUSH, as shaders/gemm.comp reads it; 0 broadcasts).
//
// Arithmetic: the products and their sums are f16 x f16 -> f32 cooperative matrices of 16 x 16
// x 16 (subgroup scope), the accumulators float32 starting at -0; the order of the additions
// inside one coopMatMulAdd is the device's (docs/gemm.md states the bound). The epilogue is
// gemm.comp's, in float32: alpha * S (+ beta * C: each product and the sum rounded, `precise`),
// then f2h (f16_bits.glsl: nearest even), then (ACT variants) the FusedActivation (gemm_act.glsl).
// K positions past K and rows / columns past M / N are
// staged as A = +0, B = -0.
//
// Work: a work group computes a BM x BN output tile; its WG / SG subgroups each own a WM x WN
// block of 16 x 16 float32 accumulators. K advances BK at a time through STAGES shared-memory stages
// (global -> registers for step s + 1 while the matrices consume step s; two stages: one barrier
// per step; one stage, for a BK whose two stages would not fit: two).
// Tiles hold the float16 bits as they lie in memory, 8 per uvec4, each tile row padded by one
// uvec4 (16 bytes) against bank conflicts; a tile is stored along its operand's contiguous
// dimension (variants: AL 0 `r` A row-major = k contiguous, 1 `c` column-major = m contiguous;
// BL 0 `r` B row-major = n contiguous, 1 `c` column-major = k contiguous), and the fragments are
// loaded with the matching layout. Global loads: 16-byte vectors where the host set F_A_VEC /
// F_B_VEC (unit inner stride, every other stride a multiple of 8 elements) and the 8 elements lie
// inside the matrix; else element by element (any strides). The epilogue stages each accumulator
// through its subgroup's 16 x 16 float32 area of the (then free) tiles, two columns per step.
// The grid is gemm.comp's (x, y, z) fold; within a matrix, groups of GROUP_M tile rows are walked
// column by column (neighbouring work groups share A rows and B columns in L2).
//
// Without tensor cores (MMA=1, family `coopmat-emulated`, no device feature): each
// cooperative-matrix operation is plain subgroup code on the same tiles. Each invocation owns an
// RB x CB block of every 16 x 16 accumulator, decodes its rows of A and columns of B exactly
// (h2f) and sums with fma over k in increasing order: with the fragments walked in k order this
// is gemm.comp's order (S = fma(a[m,k], b[k,n], S), k = 0 .. K-1), so it gives gemm.comp's results.

#ifndef MMA
#define MMA 0                                      // 0 cooperative matrices, 1 emulated
#endif
#if MMA == 0
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "f16_bits.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;      // invocations per work group = (BM/WM)*(BN/WN)*SG
layout(constant_id = 1) const uint BM = 128;      // tile rows (multiple of WM)
layout(constant_id = 2) const uint BN = 128;      // tile columns (multiple of WN)
layout(constant_id = 3) const uint BK = 32;       // K per step (multiple of 16)
layout(constant_id = 4) const uint WM = 64;       // subgroup block rows (multiple of 16)
layout(constant_id = 5) const uint WN = 32;       // subgroup block columns (multiple of 16)
layout(constant_id = 6) const uint SG = 32;       // subgroup size
layout(constant_id = 7) const uint GROUP_M = 8;   // tile rows walked together (L2 reuse)
layout(constant_id = 8) const uint STAGES = 2;    // shared-memory stages: 2 or 1

const uint FM = WM / 16u, FN = WN / 16u;          // accumulators per subgroup: FM x FN
const uint SGM = BM / WM;                         // subgroups along M
// tile geometry: OUT rows of IN float16 each (IN / 8 uvec4 + 1 of padding)
#if AL == 0
const uint A_OUT = BM, A_IN = BK;
#else
const uint A_OUT = BK, A_IN = BM;
#endif
#if BL == 0
const uint B_OUT = BK, B_IN = BN;
#else
const uint B_OUT = BN, B_IN = BK;
#endif
const uint A_RS = A_IN / 8u + 1u, B_RS = B_IN / 8u + 1u;   // row strides, uvec4
const uint A_TILE = A_OUT * A_RS, B_TILE = B_OUT * B_RS;
const uint STAGE = A_TILE + B_TILE;               // a stage: A's tile, then B's
const uint A_CH = (A_OUT * (A_IN / 8u) + WG - 1u) / WG;   // 16-byte chunks per invocation
const uint B_CH = (B_OUT * (B_IN / 8u) + WG - 1u) / WG;
shared uvec4 smem[STAGES * STAGE];                // after the K loop: 16 x 16 float32 per subgroup

layout(std430, binding = 0) readonly buffer ABuf { uint a_buf[]; };
layout(std430, binding = 0) readonly buffer ABuf4 { uvec4 a_buf4[]; };
layout(std430, binding = 1) readonly buffer BBuf { uint b_buf[]; };
layout(std430, binding = 1) readonly buffer BBuf4 { uvec4 b_buf4[]; };
layout(std430, binding = 2) readonly buffer CBuf { uint c_buf[]; };
layout(std430, binding = 3) buffer OBuf { uint o_buf[]; };

KDML_PUSH_BLOCK  // GEMM_PUSH of kompute_dml/ops/contract (generated by the build)
#if ACT
#define F16 1
#define GEMM_ACT_ID 9  // after the tile's constants
#define ACT_TABLE_BINDING 5  // the FLOAT16 activation's table (gemm_act.glsl, ops/act_table.py)
#include "gemm_act.glsl"
#define OUT16(x) gemm_act16(f2h(floatBitsToUint(x)), act)  // an output's FLOAT16 bits
#else
#define OUT16(x) f2h(floatBitsToUint(x))
#endif

#define F_HAS_C 1u
#define F_A_VEC 8u
#define F_B_VEC 16u
#define PAD_A 0x00000000u                          // +0 +0
#define PAD_B 0x80008000u                          // -0 -0

// 8 float16 of an operand: element (outer o, inner i .. i + 7) at base + o * s_out + i * s_in,
// those past (lim_out, lim_in) `pad`; one 16-byte load where `vec` and all 8 lie inside.
#define DEFINE_LOAD8(NAME, BUF, BUF4)                                                              \
    uvec4 NAME(uint base, uint s_out, uint s_in, uint o, uint i, uint lim_out, uint lim_in, bool vec, \
               uint pad) {                                                                         \
        if (o >= lim_out) return uvec4(pad);                                                       \
        const uint row = base + o * s_out;                                                         \
        if (vec && i + 8u <= lim_in) return BUF4[(row + i) >> 3];                                  \
        uint h[8];                                                                                 \
        [[unroll]] for (uint t = 0u; t < 8u; ++t) {                                                \
            const uint e = row + (i + t) * s_in;                                                   \
            h[t] = (i + t < lim_in) ? bitfieldExtract(BUF[e >> 1], int((e & 1u) << 4), 16)          \
                                    : (pad & 0xFFFFu);                                             \
        }                                                                                          \
        return uvec4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16)); \
    }
DEFINE_LOAD8(load8_a, a_buf, a_buf4)
DEFINE_LOAD8(load8_b, b_buf, b_buf4)

#define ACC_ZERO_BITS 0x80000000u                  // the accumulators start at -0
#include "coop_f16_mma.glsl"  // LOAD_A, LOAD_B, MULADD, STORE_ACC: tensor cores or emulated

#define LOADF(buf, e) uintBitsToFloat(h2f(bitfieldExtract(buf[(e) >> 1], int(((e) & 1u) << 4), 16)))

void main() {
    const uint M = pc.m, N = pc.n, K = pc.k;
    const uint NT = (N + BN - 1u) / BN, MT = (M + BM - 1u) / BM;
    const uint L = gl_WorkGroupID.x + gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
    const uint bc = L / (NT * MT);
    if (bc >= pc.nmat) return;  // folded grid: uniform over the work group
    const uint q = L % (NT * MT);
    const uint group = q / (GROUP_M * NT), first_m = group * GROUP_M;
    const uint rows_in_group = min(MT - first_m, GROUP_M);
    const uint mt = first_m + (q % (GROUP_M * NT)) % rows_in_group;
    const uint nt = (q % (GROUP_M * NT)) / rows_in_group;
    const uint m0 = mt * BM, n0 = nt * BN;
    const uint bi = bc / pc.nc, ci = bc % pc.nc;
    const uint a_base = pc.a_off + bi * pc.a_sb + ci * pc.a_sc;
    const uint b_base = pc.b_off + bi * pc.b_sb + ci * pc.b_sc;
    const bool a_vec = (pc.flags & F_A_VEC) != 0u, b_vec = (pc.flags & F_B_VEC) != 0u;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID, tid = gl_LocalInvocationID.x;
    const uint wm0 = (sg % SGM) * WM, wn0 = (sg / SGM) * WN;

    // operand geometry in tile terms: (outer, inner) strides, limits and tile origins
#if AL == 0
    const uint a_so = pc.a_sm, a_si = pc.a_sk, a_lo = M, a_li = K;
#else
    const uint a_so = pc.a_sk, a_si = pc.a_sm, a_lo = K, a_li = M;
#endif
#if BL == 0
    const uint b_so = pc.b_sk, b_si = pc.b_sn, b_lo = K, b_li = N;
#else
    const uint b_so = pc.b_sn, b_si = pc.b_sk, b_lo = N, b_li = K;
#endif
    uvec4 ra[A_CH], rb[B_CH];
    // step t's A and B tiles: global -> registers, registers -> shared stage `st`
#if AL == 0
#define A_ORG(t) uvec2(m0, (t) * BK)
#else
#define A_ORG(t) uvec2((t) * BK, m0)
#endif
#if BL == 0
#define B_ORG(t) uvec2((t) * BK, n0)
#else
#define B_ORG(t) uvec2(n0, (t) * BK)
#endif
#define LOAD_STEP(t) {                                                                              \
        const uvec2 ao = A_ORG(t), bo = B_ORG(t);                                                   \
        [[unroll]] for (uint j = 0u; j < A_CH; ++j) {                                               \
            const uint c = tid + j * WG;                                                            \
            if (c < A_OUT * (A_IN / 8u))                                                            \
                ra[j] = load8_a(a_base, a_so, a_si, ao.x + c / (A_IN / 8u), ao.y + 8u * (c % (A_IN / 8u)), \
                                a_lo, a_li, a_vec, PAD_A);                                          \
        }                                                                                           \
        [[unroll]] for (uint j = 0u; j < B_CH; ++j) {                                               \
            const uint c = tid + j * WG;                                                            \
            if (c < B_OUT * (B_IN / 8u))                                                            \
                rb[j] = load8_b(b_base, b_so, b_si, bo.x + c / (B_IN / 8u), bo.y + 8u * (c % (B_IN / 8u)), \
                                b_lo, b_li, b_vec, PAD_B);                                          \
        }                                                                                           \
    }
#define STORE_STEP(st) {                                                                            \
        [[unroll]] for (uint j = 0u; j < A_CH; ++j) {                                               \
            const uint c = tid + j * WG;                                                            \
            if (c < A_OUT * (A_IN / 8u)) smem[(st) * STAGE + (c / (A_IN / 8u)) * A_RS + c % (A_IN / 8u)] = ra[j]; \
        }                                                                                           \
        [[unroll]] for (uint j = 0u; j < B_CH; ++j) {                                               \
            const uint c = tid + j * WG;                                                            \
            if (c < B_OUT * (B_IN / 8u))                                                            \
                smem[(st) * STAGE + A_TILE + (c / (B_IN / 8u)) * B_RS + c % (B_IN / 8u)] = rb[j];   \
        }                                                                                           \
    }

    ACC_TYPE acc[FM * FN];
    [[unroll]] for (uint i = 0u; i < FM * FN; ++i) acc[i] = ACC_ZERO;

    const uint steps = (K + BK - 1u) / BK;
    LOAD_STEP(0u)
    STORE_STEP(0u)
    barrier();
    for (uint s = 0u; s < steps; ++s) {
        const uint a_tile = (s % STAGES) * STAGE, b_tile = a_tile + A_TILE;
        const bool more = s + 1u < steps;
        if (more) LOAD_STEP(s + 1u)   // in flight while this step's products run
        FRAG_LOOP for (uint kk = 0u; kk < BK / 16u; ++kk) {
            A_FRAG fa[FM];
            FRAG_LOOP for (uint i = 0u; i < FM; ++i) {
#if AL == 0
                LOAD_A(fa[i], a_tile + (wm0 + 16u * i) * A_RS + 2u * kk, A_RS, LAYOUT_ROW);
#else
                LOAD_A(fa[i], a_tile + 16u * kk * A_RS + (wm0 + 16u * i) / 8u, A_RS, LAYOUT_COL);
#endif
            }
            FRAG_LOOP for (uint j = 0u; j < FN; ++j) {
                B_FRAG fb;
#if BL == 0
                LOAD_B(fb, b_tile + 16u * kk * B_RS + (wn0 + 16u * j) / 8u, B_RS, LAYOUT_ROW);
#else
                LOAD_B(fb, b_tile + (wn0 + 16u * j) * B_RS + 2u * kk, B_RS, LAYOUT_COL);
#endif
                FRAG_LOOP for (uint i = 0u; i < FM; ++i) MULADD(fa[i], fb, acc[i * FN + j]);
            }
        }
        if (STAGES == 1u) barrier();   // one stage: read by every subgroup before it is rewritten
        if (more) STORE_STEP((s + 1u) % STAGES)   // two stages: the other one, which nobody reads this step
        barrier();
    }

    // ---- epilogue (gemm.comp's): each accumulator through this subgroup's 16 x 16 float32 staging
    const uint stage = sg * 64u;
    const bool has_c = (pc.flags & F_HAS_C) != 0u;
    const uint c_base = pc.c_off + bi * pc.c_sb + ci * pc.c_sc;
    const uint o_base = pc.o_off + bi * pc.o_sb + ci * pc.o_sc;
    const uint o_sn = pc.o_sn;
#if ACT
    const uint act = gemm_act_kind();
#endif
    FRAG_LOOP for (uint i = 0u; i < FM; ++i) {
        FRAG_LOOP for (uint j = 0u; j < FN; ++j) {
            STORE_ACC(acc[i * FN + j], stage, 4u);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            [[unroll]] for (uint t = 0u; t < 128u / SG; ++t) {
                const uint p = lane + t * SG;
                const uint r = p >> 3, c = (p & 7u) * 2u;
                const uint m = m0 + wm0 + 16u * i + r, n = n0 + wn0 + 16u * j + c;
                if (m >= M || n >= N) continue;
                const bool both = n + 1u < N;
                const uvec4 quad = smem[stage + r * 4u + (c >> 2)];
                float v[2];
                [[unroll]] for (uint e = 0u; e < 2u; ++e) {
                    precise float res = pc.alpha * uintBitsToFloat(quad[(c & 3u) + e]);
                    if (has_c && (e == 0u || both)) {
                        precise float t2 = pc.beta * LOADF(c_buf, c_base + m * pc.c_sm + (n + e) * pc.c_sn);
                        res = res + t2;
                    }
                    v[e] = res;
                }
                const uint o = o_base + m * pc.o_sm + n * o_sn;
                const uint h0 = OUT16(v[0]);
                if (both && o_sn == 1u && (o & 1u) == 0u) {
                    o_buf[o >> 1] = h0 | (OUT16(v[1]) << 16);
                } else {
                    STORE_FIELD(o_buf, o >> 1, (o & 1u) << 4, 16u, h0)
                    if (both) {
                        const uint o1 = o + o_sn;
                        const uint h1 = OUT16(v[1]);
                        STORE_FIELD(o_buf, o1 >> 1, (o1 & 1u) << 4, 16u, h1)
                    }
                }
            }
            subgroupBarrier();   // the staging is rewritten by the next accumulator
        }
    }
}
