#version 450
// DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT on cooperative matrices (VK_KHR_cooperative_matrix: tensor
// cores), 8-bit A and B:
//   Output[b,c,m,n] = AScale[m] * BScale[n] * sum_k (A[m,k] - AZP[m]) * (B[k,n] - BZP[n]) + Bias[m,n]
//
// Every operand byte becomes a signed byte a' (unsigned inputs: a ^ 0x80 = a - 128, and the same
// for their zero points), so one s8 x s8 -> s32 shape serves all four signedness pairs:
//   sum_k (a' - za')(b' - zb') = S - zb' * RA - za' * CB + K * za' * zb'
// with S = sum_k a'b' (the cooperative matrices), RA[m] = sum_k a'[m,k] and CB[n] = sum_k b'[k,n]
// (a k-contiguous operand's summed from its staging registers as they are stored, RSUM=1, or by
// OpSDot where the device has integer dot products, RSUM=2: variants mmc8s_*; the
// other layout's from the shared-memory tiles while the tensor cores work). The whole expression is
// evaluated in wrapping 32-bit integers: |true value| <= K * 255^2 < 2^31 for K <= 33025 (the
// dispatcher sends larger K to another family), so the int32 result is exact; it is converted to
// float once and scaled: float(v) * (AScale * BScale) + Bias, without contraction (`precise`).
//
// Work: a work group computes a BM x BN output tile; its WG / SG subgroups each own a WM x WN block
// of 16 x 16 int32 accumulators (KSPLIT > 1, few rows: KSPLIT groups of them, each multiplying its
// share of every step's K, their accumulators added in the epilogue). K advances BK at a time
// through STAGES shared-memory stages (global -> registers for step s + 1 while the tensor cores
// consume step s; two stages: one barrier per step; one stage, for a BK whose two stages exceed the
// shared memory: two). Tiles are k-contiguous, 16 k per uvec4, rows skewed by 16 bytes (A
// row-major, B column-major: the tensor cores' native int8 layouts); `_?n` keeps a row-major B
// row-major. Tile sizes: specialization constants (kompute_dml/ops/matmul_coop.py picks them);
// variants: load modes per operand (A: r k-contiguous, c m-contiguous, g any; B: r / n
// n-contiguous, c, g). Push: MATMUL_PUSH (matmul_push.glsl).
// Without tensor cores (MMA=1, 2; matmul_coop_mma.glsl) each cooperative-matrix operation is subgroup
// code on the same tiles: `mmc8d_*` (family `dot`) with OpSDot, `mmc8x_*` (`coopmat-emulated`) byte
// products, no device feature: the tests run the whole kernel around the tensor-core calls anywhere.
// ABL, PIPE, FAST, LDV and RSUM=0 build the ablations of `_rc` that bench_coop.py --ablate times
// (benchmarks/overlay_ablation.py, a benchmark-only overlay; never dispatched): ABL=1 no global
// loads, 2 no fragment loads, 3 neither nor MMAs, 4 no epilogue (all wrong by design); exact: 5 a
// runtime epilogue loop, PIPE=1 loads consumed at the load (matmul_coop_load.glsl), PIPE=3 loads
// two steps ahead in two register sets (default PIPE=2: one step), FAST=0 no interior fast path.

#ifndef MMA
#define MMA 0                                      // 0 cooperative matrices, 1 emulated, 2 OpSDot
#endif
#ifndef ABL
#define ABL 0                                      // ablation (see above); 0: the real kernel
#endif
#if MMA == 0
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#endif
#if MMA == 2 || (defined(RSUM) && RSUM == 2)
#extension GL_EXT_spirv_intrinsics : require
#endif
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 256;      // invocations per work group = (BM/WM)*(BN/WN)*SG
layout(constant_id = 1) const uint BM = 128;      // tile rows (multiple of WM)
layout(constant_id = 2) const uint BN = 128;      // tile columns (multiple of WN)
layout(constant_id = 3) const uint BK = 64;       // K per step (multiple of 32)
layout(constant_id = 4) const uint WM = 64;       // subgroup block rows (multiple of 16)
layout(constant_id = 5) const uint WN = 32;       // subgroup block columns (multiple of 16)
layout(constant_id = 6) const uint SG = 32;       // subgroup size
layout(constant_id = 7) const uint GROUP_M = 8;   // tile rows walked together (L2 reuse)
layout(constant_id = 8) const uint STAGES = 2;    // shared-memory stages: 2 or 1
layout(constant_id = 9) const uint KFLAGS = 0u;   // bit 31 set: the F_* flags, fixed at pipeline creation
layout(constant_id = 10) const uint KSPLIT = 1u;  // subgroups along K: each multiplies BK / KSPLIT of a step

