#version 450
// DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT (seed 003):
//   Output[b,c,m,n] = sum_k ((A[b,c,m,k] - AZP[m]) * AScale[m]) * ((B[b,c,k,n] - BZP[n]) * BScale[n])
//                     + Bias[b,c,m,n]
// computed as AScale[m] * BScale[n] * sum_k (A - AZP) * (B - BZP) + Bias.
//
// Two kernel families from this one source (kompute_dml/ops/matmul_integer.py picks one per
// device, KDML_MATMUL_KERNEL=cpu|gpu forces it):
//   FAMILY 0 (CPU Vulkan, lavapipe): every invocation accumulates a BR x BC block of outputs in
//     registers, reading packed words straight from the buffers; no shared memory, no barrier,
//     no control flow in the K loop. lavapipe runs SIMD lanes across invocations and turns
//     every SSBO load into a per-lane scalar loop, so the cost is the number of loaded words
//     per multiply-add: blocks are as large as the register file allows.
//     PACKED 1: A rows and B rows word-aligned with unit inner stride (the dispatcher checks);
//     PACKED 0: any strides, element loads.
//   FAMILY 1 (GPUs): 64x64 output tiles per 16x16 work group, 16-deep K slices of A and B
//     dequantized into shared memory, 4x4 outputs per invocation.
//
// Arithmetic: only 32-bit words and core GLSL 450 (kp enables no device feature). Signed
// inputs are XOR-ed with the sign bit of every element (x + 2^(W-1) as unsigned), zero points
// too, so (A - AZP) is unchanged and every element is extracted unsigned. A - AZP is formed
// exactly (|.| <= 2^17 for W <= 16; sign and 32-bit magnitude for W = 32) and converted to
// float. Products are accumulated in float over blocks of at most 256 K values (exact for
// 8-bit: |sum| < 256 * 255^2 < 2^24), and the block sums are added into a compensated
// (hi, lo) pair (Neumaier), so the error stays a few float32 ulps of sum |a'||b'| for any K.
//
// CPU texel variant (8-bit, the fast path on lavapipe): A and B bound as uniform texel
// buffers (usamplerBuffer, viewed as R32G32B32A32_UINT by kompute_dml's kp build), so one
// texelFetch reads 16 bytes per lane with vector loads instead of lavapipe's per-lane SSBO
// loop; 8x16 outputs per invocation. The dispatcher checks 16-byte-aligned A and B rows
// with unit inner stride, K % 16 == 0 and N % 16 == 0. The output store and the bias mode are
// compile-time, because lavapipe runs both sides of a run-time branch with lane masks, so an
// unused store path or bias load costs every call (see docs/matmul.md):
//   OUTH 1: FLOAT16 output; OUTH 0 with STORE4 1: FLOAT32 rows stored as uvec4 (unit N stride,
//   row starts on 16 bytes); OUTH 0, STORE4 0 ("s"): FLOAT32, one store per element;
//   BIAS 0 ("_nb"): none; 1: any strides; 2 ("_bn"): one value per column, the ONNX (N,) bias.
// @variant mmi_cpu_t8       FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=0 STORE4=1 BIAS=1
// @variant mmi_cpu_t8_nb    FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=0 STORE4=1 BIAS=0
// @variant mmi_cpu_t8_bn    FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=0 STORE4=1 BIAS=2
// @variant mmi_cpu_t8s      FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=0 BIAS=1
// @variant mmi_cpu_t8s_nb   FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=0 BIAS=0
// @variant mmi_cpu_t8s_bn   FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=0 BIAS=2
// @variant mmi_cpu_t8h      FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=1 BIAS=1
// @variant mmi_cpu_t8h_nb   FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=1 BIAS=0
// @variant mmi_cpu_t8h_bn   FAMILY=0 PACKED=1 TEXEL=1 W=8 BR=8 BC=16 LX=8 OUTH=1 BIAS=2
// CPU packed variants: 6x8 outputs per invocation (r1: 1x8, for M <= 2); "v" variants load
// B as uvec2 (the dispatcher checks N % 8 == 0 and 2-word-aligned B rows).
// @variant mmi_cpu_p8v     FAMILY=0 PACKED=1 W=8  BR=6 BC=8 LX=8 BVEC=2
// @variant mmi_cpu_p16v    FAMILY=0 PACKED=1 W=16 BR=6 BC=8 LX=8 BVEC=2
// @variant mmi_cpu_p32v    FAMILY=0 PACKED=1 W=32 BR=6 BC=8 LX=8 BVEC=2
// @variant mmi_cpu_p8      FAMILY=0 PACKED=1 W=8  BR=6 BC=8 LX=8 BVEC=1
// @variant mmi_cpu_p16     FAMILY=0 PACKED=1 W=16 BR=6 BC=8 LX=8 BVEC=1
// @variant mmi_cpu_p32     FAMILY=0 PACKED=1 W=32 BR=6 BC=8 LX=8 BVEC=1
// @variant mmi_cpu_p8v_r1  FAMILY=0 PACKED=1 W=8  BR=1 BC=8 LX=8 BVEC=2
// @variant mmi_cpu_p16v_r1 FAMILY=0 PACKED=1 W=16 BR=1 BC=8 LX=8 BVEC=2
// @variant mmi_cpu_p32v_r1 FAMILY=0 PACKED=1 W=32 BR=1 BC=8 LX=8 BVEC=2
// @variant mmi_cpu_p8_r1   FAMILY=0 PACKED=1 W=8  BR=1 BC=8 LX=8 BVEC=1
// @variant mmi_cpu_p16_r1  FAMILY=0 PACKED=1 W=16 BR=1 BC=8 LX=8 BVEC=1
// @variant mmi_cpu_p32_r1  FAMILY=0 PACKED=1 W=32 BR=1 BC=8 LX=8 BVEC=1
// CPU generic variants (any strides, element loads): 4x4 outputs per invocation.
// @variant mmi_cpu_g8      FAMILY=0 PACKED=0 W=8  BR=4 BC=4 LX=8
// @variant mmi_cpu_g16     FAMILY=0 PACKED=0 W=16 BR=4 BC=4 LX=8
// @variant mmi_cpu_g32     FAMILY=0 PACKED=0 W=32 BR=4 BC=4 LX=8
// GPU family (shared-memory tiles; packed rows detected at run time from a flag):
// @variant mmi_gpu_8    FAMILY=1 W=8
// @variant mmi_gpu_16   FAMILY=1 W=16
// @variant mmi_gpu_32   FAMILY=1 W=32

