#version 450
// DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT (seed 003) for 16- and 32-bit A and B on GPUs, exact:
//   Output[b,c,m,n] = float(S) * (AScale[m] * BScale[n]) + Bias[b,c,m,n],
//   S = sum_k (A[b,c,m,k] - AZP[m]) * (B[b,c,k,n] - BZP[n]) as an exact integer,
// float(S) rounded once (to nearest, ties to even). Same push constants, flags and epilogue
// order as matmul_int.comp (kompute_dml/ops/matmul_wide.py plans it; see docs/matmul.md).
//
// Core GLSL 450 and 32-bit words only (no device feature; the I64 variants below aside). Signed inputs and their zero points
// are XOR-ed with the sign bit (x + 2^(W-1) as unsigned), which leaves every difference
// unchanged, so every element is handled as an unsigned value.
//   W = 16: a' = A - AZP and b' = B - BZP (|.| <= 65535) are formed when a K slice is staged;
//     b' is split into limbs bl = b' & 255 (0..255) and bh = b' >> 8 (-256..255). Two int32
//     multiply-adds per product (a'*bl, a'*bh: each |.| < 2^24, so 128 of them stay below
//     2^31) and every 128 K the two sums go into a 64-bit two's-complement sum (two words):
//     |S| <= K * 65535^2 < 2^60 for K < 2^28.
//   W = 32: the slices hold A and B themselves (biased, 0..2^32-1); umulExtended gives each
//     exact 64-bit product A*B, summed into 96 bits (three words, uaddCarry): < K * 2^64.
//     Row sums of A and column sums of B (64 bits) are summed from the same slices by
//     invocations 0..TM+TN-1, and the epilogue forms, modulo 2^96,
//     S = sum AB - BZP*sum A - AZP*sum B + K*AZP*BZP (|S| < 2^92: exact).
// Work group 16x16, output tile TM x TN = 16*TR x 16*TC, TR x TC outputs per invocation
// (compile-time sizes: the accumulators stay in registers), K in slices of KT = 16 staged in
// shared memory; the next slice's global loads are issued before this slice's products and
// stored after them. Packed rows (unit inner stride, word-aligned: flag) are read as words,
// two 16-bit values per word.
// @variant mmw16_r4c4 W=16 TR=4 TC=4
// @variant mmw16_r8c4 W=16 TR=8 TC=4
// @variant mmw32_r4c4 W=32 TR=4 TC=4
// @variant mmw32_r8c4 W=32 TR=8 TC=4
// I64 (needs shaderInt64): 64-bit multiply-adds instead. W = 16: one int64 sum of a'*b' per
// output, no limbs; W = 32: A split into 16-bit limbs, two uint64 sums of limb * B (each
// < 2^48, so K <= 65536: the planner checks), combined into 96 bits at the end.
// @variant mmw16l_r4c4 W=16 TR=4 TC=4 I64=1
// @variant mmw16l_r8c4 W=16 TR=8 TC=4 I64=1
// @variant mmw32l_r4c4 W=32 TR=4 TC=4 I64=1
// @variant mmw32l_r8c4 W=32 TR=8 TC=4 I64=1

#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#ifndef I64
#define I64 0
#endif
#if I64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif

#define KT 16
#define TM (16 * TR)
#define TN (16 * TC)
#define ELEM_MASK ((W == 32) ? 0xFFFFFFFFu : 0xFFFFu)
#define WORD_OF(i) ((W == 16) ? ((i) >> 1) : (i))  // element index -> word (no i * W: 2^28 * 32 wraps)
#define FLUSH_SLICES 8u          // W = 16: 128 K per int32 limb sum (see above)
#if I64 && W == 32
#define SAH(kk, i) sAh[kk][(i) >> 2][(i) & 3u]
#else
#define SAH(kk, i) 0u
#endif
layout(local_size_x = 16, local_size_y = 16) in;

layout(std430, binding = 0) readonly buffer ABuf { uint a_buf[]; };
layout(std430, binding = 1) readonly buffer ASBuf { uint as_buf[]; };
layout(std430, binding = 2) readonly buffer AZBuf { uint azp_buf[]; };
layout(std430, binding = 3) readonly buffer BBuf { uint b_buf[]; };
layout(std430, binding = 4) readonly buffer BSBuf { uint bs_buf[]; };
layout(std430, binding = 5) readonly buffer BZBuf { uint bzp_buf[]; };
layout(std430, binding = 6) readonly buffer BiasBuf { uint bias_buf[]; };
layout(std430, binding = 7) buffer OutBuf { uint out_buf[]; };

