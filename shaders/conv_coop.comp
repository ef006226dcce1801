#version 450
// DirectML CONVOLUTION, FORWARD, on f16 x f16 -> f32 cooperative matrices (tensor cores): the
// `conv_coop` families (kompute_dml/ops/conv_coop.py, docs/convolution.md "Tensor cores"). The
// implicit GEMM of shaders/convolution.comp per group g: output[b, g*CoutG + m, pixel] = sum over
// k of filter[m][k] * column[k][pixel], k = (ci, kd, kh, kw) row-major, the column's element the
// input at the pixel's window position (0 outside the input: the padding), decoded by the
// operator's k table (conv_common.glsl's P_TAB); im2col is never materialized: each step gathers
// its tiles of filter rows and input columns into shared memory.
//
// Arithmetic: f16 x f16 products summed by coopMatMulAdd over 16 k at a time into float32
// accumulators starting at +0 (the order and the adders inside one multiply-add are the device's:
// docs/convolution.md states the bound), K padded to the step with zeros; then conv_common.glsl's
// epilogue (+ bias, the fused activation, the output's rounding), or with SPLIT the part's float32
// sums to the operator's scratch for convolution.comp's REDUCE variant. Types (F16: the input,
// bias and output are FLOAT16; W16: the filter is): FLOAT16 elements enter the tiles as stored;
// FLOAT32 ones (DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION) are converted to float16 as
// they load (tensor cores: the device's conversion, packHalf2x16; emulated: f2h, nearest even).
//
// Work: a work group computes a BM x BN tile (output channels x output pixels over batch and
// space) of one group and one part of the reduction; its subgroups each own a WM x WN block of
// 16 x 16 accumulators. K advances BK at a time through STAGES shared stages (the next step's
// global loads in flight while the matrices consume this one). The filter tile is BM rows of BK
// float16 (k contiguous), loaded 8 k at a time: one 16-byte load (two for FLOAT32) where the
// filter's k table offsets are k (CONV_F_W_KCONTIG: a packed filter, CROSS_CORRELATION), else
// element by element through the table. The input tile is BK rows of BN float16 (pixels
// contiguous), loaded 8 pixels of one k at a time: the invocation's 8 pixels are the same at
// every step (WG is a multiple of BN / 8), so their decoded window origins stay in registers and
// each k costs one table entry and 8 bounds-checked element loads. Tiles are stored as
// gemm_coop.comp's `rr` variant stores them (rows padded by one uvec4) and read with its
// fragments (coop_f16_mma.glsl). The grid: x pixel tiles, y channel tiles x parts, z groups;
// where the device caps x or z, each work group loops over several tiles.
//
// Without tensor cores (MMA=1, family `coopmat-emulated`): the same kernel, each
// cooperative-matrix operation plain subgroup code summing by fma over k in increasing order from
// +0: the tiled kernel's order and start, so FLOAT16 results equal convolution.comp's bit for bit.

#ifndef MMA
#define MMA 0                                      // 0 cooperative matrices, 1 emulated
#endif
#ifndef ABL  // benchmarks/overlay_conv.py's ablations (0: none)
#define ABL 0
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
layout(constant_id = 1) const uint BM = 128;      // tile rows: output channels (multiple of WM)
layout(constant_id = 2) const uint BN = 128;      // tile columns: output pixels (multiple of WN)
layout(constant_id = 3) const uint BK = 32;       // K per step (multiple of 16)
layout(constant_id = 4) const uint WM = 64;       // subgroup block rows (multiple of 16)
layout(constant_id = 5) const uint WN = 32;       // subgroup block columns (multiple of 16)
layout(constant_id = 6) const uint SG = 32;       // subgroup size
layout(constant_id = 7) const uint GROUP_M = 8;   // (GEMM's tile walk: unused here; CoopTile's layout)
layout(constant_id = 8) const uint STAGES = 2;    // shared-memory stages: 2 or 1

const uint FM = WM / 16u, FN = WN / 16u;          // accumulators per subgroup: FM x FN
const uint SGM = BM / WM;                         // subgroups along M
const uint A_CPR = BK / 8u, B_CPR = BN / 8u;      // 8-element chunks per tile row
const uint A_RS = A_CPR + 1u, B_RS = B_CPR + 1u;  // row strides, uvec4 (one of padding)
const uint A_TILE = BM * A_RS, B_TILE = BK * B_RS;
const uint STAGE = A_TILE + B_TILE;               // a stage: the filter's tile, then the input's
const uint A_CH = (BM * A_CPR + WG - 1u) / WG;    // chunks per invocation
const uint B_CH = (BK * B_CPR + WG - 1u) / WG;
shared uvec4 smem[STAGES * STAGE];                // after the K loop: 16 x 16 float32 per subgroup