#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

#define EPW (32 / W)                 // elements per word
#define ELEM_MASK ((W == 32) ? 0xFFFFFFFFu : ((1u << W) - 1u))
#define KBLOCK 256u                  // K values per float block before the compensated add
#ifndef BVEC
#define BVEC 1
#endif
#ifndef TEXEL
#define TEXEL 0
#endif
#ifndef STORE4
#define STORE4 0
#endif
#ifndef BIAS
#define BIAS 1                       // 0: no bias read; 1: any strides; 2: bias stride along M is 0
#endif

#if TEXEL
layout(binding = 0) uniform usamplerBuffer a_tex;   // texel = 4 words
layout(binding = 3) uniform usamplerBuffer b_tex;
#else
layout(std430, binding = 0) readonly buffer ABuf { uint a_buf[]; };
#endif
layout(std430, binding = 1) readonly buffer ASBuf { uint as_buf[]; };
layout(std430, binding = 2) readonly buffer AZBuf { uint azp_buf[]; };
#if !TEXEL
layout(std430, binding = 3) readonly buffer BBuf { uint b_buf[]; };
layout(std430, binding = 3) readonly buffer BBuf2 { uvec2 b_buf2[]; };
#endif
layout(std430, binding = 4) readonly buffer BSBuf { uint bs_buf[]; };
layout(std430, binding = 5) readonly buffer BZBuf { uint bzp_buf[]; };
layout(std430, binding = 6) readonly buffer BiasBuf { uint bias_buf[]; };
layout(std430, binding = 7) buffer OutBuf { uint out_buf[]; };
#if STORE4
layout(std430, binding = 7) buffer OutBuf4 { uvec4 out_buf4[]; };
#endif