const uint FM = WM / 16u, FN = WN / 16u;          // accumulators per subgroup: FM x FN
const uint SGM = BM / WM;                         // subgroups along M
const uint SGMN = SGM * (BN / WN);                // subgroups of one K share (KSPLIT of them)
const uint KK = BK / 32u / KSPLIT;                // k fragments per subgroup and step
const uint KS = BK / 16u + 1u;                    // k-contiguous tile row stride, uvec4
const uint A_TILE = BM * KS;
#if BL == 3
const uint BS = BN / 16u + 1u;                    // row-major B tile row stride, uvec4
const uint B_TILE = BK * BS;
#else
const uint BS = 0u;
const uint B_TILE = BN * KS;
#endif
const uint B_BASE = STAGES * A_TILE;              // the stages of A, then those of B; after the
shared uvec4 smem[STAGES * (A_TILE + B_TILE)];    // K loop, 16 x 16 int32 staging per subgroup
shared int sumA[BM];                              // RA of the tile's rows
shared int sumB[BN];                              // CB of the tile's columns

layout(std430, binding = 0) readonly buffer ABuf { uint a_buf[]; };
layout(std430, binding = 0) readonly buffer ABuf4 { uvec4 a_buf4[]; };
layout(std430, binding = 1) readonly buffer ASBuf { uint as_buf[]; };
layout(std430, binding = 2) readonly buffer AZBuf { uint azp_buf[]; };
layout(std430, binding = 3) readonly buffer BBuf { uint b_buf[]; };
layout(std430, binding = 3) readonly buffer BBuf4 { uvec4 b_buf4[]; };
layout(std430, binding = 4) readonly buffer BSBuf { uint bs_buf[]; };
layout(std430, binding = 5) readonly buffer BZBuf { uint bzp_buf[]; };
layout(std430, binding = 6) readonly buffer BiasBuf { uint bias_buf[]; };
layout(std430, binding = 7) buffer OutBuf { uint out_buf[]; };
layout(std430, binding = 7) buffer OutBuf2 { uvec2 out_buf2[]; };

KDML_PUSH_BLOCK  // push constants: MATMUL_PUSH of kompute_dml/ops/contract (generated by the build)
#include "matmul_push.glsl"

#if defined(RSUM) && RSUM == 2
// RSUM=2 (mmc8s_*, mmc8d_*): a staging register's zero-point sum by OpSDot with ones (4 per uvec4),
// fewer instructions than RSUM=1's 16-bit lanes; the policy takes it where the device has integer
// dot products (kompute_dml/policy.py, COOP_SUMS, with the figures)
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int rsum_sdot4(uint a, uint b, spirv_literal int packed_format);
#endif

#define F_SUM_A 0x20000000u
#define F_SUM_B 0x40000000u

// ---- operand staging (matmul_coop_load.glsl once per operand: load_a, store_a, ..., load_b, ...) ---
#define LD_MODE AL
#define LD_OP a
#define LD_TMN BM
#define LD_BUF a_buf
#define LD_BUF4 a_buf4
#define LD_SUMS sumA
#include "matmul_coop_load.glsl"
#define LD_MODE BL
#define LD_OP b
#define LD_TMN BN
#define LD_BUF b_buf
#define LD_BUF4 b_buf4
#define LD_SUMS sumB
#include "matmul_coop_load.glsl"

// ---- the cooperative-matrix operations, or their replacements (shaders/matmul_coop_mma.glsl) -----
#include "matmul_coop_mma.glsl"

// ---- epilogue helpers -------------------------------------------------------------------------
int s8(uint byte) { return int(byte << 24u) >> 24; }

// A FLOAT32 or FLOAT16 element (scales, bias) at element index idx.
float load_real(uint word, uint idx, bool f16) {
    return f16 ? unpackHalf2x16(word >> ((idx & 1u) * 16u)).x : uintBitsToFloat(word);
}
#define LOAD_REAL(buf, idx, f16) load_real(buf[(f16) ? ((idx) >> 1u) : (idx)], (idx), (f16))
#define ZP(buf, idx) bitfieldExtract(buf[(idx) >> 2u], int(8u * ((idx) & 3u)), 8)

