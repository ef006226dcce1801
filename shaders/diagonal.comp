#version 450
// DML_DIAGONAL_MATRIX and DML_DIAGONAL_MATRIX1 (seeds 000-002), every data type.
//
//   topX     = x - y
//   useValue = (End >= Begin) ^ (topX >= Begin) ^ (topX < End)
//   Output   = useValue ? Value : (HAS_INPUT ? Input : 0)
//
// DIAGONAL_MATRIX is the case Begin = Offset, End = Offset + 1 without input.
// The host shifts everything into an overflow-free unsigned domain:
//   t  = x + (rows - 1) - y          in [0, rows + cols - 2]  (< 2^32: rows * cols < 2^32)
//   ub = clamp(Begin + rows - 1, 0, rows + cols - 1), ue likewise for End
// so that (t >= ub) == (topX >= Begin) and (t < ue) == (topX < End) for every element,
// whatever Begin and End are (INT32_MIN, INT32_MAX, inverted ranges).
//
// @variant diag_b8      ELEM_BITS=8  HAS_INPUT=0
// @variant diag_b16     ELEM_BITS=16 HAS_INPUT=0
// @variant diag_b32     ELEM_BITS=32 HAS_INPUT=0
// @variant diag_b64     ELEM_BITS=64 HAS_INPUT=0
// @variant diag_in_b8   ELEM_BITS=8  HAS_INPUT=1
// @variant diag_in_b16  ELEM_BITS=16 HAS_INPUT=1
// @variant diag_in_b32  ELEM_BITS=32 HAS_INPUT=1
// @variant diag_in_b64  ELEM_BITS=64 HAS_INPUT=1
//
// Work decomposition. The host orders the output's dimensions by decreasing stride (memory
// order) and finds the innermost ones that are contiguous: they form "runs" of L elements at
// consecutive addresses (a packed output is one run). The words a run touches are cut into
// chunks of 16 bytes (UNITS units: 32-bit words, or 64-bit elements); invocation (run r,
// chunk c) computes the elements of run r in chunk c. A word whose bytes are all elements
// of the run is written whole with a plain store, four of them as one 16-byte store when the
// chunk is aligned (the fast path: packed innermost dimension, no atomics); only the words
// a run shares with bytes that are not its elements (run ends, gaps, odd strides) use
// STORE_FIELD. Consecutive invocations write consecutive 16-byte chunks: coalesced, one
// pass, and the no-input variants never read memory. Index arithmetic (divisions) happens
// once per invocation; the elements of the chunk are then walked with carries.

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

#if HAS_INPUT
layout(std430, binding = 0) readonly buffer InBuf { uint src[]; };
#define OUT_BINDING 1
#else
#define OUT_BINDING 0
#endif
// Two views of the output: 16-byte stores of aligned whole chunks, and words (plain stores
// or STORE_FIELD's atomics). Binding offsets are multiples of 16 bytes.
layout(std430, binding = OUT_BINDING) writeonly buffer OutBuf4 { uvec4 dst4[]; };
layout(std430, binding = OUT_BINDING) buffer OutBuf { uint dst[]; };

#define MAX_RANK 4
layout(push_constant) uniform PC {    // 30 words = 120 bytes
    uint out_off;     // 0: output element 0, in elements (binding offset / element size)
    uint in_off;      // 1: input element 0, in elements
    uint total;       // 2: invocations = runs * chunks
    uint chunks;      // 3: 16-byte chunks per run (invocations per run)
    uint run_len;     // 4: L, elements per run
    uint dims;        // 5: rank | split << 4 | ypos << 8 | xpos << 12 (see below)
    uint rows_m1;     // 6: rows - 1
    uint ub;          // 7: shifted, clamped DiagonalFillBegin
    uint ue;          // 8: shifted, clamped DiagonalFillEnd
    uint normal;      // 9: End >= Begin (on the original int32 values)
    uint val_lo;      // 10: Value's bit pattern (low word; the element for sub-word types)
    uint val_hi;      // 11: high word (64-bit types)
    uint div_shifts;  // 12: 6-bit shift pairs of the magic divisions: chunks, then size[0..3]
    uint chunks_magic;          // 13
    uint size[MAX_RANK];        // 14..17
    uint out_stride[MAX_RANK];  // 18..21
    uint in_stride[MAX_RANK];   // 22..25
    uint size_magic[MAX_RANK];  // 26..29
} pc;
// dims: rank = dimensions in memory order (outermost first), 1..4; dimensions [split, rank)
// form a run; ypos / xpos = index of the row / column dimension (MAX_RANK: absent, so 0).

