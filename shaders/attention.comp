#version 450
// DirectML MULTIHEAD_ATTENTION / MULTIHEAD_ATTENTION1 (kompute_dml/ops/attention.py,
// docs/attention.md): for every batch b, query head h and query row i,
//   s_j = (q_i . k_j) * Scale [+ RelativePositionBias[b, h, i, j]] [+ MaskFilterValue where masked]
//   out[b, i, h, :] = sum_j softmax(s)_j v_j
// over the keys j of the batch's sequence: its past rows, then its new ones (bias added to query,
// key and value first). Keys past the batch's sequence (MULTIHEAD_ATTENTION1's past sequence
// lengths) and, where causal, past total - seq + i take no part. Key / value head h / group.
// Arithmetic in float32 (FLOAT16 decoded exactly, rounded once at the store): the dot products as
// fused multiply-adds over d in order, online softmax (running max m, sum l, accumulators rescaled
// by exp(m_old - m_new)), exp by gelu_math.glsl's basic-arithmetic kdml_exp_le0. A row whose scores
// hold a NaN or +inf, or only -inf, gives NaN (the formula's float64 result).
//
// KERNEL 0 (mha_tiled, GPUs): a work group of 128 per (b, h, block of BQ query rows): the query
// block in shared memory, then per tile of BK keys: the key tile (shared), each invocation's
// SPT scores of its row, the row's tile max and sum over its TPR invocations (shared), the value
// tile over the key tile's storage, and each invocation's OPT accumulators of its row.
// KERNEL 1 (mha_rows, CPU devices and head sizes past DMAX): an invocation per query row and
// chunk of DC value dimensions, the keys in order, everything in registers.
// KERNEL 6 (mha_blocked, GPUs: problems of many query rows the tensor-core kernel does not take):
// a work group per (b, h, block of BQ query rows), each invocation a 4 x 4 block of the scores
// and of the accumulators, the query block, key, value and weight tiles in shared memory.
// KERNEL 2 (mha_present): an invocation per element pair of the present key and value: the past
// rows, the new rows (with their bias), zeros past the batch's sequence.
//
// Strides (elements; 4-byte words for the mask and the past sequence lengths) come from the
// operator's geometry constant, binding 12: per tensor its extra base and its batch, head,
// sequence and head-dimension strides (G_*), the push block (MHA_PUSH) the offsets and sizes.

#extension GL_GOOGLE_include_directive : require
#if KERNEL == 4
#ifndef MMA
#define MMA 0
#endif
#if MMA == 0
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "f16_bits.glsl"
#include "gelu_math.glsl"

#ifndef SPLIT
#define SPLIT 0
#endif
#ifndef ABL  // benchmarks/overlay_attention.py's ablations of the tensor-core kernel (0: none)
#define ABL 0
#endif
#ifndef NOPF  // the blocked kernel: key / value tiles loaded where stored (no register prefetch a phase ahead)
#define NOPF 0
#endif
#ifndef SGMAX  // the blocked kernel: a row's tile maximum over its invocations by subgroup shuffles
#define SGMAX 0
#endif
#if KERNEL == 6 && SGMAX
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#ifndef HALFP  // the tensor-core kernel's weights as one float16 each, exp by the device (allow_half_precision)
#define HALFP 0
#endif
#if KERNEL == 0
layout(local_size_x = 128) in;
#elif KERNEL == 4
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;  // invocations: 4 subgroups of 16 query rows each
layout(constant_id = 1) const uint SG = 32;   // subgroup size (BK, keys per tile, and DMAX: defines)
#elif KERNEL == 1
layout(local_size_x = 64) in;
#elif KERNEL == 6
layout(local_size_x = BQ / 4 * BK / 4) in;
#else
layout(local_size_x = 256) in;
#endif

layout(std430, binding = 0) readonly buffer QBuf { uint q_buf[]; };
layout(std430, binding = 1) readonly buffer KBuf { uint k_buf[]; };
layout(std430, binding = 2) readonly buffer VBuf { uint v_buf[]; };
layout(std430, binding = 3) readonly buffer BBuf { uint b_buf[]; };
layout(std430, binding = 4) readonly buffer MBuf { uint m_buf[]; };
layout(std430, binding = 5) readonly buffer RBuf { uint r_buf[]; };
layout(std430, binding = 6) readonly buffer PKBuf { uint pk_buf[]; };
layout(std430, binding = 7) readonly buffer PVBuf { uint pv_buf[]; };
layout(std430, binding = 8) readonly buffer LBuf { uint l_buf[]; };
layout(std430, binding = 9) buffer OBuf { uint o_buf[]; };
layout(std430, binding = 10) buffer PRKBuf { uint prk_buf[]; };
layout(std430, binding = 11) buffer PRVBuf { uint prv_buf[]; };
layout(std430, binding = 12) readonly buffer GBuf { uint g[]; };
#if SPLIT || KERNEL == 3
// the split partials: per (batch, head, query row, split) its maximum m, sum l (NaN: a NaN / +inf
// score), then the value head size's unnormalized accumulators
layout(std430, binding = 13) buffer SBuf { uint s_buf[]; };
#endif

KDML_PUSH_BLOCK  // MHA_PUSH of kompute_dml/ops/contract/attention.py (generated by the build)

// the geometry constant: 5 words per tensor (base, batch, head, sequence, head-dimension strides)
#define G_Q 0
#define G_K 5
#define G_V 10
#define G_PK 15
#define G_PV 20
#define G_O 25
#define G_PRK 30
#define G_PRV 35
#define G_RB 40
#define G_MK 45
#define G_BIAS 50  // query, key and value bases, the stride along the bias
#define G_PSL 55   // base, batch stride

#define F_BIAS 1u
#define F_RB 2u
#define F_PAST 4u
#define F_PSL 8u
#define F_CAUSAL 16u
#define F_PSL_UNSIGNED 32u
#define F_PRESENT_K 64u
#define F_PRESENT_V 128u
#define F_NEW_KV 256u

#define NEG_INF uintBitsToFloat(0xFF800000u)
#define POS_INF uintBitsToFloat(0x7F800000u)
#define QNAN uintBitsToFloat(0x7FC00000u)

#if BITS == 32
#define EPT 1u
#define LD(buf, e) uintBitsToFloat(buf[e])
#else
#define EPT 2u
#define LD(buf, e) uintBitsToFloat(h2f(bitfieldExtract(buf[(e) >> 1], int(((e) & 1u) * 16u), 16)))
#endif

bool has(uint f) { return (pc.flags & f) != 0u; }

// the geometry constant, read once (load_geometry): every element address below is then arithmetic
// on shared (tiled: once per work group) or private words, not a buffer load per word
#if KERNEL == 0 || KERNEL == 4
shared uint geo[60];

void load_geometry() {  // in uniform control flow: it ends with a barrier
    for (uint w = gl_LocalInvocationID.x; w < 60u; w += gl_WorkGroupSize.x) geo[w] = g[w];
    barrier();
}
#elif KERNEL == 6
#define geo g  // read where used (cached): the shared memory is the tiles'
#else
uint geo[60];

void load_geometry() {
    for (uint w = 0u; w < 60u; ++w) geo[w] = g[w];
}
#endif

uint at(uint gb, uint b, uint h, uint s, uint d) {
    return geo[gb] + b * geo[gb + 1] + h * geo[gb + 2] + s * geo[gb + 3] + d * geo[gb + 4];
}

float add_bias(float v, uint base, uint k) {
    if (!has(F_BIAS)) return v;
    precise float s = v + LD(b_buf, pc.bias_off + geo[G_BIAS + base] + k * geo[G_BIAS + 3]);
    return s;
}

// the past rows batch b keeps: the past tensor's rows, or (MULTIHEAD_ATTENTION1) its past
// sequence length, clamped to [0, past]
uint past_len(uint b) {
    if (!has(F_PAST)) return 0u;
    if (!has(F_PSL)) return pc.past;
    uint w = l_buf[pc.psl_off + geo[G_PSL] + b * geo[G_PSL + 1]];
    if (!has(F_PSL_UNSIGNED) && int(w) < 0) return 0u;
    return min(w, pc.past);
}

float query_at(uint b, uint h, uint i, uint d) {
    return add_bias(LD(q_buf, pc.q_off + at(G_Q, b, h, i, d)), 0u, h * pc.dqk + d);
}