// The 32 words of matmul_int.comp (ops/matmul_common.push_words): offsets and strides in
// elements of each tensor's type; T = Batch * Channel in the top nibbles of words 8-10, 12-15.
layout(push_constant) uniform PC { uint w[32]; } pc;
#define LO28(x) ((x) & 0x0FFFFFFFu)
#define F_A_SIGNED 0x04000000u
#define F_B_SIGNED 0x08000000u
#define F_F16 0x10000000u
#define F_A_PACKED 0x20000000u
#define F_B_PACKED 0x40000000u

uint matrix_count() {
    return (pc.w[8] >> 28) | ((pc.w[9] >> 28) << 4) | ((pc.w[10] >> 28) << 8) | ((pc.w[12] >> 28) << 12)
         | ((pc.w[13] >> 28) << 16) | ((pc.w[14] >> 28) << 20) | ((pc.w[15] >> 28) << 24);
}

#if W == 32
#define ELEM(buf, idx) (buf[(idx)])
#else
#define ELEM(buf, idx) bitfieldExtract(buf[(idx) >> 1], int(((idx) & 1u) * 16u), 16)
#endif

float real_of(uint word, uint idx, bool f16) {
    return f16 ? unpackHalf2x16(word >> ((idx & 1u) * 16u)).x : uintBitsToFloat(word);
}
#define LOAD_REAL(buf, idx, f16) real_of(buf[(f16) ? ((idx) >> 1) : (idx)], (idx), (f16))

void store_one(uint o, float v, bool f16) {  // FLOAT16: the half-word alone (atomics)
    if (f16) STORE_FIELD(out_buf, o >> 1, (o & 1u) * 16u, 16u, packHalf2x16(vec2(v, 0.0)) & 0xFFFFu)
    else out_buf[o] = floatBitsToUint(v);
}

// ---- multi-word integers (word x lowest), modulo 2^96 ------------------------------------
uvec3 add96(uvec3 a, uvec3 b) {
    uint c0, c1, c2, x = uaddCarry(a.x, b.x, c0), y = uaddCarry(a.y, b.y, c1);
    y = uaddCarry(y, c0, c2);
    return uvec3(x, y, a.z + b.z + c1 + c2);
}
uvec3 sub96(uvec3 a, uvec3 b) {
    uint b0, b1, b2, x = usubBorrow(a.x, b.x, b0), y = usubBorrow(a.y, b.y, b1);
    y = usubBorrow(y, b0, b2);
    return uvec3(x, y, a.z - b.z - b1 - b2);
}
uvec3 mul32x64(uint s, uvec2 v) {  // s * (v.y:v.x), < 2^96
    uint h0, l0, h1, l1, c;
    umulExtended(s, v.x, h0, l0);
    umulExtended(s, v.y, h1, l1);
    uint mid = uaddCarry(h0, l1, c);
    return uvec3(l0, mid, h1 + c);
}

// A two's-complement 96-bit integer (|v| < 2^95) rounded once to float: the leading one is
// shifted to bit 95, the top 24 bits are the significand, bit 71 the round bit, the rest sticky.
float round96(uvec3 v) {
    bool neg = (v.z >> 31) != 0u;
    if (neg) v = sub96(uvec3(0u), v);
    int sh = 0;
    if (v.z == 0u) { v = uvec3(0u, v.x, v.y); sh += 32; }
    if (v.z == 0u) { v = uvec3(0u, v.x, v.y); sh += 32; }
    if (v.z == 0u) return 0.0;
    int lz = 31 - findMSB(v.z);
    if (lz > 0) {
        v.z = (v.z << lz) | (v.y >> (32 - lz));
        v.y = (v.y << lz) | (v.x >> (32 - lz));
        v.x <<= lz;
    }
    sh += lz;
    uint mant = v.z >> 8;                                    // 24 bits, leading one at bit 23
    bool round_bit = (v.z & 0x80u) != 0u;
    bool sticky = (v.z & 0x7Fu) != 0u || v.y != 0u || v.x != 0u;
    if (round_bit && (sticky || (mant & 1u) != 0u)) mant += 1u;  // 2^24 is still exact
    // value = mant * 2^(72 - sh): a power-of-two factor, exact (72 - sh in [-23, 72])
    float r = float(mant) * uintBitsToFloat(uint(127 + 72 - sh) << 23);
    return neg ? -r : r;
}