// 32 words (see matmul_integer.py, _push_words). Offsets and strides are in elements of the
// tensor's own type. Every size and stride is below 2^28 (a binding holds at most
// maxStorageBufferRange = 2^27 bytes), so the top nibbles of words 8-10 and 12-15 carry the
// number of matrices T = Batch * Channel (28 bits).
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
#define F_A_PACKED 0x20000000u
#define F_B_PACKED 0x40000000u
#define F_NEVER 0x80000000u          // never set: see the texel variant's K loop
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

// ---- element access ----------------------------------------------------------------
#if W == 32
#define ELEM(buf, idx) (buf[(idx)])
#else
#define ELEM(buf, idx) bitfieldExtract(buf[(idx) / EPW], int(((idx) % EPW) * W), W)
#endif

// field j of a packed word (unsigned)
#if W == 32
#define FIELD(word, j) (word)
#elif W == 16
#define FIELD(word, j) (((j) == 1) ? ((word) >> 16) : ((word) & 0xFFFFu))
#else
#define FIELD(word, j) (((j) == 3) ? ((word) >> 24) : (((word) >> (8 * (j))) & 0xFFu))
#endif

// Zero points are kept as float for W <= 16 (exact), as the biased uint for W = 32.
#if W == 32
#define ZT uint
#define ZCONV(x) (x)
// x - z for biased 32-bit values: exact 33-bit difference, rounded once to float
float dq(uint x, uint z) { return (x >= z) ? float(x - z) : -float(z - x); }
#else
#define ZT float
#define ZCONV(x) float(int(x))
float dq(uint x, float z) { return float(int(x)) - z; }
#endif

// A FLOAT32 or FLOAT16 element (scales, bias) at element index idx of buffer buf: one load.
#define LOAD_REAL(buf, idx, f16) \
    real_of(buf[(f16) ? ((idx) >> 1) : (idx)], (idx), (f16))
float real_of(uint word, uint idx, bool f16) {
    return f16 ? unpackHalf2x16(word >> ((idx & 1u) * 16u)).x : uintBitsToFloat(word);
}

// Compensated accumulation of a block sum into (hi, lo) (Neumaier).
void comp_add(inout float hi, inout float lo, float x) {
    precise float t = hi + x;
    precise float e = (abs(hi) >= abs(x)) ? ((hi - t) + x) : ((x - t) + hi);
    lo += e;
    hi = t;
}

// Output element at element index o (of the output's type).
void store_one(uint o, float v, bool f16) {
    if (f16) {
        uint h = packHalf2x16(vec2(v, 0.0)) & 0xFFFFu;
        uint sh = (o & 1u) * 16u;
        STORE_FIELD(out_buf, o >> 1, sh, 16u, h);
    } else {
        out_buf[o] = floatBitsToUint(v);
    }
}

#if FAMILY == 0
// =====================================================================================
// CPU family: register-blocked, BR x BC outputs per invocation.
// =====================================================================================
layout(local_size_x = LX) in;