// key / value row j of batch b (the past's first pb rows, then the new ones)
float key_at(uint b, uint hk, uint j, uint pb, uint d) {
    if (j < pb) return LD(pk_buf, pc.pk_off + at(G_PK, b, hk, j, d));
    return add_bias(LD(k_buf, pc.k_off + at(G_K, b, hk, j - pb, d)), 1u, hk * pc.dqk + d);
}

float value_at(uint b, uint hk, uint j, uint pb, uint d) {
    if (j < pb) return LD(pv_buf, pc.pv_off + at(G_PV, b, hk, j, d));
    return add_bias(LD(v_buf, pc.v_off + at(G_V, b, hk, j - pb, d)), 2u, hk * pc.dv + d);
}

// the keys batch b attends: its past rows and the new ones
uint key_rows(uint pb) { return pb + (has(F_NEW_KV) ? pc.kv_seq : 0u); }

// the last key query row i attends where causal (total - seq + i; -1: none)
int causal_last(uint total, uint i) {
    return (has(F_CAUSAL) || has(F_PSL)) ? int(total) - int(pc.seq) + int(i) : int(total) - 1;
}

bool masked(uint b, uint h, uint i, uint j) {
    uint t = pc.mask_type;
    if (t == 0u) return false;
    uint base = pc.mask_off + geo[G_MK];
    if (t == 4u) return int(m_buf[base + at(G_MK, b, h, i, j) - geo[G_MK]]) <= 0;  // (negatives: onnxruntime's)
    int end = int(m_buf[base + b * geo[G_MK + 1]]);
    int start = t == 2u ? int(m_buf[base + geo[G_MK + 3] + b * geo[G_MK + 1]]) : 0;
    return int(j) >= end || int(j) < start;
}

// the score's additive terms after the scaled product
float score(float dot, uint b, uint h, uint i, uint j) {
    precise float s = dot * pc.scale;
    if (has(F_RB)) s = s + LD(r_buf, pc.rb_off + at(G_RB, b, h, i, j));
    if (masked(b, h, i, j)) s = s + pc.mask_filter;
    return s;
}

bool bad_score(float s) { return kdml_is_nan(s) || s == POS_INF; }

// result element written: FLOAT32 as is; FLOAT16 pairs (d, d + 1) as one word where they are one
// aligned word, else each with STORE_FIELD
void store_out(uint e0, uint e1, float v0, float v1, bool two) {
#if BITS == 32
    o_buf[e0] = floatBitsToUint(v0);
    if (two) o_buf[e1] = floatBitsToUint(v1);
#else
    uint h0 = f2h(floatBitsToUint(v0));
    if (two) {
        uint h1 = f2h(floatBitsToUint(v1));
        if ((e0 & 1u) == 0u && e1 == e0 + 1u) {
            o_buf[e0 >> 1] = h0 | (h1 << 16);
            return;
        }
        STORE_FIELD(o_buf, e1 >> 1, (e1 & 1u) * 16u, 16u, h1);
    }
    STORE_FIELD(o_buf, e0 >> 1, (e0 & 1u) * 16u, 16u, h0);
#endif
}

#if KERNEL == 0
// ---- tiled ----------------------------------------------------------------------------------
#define WG 128u
#define TPR (WG / uint(BQ))            // invocations per query row
#define SPT (uint(BK) / TPR)           // scores per invocation and tile
#define UPT (uint(DMAX) / (TPR * EPT)) // accumulator units (EPT elements) per invocation
#define KS (uint(DMAX) + 1u)           // a key / value row in shared memory (padded: no bank conflicts)
#define QS (uint(DMAX) + 1u)           // a query row, padded: a warp's 4 rows read 4 banks
#define PS (uint(BK) + 1u)             // a row's weights, padded likewise
shared float qs[BQ * (DMAX + 1)];
shared float ks[BK * (DMAX + 1)];
shared float ps[BQ * (BK + 1)];
shared float red[WG];

void main() {
    uint gid = linear_group_id();
    if (gid >= pc.batch * pc.heads * pc.blocks * pc.splits) return;  // the whole group (uniform)
    load_geometry();
    uint sp = gid % pc.splits;
    gid /= pc.splits;
    uint qb = gid % pc.blocks, bh = gid / pc.blocks;
    uint h = bh % pc.heads, b = bh / pc.heads, hk = h / pc.group;
    uint t = gl_LocalInvocationID.x, r = t / TPR, lane = t % TPR;
    uint i = qb * uint(BQ) + r;
    bool row_ok = i < pc.seq;
    uint pb = past_len(b);
    uint total = key_rows(pb);
    uint last_row = min(qb * uint(BQ) + uint(BQ), pc.seq) - 1u;
    uint kend = uint(clamp(causal_last(total, last_row) + 1, 0, int(total)));  // keys the block reads
#if SPLIT
    uint kbeg = min(sp * pc.chunk, kend);  // this work group's chunk of them
    kend = min(kbeg + pc.chunk, kend);
#else
    uint kbeg = 0u;
#endif
    int climit = causal_last(total, i);
    for (uint e = t; e < uint(BQ * DMAX); e += WG) {
        uint rr = e / uint(DMAX), d = e % uint(DMAX), ii = qb * uint(BQ) + rr;
        qs[rr * QS + d] = (ii < pc.seq && d < pc.dqk) ? query_at(b, h, ii, d) : 0.0;
    }
    float m = NEG_INF, l = 0.0;
    bool bad = false;
    precise float acc[UPT * EPT];  // precise: the rescaling stays a rounded product
    for (uint u = 0u; u < UPT * EPT; ++u) acc[u] = 0.0;
    for (uint j0 = kbeg; j0 < kend; j0 += uint(BK)) {
        barrier();  // the previous tile's values (and, first, the query block) are done with
        for (uint e = t; e < uint(BK * DMAX); e += WG) {
            uint c = e / uint(DMAX), d = e % uint(DMAX), j = j0 + c;
            ks[c * KS + d] = (j < kend && d < pc.dqk) ? key_at(b, hk, j, pb, d) : 0.0;
        }
        barrier();
        // the SPT dot products side by side, each query element read once for them (each in d order)
        precise float dots[SPT];
        [[unroll]] for (uint s = 0u; s < SPT; ++s) dots[s] = 0.0;
        for (uint d = 0u; d < pc.dqk; ++d) {
            float qv = qs[r * QS + d];
            [[unroll]] for (uint s = 0u; s < SPT; ++s) dots[s] = fma(qv, ks[(lane + s * TPR) * KS + d], dots[s]);
        }
        float sc[SPT];
        float tmax = NEG_INF;
        for (uint s = 0u; s < SPT; ++s) {
            uint c = lane + s * TPR, j = j0 + c;
            float v = NEG_INF;  // a key outside the row's attention: weight 0
            if (row_ok && j < kend && int(j) <= climit) {
                v = score(dots[s], b, h, i, j);
                bad = bad || bad_score(v);
            }
            sc[s] = v;
            if (!kdml_is_nan(v)) tmax = max(tmax, v);
        }
        red[t] = tmax;
        barrier();
        float mt = m;
        for (uint k = 0u; k < TPR; ++k) mt = max(mt, red[r * TPR + k]);
        precise float psum = 0.0;
        for (uint s = 0u; s < SPT; ++s) {
            float p = (mt == NEG_INF || kdml_is_nan(sc[s])) ? 0.0 : kdml_exp_le0(sc[s] - mt);
            ps[r * PS + lane + s * TPR] = p;
            psum += p;
        }
        barrier();  // every max read from red, every key read from ks
        red[t] = psum;
        for (uint e = t; e < uint(BK * DMAX); e += WG) {
            uint c = e / uint(DMAX), d = e % uint(DMAX), j = j0 + c;
            ks[c * KS + d] = (j < kend && d < pc.dv) ? value_at(b, hk, j, pb, d) : 0.0;
        }
        barrier();
        precise float tsum = 0.0;
        for (uint k = 0u; k < TPR; ++k) tsum += red[r * TPR + k];
        float alpha = (m == NEG_INF) ? 0.0 : kdml_exp_le0(m - mt);
        l = l * alpha + tsum;
        m = mt;
        // every accumulator rescaled, then the tile's weighted values in key order, each weight read
        // once for all of this invocation's accumulators (past the value head size: zeros, never stored)
        [[unroll]] for (uint u = 0u; u < UPT * EPT; ++u) acc[u] = acc[u] * alpha;
        for (uint c = 0u; c < uint(BK); ++c) {
            float p = ps[r * PS + c];
            [[unroll]] for (uint u = 0u; u < UPT; ++u)
                [[unroll]] for (uint e = 0u; e < EPT; ++e)
                    acc[u * EPT + e] = fma(p, ks[c * KS + (lane + u * TPR) * EPT + e], acc[u * EPT + e]);
        }
    }
    barrier();
    red[t] = bad ? 1.0 : 0.0;
    barrier();
    bool row_bad = false;
    for (uint k = 0u; k < TPR; ++k) row_bad = row_bad || red[r * TPR + k] != 0.0;
    if (!row_ok) return;
#if SPLIT
    uint base = ((((b * pc.heads + h) * pc.seq + i) * pc.splits) + sp) * (pc.dv + 2u);
    if (lane == 0u) {
        s_buf[base] = floatBitsToUint(m);
        s_buf[base + 1u] = floatBitsToUint(row_bad ? QNAN : l);
    }
    for (uint u = 0u; u < UPT; ++u) {
        for (uint e = 0u; e < EPT; ++e) {
            uint d = (lane + u * TPR) * EPT + e;
            if (d < pc.dv) s_buf[base + 2u + d] = floatBitsToUint(acc[u * EPT + e]);
        }
    }
    return;
#endif
    row_bad = row_bad || l == 0.0;
    float inv = 1.0 / l;
    for (uint u = 0u; u < UPT; ++u) {
        uint d = (lane + u * TPR) * EPT;
        if (d >= pc.dv) continue;
        uint e0 = pc.o_off + at(G_O, b, h, i, d);
        bool two = EPT == 2u && d + 1u < pc.dv;
        uint e1 = two ? pc.o_off + at(G_O, b, h, i, d + 1u) : e0;
        store_out(e0, e1, row_bad ? QNAN : acc[u * EPT] * inv, row_bad ? QNAN : acc[u * EPT + EPT - 1u] * inv, two);
    }
}