layout(std430, binding = 0) readonly buffer XBuf { uint x_buf[]; };
layout(std430, binding = 1) readonly buffer WBuf { uint w_buf[]; };
layout(std430, binding = 1) readonly buffer WBuf4 { uvec4 w_buf4[]; };
layout(std430, binding = 2) readonly buffer BBuf { uint b_buf[]; };
layout(std430, binding = 3) buffer YBuf { uint y_buf[]; };
layout(std430, binding = 4) readonly buffer PBuf { uint p[]; };
#if SPLIT
layout(std430, binding = 5) writeonly buffer SBuf { uint s_buf[]; };  // [part][output channel][pixel]
#endif

KDML_PUSH_BLOCK  // CONV_PUSH of kompute_dml/ops/contract (generated by the build)

#if F16
#define CONV_TABLE_BINDING 6  // the FLOAT16 activation's table (ops/act_table.py)
#endif
#define CONV_ACT_ID 9  // the fused activation's kind: specialization constant 9 (after the tile's)
#include "conv_common.glsl"  // P_*, conv_finish

#define ACC_ZERO_BITS 0u                           // the accumulators start at +0, as the tiled kernel's sums
#include "coop_f16_mma.glsl"  // LOAD_A, LOAD_B, MULADD, STORE_ACC: tensor cores or emulated

// two float32 (bits) as a float16 pair
uint pack_h(uint a, uint b) {
#if MMA == 0
    return packHalf2x16(vec2(uintBitsToFloat(a), uintBitsToFloat(b)));
#else
    return f2h(a) | (f2h(b) << 16);
#endif
}

// 8 elements' bits (16-bit float16 or 32-bit float32, `half`) as 8 float16 in a uvec4
uvec4 pack8(uint v[8], bool half_) {
    if (half_) return uvec4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
    return uvec4(pack_h(v[0], v[1]), pack_h(v[2], v[3]), pack_h(v[4], v[5]), pack_h(v[6], v[7]));
}

uint x_elem(uint e) {
#if F16
    return bitfieldExtract(x_buf[e >> 1], int((e & 1u) << 4), 16);
#else
    return x_buf[e];
#endif
}

uint w_elem(uint e) {
#if W16
    return bitfieldExtract(w_buf[e >> 1], int((e & 1u) << 4), 16);
#else
    return w_buf[e];
#endif
}

// This invocation's 8 pixels of the input tile (the same at every step): the window's first
// input element (wrapping uint arithmetic: only in-bounds positions load) and its position;
// pixels past the last: a position that fails every bounds check
uint g_base[8];
int g_d[8], g_h[8], g_w[8];
uint g_in_d, g_in_h, g_in_w;

void set_pixels(uint g, uint n) {
    g_in_d = p[P_IN];
    g_in_h = p[P_IN + 1];
    g_in_w = p[P_IN + 2];
    [[unroll]] for (uint t = 0u; t < 8u; ++t) {
        uint q = n + t;
        if (q >= p[P_NPIX]) {
            g_base[t] = 0u;
            g_d[t] = -0x40000000;
            g_h[t] = -0x40000000;
            g_w[t] = -0x40000000;
            continue;
        }
        uint ob = q / p[P_ODHW], orem = q % p[P_ODHW];
        uint od = orem / p[P_OHW], ohw = orem % p[P_OHW];
        uint oh = ohw / p[P_OUT + 2], ow = ohw % p[P_OUT + 2];
        g_d[t] = int(od * p[P_STRIDE]) - int(p[P_PAD]);
        g_h[t] = int(oh * p[P_STRIDE + 1]) - int(p[P_PAD + 1]);
        g_w[t] = int(ow * p[P_STRIDE + 2]) - int(p[P_PAD + 2]);
        g_base[t] = pc.x_off + ob * p[P_XS] + g * p[P_CING] * p[P_XS + 1] + uint(g_d[t]) * p[P_XS + 2] +
                    uint(g_h[t]) * p[P_XS + 3] + uint(g_w[t]) * p[P_XS + 4];
    }
}

// Row k of the input tile at this invocation's 8 pixels (zeros past k_hi and outside the input)
uvec4 load_b8(uint k, uint k_hi) {
    uint v[8];
    [[unroll]] for (uint t = 0u; t < 8u; ++t) v[t] = 0u;
#if (ABL & 1) != 0
    return uvec4(k);
#elif (ABL & 16) != 0
    if (k < k_hi) {
        uint xo = p[P_TAB + TAB_W * k];
        [[unroll]] for (uint t = 0u; t < 8u; ++t) v[t] = x_elem(g_base[t] + xo);
    }
    return pack8(v, F16 != 0);
#endif
    if (k < k_hi) {
        uint e = P_TAB + TAB_W * k;
        uint xo = p[e];
        int dd = int(p[e + 2u]), dh = int(p[e + 3u]), dw = int(p[e + 4u]);
        // every load issued before any is used, at clamped addresses (the tensor's first element for
        // a position in the padding, then 0 selected): a branch around each load made the GPU wait
        // for them one at a time
        bool ok[8];
        [[unroll]] for (uint t = 0u; t < 8u; ++t) {
            ok[t] = uint(g_d[t] + dd) < g_in_d && uint(g_h[t] + dh) < g_in_h && uint(g_w[t] + dw) < g_in_w;
            v[t] = x_elem(ok[t] ? g_base[t] + xo : pc.x_off);
        }
        [[unroll]] for (uint t = 0u; t < 8u; ++t) v[t] = ok[t] ? v[t] : 0u;
    }
    return pack8(v, F16 != 0);
}