// n / d for a run-time invariant d without a hardware division (Granlund & Montgomery,
// "Division by invariant integers using multiplication", fig. 4.1): exact for every 32-bit
// n; the host computes magic = floor(2^32 (2^l - d) / d) + 1 and sh = (l - 1) << 1 | min(l, 1)
// with l = ceil(log2 d).
uint fast_div(uint n, uint magic, uint sh) {
    uint hi, lo;
    umulExtended(n, magic, hi, lo);
    return (hi + ((n - hi) >> (sh & 1u))) >> (sh >> 1);
}

#if ELEM_BITS >= 32
#define ELEMS_PER_WORD 1u
#else
#define ELEMS_PER_WORD (32u / ELEM_BITS)
#endif
#if ELEM_BITS == 64
#define UNITS 2u   // a unit is one 64-bit element (two words)
#else
#define UNITS 4u   // a unit is one 32-bit word
#endif

void main() {
    // Invocation index without 32-bit overflow however the grid was folded.
    uint gid = linear_group_id();
    if (pc.total == 0u || gid > (pc.total - 1u) / gl_WorkGroupSize.x) return;
    uint base_inv = gid * gl_WorkGroupSize.x;
    if (gl_LocalInvocationID.x >= pc.total - base_inv) return;
    uint inv = base_inv + gl_LocalInvocationID.x;

    uint rank = pc.dims & 15u, split = (pc.dims >> 4) & 15u;
    uint ypos = (pc.dims >> 8) & 15u, xpos = (pc.dims >> 12) & 15u;
    uint r = fast_div(inv, pc.chunks_magic, pc.div_shifts & 63u);
    uint c = inv - r * pc.chunks;

    uint coord[MAX_RANK + 1];
    coord[MAX_RANK] = 0u;  // absent row/column dimension
    // Outer coordinates from the run index.
    uint rem = r;
    uint run_base = pc.out_off;
    for (int d = int(split) - 1; d >= 0; --d) {
        uint q = fast_div(rem, pc.size_magic[d], (pc.div_shifts >> (6 * d + 6)) & 63u);
        coord[d] = rem - q * pc.size[d];
        rem = q;
        run_base += coord[d] * pc.out_stride[d];
    }
    // Unit k of the run holds run positions [k*E - phase, (k+1)*E - phase) (E elements per
    // word); the first unit starts at lane `phase`.
    uint phase = run_base % ELEMS_PER_WORD;
    uint k0 = c * UNITS;
    uint p = (k0 == 0u) ? 0u : k0 * ELEMS_PER_WORD - phase;  // first element (run position)
    if (p >= pc.run_len) return;

    // Inner coordinates of p.
    rem = p;
    for (int d = int(rank) - 1; d >= int(split); --d) {
        uint q = fast_div(rem, pc.size_magic[d], (pc.div_shifts >> (6 * d + 6)) & 63u);
        coord[d] = rem - q * pc.size[d];
        rem = q;
    }
#if HAS_INPUT
    uint in_addr = pc.in_off;
    for (uint d = 0u; d < rank; ++d) in_addr += coord[d] * pc.in_stride[d];
    uint in_step = pc.in_stride[rank - 1u];
#endif
    // Walking the innermost dimension changes t by +1 (it is x), -1 (y) or 0 (a batch
    // dimension); the outer coordinates are only touched when it wraps.
    uint last = rank - 1u;
    uint ci = coord[last];
    uint t_step = (last == xpos ? 1u : 0u) - (last == ypos ? 1u : 0u);  // mod 2^32
    uint t = coord[xpos] + pc.rows_m1 - coord[ypos];

    uint wv[4];          // the chunk's words
    uint shift[UNITS];   // per unit (sub-word): first bit and bit count that are run elements
    uint nbits[UNITS];
    uint units = 0u;
    for (uint u = 0u; u < UNITS; ++u) {
        if (p >= pc.run_len) break;
        uint lane0 = (k0 + u == 0u) ? phase : 0u;
        uint n = min(ELEMS_PER_WORD - lane0, pc.run_len - p);
        uint word = 0u;
        for (uint i = 0u; i < ELEMS_PER_WORD; ++i) {
            if (i >= n) break;
            bool use_value = (pc.normal != 0u) != (t >= pc.ub);
            use_value = use_value != (t < pc.ue);
#if ELEM_BITS == 64
            uint lo = 0u, hi = 0u;
            if (use_value) {
                lo = pc.val_lo;
                hi = pc.val_hi;
            }
#if HAS_INPUT
            else {
                lo = src[2u * in_addr];
                hi = src[2u * in_addr + 1u];
            }
#endif
            wv[2u * u] = lo;
            wv[2u * u + 1u] = hi;
#else
            uint v = use_value ? pc.val_lo : 0u;
#if HAS_INPUT
#if ELEM_BITS == 32
            if (!use_value) v = src[in_addr];
#else
            if (!use_value) {
                v = bitfieldExtract(src[in_addr / ELEMS_PER_WORD],
                                    int((in_addr % ELEMS_PER_WORD) * uint(ELEM_BITS)), ELEM_BITS);
            }
#endif
#endif
#if ELEM_BITS == 32
            word = v;
#else
            word |= (v & ((1u << ELEM_BITS) - 1u)) << ((lane0 + i) * uint(ELEM_BITS));
#endif
#endif
            // Next element of the run (row-major over the run's dimensions).
            ci += 1u;
            t += t_step;
#if HAS_INPUT
            in_addr += in_step;
#endif
            if (ci == pc.size[last]) {
                // Carry into the run's outer dimensions (at most once per innermost row);
                // past the run's end this only disturbs coordinates no longer used.
                ci = 0u;
                coord[last] = 0u;
                for (int d = int(last) - 1; d >= int(split); --d) {
                    coord[d] += 1u;
                    if (coord[d] < pc.size[d]) break;
                    coord[d] = 0u;
                }
                t = coord[xpos] + pc.rows_m1 - coord[ypos];
#if HAS_INPUT
                in_addr = pc.in_off;
                for (uint d = 0u; d < rank; ++d) in_addr += coord[d] * pc.in_stride[d];
#endif
            }
        }
#if ELEM_BITS < 64
        wv[u] = word;
#endif
        shift[u] = lane0 * uint(ELEM_BITS);
        nbits[u] = n * uint(ELEM_BITS);
        p += n;
        units = u + 1u;
    }

    // First word of the chunk, in 32-bit words.
#if ELEM_BITS == 64
    uint w0 = 2u * (run_base + k0);
#else
    uint w0 = run_base / ELEMS_PER_WORD + k0;
#endif
    bool all_whole = (units == UNITS) && (w0 % 4u == 0u);
#if ELEM_BITS < 32
    for (uint u = 0u; u < UNITS; ++u) all_whole = all_whole && (nbits[u] == 32u);
#endif
    if (all_whole) {
        dst4[w0 / 4u] = uvec4(wv[0], wv[1], wv[2], wv[3]);
        return;
    }
    for (uint u = 0u; u < units; ++u) {
#if ELEM_BITS == 64
        dst[w0 + 2u * u] = wv[2u * u];
        dst[w0 + 2u * u + 1u] = wv[2u * u + 1u];
#else
        if (nbits[u] == 32u) {
            dst[w0 + u] = wv[u];  // every byte of this word is an element of the run
        } else {
            STORE_FIELD(dst, w0 + u, shift[u], nbits[u], wv[u] >> shift[u]);
        }
#endif
    }
}
