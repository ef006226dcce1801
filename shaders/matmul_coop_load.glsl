// One operand's global -> registers -> shared-memory staging for matmul_coop.comp, included once
// per operand (A, then B) with these macros set:
//   LD_MODE   0: any strides, byte loads from 32-bit words (any K, any layout)
//             1: k contiguous (unit K stride), every other stride a multiple of 16 bytes: uvec4 loads,
//                stored as they are ([TMN][KS] tile, k contiguous)
//             2: the tile dimension (M of A, N of B) contiguous, every other stride a multiple of 16
//                bytes: uvec4 loads of 4 k rows x 16 columns, transposed to k-contiguous words
//             3: B only, N contiguous as in mode 2, stored row-major ([BK][BS] tile, n contiguous)
//   LD_TMN    the tile's M or N size (BM or BN); LD_BUF / LD_BUF4 the operand as uint / uvec4;
//   LD_SUMS   the shared per-row (A) or per-column (B) sums; LD_OP a or b (names: LD_REGS and
//   LD_PART, this invocation's staging registers and row-sum partials, are regs_a, part_a, ...).
// Every value is stored as a signed byte: unsigned inputs are XOR-ed with 0x80 (x - 128), and
// padding (rows past M or N, k past K) is 0, which adds nothing to products or sums.
// Strides, offsets and sizes are in bytes (elements of an 8-bit type). Every invocation of the
// work group (WG of them) stages.

// PIPE, FAST and LDV other than their defaults, and RSUM 0, build only the ablations of the
// benchmark overlay (benchmarks/overlay_ablation.py) that bench_coop.py --ablate times.
#ifndef PIPE
#define PIPE 2   // global -> shared pipeline: 2 loads consumed at the store, 1 at the load (LD_LOAD)
#endif
#ifndef FAST   // 1: interior tiles' shared stores at offsets from LD_SETUP; 0 (ablation): computed per chunk
#define FAST 1
#endif
#ifndef LDV    // staging addresses: 0 clamped into the matrix, no branch; ablations: 1 every tile taken
#define LDV 0  // as interior (exact only where the tiles divide M, N, K), 2 chosen in a branch, interior
#endif         // or edge tile
#ifndef RSUM   // k-contiguous (mode 1) operands' zero-point row sums from the staging registers at the
#define RSUM 1 // store: 1 in 16-bit lanes of plain integer code, 2 by OpSDot with ones (integer_dot_product:
#endif         // variants mmc8s_*, mmc8d_*); 0 (ablation) re-read from the shared tiles every step
#if RSUM
#define LD_SUM_ARG , bool sum   // LD_STORE's extra parameter (absent with RSUM 0)
#define STORE_SUM(x) , x
#else
#define LD_SUM_ARG
#define STORE_SUM(x)
#endif
#define LD_RSUM (RSUM != 0 && LD_MODE == 1)
#ifndef LD_CAT
#define LD_CAT2(x, y) x##_##y
#define LD_CAT(x, y) LD_CAT2(x, y)
#endif
#define LD_REGS LD_CAT(regs, LD_OP)      // this operand's names (LD_OP: a or b): regs_a, load_a, ...
#define LD_PART LD_CAT(part, LD_OP)
#define LD_UNITS LD_CAT(units, LD_OP)
#define LD_COLS LD_CAT(cols, LD_OP)
#define LD_PARTS LD_CAT(parts, LD_OP)
#define LD_ITEMS LD_CAT(items, LD_OP)
#define LD_MASK16 LD_CAT(mask16, LD_OP)
#define LD_LOAD LD_CAT(load, LD_OP)
#define LD_STORE LD_CAT(store, LD_OP)
#define LD_SUM LD_CAT(sum, LD_OP)
#define LD_FLUSH LD_CAT(flush, LD_OP)
#define LD_SETUP LD_CAT(setup, LD_OP)
#define LD_Q0 LD_CAT(q0, LD_OP)
#define LD_S0 LD_CAT(s0, LD_OP)
#define LD_AT LD_CAT(fast_at, LD_OP)
#ifndef LD_SLOTS   // staging register sets: PIPE 3 loads two steps ahead (slot = step parity)
#define LD_SLOTS ((PIPE == 3) ? 2u : 1u)
#endif

