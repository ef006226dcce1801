#version 450
// DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT for few rows of A ("decode": M <= 16 per work group), 8-bit A
// and B, B n-contiguous (row-major: ONNX's weight layout):
//   Output[b,c,m,n] = AScale[m] * BScale[n] * sum_k (A[m,k] - AZP[m]) * (B[k,n] - BZP[n]) + Bias[m,n]
//
// Memory-bound: B is read once, straight from global memory into registers (no shared staging),
// with the widest load the layout allows (NCOL = 16, 8, 4 bytes: uvec4, uvec2, uint). A work group
// owns MT rows x TN = NL * NCOL columns; its WG invocations are NL along N times KL = WG / NL along
// K (split-K inside the work group, so that N = 4096 already gives 128 work groups). Invocation
// (nl, ks) sums groups of 4 k rows ks, ks + KL, ... of its NCOL columns into MT x NCOL int32
// registers (compile-time bounds: specialization constants, loops unrolled), then the k-slices
// are summed by a subgroup butterfly (lanes with the same nl) and shared-memory atomics across
// subgroups, and the epilogue writes the tile. A (MT rows, KC k at a time) is staged in shared
// memory as words of 4 signed k.
//
// Bytes become signed bytes as in matmul_coop.comp (unsigned operands XOR 0x80, their zero points
// too), and the zero points are corrected through RA[m] = sum_k a' and CB[n] = sum_k b':
//   sum_k (a' - za')(b' - zb') = S - zb' * RA - za' * CB + K * za' * zb'
// in wrapping int32: exact for K <= 33025 (the dispatcher sends larger K elsewhere).
// Variants: `mmg8_r` plain 32-bit integer code (bytes by shifts, one product per multiply-add);
// `mmg8d_r` OpSDot (integer_dot_product): 4 k rows x 4 columns are transposed in registers into
// one word of 4 k per column. Push: matmul_int.comp's 32 words (bit 31 of word 11: A rows are
// word-aligned with unit k stride; else A is gathered byte by byte). B rows need not start on
// 4-byte boundaries (packed rows with N % 4 != 0: two words per word).
// `_c`: B k-contiguous (column-major): no transpose, each invocation loads 16 k of each of its NCOL
// columns per group (a uvec4 per column where the strides are multiples of 16 bytes).
// @variant mmg8_r  BL=2
// @variant mmg8d_r DOT=1 BL=2
// @variant mmg8_c  BL=1
// @variant mmg8d_c DOT=1 BL=1

#ifndef DOT
#define DOT 0
#endif
#if DOT
#extension GL_EXT_spirv_intrinsics : require
#endif
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;      // invocations per work group (a multiple of the subgroup size)
layout(constant_id = 1) const uint MT = 1;        // rows of A per work group: the accumulator bound
layout(constant_id = 2) const uint NCOL = 16;     // columns per invocation: 4, 8 or 16 (one load per k row)
layout(constant_id = 3) const uint NL = 2;        // invocations along N (a power of two <= subgroup size)
layout(constant_id = 4) const uint KC = 2048;     // K per staged chunk of A (a multiple of 4 * KL)

const uint KL = WG / NL;                          // k-slices
const uint KW = KC / 4u;                          // words of 4 k per staged row of A
#if BL == 1
const uint GK = 16u, NB = NCOL;                   // k per group, uvec4 per group: one per column
#else
const uint GK = 4u, NB = 4u;                      // k per group, uvec4 per group: one per k row
#endif
const uint U = KC / (GK * KL);                    // groups per invocation per chunk
const uint TN = NL * NCOL;                        // tile columns
const uint NW = NCOL / 4u;                        // words per loaded row segment
const uint RED_CB = MT * TN, RED_RA = MT * TN + TN;

shared uint sa[MT * KW];                          // A chunk: row m at sa[m * KW], signed bytes
shared int red[MT * TN + TN + MT];                // S, then CB of the tile's columns, then RA of its rows