#elif KERNEL == 1
// ---- rows -----------------------------------------------------------------------------------
#define QMAX 128  // query dimensions kept in registers (the rest read again per key)

// the dot product of the cached query (qv: its first qn dimensions) with key row j
float key_dot(float qv[QMAX], uint qn, uint b, uint h, uint hk, uint i, uint j, uint pb) {
    precise float dot = 0.0;
    if (j < pb) {
        uint kb = pc.pk_off + at(G_PK, b, hk, j, 0u), ks = geo[G_PK + 4];
        for (uint d = 0u; d < qn; ++d) dot = fma(qv[d], LD(pk_buf, kb + d * ks), dot);
    } else if (!has(F_BIAS)) {
        uint kb = pc.k_off + at(G_K, b, hk, j - pb, 0u), ks = geo[G_K + 4];
        for (uint d = 0u; d < qn; ++d) dot = fma(qv[d], LD(k_buf, kb + d * ks), dot);
    } else {
        for (uint d = 0u; d < qn; ++d) dot = fma(qv[d], key_at(b, hk, j, pb, d), dot);
    }
    for (uint d = qn; d < pc.dqk; ++d) dot = fma(query_at(b, h, i, d), key_at(b, hk, j, pb, d), dot);
    return dot;
}

void main() {
    uint n = linear_group_id() * 64u + gl_LocalInvocationID.x;
    uint chunk = n % pc.blocks;
    n /= pc.blocks;
    uint i = n % pc.seq;
    n /= pc.seq;
    uint h = n % pc.heads, b = n / pc.heads;
    if (b >= pc.batch) return;
    load_geometry();
    uint hk = h / pc.group, d0 = chunk * uint(DC), pb = past_len(b), total = key_rows(pb);
    uint dn = min(uint(DC), pc.dv - d0);  // this chunk's value dimensions
    uint kend = uint(clamp(causal_last(total, i) + 1, 0, int(total)));
    float qv[QMAX];
    uint qn = min(pc.dqk, uint(QMAX));
    for (uint d = 0u; d < qn; ++d) qv[d] = query_at(b, h, i, d);
    float m = NEG_INF, l = 0.0;
    bool bad = false;
    float acc[DC];
    for (uint e = 0u; e < uint(DC); ++e) acc[e] = 0.0;
    for (uint j = 0u; j < kend; ++j) {
        float s = score(key_dot(qv, qn, b, h, hk, i, j, pb), b, h, i, j);
        if (bad_score(s)) {
            bad = true;
            continue;
        }
        if (s == NEG_INF) continue;  // weight 0 (m stays -inf only while every score so far is)
        float alpha = 1.0, p = 1.0;
        if (s > m) {
            alpha = m == NEG_INF ? 0.0 : kdml_exp_le0(m - s);
            m = s;
        } else {
            p = kdml_exp_le0(s - m);
        }
        precise float ln = l * alpha + p;
        l = ln;
        if (j < pb) {
            uint vb = pc.pv_off + at(G_PV, b, hk, j, d0), vs = geo[G_PV + 4];
            for (uint e = 0u; e < dn; ++e) acc[e] = fma(p, LD(pv_buf, vb + e * vs), acc[e] * alpha);
        } else if (!has(F_BIAS)) {
            uint vb = pc.v_off + at(G_V, b, hk, j - pb, d0), vs = geo[G_V + 4];
            for (uint e = 0u; e < dn; ++e) acc[e] = fma(p, LD(v_buf, vb + e * vs), acc[e] * alpha);
        } else {
            for (uint e = 0u; e < dn; ++e) acc[e] = fma(p, value_at(b, hk, j, pb, d0 + e), acc[e] * alpha);
        }
    }
    bool row_bad = bad || l == 0.0;
    float inv = 1.0 / l;
    for (uint e = 0u; e < uint(DC); e += EPT) {
        uint d = d0 + e;
        if (d >= pc.dv) break;
        uint e0 = pc.o_off + at(G_O, b, h, i, d);
        bool two = EPT == 2u && d + 1u < pc.dv;
        uint e1 = two ? pc.o_off + at(G_O, b, h, i, d + 1u) : e0;
        store_out(e0, e1, row_bad ? QNAN : acc[e] * inv, row_bad ? QNAN : acc[e + EPT - 1u] * inv, two);
    }
}

#elif KERNEL == 4
// ---- tensor cores (FLOAT16 without bias; ops/attention.py's "coopmat" kernel) ---------------
// A work group of 4 subgroups per (b, h, block of 64 query rows), each subgroup 16 rows; its
// query rows as FD cooperative-matrix fragments (f16, loaded once). One pass over the key tiles of
// BK rows (key and value staged in shared memory as float16 bits, 8 per uvec4, rows padded by one
// uvec4): each row's scores S = Q K^T (f16 x f16 -> f32 fragments, through the subgroup's area of
// shared memory as float32 rows; scale, relative position bias and mask added by score(), as the
// other kernels do, or the scaled product alone in a plain tile: tile_full), the tile's row
// maximum, and the weights p = exp(s - m) in float32 (row sums l) against the row's reference
// maximum m, which moves only to a tile maximum past m + TAU (so p < e^TAU; the sum and the
// accumulators are then rescaled by exp(m_old - m_new), staged through the area); each p is
// written as two float16 parts (hi = p converted, lo = (p - hi) 2^12 converted: p to about 2^-21)
// and P_hi V and P_lo V are added to two sets of accumulators. The result (hi + lo 2^-12) / l.
// HALFP=1 (DirectML's half-precision flag, mhac16h_*): each p is the device's exp, scaled by 2^10
// and written as one float16 by the device's conversion (TAU 4: p 2^10 < e^4 2^10 < 65504, and a
// weight the conversion would flush is below 2^-24), one set of accumulators: P V 2^-10 / l.
// Lanes own rows lane % 16 (several lanes a row, reduced by shuffles) or, for subgroups of 8, two
// rows each, and pairs of adjacent keys.
// MMA=1: each cooperative-matrix operation as subgroup code (coop_f16_mma.glsl: exact products,
// sums over d in order), the lavapipe tests' path.
const uint R4 = WG / SG;                          // subgroups (4: ops/attention.py)
const uint BQ4 = 16u * R4;                        // query rows per work group
const uint FD = uint(DMAX) / 16u, FK = uint(BK) / 16u;
const uint KRS = uint(DMAX) / 8u + 1u;            // a query / key / value row: uvec4
const uint SRS = uint(BK) / 4u + 1u;              // a score row (float32)
const uint PRS = uint(BK) / 8u + 1u;              // a weight row (float16)
#ifndef OSTAGE
#define OSTAGE 4
#endif
const uint OF = FD < uint(OSTAGE) ? FD : uint(OSTAGE);  // output fragments staged at once
const uint ORS = 4u * OF + 1u;                    // an output staging row (float32)
const uint KT = uint(BK) * KRS;                   // a key (value) tile
const uint SA0 = 16u * SRS, SA1 = (HALFP != 0 ? 16u : 32u) * PRS;  // scores; weights (and their low parts)
const uint SGA = SA0 > SA1 ? SA0 : SA1;           // a subgroup's area
const uint SM0 = 2u * KT + R4 * SGA, SM1 = R4 * 16u * ORS, SM2 = BQ4 * KRS;
const uint SM01 = SM0 > SM1 ? SM0 : SM1;
shared uvec4 smem[SM01 > SM2 ? SM01 : SM2];
const uint LPR = SG >= 16u ? SG / 16u : 1u;       // lanes per row
const uint RL = SG >= 16u ? 1u : 16u / SG;        // rows per lane (at most 2: subgroups of 8 or more)
const uint CPL = uint(BK) / (2u * LPR);           // key pairs per lane and row