#if LD_MODE == 2
const uint LD_UNITS = (BK / 4u) * (LD_TMN / 16u);          // 4 k rows x 16 columns each
#define LD_NR (4u * ((LD_UNITS + WG - 1u) / WG))
#elif LD_MODE == 3
const uint LD_UNITS = BK * (LD_TMN / 16u);                 // one uvec4 of one k row each
#define LD_NR ((LD_UNITS + WG - 1u) / WG)
#else
const uint LD_UNITS = LD_TMN * (BK / 16u);                 // 16 k of one row each
#define LD_NR ((LD_UNITS + WG - 1u) / WG)
#endif
uvec4 LD_REGS[LD_SLOTS * LD_NR];

#if LD_MODE == 3
// column sums of a [BK][BS] tile: each item is one word column (4 columns) over BK / LD_PARTS rows
const uint LD_COLS = LD_TMN / 4u;
const uint LD_PARTS = (WG >= LD_COLS) ? (WG / LD_COLS) : 1u;
const uint LD_ITEMS = LD_COLS * LD_PARTS;
int LD_PART[4u * ((LD_ITEMS + WG - 1u) / WG)];
#elif LD_RSUM
// row sums from the registers: staging register i always holds 16 k of one row (coop_keep), so
// its partial sums that row's chunks over the K loop (LD_STORE); 8 invocations share a row at BK 128
const uint LD_PARTS = 1u, LD_ITEMS = 0u;
int LD_PART[LD_NR];
#else
// row sums of a [TMN][KS] tile: each item is one row's (BK / 4) / LD_PARTS words
const uint LD_PARTS = (WG >= LD_TMN) ? (WG / LD_TMN) : 1u;
const uint LD_ITEMS = LD_TMN * LD_PARTS;
int LD_PART[(LD_ITEMS + WG - 1u) / WG];
#endif

// The bytes of v at and past byte `keep` (0..16) set to zero.
uvec4 LD_MASK16(uvec4 v, uint keep) {
    if (keep >= 16u) return v;   // the common case: a whole chunk
    [[unroll]] for (uint q = 0u; q < 4u; ++q) {
        uint n = uint(clamp(int(keep) - int(4u * q), 0, 4));
        v[q] &= (n == 4u) ? 0xFFFFFFFFu : ((1u << (8u * n)) - 1u);
    }
    return v;
}

#ifndef COOP_KEEP_DEFINED
#define COOP_KEEP_DEFINED
// Staging register i of an operand in load mode `mode` (1..3) with tile size tmn: its element
// (mn, k) and how many of its 16 bytes lie inside the matrix (0: none, nothing is loaded).
uint coop_keep(uint mode, uint tmn, uint i, uint MN, uint K, uint mn0, uint k0, out uint mn, out uint k) {
    const uint tid = gl_LocalInvocationID.x;
    bool ok;
    if (mode == 2u) {   // 4 registers per unit of 4 k rows x 16 columns, k group fastest
        uint u = tid + (i / 4u) * WG;
        mn = mn0 + 16u * (u / (BK / 4u));
        k = k0 + 4u * (u % (BK / 4u)) + i % 4u;
        ok = u < (BK / 4u) * (tmn / 16u) && mn < MN && k < K;
        return ok ? min(16u, MN - mn) : 0u;
    }
    uint u = tid + i * WG;
    if (mode == 3u) {   // one row of k, 16 columns
        mn = mn0 + 16u * (u % (tmn / 16u));
        k = k0 + u / (tmn / 16u);
        ok = u < BK * (tmn / 16u) && k < K && mn < MN;
        return ok ? min(16u, MN - mn) : 0u;
    }
    mn = mn0 + u / (BK / 16u);   // mode 1: 16 k of one row
    k = k0 + 16u * (u % (BK / 16u));
    ok = u < tmn * (BK / 16u) && mn < MN && k < K;
    return ok ? min(16u, K - k) : 0u;
}
#endif