layout(std430, binding = 0) readonly buffer ABuf { uint a_buf[]; };
layout(std430, binding = 1) readonly buffer ASBuf { uint as_buf[]; };
layout(std430, binding = 2) readonly buffer AZBuf { uint azp_buf[]; };
layout(std430, binding = 3) readonly buffer BBuf { uint b_buf[]; };
layout(std430, binding = 3) readonly buffer BBuf2 { uvec2 b_buf2[]; };
layout(std430, binding = 3) readonly buffer BBuf4 { uvec4 b_buf4[]; };
layout(std430, binding = 4) readonly buffer BSBuf { uint bs_buf[]; };
layout(std430, binding = 5) readonly buffer BZBuf { uint bzp_buf[]; };
layout(std430, binding = 6) readonly buffer BiasBuf { uint bias_buf[]; };
layout(std430, binding = 7) buffer OutBuf { uint out_buf[]; };
layout(std430, binding = 7) buffer OutBuf2 { uvec2 out_buf2[]; };

layout(push_constant) uniform PC { uint w[32]; } pc;

#define LO28(x) ((x) & 0x0FFFFFFFu)
#define P_A_OFF pc.w[0]
#define P_AS_OFF pc.w[1]
#define P_AZP_OFF pc.w[2]
#define P_B_OFF pc.w[3]
#define P_BS_OFF pc.w[4]
#define P_BZP_OFF pc.w[5]
#define P_BIAS_OFF pc.w[6]
#define P_OUT_OFF pc.w[7]
#define P_M LO28(pc.w[8])
#define P_N LO28(pc.w[9])
#define P_K LO28(pc.w[10])
#define P_C (pc.w[11] & 0x03FFFFFFu)
#define F_A_SIGNED 0x04000000u
#define F_B_SIGNED 0x08000000u
#define F_F16 0x10000000u
#define F_SUM_A 0x20000000u
#define F_SUM_B 0x40000000u
#define F_A_WORDS 0x80000000u
#define P_FLAGS pc.w[11]
#define P_A_SB LO28(pc.w[12])
#define P_A_SC LO28(pc.w[13])
#define P_A_SM LO28(pc.w[14])
#define P_A_SK LO28(pc.w[15])
#define P_B_SB pc.w[16]
#define P_B_SC pc.w[17]
#define P_B_SK pc.w[18]
#define P_B_SN pc.w[19]
#define P_O_SB pc.w[20]
#define P_O_SC pc.w[21]
#define P_O_SM pc.w[22]
#define P_O_SN pc.w[23]
#define P_BI_SB pc.w[24]
#define P_BI_SC pc.w[25]
#define P_BI_SM pc.w[26]
#define P_BI_SN pc.w[27]
#define P_AS_S pc.w[28]
#define P_AZP_S pc.w[29]
#define P_BS_S pc.w[30]
#define P_BZP_S pc.w[31]

uint matrix_count() {
    return (pc.w[8] >> 28) | ((pc.w[9] >> 28) << 4) | ((pc.w[10] >> 28) << 8) | ((pc.w[12] >> 28) << 12)
         | ((pc.w[13] >> 28) << 16) | ((pc.w[14] >> 28) << 20) | ((pc.w[15] >> 28) << 24);
}

#if DOT
// OpSDot (SPV_KHR_integer_dot_product), PackedVectorFormat4x8Bit: as matmul_coop_mma.glsl
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(uint a, uint b, spirv_literal int packed_format);
int dot4(uint a, uint b) { return sdot4(a, b, 0); }
#endif

int s8(uint byte) { return int(byte << 24u) >> 24; }
float load_real(uint word, uint idx, bool f16) {
    return f16 ? unpackHalf2x16(word >> ((idx & 1u) * 16u)).x : uintBitsToFloat(word);
}
#define LOAD_REAL(buf, idx, f16) load_real(buf[(f16) ? ((idx) >> 1u) : (idx)], (idx), (f16))
#define ZP(buf, idx) bitfieldExtract(buf[(idx) >> 2u], int(8u * ((idx) & 3u)), 8)

void store_one(uint o, float v, bool f16) {
    if (f16) {
        uint h = packHalf2x16(vec2(v, 0.0)) & 0xFFFFu;
        STORE_FIELD(out_buf, o >> 1u, (o & 1u) * 16u, 16u, h);
    } else {
        out_buf[o] = floatBitsToUint(v);
    }
}