// Row `row` of the filter tile (output channel m0 + row of the group, whose first row's first
// element is `base`; zeros past CoutG) at k = ka .. ka + 7 (zeros past k_hi)
uvec4 load_a8(uint base, uint m0, uint row, uint ka, uint k_hi, bool kcontig) {
#if (ABL & 2) != 0
    return uvec4(ka + row);
#endif
    if (m0 + row >= p[P_COUTG]) return uvec4(0u);
    const uint first = base + row * p[P_WM];
    if (kcontig && ka + 8u <= k_hi) {
#if W16
        return w_buf4[(first + ka) >> 3];
#else
        const uvec4 lo = w_buf4[(first + ka) >> 2], hi = w_buf4[((first + ka) >> 2) + 1u];
        return uvec4(pack_h(lo.x, lo.y), pack_h(lo.z, lo.w), pack_h(hi.x, hi.y), pack_h(hi.z, hi.w));
#endif
    }
    uint v[8];
    [[unroll]] for (uint t = 0u; t < 8u; ++t)
        v[t] = ka + t < k_hi ? w_elem(first + p[P_TAB + TAB_W * (ka + t) + 1u]) : 0u;
    return pack8(v, W16 != 0);
}

// the output element of channel co at pixel q (its address)
uint y_index(uint co, uint q) {
    uint qb = q / p[P_ODHW], qrem = q % p[P_ODHW];
    uint qd = qrem / p[P_OHW], qhw = qrem % p[P_OHW];
    uint qh = qhw / p[P_OUT + 2], qw = qhw % p[P_OUT + 2];
    return pc.y_off + qb * p[P_YS] + co * p[P_YS + 1] + qd * p[P_YS + 2] + qh * p[P_YS + 3] + qw * p[P_YS + 4];
}

// One BM x BN tile: output channels m0.. of group g, output pixels n0.., the reduction's part sp
void conv_tile(uint g, uint m0, uint n0, uint sp) {
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID, tid = gl_LocalInvocationID.x;
    const uint wm0 = (sg % SGM) * WM, wn0 = (sg / SGM) * WN;
    const uint coutg = p[P_COUTG], npix = p[P_NPIX];
    const uint k_lo = sp * p[P_KCHUNK], k_hi = min(p[P_KLEN], k_lo + p[P_KCHUNK]);
    const uint w_base = pc.w_off + g * p[P_WG] + m0 * p[P_WM];
    const bool kcontig = (p[P_FLAGS] & CONV_F_W_KCONTIG) != 0u;
    set_pixels(g, n0 + 8u * (tid % B_CPR));

    uvec4 ra[A_CH], rb[B_CH];
#define LOAD_STEP(t) {                                                                              \
        const uint k0 = k_lo + (t) * BK;                                                            \
        [[unroll]] for (uint j = 0u; j < A_CH; ++j) {                                               \
            const uint c = tid + j * WG;                                                            \
            if (c < BM * A_CPR) ra[j] = load_a8(w_base, m0, c / A_CPR, k0 + 8u * (c % A_CPR), k_hi, kcontig); \
        }                                                                                           \
        [[unroll]] for (uint j = 0u; j < B_CH; ++j) {                                               \
            const uint c = tid + j * WG;                                                            \
            if (c < BK * B_CPR) rb[j] = load_b8(k0 + c / B_CPR, k_hi);                              \
        }                                                                                           \
    }