// Fast path: units in rows of LD_R (mode 1: 16-k chunks of a row; 3: 16-column chunks of a k row;
// 2: 4-k groups of a 16-column unit). Where WG is a multiple of LD_R every register of this
// invocation sits a fixed distance from the first, so LD_SETUP computes its shared offset (and,
// for the LDV ablations, its global uvec4 index at step 0) once; each store adds constants.
// (macros, not spec-constant globals: glslang misplaces those combined ones in function blocks)
#if LD_MODE == 1
#define LD_R (BK / 16u)
#elif LD_MODE == 3
#define LD_R (LD_TMN / 16u)
#else
#define LD_R (BK / 4u)
#endif
#define LD_FAST (FAST != 0 && LD_MODE != 0 && WG % LD_R == 0u)
#define LD_RSTEP (WG / LD_R)   // rows per register
uint LD_Q0, LD_S0;
void LD_SETUP(uint base, uint s_mn, uint s_k, uint mn0) {
    const uint r0 = gl_LocalInvocationID.x / LD_R, c = gl_LocalInvocationID.x % LD_R;
    if (LD_MODE == 1) { LD_Q0 = (base + (mn0 + r0) * s_mn + 16u * c) >> 4u; LD_S0 = r0 * KS + c; }
    else if (LD_MODE == 3) { LD_Q0 = (base + r0 * s_k + mn0 + 16u * c) >> 4u; LD_S0 = r0 * BS + c; }
    else { LD_Q0 = (base + 4u * c * s_k + mn0 + 16u * r0) >> 4u; LD_S0 = 0u; }
}
// uvec4 index of register i at k0 (interior steps only)
uint LD_AT(uint i, uint s_mn, uint s_k, uint k0) {
    if (LD_MODE == 1) return LD_Q0 + (k0 >> 4u) + i * LD_RSTEP * (s_mn >> 4u);
    if (LD_MODE == 3) return LD_Q0 + (k0 >> 4u) * s_k + i * LD_RSTEP * (s_k >> 4u);
    return LD_Q0 + (k0 >> 4u) * s_k + (i / 4u) * LD_RSTEP + (i % 4u) * (s_k >> 4u);
}