// Word `kw` (k = k0 + 4 kw .. + 3) of row `row` (byte index of its k = 0), signed bytes, 0 past K.
uint a_word(uint row, uint k, uint K, uint xe4, bool words) {
    uint v = 0u;
    if (words) {
        v = a_buf[(row + k) >> 2u];
    } else {
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            uint idx = row + min(k + j, K - 1u) * P_A_SK;
            v |= bitfieldExtract(a_buf[idx >> 2u], int(8u * (idx & 3u)), 8) << (8u * j);
        }
    }
    uint keep = (K - k >= 4u) ? 0xFFFFFFFFu : ((1u << (8u * (K - k))) - 1u);
    return (v ^ xe4) & keep;
}

// NCOL bytes of one B row from byte `at` (columns nc0..): one vector load where they all lie inside N
// on an NCOL-byte boundary (`whole`), else word by word; rows off 4-byte boundaries (packed rows of
// N % 4 != 0) take two words per word, loading the second only where it holds a column < N.
uvec4 b_row(uint at, uint nc0, uint N, bool whole, uint pad) {
    uvec4 v = uvec4(pad);
    if (whole) {
        if (NCOL == 16u) v = b_buf4[at >> 4u];
        else if (NCOL == 8u) v.xy = b_buf2[at >> 3u];
        else v.x = b_buf[at >> 2u];
    } else {
        const uint s = at & 3u, w = at >> 2u;
        [[unroll]] for (uint q = 0u; q < NW; ++q) {
            const uint c = nc0 + 4u * q;
            if (c < N) {
                uint lo = b_buf[w + q];
                if (s != 0u) lo = (lo >> (8u * s)) | (((c + 4u - s < N) ? b_buf[w + q + 1u] : 0u) << (32u - 8u * s));
                v[q] = lo;
            }
        }
    }
    return v;
}

#if !DOT
// Portable: the sums of 4 k (signed bytes bv[e * NCOL + c], k e of column c) with each row's word of
// those 4 k (A_WORD, m in scope), and their column and row sums.
#define MULADD_4K(A_WORD)                                                                                  \
    if (need_cb) [[unroll]] for (uint c = 0u; c < NCOL; ++c)                                              \
        cb[c] += bv[c] + bv[NCOL + c] + bv[2u * NCOL + c] + bv[3u * NCOL + c];                            \
    [[unroll]] for (uint m = 0u; m < MT; ++m) {                                                           \
        const int aw = int(A_WORD);                                                                       \
        const int a0 = bitfieldExtract(aw, 0, 8), a1 = bitfieldExtract(aw, 8, 8);                         \
        const int a2 = bitfieldExtract(aw, 16, 8), a3 = bitfieldExtract(aw, 24, 8);                       \
        if (need_ra) ra[m] += a0 + a1 + a2 + a3;                                                          \
        [[unroll]] for (uint c = 0u; c < NCOL; ++c)                                                       \
            acc[m * NCOL + c] += a0 * bv[c] + a1 * bv[NCOL + c] + a2 * bv[2u * NCOL + c] + a3 * bv[3u * NCOL + c]; \
    }
#endif

// 16 k (k0..) of one B column from byte `at`, words past K replaced by `pad` (bytes past K too):
// one uvec4 load where they all lie inside K on a 16-byte boundary (`vec`).
uvec4 b_col(uint at, uint k, uint K, bool vec, uint pad) {
    if (vec && k + 16u <= K) return b_buf4[at >> 4u];
    uvec4 v = uvec4(pad);
    [[unroll]] for (uint q = 0u; q < 4u; ++q) {
        if (k + 4u * q < K) {
            const uint w = b_buf[(at >> 2u) + q];
            const uint keep = (K - k - 4u * q >= 4u) ? 0xFFFFFFFFu : ((1u << (8u * (K - k - 4u * q))) - 1u);
            v[q] = (w & keep) | (pad & ~keep);
        }
    }
    return v;
}