#if W == 16
shared ivec4 sA[KT][TM / 4];   // [k][m]: a'
shared ivec4 sBl[KT][TN / 4];  // [k][n]: b' & 255 (I64: b')
#if !I64
shared ivec4 sBh[KT][TN / 4];  // [k][n]: b' >> 8
#endif
#else
shared uvec4 sA[KT][TM / 4];   // [k][m]: A (biased; I64: A & 0xFFFF)
#if I64
shared uvec4 sAh[KT][TM / 4];  // [k][m]: A >> 16
#endif
shared uvec4 sB[KT][TN / 4];   // [k][n]: B (biased)
shared uvec2 sRowSum[TM];      // sum_k A, 64 bits
shared uvec2 sColSum[TN];      // sum_k B
#endif

// The slice at K0 into ra / rb (raw biased values): words where the rows are packed and the
// whole share lies inside the matrix, else one element at a time with bounds checks.
#if W == 16
#define FILL_A la_z                // out-of-range elements load as the zero point: a', b' = 0
#define FILL_B(j) lb_z[j]
#define UNPACK(r, q, wd) { uint wd_ = (wd); r[2u * (q)] = wd_ & 0xFFFFu; r[2u * (q) + 1u] = wd_ >> 16; }
#else
#define FILL_A 0u                  // out-of-range elements are 0: no term in any sum
#define FILL_B(j) 0u
#define UNPACK(r, q, wd) { r[q] = (wd); }
#endif
#define LOAD_SLICE(K0)                                                                             \
    {                                                                                              \
        uint kb = (K0) + la_k;                                                                     \
        uint ia = a_row + kb * a_sk;                                                               \
        if (a_packed && la_ok && kb + TR <= K) {                                                   \
            [[unroll]] for (uint q = 0u; q < TR * W / 32u; ++q) UNPACK(ra, q, a_buf[WORD_OF(ia) + q] ^ a_xw) \
        } else {                                                                                   \
            [[unroll]] for (uint j = 0u; j < TR; ++j)                                              \
                ra[j] = (la_ok && kb + j < K) ? ((ELEM(a_buf, ia + j * a_sk) ^ a_xe) & ELEM_MASK) : FILL_A; \
        }                                                                                          \
        uint k = (K0) + lb_k, nb = n0 + lb_n;                                                      \
        uint ib = b_base + min(k, K - 1u) * b_sk + min(nb, N - 1u) * b_sn;                         \
        if (b_packed && k < K && nb + TC <= N) {                                                   \
            [[unroll]] for (uint q = 0u; q < TC * W / 32u; ++q) UNPACK(rb, q, b_buf[WORD_OF(ib) + q] ^ b_xw) \
        } else {                                                                                   \
            [[unroll]] for (uint j = 0u; j < TC; ++j)                                              \
                rb[j] = (k < K && nb + j < N) ? ((ELEM(b_buf, ib + j * b_sn) ^ b_xe) & ELEM_MASK) : FILL_B(j); \
        }                                                                                          \
    }