void main() {
    const uint M = P_M, N = P_N, K = P_K, C = P_C, flags = P_FLAGS;
    const uint T = matrix_count();
#ifdef OUTH
    const bool f16 = OUTH != 0;               // compile-time output type (see the texel variants)
#else
    const bool f16 = (flags & F_F16) != 0u;
#endif
    const uint a_xe = ((flags & F_A_SIGNED) != 0u) ? (1u << (W - 1)) : 0u;  // per element
    const uint b_xe = ((flags & F_B_SIGNED) != 0u) ? (1u << (W - 1)) : 0u;
#if W == 8
    const uint a_xw = a_xe * 0x01010101u, b_xw = b_xe * 0x01010101u;       // per word
#elif W == 16
    const uint a_xw = a_xe * 0x00010001u, b_xw = b_xe * 0x00010001u;
#else
    const uint a_xw = a_xe, b_xw = b_xe;
#endif

    const uint NB = (N + BC - 1u) / BC, MB = (M + BR - 1u) / BR;
    const uint NBG = (NB + LX - 1u) / LX;
    uint L = linear_group_id();
    uint nbg = L % NBG;
    uint rest = L / NBG;
    uint mb = rest % MB;
    uint bc = min(rest / MB, T - 1u);        // a folded grid over-covers: clamp, do not branch
    bool live = (rest / MB) < T;
    uint nb = nbg * LX + gl_LocalInvocationID.x;
    live = live && nb < NB;
    nb = min(nb, NB - 1u);
    uint bi = bc / C, ci = bc % C;
    uint m0 = mb * BR, n0 = nb * BC;

    uint a_base = P_A_OFF + bi * P_A_SB + ci * P_A_SC;
    uint b_base = P_B_OFF + bi * P_B_SB + ci * P_B_SC;

    uint arow[BR];
    ZT azf[BR];
    for (uint r = 0u; r < BR; ++r) {
        uint m = min(m0 + r, M - 1u);
        arow[r] = a_base + m * P_A_SM;
        azf[r] = ZCONV((ELEM(azp_buf, P_AZP_OFF + m * P_AZP_S) ^ a_xe) & ELEM_MASK);
    }
    uint bcol[BC];
    ZT bzf[BC];
    for (uint c = 0u; c < BC; ++c) {
        uint n = min(n0 + c, N - 1u);
        bcol[c] = n;
        bzf[c] = ZCONV((ELEM(bzp_buf, P_BZP_OFF + n * P_BZP_S) ^ b_xe) & ELEM_MASK);
    }

    float hi[BR][BC], lo[BR][BC], acc[BR][BC];
    for (uint r = 0u; r < BR; ++r)
        for (uint c = 0u; c < BC; ++c) {
            hi[r][c] = 0.0;
            lo[r][c] = 0.0;
        }

#if PACKED
    // A rows: word-aligned, k contiguous. B rows: word-aligned, n contiguous.
    const uint BCW = BC / EPW;                // B words per k row per invocation
    uint awb[BR];
    for (uint r = 0u; r < BR; ++r) awb[r] = arow[r] / EPW;
    uint bw_col[BCW];
    const uint last_bw = (N - 1u) / EPW;
    for (uint q = 0u; q < BCW; ++q) bw_col[q] = min(n0 / EPW + q, last_bw);
    const uint b_sk_w = P_B_SK / EPW;
    const uint b_base_w = b_base / EPW;

#if TEXEL
    // K in chunks of 16 (4 words = one texel of each A row; 16 B rows of one texel each).
    // lavapipe implements texelFetch as a function call, and LLVM keeps values that live
    // across calls in memory: all fetches of a chunk come first, under a branch on a bit
    // that is never set (F_NEVER), so the calls sit in their own block and the
    // multiply-adds that follow work from registers.
    const uint KW = K / EPW;                  // a multiple of 4 (K % 16 == 0)
    const uint KBW = KBLOCK / EPW;
    for (uint kw0 = 0u; kw0 < KW; kw0 += KBW) {
        uint kw1 = min(KW, kw0 + KBW);
        [[unroll]] for (uint r = 0u; r < BR; ++r)
            [[unroll]] for (uint c = 0u; c < BC; ++c) acc[r][c] = 0.0;
        for (uint kw = kw0; kw < kw1; kw += 4u) {
            uvec4 at[BR];
            uvec4 bt[16];
            uint brow0 = b_base_w + kw * EPW * b_sk_w + bw_col[0];
            if ((flags & F_NEVER) == 0u) {
                [[unroll]] for (uint r = 0u; r < BR; ++r) at[r] = texelFetch(a_tex, int((awb[r] + kw) >> 2u)) ^ a_xw;
                [[unroll]] for (uint kk = 0u; kk < 16u; ++kk)
                    bt[kk] = texelFetch(b_tex, int((brow0 + kk * b_sk_w) >> 2u)) ^ b_xw;
            } else {
                [[unroll]] for (uint r = 0u; r < BR; ++r) at[r] = uvec4(0u);
                [[unroll]] for (uint kk = 0u; kk < 16u; ++kk) bt[kk] = uvec4(0u);
            }
            [[unroll]] for (uint kk = 0u; kk < 16u; ++kk) {
                float av[BR];
                [[unroll]] for (uint r = 0u; r < BR; ++r) av[r] = dq(FIELD(at[r][kk / 4u], kk % 4u), azf[r]);
                [[unroll]] for (uint q = 0u; q < 4u; ++q)
                    [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                        float bv = dq(FIELD(bt[kk][q], e), bzf[q * 4u + e]);
                        [[unroll]] for (uint r = 0u; r < BR; ++r)
                            acc[r][q * 4u + e] = fma(av[r], bv, acc[r][q * 4u + e]);
                    }
            }
        }
        [[unroll]] for (uint r = 0u; r < BR; ++r)
            [[unroll]] for (uint c = 0u; c < BC; ++c) comp_add(hi[r][c], lo[r][c], acc[r][c]);
    }
#else
    const uint KW = K / EPW;                  // whole words of K
    const uint KBW = KBLOCK / EPW;            // words per float block
    for (uint kw0 = 0u; kw0 < KW; kw0 += KBW) {
        uint kw1 = min(KW, kw0 + KBW);
        for (uint r = 0u; r < BR; ++r)
            for (uint c = 0u; c < BC; ++c) acc[r][c] = 0.0;
        for (uint kw = kw0; kw < kw1; ++kw) {
            uint aw[BR];
            for (uint r = 0u; r < BR; ++r) aw[r] = a_buf[awb[r] + kw] ^ a_xw;
            uint brow = b_base_w + kw * EPW * b_sk_w;
            for (uint j = 0u; j < EPW; ++j) {
                float bv[BC];
                uint bws[BCW];
#if BVEC == 2
                // two words per load: half the per-lane load loops (lavapipe)
                for (uint q = 0u; q < BCW / 2u; ++q) {
                    uvec2 v2 = b_buf2[(brow + j * b_sk_w + bw_col[2u * q]) / 2u];
                    bws[2u * q] = v2.x;
                    bws[2u * q + 1u] = v2.y;
                }
#else
                for (uint q = 0u; q < BCW; ++q) bws[q] = b_buf[brow + j * b_sk_w + bw_col[q]];
#endif
                for (uint q = 0u; q < BCW; ++q) {
                    uint bw = bws[q] ^ b_xw;
                    for (uint e = 0u; e < EPW; ++e) bv[q * EPW + e] = dq(FIELD(bw, e), bzf[q * EPW + e]);
                }
                for (uint r = 0u; r < BR; ++r) {
                    float av = dq(FIELD(aw[r], j), azf[r]);
                    for (uint c = 0u; c < BC; ++c) acc[r][c] = fma(av, bv[c], acc[r][c]);
                }
            }
        }
        for (uint r = 0u; r < BR; ++r)
            for (uint c = 0u; c < BC; ++c) comp_add(hi[r][c], lo[r][c], acc[r][c]);
    }
#if W != 32
    // K tail: the last K % EPW values (the rest of that A word belongs to the next row).
    const uint ktail = K - KW * EPW;
    if (ktail != 0u) {
        for (uint r = 0u; r < BR; ++r)
            for (uint c = 0u; c < BC; ++c) acc[r][c] = 0.0;
        uint aw[BR];
        for (uint r = 0u; r < BR; ++r) aw[r] = a_buf[awb[r] + KW] ^ a_xw;
        for (uint j = 0u; j < EPW - 1u; ++j) {
            uint k = min(KW * EPW + j, K - 1u);
            float keep = (j < ktail) ? 1.0 : 0.0;
            float bv[BC];
            for (uint q = 0u; q < BCW; ++q) {
                uint bw = b_buf[b_base_w + k * b_sk_w + bw_col[q]] ^ b_xw;
                for (uint e = 0u; e < EPW; ++e) bv[q * EPW + e] = dq(FIELD(bw, e), bzf[q * EPW + e]);
            }
            for (uint r = 0u; r < BR; ++r) {
                float av = dq(FIELD(aw[r], j), azf[r]) * keep;
                for (uint c = 0u; c < BC; ++c) acc[r][c] = fma(av, bv[c], acc[r][c]);
            }
        }
        for (uint r = 0u; r < BR; ++r)
            for (uint c = 0u; c < BC; ++c) comp_add(hi[r][c], lo[r][c], acc[r][c]);
    }
#endif
#endif  // TEXEL
#else
    // Generic strides: one element load per value.
    const uint a_sk = P_A_SK, b_sk = P_B_SK, b_sn = P_B_SN;
    for (uint k0 = 0u; k0 < K; k0 += KBLOCK) {
        uint k1 = min(K, k0 + KBLOCK);
        for (uint r = 0u; r < BR; ++r)
            for (uint c = 0u; c < BC; ++c) acc[r][c] = 0.0;
        for (uint k = k0; k < k1; ++k) {
            float bv[BC];
            uint brow = b_base + k * b_sk;
            for (uint c = 0u; c < BC; ++c)
                bv[c] = dq((ELEM(b_buf, brow + bcol[c] * b_sn) ^ b_xe) & ELEM_MASK, bzf[c]);
            for (uint r = 0u; r < BR; ++r) {
                float av = dq((ELEM(a_buf, arow[r] + k * a_sk) ^ a_xe) & ELEM_MASK, azf[r]);
                for (uint c = 0u; c < BC; ++c) acc[r][c] = fma(av, bv[c], acc[r][c]);
            }
        }
        for (uint r = 0u; r < BR; ++r)
            for (uint c = 0u; c < BC; ++c) comp_add(hi[r][c], lo[r][c], acc[r][c]);
    }
#endif

    // ---- epilogue: scales, bias, store ----------------------------------------------
    uint o_base = P_OUT_OFF + bi * P_O_SB + ci * P_O_SC;
    uint bias_base = P_BIAS_OFF + bi * P_BI_SB + ci * P_BI_SC;
    float bsc[BC];
    for (uint c = 0u; c < BC; ++c) bsc[c] = LOAD_REAL(bs_buf, P_BS_OFF + bcol[c] * P_BS_S, f16);
#if BIAS == 2
    float bias_n[BC];                         // the same for every row of the block
    for (uint c = 0u; c < BC; ++c) bias_n[c] = LOAD_REAL(bias_buf, bias_base + bcol[c] * P_BI_SN, f16);
#endif
#if STORE4
    // FLOAT32 rows: BC = 16 outputs of a row in BC / 4 uvec4 stores, one lane loop each (N % 16
    // == 0, so a live block's columns are all in range)
    for (uint r = 0u; r < BR; ++r) {
        uint m = m0 + r;
        float asc = LOAD_REAL(as_buf, P_AS_OFF + min(m, M - 1u) * P_AS_S, false);
        if (live && m < M) {
            uint o4 = (o_base + m * P_O_SM + n0) >> 2u;
            [[unroll]] for (uint q = 0u; q < BC / 4u; ++q) {
                vec4 v;
                [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                    uint c = q * 4u + e;
#if BIAS == 2
                    float bias = bias_n[c];
#elif BIAS == 1
                    float bias = LOAD_REAL(bias_buf, bias_base + m * P_BI_SM + (n0 + c) * P_BI_SN, false);
#else
                    const float bias = 0.0;
#endif
                    v[e] = (hi[r][c] + lo[r][c]) * (asc * bsc[c]) + bias;
                }
                out_buf4[o4 + q] = floatBitsToUint(v);
            }
        }
    }
#else
    for (uint r = 0u; r < BR; ++r) {
        uint m = m0 + r;
        float asc = LOAD_REAL(as_buf, P_AS_OFF + min(m, M - 1u) * P_AS_S, f16);
        for (uint c = 0u; c < BC; ++c) {
            uint n = n0 + c;
            if (live && m < M && n < N) {
#if BIAS == 2
                float bias = bias_n[c];
#elif BIAS == 1
                float bias = LOAD_REAL(bias_buf, bias_base + m * P_BI_SM + n * P_BI_SN, f16);
#else
                const float bias = 0.0;
#endif
                float v = (hi[r][c] + lo[r][c]) * (asc * bsc[c]) + bias;
                store_one(o_base + m * P_O_SM + n * P_O_SN, v, f16);
            }
        }
    }
#endif
}