#define STORE_STEP(st) {                                                                            \
        [[unroll]] for (uint j = 0u; j < A_CH; ++j) {                                               \
            const uint c = tid + j * WG;                                                            \
            if (c < BM * A_CPR) smem[(st) * STAGE + (c / A_CPR) * A_RS + c % A_CPR] = ra[j];        \
        }                                                                                           \
        [[unroll]] for (uint j = 0u; j < B_CH; ++j) {                                               \
            const uint c = tid + j * WG;                                                            \
            if (c < BK * B_CPR) smem[(st) * STAGE + A_TILE + (c / B_CPR) * B_RS + c % B_CPR] = rb[j]; \
        }                                                                                           \
    }

    ACC_TYPE acc[FM * FN];
    [[unroll]] for (uint i = 0u; i < FM * FN; ++i) acc[i] = ACC_ZERO;

    const uint steps = (k_hi - k_lo + BK - 1u) / BK;
    LOAD_STEP(0u)
    STORE_STEP(0u)
    barrier();
    for (uint s = 0u; s < steps; ++s) {
        const uint a_tile = (s % STAGES) * STAGE, b_tile = a_tile + A_TILE;
        const bool more = s + 1u < steps;
        if (more) LOAD_STEP(s + 1u)   // in flight while this step's products run
        FRAG_LOOP for (uint kk = 0u; kk < BK / 16u; ++kk) {
            A_FRAG fa[FM];
            FRAG_LOOP for (uint i = 0u; i < FM; ++i)
                LOAD_A(fa[i], a_tile + (wm0 + 16u * i) * A_RS + 2u * kk, A_RS, LAYOUT_ROW);
            FRAG_LOOP for (uint j = 0u; j < FN; ++j) {
                B_FRAG fb;
                LOAD_B(fb, b_tile + 16u * kk * B_RS + (wn0 + 16u * j) / 8u, B_RS, LAYOUT_ROW);
#if (ABL & 4) == 0
                FRAG_LOOP for (uint i = 0u; i < FM; ++i) MULADD(fa[i], fb, acc[i * FN + j]);
#endif
            }
        }
        if (STAGES == 1u) barrier();   // one stage: read by every subgroup before it is rewritten
        if (more) STORE_STEP((s + 1u) % STAGES)   // two stages: the other one, which nobody reads this step
        barrier();
    }

    // ---- epilogue: each accumulator through this subgroup's 16 x 16 float32 staging; a lane takes
    // two adjacent pixels of a row at a time (a FLOAT16 pair that is one output word: one store)
    const uint stage = sg * 64u;
    FRAG_LOOP for (uint i = 0u; i < FM; ++i) {
        FRAG_LOOP for (uint j = 0u; j < FN; ++j) {
            STORE_ACC(acc[i * FN + j], stage, 4u);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint t = 0u; t < 128u / SG; ++t) {   // rolled: conv_finish inlined once
                const uint pr = lane + t * SG;
                const uint r = pr >> 3, c = (pr & 7u) * 2u;
                const uint m = m0 + wm0 + 16u * i + r, q = n0 + wn0 + 16u * j + c;
                if (m >= coutg || q >= npix || (ABL & 8) != 0) continue;
                const bool both = q + 1u < npix;
                const uvec4 quad = smem[stage + r * 4u + (c >> 2)];
                const uint co = g * coutg + m;
#if SPLIT
                const uint s0 = (sp * p[P_COUT] + co) * npix + q;
                s_buf[s0] = quad[c & 3u];
                if (both) s_buf[s0 + 1u] = quad[(c & 3u) + 1u];
#else
                const uint o0 = y_index(co, q);
                const uint v0 = conv_finish(uintBitsToFloat(quad[c & 3u]), co);
                const uint o1 = both ? y_index(co, q + 1u) : 0u;
                const uint v1 = both ? conv_finish(uintBitsToFloat(quad[(c & 3u) + 1u]), co) : 0u;
#if F16
                if (both && o1 == o0 + 1u && (o0 & 1u) == 0u) {
                    y_buf[o0 >> 1] = v0 | (v1 << 16);
                } else {
                    STORE_FIELD(y_buf, o0 >> 1, (o0 & 1u) << 4, 16u, v0)
                    if (both) STORE_FIELD(y_buf, o1 >> 1, (o1 & 1u) << 4, 16u, v1)
                }
#else
                y_buf[o0] = v0;
                if (both) y_buf[o1] = v1;
#endif
#endif
            }
            subgroupBarrier();   // the staging is rewritten by the next accumulator
        }
    }
    barrier();   // the staging is the next tile's first stage
}

// The grid's x (pixel tiles) and z (groups) may be capped at the device's work-group counts:
// each work group then takes every gl_NumWorkGroups-th tile (uniform across the work group, so
// the barriers stay in uniform control flow).
void main() {
    const uint ntiles = (p[P_NPIX] + BN - 1u) / BN, groups = p[P_COUT] / p[P_COUTG];
    const uint ctiles = (p[P_COUTG] + BM - 1u) / BM;  // grid y: channel tiles x the reduction's parts
    const uint m0 = (gl_WorkGroupID.y % ctiles) * BM, sp = gl_WorkGroupID.y / ctiles;
    for (uint g = gl_WorkGroupID.z; g < groups; g += gl_NumWorkGroups.z)
        for (uint tile = gl_WorkGroupID.x; tile < ntiles; tile += gl_NumWorkGroups.x)
            conv_tile(g, m0, tile * BN, sp);
}