void main() {
    const uint M = LO28(pc.w[8]), N = LO28(pc.w[9]), K = LO28(pc.w[10]), C = pc.w[11] & 0x03FFFFFFu;
    const uint flags = pc.w[11];
    const uint T = matrix_count();
    const bool f16 = (flags & F_F16) != 0u;
    const uint a_xe = ((flags & F_A_SIGNED) != 0u) ? (1u << (W - 1)) : 0u;
    const uint b_xe = ((flags & F_B_SIGNED) != 0u) ? (1u << (W - 1)) : 0u;
    const uint a_xw = (W == 16) ? a_xe * 0x00010001u : a_xe;
    const uint b_xw = (W == 16) ? b_xe * 0x00010001u : b_xe;
    const bool a_packed = (flags & F_A_PACKED) != 0u;
    const bool b_packed = (flags & F_B_PACKED) != 0u;

    const uint NT = (N + TN - 1u) / TN, MT = (M + TM - 1u) / TM;
    uint L = linear_group_id();
    uint nt = L % NT;
    uint rest = L / NT;
    uint mt = rest % MT;
    uint bc = rest / MT;
    if (bc >= T) return;   // folded grid: uniform over the work group
    uint bi = bc / C, ci = bc % C;
    uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
    uint lid = ty * 16u + tx;
    uint m0 = mt * TM, n0 = nt * TN;
    uint a_base = pc.w[0] + bi * LO28(pc.w[12]) + ci * LO28(pc.w[13]);
    uint b_base = pc.w[3] + bi * pc.w[16] + ci * pc.w[17];
    const uint a_sm = LO28(pc.w[14]), a_sk = LO28(pc.w[15]), b_sk = pc.w[18], b_sn = pc.w[19];

    // Staging share: TR consecutive k of one A row, TC consecutive n of one B row.
    const uint la_row = lid / (KT / TR), la_k = (lid % (KT / TR)) * TR;
    const uint lb_k = lid / (TN / TC), lb_n = (lid % (TN / TC)) * TC;
    const uint la_m = m0 + la_row;
    const bool la_ok = la_m < M;
    const uint a_row = a_base + min(la_m, M - 1u) * a_sm;
#if W == 16
    // out-of-range elements load as the zero point, so their a', b' are 0
    const uint la_z = (ELEM(azp_buf, pc.w[2] + min(la_m, M - 1u) * pc.w[29]) ^ a_xe) & ELEM_MASK;
    uint lb_z[TC];
    [[unroll]] for (uint j = 0u; j < TC; ++j)
        lb_z[j] = (ELEM(bzp_buf, pc.w[5] + min(n0 + lb_n + j, N - 1u) * pc.w[31]) ^ b_xe) & ELEM_MASK;
#endif
    uint ra[TR], rb[TC];     // the next slice, in flight over this slice's products

#if W == 32
    uvec2 own_sum = uvec2(0u);   // invocations < TM: row sum of A; TM..TM+TN-1: column sum of B
#endif
#if I64 && W == 16
    int64_t acc[TR][TC];
    [[unroll]] for (uint i = 0u; i < TR; ++i)
        [[unroll]] for (uint j = 0u; j < TC; ++j) acc[i][j] = 0;
#elif I64
    uint64_t accl[TR][TC], acch[TR][TC];
    [[unroll]] for (uint i = 0u; i < TR; ++i)
        [[unroll]] for (uint j = 0u; j < TC; ++j) { accl[i][j] = 0ul; acch[i][j] = 0ul; }
#elif W == 16
    int accl[TR][TC], acch[TR][TC];
    uint slo[TR][TC], shi[TR][TC];
    [[unroll]] for (uint i = 0u; i < TR; ++i)
        [[unroll]] for (uint j = 0u; j < TC; ++j) { accl[i][j] = 0; acch[i][j] = 0; slo[i][j] = 0u; shi[i][j] = 0u; }
#else
    uint acc0[TR][TC], acc1[TR][TC], acc2[TR][TC];
    [[unroll]] for (uint i = 0u; i < TR; ++i)
        [[unroll]] for (uint j = 0u; j < TC; ++j) { acc0[i][j] = 0u; acc1[i][j] = 0u; acc2[i][j] = 0u; }
#endif

    LOAD_SLICE(0u)
    for (uint k0 = 0u, slice = 0u; k0 < K; k0 += KT, ++slice) {
        // ---- store the slice (W = 16: the differences and B's limbs)
#if W == 16
        [[unroll]] for (uint j = 0u; j < TR; ++j) sA[la_k + j][la_row >> 2][la_row & 3u] = int(ra[j]) - int(la_z);
        [[unroll]] for (uint j = 0u; j < TC; ++j) {
            int bd = int(rb[j]) - int(lb_z[j]);
#if I64
            sBl[lb_k][(lb_n + j) >> 2][(lb_n + j) & 3u] = bd;
#else
            sBl[lb_k][(lb_n + j) >> 2][(lb_n + j) & 3u] = bd & 255;
            sBh[lb_k][(lb_n + j) >> 2][(lb_n + j) & 3u] = bd >> 8;
#endif
        }
#elif I64
        [[unroll]] for (uint j = 0u; j < TR; ++j) {
            sA[la_k + j][la_row >> 2][la_row & 3u] = ra[j] & 0xFFFFu;
            sAh[la_k + j][la_row >> 2][la_row & 3u] = ra[j] >> 16;
        }
        [[unroll]] for (uint j = 0u; j < TC; ++j) sB[lb_k][(lb_n + j) >> 2][(lb_n + j) & 3u] = rb[j];
#else
        [[unroll]] for (uint j = 0u; j < TR; ++j) sA[la_k + j][la_row >> 2][la_row & 3u] = ra[j];
        [[unroll]] for (uint j = 0u; j < TC; ++j) sB[lb_k][(lb_n + j) >> 2][(lb_n + j) & 3u] = rb[j];
#endif
        barrier();
        if (k0 + KT < K) LOAD_SLICE(k0 + KT)
        // ---- products
        [[unroll]] for (uint kk = 0u; kk < KT; ++kk) {
#if I64 && W == 16
            ivec4 av[TR / 4], bv[TC / 4];
            [[unroll]] for (uint q = 0u; q < TR / 4; ++q) av[q] = sA[kk][ty * (TR / 4) + q];
            [[unroll]] for (uint q = 0u; q < TC / 4; ++q) bv[q] = sBl[kk][tx * (TC / 4) + q];
            [[unroll]] for (uint i = 0u; i < TR; ++i)
                [[unroll]] for (uint j = 0u; j < TC; ++j)
                    acc[i][j] += int64_t(av[i / 4u][i % 4u]) * int64_t(bv[j / 4u][j % 4u]);
#elif I64
            uvec4 al[TR / 4], ah[TR / 4], bv[TC / 4];
            [[unroll]] for (uint q = 0u; q < TR / 4; ++q) { al[q] = sA[kk][ty * (TR / 4) + q]; ah[q] = sAh[kk][ty * (TR / 4) + q]; }
            [[unroll]] for (uint q = 0u; q < TC / 4; ++q) bv[q] = sB[kk][tx * (TC / 4) + q];
            [[unroll]] for (uint i = 0u; i < TR; ++i)
                [[unroll]] for (uint j = 0u; j < TC; ++j) {
                    uint64_t b = uint64_t(bv[j / 4u][j % 4u]);
                    accl[i][j] += uint64_t(al[i / 4u][i % 4u]) * b;
                    acch[i][j] += uint64_t(ah[i / 4u][i % 4u]) * b;
                }
#elif W == 16
            ivec4 av[TR / 4], bl[TC / 4], bh[TC / 4];
            [[unroll]] for (uint q = 0u; q < TR / 4; ++q) av[q] = sA[kk][ty * (TR / 4) + q];
            [[unroll]] for (uint q = 0u; q < TC / 4; ++q) { bl[q] = sBl[kk][tx * (TC / 4) + q]; bh[q] = sBh[kk][tx * (TC / 4) + q]; }
            [[unroll]] for (uint i = 0u; i < TR; ++i)
                [[unroll]] for (uint j = 0u; j < TC; ++j) {
                    int a = av[i / 4u][i % 4u];
                    accl[i][j] += a * bl[j / 4u][j % 4u];
                    acch[i][j] += a * bh[j / 4u][j % 4u];
                }
#else
            uvec4 av[TR / 4], bv[TC / 4];
            [[unroll]] for (uint q = 0u; q < TR / 4; ++q) av[q] = sA[kk][ty * (TR / 4) + q];
            [[unroll]] for (uint q = 0u; q < TC / 4; ++q) bv[q] = sB[kk][tx * (TC / 4) + q];
            [[unroll]] for (uint i = 0u; i < TR; ++i)
                [[unroll]] for (uint j = 0u; j < TC; ++j) {
                    uint ph, pl, c0, c1;
                    umulExtended(av[i / 4u][i % 4u], bv[j / 4u][j % 4u], ph, pl);
                    acc0[i][j] = uaddCarry(acc0[i][j], pl, c0);
                    acc1[i][j] = uaddCarry(acc1[i][j], ph + c0, c1);  // ph <= 2^32 - 2: no wrap
                    acc2[i][j] += c1;
                }
#endif
        }
#if W == 32
        if (lid < TM + TN) {
            [[unroll]] for (uint kk = 0u; kk < KT; ++kk) {
                uint v;
                if (lid < TM) v = sA[kk][lid >> 2][lid & 3u] + (I64 != 0 ? SAH(kk, lid) << 16 : 0u);
                else v = sB[kk][(lid - TM) >> 2][(lid - TM) & 3u];
                uint c;
                own_sum.x = uaddCarry(own_sum.x, v, c);
                own_sum.y += c;
            }
        }
#endif
        barrier();
#if W == 16 && !I64
        if (slice % FLUSH_SLICES == FLUSH_SLICES - 1u || k0 + KT >= K) {
            // S += accl + acch * 256 (64-bit two's complement)
            [[unroll]] for (uint i = 0u; i < TR; ++i)
                [[unroll]] for (uint j = 0u; j < TC; ++j) {
                    uint c0, c1;
                    slo[i][j] = uaddCarry(slo[i][j], uint(accl[i][j]), c0);
                    shi[i][j] += c0 + uint(accl[i][j] >> 31);
                    slo[i][j] = uaddCarry(slo[i][j], uint(acch[i][j]) << 8, c1);
                    shi[i][j] += c1 + uint(acch[i][j] >> 24);
                    accl[i][j] = 0;
                    acch[i][j] = 0;
                }
        }
#endif
    }

    // ---- epilogue: exact sum -> float (one rounding) -> * (AScale * BScale) + Bias
#if W == 32
    if (lid < TM) sRowSum[lid] = own_sum;
    else if (lid < TM + TN) sColSum[lid - TM] = own_sum;
    barrier();
#endif
    uint o_base = pc.w[7] + bi * pc.w[20] + ci * pc.w[21];
    uint bias_base = pc.w[6] + bi * pc.w[24] + ci * pc.w[25];
    [[unroll]] for (uint i = 0u; i < TR; ++i) {
        uint m = m0 + ty * TR + i;
        if (m >= M) continue;
        float asc = LOAD_REAL(as_buf, pc.w[1] + m * pc.w[28], f16);
#if W == 32
        uint az = (ELEM(azp_buf, pc.w[2] + m * pc.w[29]) ^ a_xe) & ELEM_MASK;
        uvec2 rsum = sRowSum[ty * TR + i];
#endif
        [[unroll]] for (uint j = 0u; j < TC; ++j) {
            uint n = n0 + tx * TC + j;
            if (n >= N) continue;
#if W == 16 && I64
            uvec3 s = uvec3(uint(acc[i][j]), uint(acc[i][j] >> 32), uint(acc[i][j] >> 63));
#elif W == 16
            uvec3 s = uvec3(slo[i][j], shi[i][j], (shi[i][j] >> 31) * 0xFFFFFFFFu);
#else
            uint bz = (ELEM(bzp_buf, pc.w[5] + n * pc.w[31]) ^ b_xe) & ELEM_MASK;
            uint zh, zl;
            umulExtended(az, bz, zh, zl);
#if I64
            uint64_t l = accl[i][j], h = acch[i][j];  // S = l + h * 2^16
            uvec3 s = add96(uvec3(uint(l), uint(l >> 32), 0u), uvec3(uint(h) << 16, uint(h >> 16), uint(h >> 48)));
#else
            uvec3 s = uvec3(acc0[i][j], acc1[i][j], acc2[i][j]);
#endif
            s = sub96(s, mul32x64(bz, rsum));
            s = sub96(s, mul32x64(az, sColSum[tx * TC + j]));
            s = add96(s, mul32x64(K, uvec2(zl, zh)));
#endif
            float bsc = LOAD_REAL(bs_buf, pc.w[4] + n * pc.w[30], f16);
            float bias = LOAD_REAL(bias_buf, bias_base + m * pc.w[26] + n * pc.w[27], f16);
            precise float v = round96(s) * (asc * bsc) + bias;
            store_one(o_base + m * pc.w[22] + n * pc.w[23], v, f16);
        }
    }
}