#else
// =====================================================================================
// GPU family: shared-memory tiles, 64x64 outputs per 16x16 work group, 4x4 per invocation.
// =====================================================================================
#define TM 64u
#define TN 64u
#define KT 16u
layout(local_size_x = 16, local_size_y = 16) in;

shared float sA[KT][TM];   // [k][m]: dequantized A' slice
shared float sB[KT][TN];   // [k][n]: dequantized B' slice

void main() {
    const uint M = P_M, N = P_N, K = P_K, C = P_C, flags = P_FLAGS;
    const uint T = matrix_count();
    const bool f16 = (flags & F_F16) != 0u;
    const uint a_xe = ((flags & F_A_SIGNED) != 0u) ? (1u << (W - 1)) : 0u;
    const uint b_xe = ((flags & F_B_SIGNED) != 0u) ? (1u << (W - 1)) : 0u;
    const bool a_packed = (flags & F_A_PACKED) != 0u;
    const bool b_packed = (flags & F_B_PACKED) != 0u;

    const uint NT = (N + TN - 1u) / TN, MT = (M + TM - 1u) / TM;
    uint L = linear_group_id();
    uint nt = L % NT;
    uint rest = L / NT;
    uint mt = rest % MT;
    uint bc = rest / MT;
    if (bc >= T) return;   // uniform over the work group
    uint bi = bc / C, ci = bc % C;
    uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
    uint lid = ty * 16u + tx;
    uint m0 = mt * TM, n0 = nt * TN;

    uint a_base = P_A_OFF + bi * P_A_SB + ci * P_A_SC;
    uint b_base = P_B_OFF + bi * P_B_SB + ci * P_B_SC;
    const uint a_sm = P_A_SM, a_sk = P_A_SK, b_sk = P_B_SK, b_sn = P_B_SN;

    // This invocation's share of each slice: 4 consecutive k of one A row, 4 consecutive n
    // of one B row.
    uint la_row = lid / 4u, la_k = (lid % 4u) * 4u;
    uint lb_k = lid / 16u, lb_n = (lid % 16u) * 4u;
    uint la_m = m0 + la_row;
    bool la_ok = la_m < M;
    ZT la_z = ZCONV((ELEM(azp_buf, P_AZP_OFF + min(la_m, M - 1u) * P_AZP_S) ^ a_xe) & ELEM_MASK);
    ZT lb_z[4];
    for (uint j = 0u; j < 4u; ++j) {
        uint n = min(n0 + lb_n + j, N - 1u);
        lb_z[j] = ZCONV((ELEM(bzp_buf, P_BZP_OFF + n * P_BZP_S) ^ b_xe) & ELEM_MASK);
    }

    float acc[4][4], hi[4][4], lo[4][4];
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) {
            acc[i][j] = 0.0;
            hi[i][j] = 0.0;
            lo[i][j] = 0.0;
        }

    for (uint k0 = 0u; k0 < K; k0 += KT) {
        // ---- A slice: rows m0.., k = k0 + la_k .. +3
        {
            uint kb = k0 + la_k;
            uint idx = a_base + min(la_m, M - 1u) * a_sm + kb * a_sk;
            uint v[4];
            if (a_packed && la_ok && kb + 3u < K) {
#if W == 8
                uint wd = a_buf[idx / 4u] ^ (a_xe * 0x01010101u);
                for (uint j = 0u; j < 4u; ++j) v[j] = FIELD(wd, j);
#elif W == 16
                uint w0 = a_buf[idx / 2u] ^ (a_xe * 0x00010001u), w1 = a_buf[idx / 2u + 1u] ^ (a_xe * 0x00010001u);
                v[0] = w0 & 0xFFFFu; v[1] = w0 >> 16; v[2] = w1 & 0xFFFFu; v[3] = w1 >> 16;
#else
                for (uint j = 0u; j < 4u; ++j) v[j] = a_buf[idx + j] ^ a_xe;
#endif
            } else {
                for (uint j = 0u; j < 4u; ++j)
                    v[j] = (la_ok && kb + j < K) ? ((ELEM(a_buf, idx + j * a_sk) ^ a_xe) & ELEM_MASK) : 0u;
            }
            for (uint j = 0u; j < 4u; ++j)
                sA[la_k + j][la_row] = (la_ok && kb + j < K) ? dq(v[j], la_z) : 0.0;
        }
        // ---- B slice: k = k0 + lb_k, n = n0 + lb_n .. +3
        {
            uint k = k0 + lb_k;
            bool kok = k < K;
            uint nb = n0 + lb_n;
            uint idx = b_base + min(k, K - 1u) * b_sk + min(nb, N - 1u) * b_sn;
            uint v[4];
            if (b_packed && kok && nb + 3u < N) {
#if W == 8
                uint wd = b_buf[idx / 4u] ^ (b_xe * 0x01010101u);
                for (uint j = 0u; j < 4u; ++j) v[j] = FIELD(wd, j);
#elif W == 16
                uint w0 = b_buf[idx / 2u] ^ (b_xe * 0x00010001u), w1 = b_buf[idx / 2u + 1u] ^ (b_xe * 0x00010001u);
                v[0] = w0 & 0xFFFFu; v[1] = w0 >> 16; v[2] = w1 & 0xFFFFu; v[3] = w1 >> 16;
#else
                for (uint j = 0u; j < 4u; ++j) v[j] = b_buf[idx + j] ^ b_xe;
#endif
            } else {
                for (uint j = 0u; j < 4u; ++j)
                    v[j] = (kok && nb + j < N) ? ((ELEM(b_buf, idx + j * b_sn) ^ b_xe) & ELEM_MASK) : 0u;
            }
            for (uint j = 0u; j < 4u; ++j)
                sB[lb_k][lb_n + j] = (kok && nb + j < N) ? dq(v[j], lb_z[j]) : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < KT; ++kk) {
            float av[4], bv[4];
            for (uint i = 0u; i < 4u; ++i) av[i] = sA[kk][ty + 16u * i];
            for (uint j = 0u; j < 4u; ++j) bv[j] = sB[kk][tx + 16u * j];
            for (uint i = 0u; i < 4u; ++i)
                for (uint j = 0u; j < 4u; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
        }
        barrier();
        if (((k0 + KT) % KBLOCK) == 0u || k0 + KT >= K) {
            for (uint i = 0u; i < 4u; ++i)
                for (uint j = 0u; j < 4u; ++j) {
                    comp_add(hi[i][j], lo[i][j], acc[i][j]);
                    acc[i][j] = 0.0;
                }
        }
    }

    uint o_base = P_OUT_OFF + bi * P_O_SB + ci * P_O_SC;
    uint bias_base = P_BIAS_OFF + bi * P_BI_SB + ci * P_BI_SC;
    for (uint i = 0u; i < 4u; ++i) {
        uint m = m0 + ty + 16u * i;
        if (m >= M) continue;
        float asc = LOAD_REAL(as_buf, P_AS_OFF + m * P_AS_S, f16);
        for (uint j = 0u; j < 4u; ++j) {
            uint n = n0 + tx + 16u * j;
            if (n >= N) continue;
            float bsc = LOAD_REAL(bs_buf, P_BS_OFF + n * P_BS_S, f16);
            float bias = LOAD_REAL(bias_buf, bias_base + m * P_BI_SM + n * P_BI_SN, f16);
            float v = (hi[i][j] + lo[i][j]) * (asc * bsc) + bias;
            store_one(o_base + m * P_O_SM + n * P_O_SN, v, f16);
        }
    }
}
#endif