void main() {
    const uint M = P_M, N = P_N, K = P_K, C = P_C, flags = P_FLAGS;
    const uint T = matrix_count();
    const bool f16 = (flags & F_F16) != 0u;
    const uint a_xe = ((flags & F_A_SIGNED) != 0u) ? 0u : 0x80u;   // unsigned -> signed byte
    const uint b_xe = ((flags & F_B_SIGNED) != 0u) ? 0u : 0x80u;
    const uint a_xe4 = a_xe * 0x01010101u, b_xe4 = b_xe * 0x01010101u;
    const bool need_ra = (flags & F_SUM_A) != 0u, need_cb = (flags & F_SUM_B) != 0u;
    const bool a_words = (flags & F_A_WORDS) != 0u;

    // tile: matrices outermost, then column tiles, row tiles fastest (they share the B columns)
    const uint NT = (N + TN - 1u) / TN, MTS = (M + MT - 1u) / MT;
    const uint L = linear_group_id();
    const uint bc = L / (NT * MTS);
    if (bc >= T) return;   // a folded grid over-covers; uniform over the work group
    const uint q = L % (NT * MTS);
    const uint m0 = (q % MTS) * MT, n0 = (q / MTS) * TN;
    const uint bi = bc / C, ci = bc % C;
    const uint a_base = P_A_OFF + bi * P_A_SB + ci * P_A_SC;
    const uint b_base = P_B_OFF + bi * P_B_SB + ci * P_B_SC;
    const uint sk = P_B_SK;

    // (nl, ks) from the subgroup's own numbering: the butterfly below pairs lanes with equal nl
    const uint lane = gl_SubgroupInvocationID;
    const uint nl = lane % NL, ks = gl_SubgroupID * (gl_SubgroupSize / NL) + lane / NL;
    const uint nc0 = n0 + nl * NCOL;
#if BL == 1
    const uint sn = P_B_SN;
    const bool aligned = ((P_B_OFF | P_B_SB | P_B_SC | sn) & 15u) == 0u;   // every column segment
#else
    const bool aligned = ((P_B_OFF | P_B_SB | P_B_SC | sk) & (NCOL - 1u)) == 0u;   // every row segment
#endif
    const bool whole = aligned && nc0 + NCOL <= N;
    const uint tid = gl_LocalInvocationID.x;
    for (uint i = tid; i < MT * TN + TN + MT; i += WG) red[i] = 0;

    int acc[MT * NCOL];
    int cb[NCOL];
    int ra[MT];
    [[unroll]] for (uint i = 0u; i < MT * NCOL; ++i) acc[i] = 0;
    [[unroll]] for (uint c = 0u; c < NCOL; ++c) cb[c] = 0;
    [[unroll]] for (uint m = 0u; m < MT; ++m) ra[m] = 0;

    for (uint k0 = 0u; k0 < K; k0 += KC) {
        // this chunk's rows of B first, so that they are in flight while A is staged; interior chunks
        // (all rows inside K, all columns inside N on a vector boundary: all but the edges) load
        // unconditionally; elsewhere rows past K get the pattern that the sign flip turns into 0
        uvec4 rb[NB * U];
#if BL == 1
        if (whole && k0 + KC <= K) {
            [[unroll]] for (uint i = 0u; i < U; ++i)
                [[unroll]] for (uint c = 0u; c < NCOL; ++c)
                    rb[NCOL * i + c] = b_buf4[(b_base + (nc0 + c) * sn + k0 + 16u * (ks + KL * i)) >> 4u];
        } else {
            [[unroll]] for (uint i = 0u; i < U; ++i) {
                const uint k = k0 + 16u * (ks + KL * i);
                [[unroll]] for (uint c = 0u; c < NCOL; ++c)
                    rb[NCOL * i + c] = (k < K && nc0 + c < N) ? b_col(b_base + (nc0 + c) * sn + k, k, K, aligned, b_xe4)
                                                              : uvec4(b_xe4);
            }
        }
#else
        if (whole && k0 + KC <= K) {
            [[unroll]] for (uint i = 0u; i < U; ++i)
                [[unroll]] for (uint r = 0u; r < 4u; ++r)
                    rb[4u * i + r] = b_row(b_base + (k0 + 4u * (ks + KL * i) + r) * sk + nc0, nc0, N, true, 0u);
        } else {
            [[unroll]] for (uint i = 0u; i < U; ++i) {
                const uint k = k0 + 4u * (ks + KL * i);
                [[unroll]] for (uint r = 0u; r < 4u; ++r)
                    rb[4u * i + r] = (k + r < K && nc0 < N) ? b_row(b_base + (k + r) * sk + nc0, nc0, N, whole, b_xe4)
                                                            : uvec4(b_xe4);
            }
        }
#endif
        barrier();   // the previous chunk of A is consumed (and red is zeroed, the first time)
        [[unroll]] for (uint i = 0u; i < (MT * KW + WG - 1u) / WG; ++i) {
            const uint u = tid + i * WG;
            if (u < MT * KW) {
                const uint m = u / KW, k = k0 + 4u * (u % KW);
                sa[u] = (m0 + m < M && k < K) ? a_word(a_base + (m0 + m) * P_A_SM, k, K, a_xe4, a_words) : 0u;
            }
        }
        barrier();
#if BL == 1
        [[unroll]] for (uint i = 0u; i < U; ++i) {
            const uint kw0 = 4u * (ks + KL * i);   // the group's first word of 4 k in the staged rows
            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
#if DOT
                uint bw[NCOL];   // column c, k 4j..4j+3 of the group
                [[unroll]] for (uint c = 0u; c < NCOL; ++c) bw[c] = rb[NCOL * i + c][j] ^ b_xe4;
                if (need_cb) [[unroll]] for (uint c = 0u; c < NCOL; ++c) cb[c] += dot4(bw[c], 0x01010101u);
                [[unroll]] for (uint m = 0u; m < MT; ++m) {
                    const uint aw = sa[m * KW + kw0 + j];
                    if (need_ra) ra[m] += dot4(aw, 0x01010101u);
                    [[unroll]] for (uint c = 0u; c < NCOL; ++c) acc[m * NCOL + c] += dot4(aw, bw[c]);
                }
#else
                int bv[4u * NCOL];   // k 4j + e of column c at bv[e * NCOL + c]
                [[unroll]] for (uint e = 0u; e < 4u; ++e)
                    [[unroll]] for (uint c = 0u; c < NCOL; ++c)
                        bv[e * NCOL + c] = bitfieldExtract(int(rb[NCOL * i + c][j] ^ b_xe4), int(8u * e), 8);
                MULADD_4K(sa[m * KW + kw0 + j])
#endif
            }
        }
#else
        [[unroll]] for (uint i = 0u; i < U; ++i) {
            const uint kw = ks + KL * i;
#if DOT
            uint bt[NCOL];   // column c: its 4 k rows as one word (byte r = row r)
            [[unroll]] for (uint qw = 0u; qw < NW; ++qw) {
                const uint a = rb[4u * i][qw] ^ b_xe4, b = rb[4u * i + 1u][qw] ^ b_xe4;
                const uint c = rb[4u * i + 2u][qw] ^ b_xe4, d = rb[4u * i + 3u][qw] ^ b_xe4;
                const uint t0 = (a & 0x00FF00FFu) | ((b & 0x00FF00FFu) << 8u);   // a0 b0 a2 b2
                const uint t1 = ((a >> 8u) & 0x00FF00FFu) | (b & 0xFF00FF00u);   // a1 b1 a3 b3
                const uint t2 = (c & 0x00FF00FFu) | ((d & 0x00FF00FFu) << 8u);   // c0 d0 c2 d2
                const uint t3 = ((c >> 8u) & 0x00FF00FFu) | (d & 0xFF00FF00u);   // c1 d1 c3 d3
                bt[4u * qw] = (t0 & 0xFFFFu) | (t2 << 16u);
                bt[4u * qw + 1u] = (t1 & 0xFFFFu) | (t3 << 16u);
                bt[4u * qw + 2u] = (t0 >> 16u) | (t2 & 0xFFFF0000u);
                bt[4u * qw + 3u] = (t1 >> 16u) | (t3 & 0xFFFF0000u);
            }
            if (need_cb) [[unroll]] for (uint c = 0u; c < NCOL; ++c) cb[c] += dot4(bt[c], 0x01010101u);
            [[unroll]] for (uint m = 0u; m < MT; ++m) {
                const uint aw = sa[m * KW + kw];
                if (need_ra) ra[m] += dot4(aw, 0x01010101u);
                [[unroll]] for (uint c = 0u; c < NCOL; ++c) acc[m * NCOL + c] += dot4(aw, bt[c]);
            }
#else
            int bv[4u * NCOL];   // row r, column c at bv[r * NCOL + c]
            [[unroll]] for (uint r = 0u; r < 4u; ++r)
                [[unroll]] for (uint c = 0u; c < NCOL; ++c)
                    bv[r * NCOL + c] = bitfieldExtract(int(rb[4u * i + r][c >> 2u] ^ b_xe4), int(8u * (c & 3u)), 8);
            MULADD_4K(sa[m * KW + kw])
#endif
        }
#endif
    }

    // k-slices: butterfly over the lanes of a subgroup with this nl, then across subgroups in shared
    for (uint x = NL; x < gl_SubgroupSize; x <<= 1u) {
        [[unroll]] for (uint i = 0u; i < MT * NCOL; ++i) acc[i] += subgroupShuffleXor(acc[i], x);
        if (need_cb) [[unroll]] for (uint c = 0u; c < NCOL; ++c) cb[c] += subgroupShuffleXor(cb[c], x);
        if (need_ra) [[unroll]] for (uint m = 0u; m < MT; ++m) ra[m] += subgroupShuffleXor(ra[m], x);
    }
    if (lane < NL) {
        [[unroll]] for (uint m = 0u; m < MT; ++m)
            [[unroll]] for (uint c = 0u; c < NCOL; ++c) atomicAdd(red[m * TN + nl * NCOL + c], acc[m * NCOL + c]);
        if (need_cb) [[unroll]] for (uint c = 0u; c < NCOL; ++c) atomicAdd(red[RED_CB + nl * NCOL + c], cb[c]);
        if (need_ra && nl == 0u) [[unroll]] for (uint m = 0u; m < MT; ++m) atomicAdd(red[RED_RA + m], ra[m]);
    }
    barrier();

    // ---- epilogue: two adjacent columns per item, as matmul_coop.comp
    const uint o_base = P_OUT_OFF + bi * P_O_SB + ci * P_O_SC;
    const uint bias_base = P_BIAS_OFF + bi * P_BI_SB + ci * P_BI_SC;
    const uint o_sn = P_O_SN;
    [[unroll]] for (uint t = 0u; t < (MT * TN / 2u + WG - 1u) / WG; ++t) {
        const uint p = tid + t * WG;
        const uint ml = p / (TN / 2u), nl2 = (p % (TN / 2u)) * 2u;
        const uint m = m0 + ml, n = n0 + nl2;
        if (p >= MT * TN / 2u || m >= M || n >= N) continue;
        const int za = s8((ZP(azp_buf, P_AZP_OFF + m * P_AZP_S) ^ a_xe) & 0xFFu);
        const int rak = red[RED_RA + ml] - int(K) * za;   // RA - K za', wrapping
        const float asc = LOAD_REAL(as_buf, P_AS_OFF + m * P_AS_S, f16);
        const bool both = n + 1u < N;
        float val[2];
        [[unroll]] for (uint e = 0u; e < 2u; ++e) {
            const uint ne = min(n + e, N - 1u);
            const int zb = s8((ZP(bzp_buf, P_BZP_OFF + ne * P_BZP_S) ^ b_xe) & 0xFFu);
            const int v = red[ml * TN + nl2 + e] - zb * rak - za * red[RED_CB + nl2 + e];
            const float bsc = LOAD_REAL(bs_buf, P_BS_OFF + ne * P_BS_S, f16);
            const float bias = LOAD_REAL(bias_buf, bias_base + m * P_BI_SM + ne * P_BI_SN, f16);
            precise float prod = float(v) * (asc * bsc);
            precise float res = prod + bias;
            val[e] = res;
        }
        const uint o = o_base + m * P_O_SM + n * o_sn;
        if (both && o_sn == 1u && (o & 1u) == 0u) {
            // both elements of one 32-bit (FLOAT16) or 64-bit (FLOAT32) unit are ours
            if (f16) out_buf[o >> 1u] = packHalf2x16(vec2(val[0], val[1]));
            else out_buf2[o >> 1u] = floatBitsToUint(vec2(val[0], val[1]));
        } else {
            store_one(o, val[0], f16);
            if (both) store_one(o + o_sn, val[1], f16);
        }
    }
}