void store_one(uint o, float v, bool f16) {
    if (f16) {
        uint h = packHalf2x16(vec2(v, 0.0)) & 0xFFFFu;
        uint sh = (o & 1u) * 16u;
        STORE_FIELD(out_buf, o >> 1u, sh, 16u, h);
    } else {
        out_buf[o] = floatBitsToUint(v);
    }
}

// One step's fragment loads and multiply-adds on the shared stage at a_tile / b_tile (in main: acc,
// kz, wm0, wn0)
#if BL == 3
#define LOAD_B_KK(fb, b_tile, kk, j) LOAD_B(fb, b_tile + 32u * (kk) * BS + (wn0 + 16u * (j)) / 16u, BS, LAYOUT_ROW)
#else
#define LOAD_B_KK(fb, b_tile, kk, j) LOAD_B(fb, b_tile + (wn0 + 16u * (j)) * KS + 2u * (kk), KS, LAYOUT_COL)
#endif
#define MMA_STEP(a_tile, b_tile) \
        [[unroll]] for (uint k2 = 0u; k2 < KK; ++k2) { \
            const uint kk = kz * KK + k2; \
            A_FRAG fa[FM]; \
            [[unroll]] for (uint i = 0u; i < FM; ++i) \
                LOAD_A(fa[i], (a_tile) + (wm0 + 16u * i) * KS + 2u * kk, KS); \
            [[unroll]] for (uint j = 0u; j < FN; ++j) { \
                B_FRAG fb; \
                LOAD_B_KK(fb, (b_tile), kk, j); \
                [[unroll]] for (uint i = 0u; i < FM; ++i) acc[i * FN + j] = MULADD(fa[i], fb, acc[i * FN + j]); \
            } \
        }

void main() {
    const uint M = LO28(pc.m), N = LO28(pc.n), K = LO28(pc.k), C = CHANNELS(pc.c_flags);
    const uint flags = ((KFLAGS & 0x80000000u) != 0u) ? KFLAGS : pc.c_flags;   // KFLAGS: XOR, sums folded
    const uint T = matrix_count();
    const bool f16 = (flags & F_F16) != 0u;
    const uint a_xe = ((flags & F_A_SIGNED) != 0u) ? 0u : 0x80u;   // unsigned -> signed byte
    const uint b_xe = ((flags & F_B_SIGNED) != 0u) ? 0u : 0x80u;
    const bool need_ra = (flags & F_SUM_A) != 0u, need_cb = (flags & F_SUM_B) != 0u;

    // tile of this work group: matrices outermost, then groups of GROUP_M tile rows walked
    // column by column so that neighbouring work groups share A rows and B columns in L2
    const uint NT = (N + BN - 1u) / BN, MT = (M + BM - 1u) / BM;
    const uint L = linear_group_id();
    const uint bc = L / (NT * MT);
    if (bc >= T) return;   // a folded grid over-covers; uniform over the work group
    const uint q = L % (NT * MT);
    const uint group = q / (GROUP_M * NT), first_m = group * GROUP_M;
    const uint rows_in_group = min(MT - first_m, GROUP_M);
    const uint mt = first_m + (q % (GROUP_M * NT)) % rows_in_group;
    const uint nt = (q % (GROUP_M * NT)) / rows_in_group;
    const uint m0 = mt * BM, n0 = nt * BN;
    const uint bi = bc / C, ci = bc % C;
    const uint a_base = pc.a_off + bi * LO28(pc.a_sb) + ci * LO28(pc.a_sc);
    const uint b_base = pc.b_off + bi * pc.b_sb + ci * pc.b_sc;

    const uint sg = gl_SubgroupID;
    // KSPLIT > 1 (few rows, long K): subgroup kz multiplies the k fragments kz * KK ... of every
    // step, so a work group keeps KSPLIT times the bytes of one output tile in flight; the K
    // shares' accumulators are added in the epilogue
    const uint kz = (KSPLIT == 1u) ? 0u : sg / SGMN, sgmn = (KSPLIT == 1u) ? sg : sg % SGMN;
    const uint wm0 = (sgmn % SGM) * WM, wn0 = (sgmn / SGM) * WN;
    const uint tid = gl_LocalInvocationID.x;

    for (uint i = tid; i < BM; i += WG) sumA[i] = 0;
    for (uint i = tid; i < BN; i += WG) sumB[i] = 0;
    [[unroll]] for (uint i = 0u; i < part_a.length(); ++i) part_a[i] = 0;
    [[unroll]] for (uint i = 0u; i < part_b.length(); ++i) part_b[i] = 0;

    ACC_TYPE acc[FM * FN];
    [[unroll]] for (uint i = 0u; i < FM * FN; ++i) acc[i] = ACC_ZERO;

    const uint steps = (K + BK - 1u) / BK;
    setup_a(a_base, LO28(pc.a_sm), LO28(pc.a_sk), m0);   // the fast path's per-invocation offsets, once
    setup_b(b_base, pc.b_sn, pc.b_sk, n0);
    // step t: global -> register set `slot` -> shared stage t % STAGES
#define LOAD_STEP(slot, t) { load_a(slot, a_base, LO28(pc.a_sm), LO28(pc.a_sk), M, K, m0, (t) * BK, a_xe); \
                             load_b(slot, b_base, pc.b_sn, pc.b_sk, N, K, n0, (t) * BK, b_xe); }