layout(std430, binding = 0) readonly buffer QBuf4 { uvec4 q_buf4[]; };
layout(std430, binding = 1) readonly buffer KBuf4 { uvec4 k_buf4[]; };
layout(std430, binding = 2) readonly buffer VBuf4 { uvec4 v_buf4[]; };
layout(std430, binding = 6) readonly buffer PKBuf4 { uvec4 pk_buf4[]; };
layout(std430, binding = 7) readonly buffer PVBuf4 { uvec4 pv_buf4[]; };

#define ACC_ZERO_BITS 0u
#include "coop_f16_mma.glsl"  // LOAD_A, LOAD_B, MULADD, STORE_ACC: tensor cores or emulated
#if MMA == 0
#define LANE_LOOP [[unroll]]  // bounds from the specialization constants: registers, not memory
#else
#define LANE_LOOP
#endif

#if BITS == 32
// FLOAT32 (allow_half_precision: HALFP): n (<= 8) elements of a row from element e0, stride ds,
// converted to float16 by the device (packHalf2x16) as one uvec4 (zeros past n): two 16-byte loads
// where the 8 lie aligned and contiguous
#define DEFINE_ROW8(NAME, BUF, BUF4)                                                               \
    uvec4 NAME(uint e0, uint ds, uint n) {                                                         \
        vec4 a = vec4(0.0), c = vec4(0.0);                                                         \
        if (ds == 1u && n == 8u && (e0 & 3u) == 0u) {                                              \
            a = uintBitsToFloat(BUF4[e0 >> 2]);                                                    \
            c = uintBitsToFloat(BUF4[(e0 >> 2) + 1u]);                                             \
        } else {                                                                                   \
            [[unroll]] for (uint t = 0u; t < 4u; ++t) {                                            \
                a[t] = t < n ? uintBitsToFloat(BUF[e0 + t * ds]) : 0.0;                            \
                c[t] = t + 4u < n ? uintBitsToFloat(BUF[e0 + (t + 4u) * ds]) : 0.0;                \
            }                                                                                      \
        }                                                                                          \
        return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(c.xy), packHalf2x16(c.zw)); \
    }
#else
// n (<= 8) float16 bits of a row from element e0, stride ds, as one uvec4 (zeros past n): a
// 16-byte load where the 8 lie aligned and contiguous
#define DEFINE_ROW8(NAME, BUF, BUF4)                                                               \
    uvec4 NAME(uint e0, uint ds, uint n) {                                                         \
        if (ds == 1u && n == 8u) {                                                                 \
            if ((e0 & 7u) == 0u) return BUF4[e0 >> 3];                                             \
            if ((e0 & 1u) == 0u) {                                                                 \
                uint w = e0 >> 1;                                                                  \
                return uvec4(BUF[w], BUF[w + 1u], BUF[w + 2u], BUF[w + 3u]);                       \
            }                                                                                      \
        }                                                                                          \
        uint hh[8];                                                                                \
        [[unroll]] for (uint t = 0u; t < 8u; ++t) {                                                \
            uint e = e0 + t * ds;                                                                  \
            hh[t] = t < n ? bitfieldExtract(BUF[e >> 1], int((e & 1u) << 4), 16) : 0u;            \
        }                                                                                          \
        return uvec4(hh[0] | (hh[1] << 16), hh[2] | (hh[3] << 16), hh[4] | (hh[5] << 16), hh[6] | (hh[7] << 16)); \
    }
#endif
DEFINE_ROW8(row8_q, q_buf, q_buf4)
DEFINE_ROW8(row8_k, k_buf, k_buf4)
DEFINE_ROW8(row8_v, v_buf, v_buf4)
DEFINE_ROW8(row8_pk, pk_buf, pk_buf4)
DEFINE_ROW8(row8_pv, pv_buf, pv_buf4)

// the key tile (and the value tile after it) of keys j0 .. j0 + BK - 1: zeros past kend and past
// the head sizes (loading the next tile into registers under the current one's work measured no
// faster on the H100: 929 -> 936 us at Whisper 8x1500, and the emulation 10x slower)
const uint W8 = uint(DMAX) / 8u;

void load_kv(uint j0, uint kend, uint b, uint hk, uint pb) {
    for (uint x = gl_LocalInvocationID.x; x < uint(BK) * W8; x += WG) {
        uint c = x / W8, q8 = x % W8, j = j0 + c, d0 = q8 * 8u;
        uint n = (j < kend && d0 < pc.dqk) ? min(8u, pc.dqk - d0) : 0u;
        uvec4 w = uvec4(0u);
        if (n != 0u) w = j < pb ? row8_pk(pc.pk_off + at(G_PK, b, hk, j, d0), geo[G_PK + 4], n)
                                : row8_k(pc.k_off + at(G_K, b, hk, j - pb, d0), geo[G_K + 4], n);
        smem[c * KRS + q8] = w;
        n = (j < kend && d0 < pc.dv) ? min(8u, pc.dv - d0) : 0u;
        w = uvec4(0u);
        if (n != 0u) w = j < pb ? row8_pv(pc.pv_off + at(G_PV, b, hk, j, d0), geo[G_PV + 4], n)
                                : row8_v(pc.v_off + at(G_V, b, hk, j - pb, d0), geo[G_V + 4], n);
        smem[KT + c * KRS + q8] = w;
    }
}

uint lane_row(uint lane, uint r) { return SG >= 16u ? (lane & 15u) : lane + r * SG; }
uint lane_pair(uint lane, uint k) { return (SG >= 16u ? lane / 16u : 0u) + k * LPR; }

// score (row, key c of the tile) from the subgroup's area: -inf outside the row's attention.
// `full`: a tile every row of the subgroup attends whole, without mask or relative position bias
// (tile_full): the scaled dot product alone, the same rounding as score()'s
float tile_score(uint area, uint row, uint c, uint ii, uint j, uint kend, int climit, uint b, uint h, bool full) {
    float dot = uintBitsToFloat(smem[area + row * SRS + (c >> 2)][c & 3u]);
    if (full) {
        precise float s = dot * pc.scale;
        return s;
    }
    if (ii >= pc.seq || j >= kend || int(j) > climit) return NEG_INF;
    return score(dot, b, h, ii, j);
}

// S = Q K^T of the subgroup's rows and the key tile into its area (float32 rows)
#define SCORES(qf, area)                                                                           \
    {                                                                                              \
        ACC_TYPE s[FK];                                                                            \
        FRAG_LOOP for (uint kb = 0u; kb < FK; ++kb) s[kb] = ACC_ZERO;                              \
        FRAG_LOOP for (uint f = 0u; f < FD; ++f) {                                                 \
            FRAG_LOOP for (uint kb = 0u; kb < FK; ++kb) {                                          \
                B_FRAG kf;                                                                         \
                LOAD_B(kf, kb * 16u * KRS + f * 2u, KRS, LAYOUT_COL);                              \
                MULADD(qf[f], kf, s[kb]);                                                          \
            }                                                                                      \
        }                                                                                          \
        FRAG_LOOP for (uint kb = 0u; kb < FK; ++kb) STORE_ACC(s[kb], area + kb * 4u, SRS);        \
        subgroupMemoryBarrierShared();                                                             \
        subgroupBarrier();                                                                         \
    }

