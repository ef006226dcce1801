// One operand's global -> registers -> shared-memory staging for matmul_coop.comp, included once
// per operand (A, then B) with these macros set:
//   LD_MODE   0: any strides, byte loads from 32-bit words (any K, any layout)
//             1: k contiguous (unit K stride), every other stride a multiple of 16 bytes: uvec4 loads,
//                stored as they are ([TMN][KS] tile, k contiguous)
//             2: the tile dimension (M of A, N of B) contiguous, every other stride a multiple of 16
//                bytes: uvec4 loads of 4 k rows x 16 columns, transposed to k-contiguous words
//             3: B only, N contiguous as in mode 2, stored row-major ([BK][BS] tile, n contiguous)
//   LD_TMN    the tile's M or N size (BM or BN); LD_BUF / LD_BUF4 the operand as uint / uvec4;
//   LD_REGS, LD_PART: this invocation's staging registers and row-sum partials;
//   LD_SUMS:  the shared per-row (A) or per-column (B) sums; LD_LOAD, LD_STORE, LD_SUM, LD_FLUSH:
//   the function names.
// Every value is stored as a signed byte: unsigned inputs are XOR-ed with 0x80 (x - 128), and
// padding (rows past M or N, k past K) is 0, which adds nothing to products or sums.
// Strides, offsets and sizes are in bytes (elements of an 8-bit type).

#if LD_MODE == 2
const uint LD_UNITS = (BK / 4u) * (LD_TMN / 16u);          // 4 k rows x 16 columns each
uvec4 LD_REGS[4u * ((LD_UNITS + WG - 1u) / WG)];
#elif LD_MODE == 3
const uint LD_UNITS = BK * (LD_TMN / 16u);                 // one uvec4 of one k row each
uvec4 LD_REGS[(LD_UNITS + WG - 1u) / WG];
#else
const uint LD_UNITS = LD_TMN * (BK / 16u);                 // 16 k of one row each
uvec4 LD_REGS[(LD_UNITS + WG - 1u) / WG];
#endif

#if LD_MODE == 3
// column sums of a [BK][BS] tile: each item is one word column (4 columns) over BK / LD_PARTS rows
const uint LD_COLS = LD_TMN / 4u;
const uint LD_PARTS = (WG >= LD_COLS) ? (WG / LD_COLS) : 1u;
const uint LD_ITEMS = LD_COLS * LD_PARTS;
int LD_PART[4u * ((LD_ITEMS + WG - 1u) / WG)];
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

// Global -> registers for the tile at (mn0, k0). base: the matrix's first byte; s_mn, s_k:
// strides; MN, K: extents; xe: 0x80 for an unsigned operand, else 0.
void LD_LOAD(uint base, uint s_mn, uint s_k, uint MN, uint K, uint mn0, uint k0, uint xe) {
    const uint tid = gl_LocalInvocationID.x;
    const uint xw = xe * 0x01010101u;
#if LD_MODE == 2
    [[unroll]] for (uint i = 0u; i < LD_REGS.length() / 4u; ++i) {
        uint u = tid + i * WG;
        uint kg = u % (BK / 4u), mq = u / (BK / 4u);   // k group fastest: see the store's banks
        uint mn = mn0 + 16u * mq;
        bool ok = u < LD_UNITS && mn < MN;
        uint keep = ok ? min(16u, MN - mn) : 0u;
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            uint k = k0 + 4u * kg + j;
            uvec4 v = uvec4(0u);
            if (ok && k < K) v = LD_MASK16(LD_BUF4[(base + k * s_k + mn) >> 4u] ^ xw, keep);
            LD_REGS[4u * i + j] = v;
        }
    }
#elif LD_MODE == 3
    [[unroll]] for (uint i = 0u; i < LD_REGS.length(); ++i) {
        uint u = tid + i * WG;
        uint nq = u % (LD_TMN / 16u), kr = u / (LD_TMN / 16u);
        uint k = k0 + kr, mn = mn0 + 16u * nq;
        uvec4 v = uvec4(0u);
        if (u < LD_UNITS && k < K && mn < MN) v = LD_MASK16(LD_BUF4[(base + k * s_k + mn) >> 4u] ^ xw, MN - mn);
        LD_REGS[i] = v;
    }
#else
    [[unroll]] for (uint i = 0u; i < LD_REGS.length(); ++i) {
        uint u = tid + i * WG;
        uint kq = u % (BK / 16u), row = u / (BK / 16u);
        uint mn = mn0 + row, k = k0 + 16u * kq;
        uvec4 v = uvec4(0u);
        if (u < LD_UNITS && mn < MN && k < K) {
#if LD_MODE == 1
            v = LD_MASK16(LD_BUF4[(base + mn * s_mn + k) >> 4u] ^ xw, K - k);
#else
            uint at = base + mn * s_mn + k * s_k;
            [[unroll]] for (uint e = 0u; e < 16u; ++e) {
                if (k + e < K) {
                    uint idx = at + e * s_k;
                    uint byte = (bitfieldExtract(LD_BUF[idx >> 2u], int(8u * (idx & 3u)), 8) ^ xe) & 0xFFu;
                    v[e >> 2u] |= byte << (8u * (e & 3u));
                }
            }
#endif
        }
        LD_REGS[i] = v;
    }
#endif
}

// Registers -> the shared tile starting at smem[tile].
void LD_STORE(uint tile) {
    const uint tid = gl_LocalInvocationID.x;
#if LD_MODE == 2
    [[unroll]] for (uint i = 0u; i < LD_REGS.length() / 4u; ++i) {
        uint u = tid + i * WG;
        if (u < LD_UNITS) {
            uint kg = u % (BK / 4u), mq = u / (BK / 4u);
            // 4 k rows (a, b, c, d) x 16 columns -> 16 words, one per column, bytes in k order
            [[unroll]] for (uint q = 0u; q < 4u; ++q) {
                uint a = LD_REGS[4u * i][q], b = LD_REGS[4u * i + 1u][q];
                uint c = LD_REGS[4u * i + 2u][q], d = LD_REGS[4u * i + 3u][q];
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
    [[unroll]] for (uint i = 0u; i < LD_REGS.length(); ++i) {
        uint u = tid + i * WG;
        if (u < LD_UNITS) smem[tile + (u / (LD_TMN / 16u)) * BS + u % (LD_TMN / 16u)] = LD_REGS[i];
    }
#else
    [[unroll]] for (uint i = 0u; i < LD_REGS.length(); ++i) {
        uint u = tid + i * WG;
        if (u < LD_UNITS) smem[tile + (u / (BK / 16u)) * KS + u % (BK / 16u)] = LD_REGS[i];
    }
#endif
}

// Adds the signed bytes of the shared tile at smem[tile] to this invocation's partial sums
// (rows of a k-contiguous tile; columns of a row-major one). A signed byte is its biased
// unsigned value (byte ^ 0x80) - 128; unsigned bytes are summed two per 16-bit lane.
void LD_SUM(uint tile) {
    const uint tid = gl_LocalInvocationID.x;
#if LD_MODE == 3
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
#if LD_MODE == 3
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