#define STORE_STEP(slot, t) { store_a(slot, ((t) % STAGES) * A_TILE, M, K, m0, (t) * BK, a_xe STORE_SUM(need_ra)); \
                              store_b(slot, B_BASE + ((t) % STAGES) * B_TILE, N, K, n0, (t) * BK, b_xe STORE_SUM(need_cb)); }
    LOAD_STEP(0u, 0u)
    STORE_STEP(0u, 0u)
#if PIPE == 3   // step t's loads in register set t & 1; step 1's in flight from here on
    if (ABL != 1 && steps > 1u) LOAD_STEP(1u, 1u)
#endif
    barrier();

#if ABL == 2   // the first step's fragments, reused by every step
    A_FRAG fa0[FM];
    B_FRAG fb0[FN];
    [[unroll]] for (uint i = 0u; i < FM; ++i) LOAD_A(fa0[i], (wm0 + 16u * i) * KS, KS);
    [[unroll]] for (uint j = 0u; j < FN; ++j) LOAD_B(fb0[j], B_BASE + (wn0 + 16u * j) * KS, KS, LAYOUT_COL);
#endif
    for (uint s = 0u; s < steps; ++s) {
        const uint cur = s % STAGES, par = s & 1u;   // shared stage; register set (PIPE 3)
        const uint a_tile = cur * A_TILE, b_tile = B_BASE + cur * B_TILE;
        const bool more = ABL != 1 && s + 1u < steps;   // ablation 1: the first tile only
#if PIPE == 3   // two steps ahead: loads in flight during this step's and the next step's MMAs
        if (ABL != 1 && s + 2u < steps) { if (par == 0u) LOAD_STEP(0u, s + 2u) else LOAD_STEP(1u, s + 2u) }
#else   // the next step's loads are in flight while this step computes (until STORE_STEP)
        if (more) LOAD_STEP(0u, s + 1u)
#endif
        if (need_ra) sum_a(a_tile);
        if (need_cb) sum_b(b_tile);
#if ABL == 2
        [[unroll]] for (uint kk = 0u; kk < BK / 32u; ++kk)
            [[unroll]] for (uint j = 0u; j < FN; ++j)
                [[unroll]] for (uint i = 0u; i < FM; ++i) acc[i * FN + j] = MULADD(fa0[i], fb0[j], acc[i * FN + j]);
#elif ABL != 3
        MMA_STEP(a_tile, b_tile)
#endif
        if (STAGES == 1u) barrier();   // one stage: read by every subgroup before it is rewritten
#if PIPE == 3   // constant register-set indices (a runtime one would put the sets in local memory)
        if (more) { if (par == 0u) STORE_STEP(1u, s + 1u) else STORE_STEP(0u, s + 1u) }
#else
        if (more) STORE_STEP(0u, s + 1u)
#endif
        barrier();
    }
    if (need_ra) flush_a();
    if (need_cb) flush_b();
    barrier();   // sums complete; the tiles are free for the accumulator staging
    const uint lane = gl_SubgroupInvocationID, stage = sg * 64u;   // this subgroup's 16 x 16 int32 staging

    if (KSPLIT > 1u) {   // every K share's accumulators staged; the first share adds them up below
        [[unroll]] for (uint i = 0u; i < FM * FN; ++i) STORE_ACC(acc[i], (sg * FM * FN + i) * 64u, 4u);
        barrier();
        if (kz != 0u) return;   // (no barrier follows)
    }