// Global -> registers for the tile at (mn0, k0). base: the matrix's first byte; s_mn, s_k: strides;
// MN, K: extents; xe: 0x80 for an unsigned operand, else 0; slot: the register set. PIPE 2: the
// registers hold the bytes as loaded and nothing reads them until LD_STORE, after this step's MMAs,
// so the loads stay in flight meanwhile (PIPE 1 flips signs and masks right here, which makes every
// invocation wait for its loads before its MMAs).
void LD_LOAD(uint slot, uint base, uint s_mn, uint s_k, uint MN, uint K, uint mn0, uint k0, uint xe) {
#if LD_MODE != 0
    const uint nr = LD_NR;
    uint at[LD_NR], keep[LD_NR];
#if LDV == 0
    // Every register's element clamped into the matrix, then its 16-byte chunk: the same address
    // code for interior and edge tiles, no branch before the loads (a chunk outside the tile reads
    // one inside and is zeroed at the store). A branch between interior constants (LD_SETUP) and
    // edge bounds (LDV 2) costs a quarter of the throughput: H100 4096^3 / 8192^3 426.8 / 491.1
    // TOPS against 322.8 / 339.0 (`bench_coop.py --rounds 3 --no-compare --ablate`, a10).
    [[unroll]] for (uint i = 0u; i < nr; ++i) {
        uint mn, k;
        keep[i] = coop_keep(LD_MODE, LD_TMN, i, MN, K, mn0, k0, mn, k);
        mn = min(mn, MN - 1u);   // (sizes are at least 1)
        k = min(k, K - 1u);
        if (LD_MODE == 1) k &= ~15u; else mn &= ~15u;   // the chunk's first byte (16-byte aligned)
        at[i] = (base + (LD_MODE == 1 ? mn * s_mn + k : k * s_k + mn)) >> 4u;
    }
#else   // ablations: LDV 1 every tile taken as interior; 2 the addresses chosen in a branch
    const uint tid = gl_LocalInvocationID.x, per = (LD_MODE == 2) ? 4u : 1u;
#if LDV == 1   // (a condition, not a const bool: glslang misplaces a spec-constant-only local)
    if (LD_FAST) {
#else
    const bool fast = LD_FAST && mn0 + LD_TMN <= MN && k0 + BK <= K;   // the whole tile inside (uniform)
    if (fast) {
#endif
        [[unroll]] for (uint i = 0u; i < nr; ++i) {
            keep[i] = 16u;
            at[i] = (LD_UNITS % WG == 0u || tid + (i / per) * WG < LD_UNITS) ? LD_AT(i, s_mn, s_k, k0) : base >> 4u;
        }
    } else {
        [[unroll]] for (uint i = 0u; i < nr; ++i) {
            uint mn, k;
            keep[i] = coop_keep(LD_MODE, LD_TMN, i, MN, K, mn0, k0, mn, k);
            // a unit wholly outside: any valid address (its bytes are zeroed at the store)
            at[i] = (keep[i] != 0u) ? (base + (LD_MODE == 1 ? mn * s_mn + k : k * s_k + mn)) >> 4u : base >> 4u;
        }
    }
#endif
    [[unroll]] for (uint i = 0u; i < nr; ++i) {
        uvec4 v = LD_BUF4[at[i]];
#if PIPE == 1
        v = LD_MASK16(v ^ (xe * 0x01010101u), keep[i]);
#endif
        LD_REGS[slot * nr + i] = v;
    }
#else
    const uint tid = gl_LocalInvocationID.x, nr = LD_NR;
    [[unroll]] for (uint i = 0u; i < nr; ++i) {
        uint u = tid + i * WG;
        uint kq = u % (BK / 16u), row = u / (BK / 16u);
        uint mn = mn0 + row, k = k0 + 16u * kq;
        uvec4 v = uvec4(0u);
        if (u < LD_UNITS && mn < MN && k < K) {
            uint at = base + mn * s_mn + k * s_k;
            [[unroll]] for (uint e = 0u; e < 16u; ++e) {
                if (k + e < K) {
                    uint idx = at + e * s_k;
                    uint byte = (bitfieldExtract(LD_BUF[idx >> 2u], int(8u * (idx & 3u)), 8) ^ xe) & 0xFFu;
                    v[e >> 2u] |= byte << (8u * (e & 3u));
                }
            }
        }
        LD_REGS[slot * nr + i] = v;
    }
#endif
}

// Registers -> the shared tile starting at smem[tile] (the load's MN, K, mn0, k0, xe).
void LD_STORE(uint slot, uint tile, uint MN, uint K, uint mn0, uint k0, uint xe LD_SUM_ARG) {
    const uint tid = gl_LocalInvocationID.x, nr = LD_NR;
#if LD_MODE != 0 && PIPE != 1
#if LDV != 1
    const bool inside = LD_FAST && mn0 + LD_TMN <= MN && k0 + BK <= K;   // nothing to mask
#endif
    if (xe != 0u) {   // sign flip
        [[unroll]] for (uint i = 0u; i < nr; ++i) LD_REGS[slot * nr + i] ^= uvec4(xe * 0x01010101u);
    }
#if LDV != 1
    if (!inside) {   // padding zeroed (one branch around the loop, as in LD_LOAD)
        [[unroll]] for (uint i = 0u; i < nr; ++i) {
            uint mn, k;
            LD_REGS[slot * nr + i] = LD_MASK16(LD_REGS[slot * nr + i], coop_keep(LD_MODE, LD_TMN, i, MN, K, mn0, k0, mn, k));
        }
    }
#endif
#endif
#if LD_RSUM   // the row sums of the bytes as stored (signed; padding 0), reading no shared memory
    if (sum) {
        [[unroll]] for (uint i = 0u; i < nr; ++i) {
#if RSUM == 2   // the signed bytes as stored, 4 at a time (integer dot products with ones)
            [[unroll]] for (uint q = 0u; q < 4u; ++q) LD_PART[i] += rsum_sdot4(LD_REGS[slot * nr + i][q], 0x01010101u, 0);
#else
            const uvec4 v = LD_REGS[slot * nr + i] ^ uvec4(0x80808080u);   // each byte + 128
            const uvec4 l = (v & 0x00FF00FFu) + ((v >> 8u) & 0x00FF00FFu);
            const uint lanes = l.x + l.y + l.z + l.w;   // two 16-bit lanes of at most 8 x 255
            LD_PART[i] += int((lanes & 0xFFFFu) + (lanes >> 16u)) - 2048;
#endif
        }
    }
#endif
#if LD_MODE == 2
    [[unroll]] for (uint i = 0u; i < nr / 4u; ++i) {
        uint u = tid + i * WG;
        if (u < LD_UNITS) {
            uint kg = u % (BK / 4u), mq = u / (BK / 4u);
            // 4 k rows (a, b, c, d) x 16 columns -> 16 words, one per column, bytes in k order
            [[unroll]] for (uint q = 0u; q < 4u; ++q) {
                uint a = LD_REGS[slot * nr + 4u * i][q], b = LD_REGS[slot * nr + 4u * i + 1u][q];
                uint c = LD_REGS[slot * nr + 4u * i + 2u][q], d = LD_REGS[slot * nr + 4u * i + 3u][q];
                uint t0 = (a & 0x00FF00FFu) | ((b & 0x00FF00FFu) << 8u);   // a0 b0 a2 b2
                uint t1 = ((a >> 8u) & 0x00FF00FFu) | (b & 0xFF00FF00u);   // a1 b1 a3 b3
                uint t2 = (c & 0x00FF00FFu) | ((d & 0x00FF00FFu) << 8u);   // c0 d0 c2 d2
                uint t3 = ((c >> 8u) & 0x00FF00FFu) | (d & 0xFF00FF00u);   // c1 d1 c3 d3
                uint col = 16u * mq + 4u * q;
                uint at = tile + col * KS + (kg >> 2u);
                smem[at][kg & 3u] = (t0 & 0xFFFFu) | (t2 << 16u);                 // a0 b0 c0 d0
                smem[at + KS][kg & 3u] = (t1 & 0xFFFFu) | (t3 << 16u);            // a1 b1 c1 d1
                smem[at + 2u * KS][kg & 3u] = (t0 >> 16u) | (t2 & 0xFFFF0000u);   // a2 b2 c2 d2
                smem[at + 3u * KS][kg & 3u] = (t1 >> 16u) | (t3 & 0xFFFF0000u);   // a3 b3 c3 d3
            }
        }
    }
#elif LD_MODE == 3
    [[unroll]] for (uint i = 0u; i < nr; ++i) {
        uint u = tid + i * WG;
        if (LD_FAST) { if (LD_UNITS % WG == 0u || u < LD_UNITS) smem[tile + LD_S0 + i * LD_RSTEP * BS] = LD_REGS[slot * nr + i]; }
        else if (u < LD_UNITS) smem[tile + (u / (LD_TMN / 16u)) * BS + u % (LD_TMN / 16u)] = LD_REGS[slot * nr + i];
    }
#else
    [[unroll]] for (uint i = 0u; i < nr; ++i) {
        uint u = tid + i * WG;
        if (LD_FAST) { if (LD_UNITS % WG == 0u || u < LD_UNITS) smem[tile + LD_S0 + i * LD_RSTEP * KS] = LD_REGS[slot * nr + i]; }
        else if (u < LD_UNITS) smem[tile + (u / (BK / 16u)) * KS + u % (BK / 16u)] = LD_REGS[slot * nr + i];
    }
#endif
}

// Adds the signed bytes of the shared tile at smem[tile] to this invocation's partial sums
// (rows of a k-contiguous tile; columns of a row-major one). A signed byte is its biased
// unsigned value (byte ^ 0x80) - 128; unsigned bytes are summed two per 16-bit lane.
void LD_SUM(uint tile) {
    const uint tid = gl_LocalInvocationID.x;
#if LD_RSUM
    // (summed at the store)
#elif LD_MODE == 3
    const uint rows = BK / LD_PARTS;
    [[unroll]] for (uint i = 0u; i < LD_PART.length() / 4u; ++i) {
        uint item = tid + i * WG;
        if (item < LD_ITEMS) {
            uint col = item % LD_COLS, part = item / LD_COLS;
            uint even = 0u, odd = 0u;   // bytes 0, 2 and 1, 3 of each word, 16-bit lanes
            [[unroll]] for (uint j = 0u; j < rows; ++j) {   // unrolled: see emu_muladd (lavapipe)
                uint w = smem[tile + (part * rows + j) * BS + (col >> 2u)][col & 3u] ^ 0x80808080u;
                even += w & 0x00FF00FFu;
                odd += (w >> 8u) & 0x00FF00FFu;
            }
            int bias = int(128u * rows);
            LD_PART[4u * i] += int(even & 0xFFFFu) - bias;
            LD_PART[4u * i + 1u] += int(odd & 0xFFFFu) - bias;
            LD_PART[4u * i + 2u] += int(even >> 16u) - bias;
            LD_PART[4u * i + 3u] += int(odd >> 16u) - bias;
        }
    }
#else
    const uint words = (BK / 4u) / LD_PARTS;
    [[unroll]] for (uint i = 0u; i < LD_PART.length(); ++i) {
        uint item = tid + i * WG;
        if (item < LD_ITEMS) {
            uint row = item / LD_PARTS, part = item % LD_PARTS;
            uint lanes = 0u;
            [[unroll]] for (uint j = 0u; j < words; ++j) {   // unrolled: see emu_muladd (lavapipe)
                uint w = part * words + j;
                uint v = smem[tile + row * KS + (w >> 2u)][w & 3u] ^ 0x80808080u;
                lanes += (v & 0x00FF00FFu) + ((v >> 8u) & 0x00FF00FFu);
            }
            LD_PART[i] += int((lanes & 0xFFFFu) + (lanes >> 16u)) - int(512u * words);
        }
    }
#endif
}

// Partial sums -> LD_SUMS (shared, zeroed before the K loop).
void LD_FLUSH() {
    const uint tid = gl_LocalInvocationID.x;
#if LD_RSUM
    [[unroll]] for (uint i = 0u; i < LD_NR; ++i) {
        const uint u = tid + i * WG;   // the unit of register i (coop_keep): row u / (BK / 16)
        if (u < LD_UNITS) atomicAdd(LD_SUMS[u / (BK / 16u)], LD_PART[i]);
    }
#elif LD_MODE == 3
    [[unroll]] for (uint i = 0u; i < LD_PART.length() / 4u; ++i) {
        uint item = tid + i * WG;
        if (item < LD_ITEMS) {
            uint col = item % LD_COLS;
            [[unroll]] for (uint e = 0u; e < 4u; ++e) atomicAdd(LD_SUMS[4u * col + e], LD_PART[4u * i + e]);
        }
    }
#else
    [[unroll]] for (uint i = 0u; i < LD_PART.length(); ++i) {
        uint item = tid + i * WG;
        if (item < LD_ITEMS) atomicAdd(LD_SUMS[item / LD_PARTS], LD_PART[i]);
    }
#endif
}

// the next operand's inclusion defines them anew
#undef LD_MODE
#undef LD_TMN
#undef LD_BUF
#undef LD_BUF4
#undef LD_REGS
#undef LD_PART
#undef LD_SUMS
#undef LD_UNITS
#undef LD_COLS
#undef LD_PARTS
#undef LD_ITEMS
#undef LD_MASK16
#undef LD_LOAD
#undef LD_STORE
#undef LD_SUM
#undef LD_FLUSH
#undef LD_OP
#undef LD_SETUP
#undef LD_Q0
#undef LD_S0
#undef LD_R
#undef LD_FAST
#undef LD_RSTEP
#undef LD_AT
#undef LD_NR
#undef LD_RSUM