// whether the subgroup's rows i0 .. i0 + 15 all attend keys j0 .. j0 + BK - 1, scores plain (uniform)
bool tile_full(bool plain, uint i0, uint j0, uint kend, uint total) {
    return plain && i0 + 16u <= pc.seq && j0 + uint(BK) <= kend && int(j0) + int(BK) - 1 <= causal_last(total, i0);
}

// A row's weights exp(s - m) stay below e^TAU while its reference maximum m stands
const float TAU = HALFP != 0 ? 4.0 : 8.0;
const float PSCALE = 1024.0;  // HALFP: the weights' scale in float16 (a power of two: exact)
const uint ACS = 5u;  // an accumulator's row staged in the subgroup's area (uvec4: 16 floats, padded)

// exp(d) for d <= TAU (a NaN passes through): kdml_exp_neg's reduction holds for either sign there
float kdml_exp_le(float d) {
    if (kdml_is_nan(d)) return d;
    if (d < -87.5) return 0.0;
    return kdml_exp_neg(-d, 0.0, 0);
}

// accumulator rows times their row's factor, through the subgroup's area
#define RESCALE(acc, area, alpha)                                                                  \
    {                                                                                              \
        STORE_ACC(acc, area, ACS);                                                                 \
        subgroupMemoryBarrierShared();                                                             \
        subgroupBarrier();                                                                         \
        LANE_LOOP for (uint r = 0u; r < RL; ++r) {                                                 \
            uint row = lane_row(lane, r);                                                          \
            LANE_LOOP for (uint k = 0u; k < 8u / LPR; ++k) {                                       \
                uint c = 2u * lane_pair(lane, k), w = area + row * ACS + (c >> 2);                  \
                precise float a0 = uintBitsToFloat(smem[w][c & 3u]) * alpha[r];                    \
                precise float a1 = uintBitsToFloat(smem[w][(c & 3u) + 1u]) * alpha[r];             \
                smem[w][c & 3u] = floatBitsToUint(a0);                                             \
                smem[w][(c & 3u) + 1u] = floatBitsToUint(a1);                                      \
            }                                                                                      \
        }                                                                                          \
        subgroupMemoryBarrierShared();                                                             \
        subgroupBarrier();                                                                         \
        LOAD_ACC(acc, area, ACS);                                                                  \
        subgroupMemoryBarrierShared();                                                             \
        subgroupBarrier();                                                                         \
    }