#if ABL == 4   // no epilogue: the int32 sums of whole 16 x 16 blocks stored as they are
    [[unroll]] for (uint i = 0u; i < FM; ++i) [[unroll]] for (uint j = 0u; j < FN; ++j) {
        const uint m = m0 + wm0 + 16u * i, n = n0 + wn0 + 16u * j;
        if (m + 16u <= M && n + 16u <= N) coopMatStore(acc[i * FN + j], out_buf, pc.out_off + m * pc.o_sm + n, pc.o_sm, LAYOUT_ROW);
    }
    return;
#endif
    // ---- epilogue: each accumulator through this subgroup's 16 x 16 staging, two columns per step.
    // Tensor cores: the pair loop has a fixed trip count, unrolled (a runtime loop inside may keep
    // the accumulator loops rolled, and one accumulator indexed at run time puts all in local memory)
    const uint o_base = pc.out_off + bi * pc.o_sb + ci * pc.o_sc;
    const uint bias_base = pc.bias_off + bi * pc.bi_sb + ci * pc.bi_sc;
    const uint o_sn = pc.o_sn;
    [[unroll]] for (uint i = 0u; i < FM; ++i) {
        [[unroll]] for (uint j = 0u; j < FN; ++j) {
            if (KSPLIT == 1u) {
                STORE_ACC(acc[i * FN + j], stage, 4u);
                subgroupMemoryBarrierShared(); subgroupBarrier();
            }
#if MMA == 0 && ABL != 5
            [[unroll]] for (uint t = 0u; t < 128u / SG; ++t) {
                const uint p = lane + t * SG;
#else
            for (uint p = lane; p < 128u; p += gl_SubgroupSize) {
#endif
                const uint r = p >> 3u, c = (p & 7u) * 2u;
                const uint ml = wm0 + 16u * i + r, nl = wn0 + 16u * j + c;
                const uint m = m0 + ml, n = n0 + nl;
                if (m >= M || n >= N) continue;
                uvec4 quad;   // wrapping sums: int32 arithmetic
                if (KSPLIT == 1u) {
                    quad = smem[stage + r * 4u + (c >> 2u)];
                } else {
                    quad = uvec4(0u);
                    [[unroll]] for (uint z = 0u; z < KSPLIT; ++z)
                        quad += smem[((z * SGMN + sgmn) * FM * FN + i * FN + j) * 64u + r * 4u + (c >> 2u)];
                }
                const int za = s8((ZP(azp_buf, pc.azp_off + m * pc.azp_s) ^ a_xe) & 0xFFu);
                const int ra = sumA[ml] - int(K) * za;   // RA - K za', wrapping
                const float asc = LOAD_REAL(as_buf, pc.as_off + m * pc.as_s, f16);
                const bool both = n + 1u < N;
                float val[2];
                [[unroll]] for (uint e = 0u; e < 2u; ++e) {
                    const uint ne = min(n + e, N - 1u);
                    const int zb = s8((ZP(bzp_buf, pc.bzp_off + ne * pc.bzp_s) ^ b_xe) & 0xFFu);
                    const int v = int(quad[(c & 3u) + e]) - zb * ra - za * sumB[nl + e];
                    const float bsc = LOAD_REAL(bs_buf, pc.bs_off + ne * pc.bs_s, f16);
                    const float bias = LOAD_REAL(bias_buf, bias_base + m * pc.bi_sm + ne * pc.bi_sn, f16);
                    precise float prod = float(v) * (asc * bsc);
                    precise float res = prod + bias;
                    val[e] = res;
                }
                const uint o = o_base + m * pc.o_sm + n * o_sn;
                if (both && o_sn == 1u && (o & 1u) == 0u) {
                    // both elements of one 32-bit (FLOAT16) or 64-bit (FLOAT32) unit are ours
                    if (f16) out_buf[o >> 1u] = packHalf2x16(vec2(val[0], val[1]));
                    else out_buf2[o >> 1u] = floatBitsToUint(vec2(val[0], val[1]));
                } else {
                    store_one(o, val[0], f16);
                    if (both) store_one(o + o_sn, val[1], f16);
                }
            }
            subgroupBarrier();   // the staging is rewritten by the next accumulator
        }
    }
}