void main() {
    uint gid = linear_group_id();
    if (gid >= pc.batch * pc.heads * pc.blocks) return;  // the whole group (uniform)
    load_geometry();
    uint qb = gid % pc.blocks, bh = gid / pc.blocks;
    uint h = bh % pc.heads, b = bh / pc.heads, hk = h / pc.group;
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint i0 = qb * BQ4 + sg * 16u;  // the subgroup's first query row
    uint pb = past_len(b), total = key_rows(pb);
    uint last_row = min(qb * BQ4 + BQ4, pc.seq) - 1u;
    uint kend = uint(clamp(causal_last(total, last_row) + 1, 0, int(total)));  // keys the block reads
#if (ABL & 128) != 0
    bool plain = false;
#else
    bool plain = !has(F_RB) && pc.mask_type == 0u;  // scores without additive terms
#endif
    for (uint x = gl_LocalInvocationID.x; x < BQ4 * W8; x += WG) {  // the query block, over the tiles
        uint r = x / W8, q8 = x % W8, i = qb * BQ4 + r, d0 = q8 * 8u;
        uint n = (i < pc.seq && d0 < pc.dqk) ? min(8u, pc.dqk - d0) : 0u;
        smem[r * KRS + q8] = n == 0u ? uvec4(0u) : row8_q(pc.q_off + at(G_Q, b, h, i, d0), geo[G_Q + 4], n);
    }
    barrier();
    A_FRAG qf[FD];
    FRAG_LOOP for (uint f = 0u; f < FD; ++f) LOAD_A(qf[f], sg * 16u * KRS + f * 2u, KRS, LAYOUT_ROW);
    uint area = 2u * KT + sg * SGA;
    float mrow[2], lrow[2];
    bool badr[2];
    int climit[2];
    LANE_LOOP for (uint r = 0u; r < 2u; ++r) {
        mrow[r] = NEG_INF;
        lrow[r] = 0.0;
        badr[r] = false;
        climit[r] = causal_last(total, i0 + lane_row(lane, r));
    }
    ACC_TYPE oh[FD];  // (one declarator each: glslang drops a coopmat's use from the second)
#if !HALFP
    ACC_TYPE ol[FD];
#endif
    FRAG_LOOP for (uint f = 0u; f < FD; ++f) {
        oh[f] = ACC_ZERO;
#if !HALFP
        ol[f] = ACC_ZERO;
#endif
    }
    float pw[2u * uint(BK)];  // this lane's scores, then weights, of the tile (16 BK / SG of them)
    for (uint j0 = 0u; j0 < kend; j0 += uint(BK)) {
        barrier();  // the previous tile (first: the query block) is done with
#if (ABL & 16) == 0
        load_kv(j0, kend, b, hk, pb);
#endif
        barrier();
        SCORES(qf, area)
        bool full = tile_full(plain, i0, j0, kend, total);
        uint n = 0u;
        float tmax[2];
        LANE_LOOP for (uint r = 0u; r < RL; ++r) {
            uint row = lane_row(lane, r);
            tmax[r] = NEG_INF;
            LANE_LOOP for (uint k = 0u; k < CPL; ++k) {
                LANE_LOOP for (uint e = 0u; e < 2u; ++e) {
                    uint c = 2u * lane_pair(lane, k) + e;
                    float v = tile_score(area, row, c, i0 + row, j0 + c, kend, climit[r], b, h, full);
                    badr[r] = badr[r] || bad_score(v);
                    tmax[r] = max(tmax[r], v);  // (a NaN's row is NaN whatever its maximum)
                    pw[n++] = v;
                }
            }
        }
        // a row's reference maximum m moves only to a tile maximum past m + TAU (weights below e^TAU
        // meanwhile): its sum and accumulators are then rescaled by exp(m_old - m_new)
        bool grow = false;
        float alpha[2];
        LANE_LOOP for (uint r = 0u; r < RL; ++r) {
            for (uint o = 16u; o < SG; o <<= 1) tmax[r] = max(tmax[r], subgroupShuffleXor(tmax[r], o));
            alpha[r] = 1.0;
            if (tmax[r] > mrow[r] + TAU) {
                if (mrow[r] != NEG_INF) {  // (before: every weight 0, nothing to rescale)
                    alpha[r] = kdml_exp_le0(mrow[r] - tmax[r]);
                    precise float l = lrow[r] * alpha[r];
                    lrow[r] = l;
                    grow = true;
                }
                mrow[r] = tmax[r];
            }
        }
#if (ABL & 256) == 0
        uint any = grow ? 1u : 0u;  // over the subgroup (shuffles: no vote operations needed)
        for (uint o = 1u; o < SG; o <<= 1) any |= subgroupShuffleXor(any, o);
        if (any != 0u) {  // (the scores are in registers: the area stages the accumulators)
            subgroupBarrier();
            FRAG_LOOP for (uint f = 0u; f < FD; ++f) {
                RESCALE(oh[f], area, alpha)
#if !HALFP
                RESCALE(ol[f], area, alpha)
#endif
            }
        }
#endif
        n = 0u;
        LANE_LOOP for (uint r = 0u; r < RL; ++r) {
            LANE_LOOP for (uint k = 0u; k < CPL; ++k) {
                LANE_LOOP for (uint e = 0u; e < 2u; ++e) {
                    float v = pw[n];
#if HALFP
                    float p = (mrow[r] == NEG_INF || kdml_is_nan(v)) ? 0.0 : exp(v - mrow[r]);
#elif (ABL & 4) != 0
                    float p = exp(v - mrow[r]);
#else
                    float p = (mrow[r] == NEG_INF || kdml_is_nan(v)) ? 0.0 : kdml_exp_le(v - mrow[r]);
#endif
                    precise float ls = lrow[r] + p;
                    lrow[r] = ls;
                    pw[n++] = p;
                }
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();  // every score read: the weights take their place
        n = 0u;
        LANE_LOOP for (uint r = 0u; r < RL; ++r) {
            uint row = lane_row(lane, r);
            LANE_LOOP for (uint k = 0u; k < CPL; ++k) {
                uint c = 2u * lane_pair(lane, k);
#if HALFP
                smem[area + row * PRS + (c >> 3)][(c >> 1) & 3u] = packHalf2x16(vec2(pw[n], pw[n + 1u]) * PSCALE);
                n += 2u;
#else
                // hi by the device's conversion (whichever way it rounds or flushes, p - hi is exact), decoded by
                // integer code (the H100's compiler folds p - unpackHalf2x16(packHalf2x16(p)) to 0), lo rounded
                // to nearest even: both branch-free (p < e^TAU: no infinity, |lo| < 2^13)
                uint hi = packHalf2x16(vec2(pw[n], pw[n + 1u]));
#if (ABL & 512) != 0
                precise float r0 = (pw[n] - uintBitsToFloat(h2f(hi & 0xFFFFu))) * 4096.0;
                precise float r1 = (pw[n + 1u] - uintBitsToFloat(h2f(hi >> 16))) * 4096.0;
#else
                precise float r0 = (pw[n] - h2f_finite(hi & 0xFFFFu)) * 4096.0;
                precise float r1 = (pw[n + 1u] - h2f_finite(hi >> 16)) * 4096.0;
#endif
                n += 2u;
                smem[area + row * PRS + (c >> 3)][(c >> 1) & 3u] = hi;
#if (ABL & 2) == 0
#if (ABL & 64) != 0
                smem[area + (16u + row) * PRS + (c >> 3)][(c >> 1) & 3u] = packHalf2x16(vec2(r0, r1));
#elif (ABL & 512) != 0
                smem[area + (16u + row) * PRS + (c >> 3)][(c >> 1) & 3u] =
                    f2h(floatBitsToUint(r0)) | (f2h(floatBitsToUint(r1)) << 16);
#else
                smem[area + (16u + row) * PRS + (c >> 3)][(c >> 1) & 3u] = f2h_finite(r0) | (f2h_finite(r1) << 16);
#endif
#endif
#endif
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
#if (ABL & 32) != 0
        if (j0 == 0xFFFFFFFFu)
#endif
        FRAG_LOOP for (uint kb = 0u; kb < FK; ++kb) {
            A_FRAG ph;
            LOAD_A(ph, area + kb * 2u, PRS, LAYOUT_ROW);
#if !HALFP
            A_FRAG pl;
            LOAD_A(pl, area + 16u * PRS + kb * 2u, PRS, LAYOUT_ROW);
#endif
            FRAG_LOOP for (uint f = 0u; f < FD; ++f) {
                B_FRAG vf;
                LOAD_B(vf, KT + kb * 16u * KRS + f * 2u, KRS, LAYOUT_ROW);
                MULADD(ph, vf, oh[f]);
#if (ABL & 2) == 0 && !HALFP
                MULADD(pl, vf, ol[f]);
#endif
            }
        }
    }
    LANE_LOOP for (uint r = 0u; r < RL; ++r) {
        for (uint o = 16u; o < SG; o <<= 1) {
            lrow[r] += subgroupShuffleXor(lrow[r], o);
            badr[r] = (subgroupShuffleXor(badr[r] ? 1u : 0u, o) != 0u) || badr[r];
        }
    }
#if !HALFP
    FRAG_LOOP for (uint f = 0u; f < FD; ++f) ACC_ADD_SCALED(oh[f], ol[f], 1.0 / 4096.0);
#endif
    // the result through shared memory, OF fragments at a time: each lane its rows' key pairs
    for (uint f0 = 0u; f0 < FD; f0 += OF) {
        barrier();  // every subgroup is done with the tiles (then: with its last staging)
        FRAG_LOOP for (uint f = 0u; f < OF; ++f) STORE_ACC(oh[f0 + f], sg * 16u * ORS + f * 4u, ORS);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        LANE_LOOP for (uint r = 0u; r < RL; ++r) {
            uint row = lane_row(lane, r), ii = i0 + row;
            if (ii >= pc.seq) continue;
            bool bad = badr[r] || lrow[r] == 0.0;
#if HALFP
            float inv = 1.0 / (lrow[r] * PSCALE);
#else
            float inv = 1.0 / lrow[r];
#endif
            LANE_LOOP for (uint k = 0u; k < 8u * OF / LPR; ++k) {
                uint c = 2u * lane_pair(lane, k), d = f0 * 16u + c;
                if (d >= pc.dv) continue;
                uint sw = sg * 16u * ORS + row * ORS;
                float v0 = uintBitsToFloat(smem[sw + (c >> 2)][c & 3u]);
                float v1 = uintBitsToFloat(smem[sw + ((c + 1u) >> 2)][(c + 1u) & 3u]);
                uint e0 = pc.o_off + at(G_O, b, h, ii, d);
                bool two = d + 1u < pc.dv;
                uint e1 = two ? pc.o_off + at(G_O, b, h, ii, d + 1u) : e0;
                store_out(e0, e1, bad ? QNAN : v0 * inv, bad ? QNAN : v1 * inv, two);
            }
        }
    }
}

#elif KERNEL == 3
// ---- the split partials combined ------------------------------------------------------------
void main() {
    uint n = linear_group_id() * 256u + gl_LocalInvocationID.x;
    uint units = (pc.dv + EPT - 1u) / EPT;
    if (n >= pc.batch * pc.heads * pc.seq * units) return;
    load_geometry();
    uint d = (n % units) * EPT, row = n / units;
    uint i = row % pc.seq, bh = row / pc.seq, h = bh % pc.heads, b = bh / pc.heads;
    uint first = row * pc.splits * (pc.dv + 2u);
    float mx = NEG_INF;
    bool bad = false;
    for (uint sp = 0u; sp < pc.splits; ++sp) {
        uint base = first + sp * (pc.dv + 2u);
        float l = uintBitsToFloat(s_buf[base + 1u]);
        bad = bad || kdml_is_nan(l);
        if (l > 0.0) mx = max(mx, uintBitsToFloat(s_buf[base]));
    }
    precise float den = 0.0;
    precise float num[EPT];
    for (uint e = 0u; e < EPT; ++e) num[e] = 0.0;
    for (uint sp = 0u; sp < pc.splits; ++sp) {
        uint base = first + sp * (pc.dv + 2u);
        float l = uintBitsToFloat(s_buf[base + 1u]);
        if (!(l > 0.0)) continue;  // no key of this chunk counts (or a NaN: bad)
        float w = kdml_exp_le0(uintBitsToFloat(s_buf[base]) - mx);
        den = fma(l, w, den);
        for (uint e = 0u; e < EPT; ++e) {
            uint dd = min(d + e, pc.dv - 1u);
            num[e] = fma(uintBitsToFloat(s_buf[base + 2u + dd]), w, num[e]);
        }
    }
    bool row_bad = bad || den == 0.0;
    float inv = 1.0 / den;
    uint e0 = pc.o_off + at(G_O, b, h, i, d);
    bool two = EPT == 2u && d + 1u < pc.dv;
    uint e1 = two ? pc.o_off + at(G_O, b, h, i, d + 1u) : e0;
    store_out(e0, e1, row_bad ? QNAN : num[0] * inv, row_bad ? QNAN : num[EPT - 1u] * inv, two);
}

#elif KERNEL == 6
// ---- register blocks ------------------------------------------------------------------------
// The tiled kernel's arithmetic (each dot product over d in order, online softmax per tile, the
// value sum over the keys in order), as a blocked matrix product: invocation (tr, tc) owns query
// rows 4 tr .. 4 tr + 3 and, per tile, keys 4 tc .. 4 tc + 3 of the scores and head dimensions
// 4 tc .. 4 tc + 3 of the accumulators (BK == DMAX), so each shared-memory read of 4 words feeds
// 16 fused multiply-adds. The query block [d][row] and the key tile [d][key] transposed (their
// groups of 4 swizzled by d % 8: fewer bank conflicts where a row's dimensions are written), the
// value tile [key][d] over the keys' storage, the weights [key][row] (row groups swizzled by the key
// group: no bank conflicts where they are written); a row's tile maximum over its NC invocations
// through the weights' storage; each invocation keeps its part of the row sums, added once at the
// end. As in GEMM (gemm.comp), a tile's global loads are issued into registers a phase ahead: the
// values during the scores' products, the next keys during the values' products. Head dimensions
// past dqk / dv are zeros (their products add nothing); rows past seq store nothing. The geometry
// is read from its buffer (the shared memory is the tiles': 48 KiB at 64 rows).
const uint NC = uint(BK) / 4u;           // key (and head-dimension) groups per row group
const uint NT = uint(BQ) / 4u * NC;      // invocations
const uint Q4 = uint(BQ) / 4u, K4 = uint(BK) / 4u, D4 = uint(DMAX) / 4u;
const uint RP = NT / uint(DMAX);         // rows per pass of the tiles' loads
const uint NL = uint(BK) / RP;           // an invocation's loads per tile
shared vec4 qt[DMAX * Q4];               // [d][row group ^ (d % 8)]
shared vec4 kv[DMAX * K4];               // [d][key group ^ (d % 8)], then [key][d]
shared vec4 pt[BK * Q4];                 // [key][row group ^ (key / 4 % Q4)]; before it the partials

uint pslot(uint c, uint g) { return c * Q4 + (g ^ ((c >> 2u) % Q4)); }  // key c's weights of row group g
uint rslot(uint k, uint g) { return k * Q4 + (g ^ (k % Q4)); }          // key group k's partials of row group g

// element ld of key / value rows j0 + lc, j0 + lc + RP, ... into dst: the past's rows, then the new
// ones (bias added); zeros past kend and past the head size (inb false). A tile wholly of new rows
// without bias loads without branches (addresses clamped into the row).
#define LOAD_ROWS(dst, J0, inb, BUF, base, step, PBUF, pbase, pstep, bias)                        \
    if ((J0) >= pb && (J0) + uint(BK) <= kend && !biased) {                                       \
        [[unroll]] for (uint n = 0u; n < NL; ++n) {                                               \
            float x = LD(BUF, base + ((J0) - pb + lc + n * RP) * step);                           \
            dst[n] = inb ? x : 0.0;                                                               \
        }                                                                                         \
    } else {                                                                                      \
        [[unroll]] for (uint n = 0u; n < NL; ++n) {                                               \
            uint j = (J0) + lc + n * RP;                                                          \
            float x = 0.0;                                                                        \
            if (j < kend && inb) {                                                                \
                if (j < pb) {                                                                     \
                    x = LD(PBUF, pbase + j * pstep);                                              \
                } else {                                                                          \
                    x = LD(BUF, base + (j - pb) * step);                                          \
                    if (biased) {                                                                 \
                        precise float sb_ = x + bias;                                             \
                        x = sb_;                                                                  \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
            dst[n] = x;                                                                           \
        }                                                                                         \
    }

void main() {
    uint gid = linear_group_id();
    if (gid >= pc.batch * pc.heads * pc.blocks) return;  // the whole group (uniform)
    uint qb = gid % pc.blocks, bh = gid / pc.blocks;
    uint h = bh % pc.heads, b = bh / pc.heads, hk = h / pc.group;
    uint t = gl_LocalInvocationID.x, tr = t / NC, tc = t % NC;
    uint i0 = qb * uint(BQ);
    uint pb = past_len(b), total = key_rows(pb);
    uint last_row = min(i0 + uint(BQ), pc.seq) - 1u;
    uint kend = uint(clamp(causal_last(total, last_row) + 1, 0, int(total)));  // keys the block reads
    // the tiles' loads: invocation t reads head dimension ld of rows lc, lc + RP, ... (a row's
    // consecutive dimensions in consecutive invocations), through per-invocation bases and row strides
    uint ld = t % uint(DMAX), lc = t / uint(DMAX);
    bool kin = ld < pc.dqk, vin = ld < pc.dv;
    uint lk = min(ld, pc.dqk - 1u), lv = min(ld, pc.dv - 1u);  // (clamped: the branch-free loads' addresses)
    uint qbase = pc.q_off + at(G_Q, b, h, 0u, lk), qstep = geo[G_Q + 3];
    uint kbase = pc.k_off + at(G_K, b, hk, 0u, lk), kstep = geo[G_K + 3];
    uint vbase = pc.v_off + at(G_V, b, hk, 0u, lv), vstep = geo[G_V + 3];
    uint pkbase = pc.pk_off + at(G_PK, b, hk, 0u, lk), pkstep = geo[G_PK + 3];
    uint pvbase = pc.pv_off + at(G_PV, b, hk, 0u, lv), pvstep = geo[G_PV + 3];
    bool biased = has(F_BIAS);
    float qbias = 0.0, kbias = 0.0, vbias = 0.0;
    if (biased) {
        if (kin) qbias = LD(b_buf, pc.bias_off + geo[G_BIAS] + (h * pc.dqk + ld) * geo[G_BIAS + 3]);
        if (kin) kbias = LD(b_buf, pc.bias_off + geo[G_BIAS + 1] + (hk * pc.dqk + ld) * geo[G_BIAS + 3]);
        if (vin) vbias = LD(b_buf, pc.bias_off + geo[G_BIAS + 2] + (hk * pc.dv + ld) * geo[G_BIAS + 3]);
    }
    for (uint r = lc; r < uint(BQ); r += RP) {  // the query block, transposed (row groups swizzled)
        uint ii = i0 + r;
        float x = 0.0;
        if (ii < pc.seq && kin) {
            x = LD(q_buf, qbase + ii * qstep);
            if (biased) {
                precise float sb = x + qbias;
                x = sb;
            }
        }
        qt[ld * Q4 + ((r >> 2u) ^ (ld & 7u))][r & 3u] = x;
    }
    float m[4], lp[4];  // lp: this invocation's part of the row sums
    uint bad = 0u;      // bit a: row a saw a NaN or +inf score
    precise float o[16];  // rows a, head dimensions e: o[4 a + e]; precise: the rescaling stays a rounded product
    [[unroll]] for (uint a = 0u; a < 4u; ++a) {
        m[a] = NEG_INF;
        lp[a] = 0.0;
        [[unroll]] for (uint e = 0u; e < 4u; ++e) o[a * 4u + e] = 0.0;
    }
    uint ir = i0 + tr * 4u;  // this invocation's first row
    // scores that are the scaled products alone: no mask, no relative position bias (per tile: its
    // keys inside the sequence and every one of the invocation's rows' causal limits, the rows inside seq)
    bool simple = pc.mask_type == 0u && !has(F_RB) && ir + 3u < pc.seq;
    float xk[NL], xv[NL];
#if !NOPF
    if (kend > 0u) LOAD_ROWS(xk, 0u, kin, k_buf, kbase, kstep, pk_buf, pkbase, pkstep, kbias)
#endif
    for (uint j0 = 0u; j0 < kend; j0 += uint(BK)) {
        barrier();  // the previous tile's values and weights are done with (first: the query block is written)
#if NOPF
        LOAD_ROWS(xk, j0, kin, k_buf, kbase, kstep, pk_buf, pkbase, pkstep, kbias)
#endif
        [[unroll]] for (uint n = 0u; n < NL; ++n) {  // the key tile, transposed (key groups swizzled)
            uint c = lc + n * RP;
            kv[ld * K4 + ((c >> 2u) ^ (ld & 7u))][c & 3u] = xk[n];
        }
        barrier();
#if !NOPF
        LOAD_ROWS(xv, j0, vin, v_buf, vbase, vstep, pv_buf, pvbase, pvstep, vbias)
#endif
        precise float s[16];  // rows a, keys c: s[4 a + c]
        [[unroll]] for (uint n = 0u; n < 16u; ++n) s[n] = 0.0;
        [[dont_unroll]] for (uint d0 = 0u; d0 < uint(DMAX); d0 += 4u) {
            [[unroll]] for (uint x = 0u; x < 4u; ++x) {
                uint d = d0 + x;
                vec4 qv = qt[d * Q4 + (tr ^ (d & 7u))], kk = kv[d * K4 + (tc ^ (d & 7u))];
#if (ABL & 4) == 0
                [[unroll]] for (uint a = 0u; a < 4u; ++a)
                    [[unroll]] for (uint c = 0u; c < 4u; ++c) s[a * 4u + c] = fma(qv[a], kk[c], s[a * 4u + c]);
#else
                s[0] += qv.x + kk.x;
#endif
            }
        }
        vec4 pm = vec4(NEG_INF);  // the rows' maxima over this invocation's keys
        if (simple && j0 + uint(BK) <= kend && causal_last(total, ir) >= int(j0 + uint(BK)) - 1) {
            [[unroll]] for (uint n = 0u; n < 16u; ++n) {  // a plain tile: the scaled products (score()'s rounding)
                precise float v = s[n] * pc.scale;
                if (bad_score(v)) bad |= 1u << (n >> 2u);
                s[n] = v;
                if (!kdml_is_nan(v)) pm[n >> 2u] = max(pm[n >> 2u], v);
            }
        } else {
            [[unroll]] for (uint a = 0u; a < 4u; ++a) {
                uint i = ir + a;
                int climit = causal_last(total, i);
                [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                    uint j = j0 + tc * 4u + c;
                    float v = NEG_INF;  // a key outside the row's attention: weight 0
                    if (i < pc.seq && j < kend && int(j) <= climit) {
                        v = score(s[a * 4u + c], b, h, i, j);
                        if (bad_score(v)) bad |= 1u << a;
                    }
                    s[a * 4u + c] = v;
                    if (!kdml_is_nan(v)) pm[a] = max(pm[a], v);
                }
            }
        }
#if SGMAX  // (the NC invocations of a row group are consecutive lanes of one subgroup)
        for (uint x = 1u; x < NC; x <<= 1u) pm = max(pm, subgroupShuffleXor(pm, x));
        vec4 mt = max(vec4(m[0], m[1], m[2], m[3]), pm);
        barrier();  // every key read: the weights and values take their places
#else
        pt[rslot(tc, tr)] = pm;
        barrier();
        vec4 mt = vec4(m[0], m[1], m[2], m[3]);
        for (uint k = 0u; k < NC; ++k) mt = max(mt, pt[rslot(k, tr)]);
        barrier();  // every partial read, every key read: the weights and values take their places
#endif
        [[unroll]] for (uint a = 0u; a < 4u; ++a) {
            float alpha = (m[a] == NEG_INF) ? 0.0 : kdml_exp_le0(m[a] - mt[a]);
            precise float ts = 0.0;
            [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                float v = s[a * 4u + c];
#if (ABL & 1) == 0
                float p = (mt[a] == NEG_INF || kdml_is_nan(v)) ? 0.0 : kdml_exp_le0(v - mt[a]);
#else
                float p = exp(v - mt[a]);
#endif
                s[a * 4u + c] = p;
                ts += p;
            }
            precise float ln = lp[a] * alpha + ts;
            lp[a] = ln;
            m[a] = mt[a];
            [[unroll]] for (uint e = 0u; e < 4u; ++e) o[a * 4u + e] = o[a * 4u + e] * alpha;
        }
        [[unroll]] for (uint c = 0u; c < 4u; ++c) pt[pslot(tc * 4u + c, tr)] = vec4(s[c], s[4u + c], s[8u + c], s[12u + c]);
#if NOPF
        LOAD_ROWS(xv, j0, vin, v_buf, vbase, vstep, pv_buf, pvbase, pvstep, vbias)
#endif
        [[unroll]] for (uint n = 0u; n < NL; ++n) kv[(lc + n * RP) * D4 + (ld >> 2u)][ld & 3u] = xv[n];  // the value tile
#if !NOPF
        if (j0 + uint(BK) < kend) LOAD_ROWS(xk, j0 + uint(BK), kin, k_buf, kbase, kstep, pk_buf, pkbase, pkstep, kbias)
#endif
        barrier();
        [[dont_unroll]] for (uint c0 = 0u; c0 < uint(BK); c0 += 4u) {
            [[unroll]] for (uint x = 0u; x < 4u; ++x) {
                vec4 pv = pt[pslot(c0 + x, tr)], vv = kv[(c0 + x) * D4 + tc];
#if (ABL & 8) == 0
                [[unroll]] for (uint a = 0u; a < 4u; ++a)
                    [[unroll]] for (uint e = 0u; e < 4u; ++e) o[a * 4u + e] = fma(pv[a], vv[e], o[a * 4u + e]);
#else
                o[0] += pv.x + vv.x;
#endif
            }
        }
    }
    barrier();  // the last tile's weights are read
    pt[rslot(tc, tr)] = vec4((bad & 1u) != 0u ? QNAN : lp[0], (bad & 2u) != 0u ? QNAN : lp[1],
                             (bad & 4u) != 0u ? QNAN : lp[2], (bad & 8u) != 0u ? QNAN : lp[3]);
    barrier();
    precise vec4 l4 = vec4(0.0);
    for (uint k = 0u; k < NC; ++k) l4 += pt[rslot(k, tr)];
    [[unroll]] for (uint a = 0u; a < 4u; ++a) {
        uint i = ir + a;
        if (i >= pc.seq) continue;
        bool row_bad = kdml_is_nan(l4[a]) || l4[a] == 0.0;
        float inv = 1.0 / l4[a];
        [[unroll]] for (uint e = 0u; e < 4u; e += EPT) {
            uint d = tc * 4u + e;
            if (d < pc.dv) {
                uint e0 = pc.o_off + at(G_O, b, h, i, d);
                bool two = EPT == 2u && d + 1u < pc.dv;
                uint e1 = two ? pc.o_off + at(G_O, b, h, i, d + 1u) : e0;
                store_out(e0, e1, row_bad ? QNAN : o[a * 4u + e] * inv, row_bad ? QNAN : o[a * 4u + e + EPT - 1u] * inv,
                          two);
            }
        }
    }
}

#else
// ---- present key and value ------------------------------------------------------------------
void put(bool value, uint e, float v) {
#if BITS == 32
    if (value) prv_buf[e] = floatBitsToUint(v);
    else prk_buf[e] = floatBitsToUint(v);
#else
    uint hv = f2h(floatBitsToUint(v));
    if (value) STORE_FIELD(prv_buf, e >> 1, (e & 1u) * 16u, 16u, hv)
    else STORE_FIELD(prk_buf, e >> 1, (e & 1u) * 16u, 16u, hv)
#endif
}

void main() {
    uint n = linear_group_id() * 256u + gl_LocalInvocationID.x;
    uint kpairs = has(F_PRESENT_K) ? (pc.dqk + EPT - 1u) / EPT : 0u;
    uint vpairs = has(F_PRESENT_V) ? (pc.dv + EPT - 1u) / EPT : 0u;
    uint per_row = kpairs + vpairs;
    uint rows = pc.batch * (pc.heads / pc.group) * pc.present;
    if (per_row == 0u || n >= rows * per_row) return;
    load_geometry();
    uint k = n % per_row, row = n / per_row;
    uint j = row % pc.present;
    row /= pc.present;
    uint hk = row % (pc.heads / pc.group), b = row / (pc.heads / pc.group);
    bool value = k >= kpairs;
    uint d = (value ? k - kpairs : k) * EPT, width = value ? pc.dv : pc.dqk;
    uint pb = past_len(b), total = key_rows(pb);
    uint gb = value ? G_PRV : G_PRK;
    uint base = value ? pc.prv_off : pc.prk_off;
    uint e0 = base + at(gb, b, hk, j, d);
    float v[EPT];
    for (uint x = 0u; x < EPT; ++x) {
        uint dd = min(d + x, width - 1u);
        v[x] = j >= total ? 0.0 : value ? value_at(b, hk, j, pb, dd) : key_at(b, hk, j, pb, dd);
    }
#if BITS == 32
    put(value, e0, v[0]);
#else
    bool two = d + 1u < width;
    uint e1 = base + at(gb, b, hk, j, d + 1u);
    if (two && (e0 & 1u) == 0u && e1 == e0 + 1u) {
        uint w = f2h(floatBitsToUint(v[0])) | (f2h(floatBitsToUint(v[1])) << 16);
        if (value) prv_buf[e0 >> 1] = w;
        else prk_buf[e0 >> 1] = w;
        return;
    }
    put(value, e0, v[0]);
    if (two) put(value, e1, v[1]);
#endif
}
#endif
