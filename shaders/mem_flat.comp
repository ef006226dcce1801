#version 450
// DIAGONAL_MATRIX / DIAGONAL_MATRIX1 on a packed output for GPUs (DevicePolicy.memory_kernel
// == "gpu"; planned by kompute_dml/ops/gpu_flat.py), for rows that are not on the 16-byte grid
// (e.g. 8-bit rows of odd length). mem_rows.comp cuts every row on the grid, so each such row
// has up to two partial chunks written word by word with atomics; here the whole output is
// one contiguous byte range cut into 16-byte chunks, each written once, with one uvec4 store,
// by one invocation. Only the range's first and last chunk can be partial (word by word,
// STORE_FIELD for a word shared with bytes outside the output).
//
// @variant flat_diag_b8     ELEM_BITS=8  MODE=1
// @variant flat_diag_b16    ELEM_BITS=16 MODE=1
// @variant flat_diag_b32    ELEM_BITS=32 MODE=1
// @variant flat_diag_b64    ELEM_BITS=64 MODE=1
// @variant flat_diag_in_b8  ELEM_BITS=8  MODE=2
// @variant flat_diag_in_b16 ELEM_BITS=16 MODE=2
// @variant flat_diag_in_b32 ELEM_BITS=32 MODE=2
// @variant flat_diag_in_b64 ELEM_BITS=64 MODE=2
//
// MODE 1: output = band ? Value : 0; MODE 2: output = band ? Value : input, the input packed
// with the output's sizes (so input element i lies at the same flat position i).
//
// A chunk may span row boundaries (several rows when a row is shorter than 16 bytes): the
// (y, x) of its first element cost one magic-number division (two with batch dimensions),
// then its elements are walked as row segments. Per segment, t = x + rows - 1 - y runs over
// [t0, t0 + len), and the elements whose t lies in [band_lo, band_hi) form one element range
// (the same test as mem_rows.comp; see diagonal.comp for the unsigned domain). The ranges of
// all segments make a bit mask of the chunk's N elements, expanded to per-word bit masks, so
// the chunk is merged a word at a time (16 elements of 8 bits cost what 2 of 64 bits cost).
// Work: a work group takes 256 * VECS consecutive chunks; invocation `lane` takes chunks
// lane, lane + 256, ..., so each store instruction of a subgroup writes one contiguous block.
// The groups cover ceil(total / N) chunks; a range starting mid-chunk touches one chunk
// more, always partial, which lane 0 of the last group writes.

#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "gpu_common.glsl"

layout(local_size_x = 256) in;

#define HAS_INPUT (MODE == 2)
#define W uint(ELEM_BITS)
#define N (128u / W)  // elements per 16-byte chunk
#if ELEM_BITS <= 32
#define E (32u / W)   // elements per 32-bit word
#endif

#if HAS_INPUT
layout(std430, binding = 0) readonly buffer InBuf { uint src[]; };
layout(std430, binding = 0) readonly buffer InBuf4 { uvec4 src4[]; };
#define OUT_BINDING 1
#else
#define OUT_BINDING 0
#endif
// Binding offsets are multiples of 16 bytes, so the uvec4 view is aligned.
layout(std430, binding = OUT_BINDING) writeonly buffer OutBuf4 { uvec4 dst4[]; };
layout(std430, binding = OUT_BINDING) buffer OutBuf { uint dst[]; };

layout(push_constant) uniform PC {  // 16 words = 64 bytes
    uint out_off;     // 0: output element 0, in elements (binding offset / element size)
    uint in_off;      // 1: input element 0, in elements
    uint ngroups;     // 2: work groups with work (a folded grid may have more)
    uint total;       // 3: output elements
    uint cover;       // 4: chunks the groups cover, ceil(total / N)
    uint cols;        // 5: elements per row
    uint rows;        // 6: rows per matrix
    uint cols_magic;  // 7: division magics (gpu_fast_div)
    uint rows_magic;  // 8
    uint shifts;      // 9: cols shift | rows shift << 6
    uint rows_m1;     // 10: rows - 1
    uint ub;          // 11: shifted, clamped DiagonalFillBegin (see diagonal.comp)
    uint ue;          // 12: shifted, clamped DiagonalFillEnd
    uint normal;      // 13: End >= Begin
    uint val_lo;      // 14: Value: its bit pattern repeated over a word (sub-word types) / low word
    uint val_hi;      // 15: high word (64-bit types)
} pc;

// Bits [0, n) of a word, n <= 32.
uint low_bits(uint n) { return n >= 32u ? 0xFFFFFFFFu : (1u << n) - 1u; }

#if ELEM_BITS == 64
#define VALUE4 uvec4(pc.val_lo, pc.val_hi, pc.val_lo, pc.val_hi)
#else
#define VALUE4 uvec4(pc.val_lo)
#endif

// The band as one t-range: End >= Begin gives Value inside [ub, ue), End < Begin (then
// ue <= ub after the host's monotone clamping) Value outside [ue, ub).
bool band_normal() { return pc.normal != 0u; }
uint band_lo() { return band_normal() ? pc.ub : pc.ue; }
uint band_hi() { return band_normal() ? pc.ue : pc.ub; }

// Bit j set: chunk element j takes Value, for the chunk elements [jlo, jhi), element jlo
// being flat output element `first` (bits outside [jlo, jhi) are 0).
uint value_elements(uint first, uint jlo, uint jhi) {
    uint q = gpu_fast_div(first, pc.cols_magic, pc.shifts & 63u);
    uint x = first - q * pc.cols;
    uint y = q;
    if (q >= pc.rows) y = q - gpu_fast_div(q, pc.rows_magic, (pc.shifts >> 6) & 63u) * pc.rows;
    uint lo = band_lo(), hi = band_hi();
    uint inside = 0u;  // elements whose t lies in [lo, hi)
    for (uint j = jlo; j < jhi;) {  // one row segment per iteration
        uint len = min(jhi - j, pc.cols - x);
        uint t0 = x + pc.rows_m1 - y;
        uint a = lo > t0 ? min(lo - t0, len) : 0u;
        uint b = hi > t0 ? min(hi - t0, len) : 0u;  // a <= b as lo <= hi
        inside |= low_bits(j + b) & ~low_bits(j + a);
        j += len;
        x = 0u;
        y = y == pc.rows_m1 ? 0u : y + 1u;  // the next row (of the next matrix after the last)
    }
    return band_normal() ? inside : (low_bits(jhi) & ~low_bits(jlo)) & ~inside;
}

// The bits of word u (0..3) of a chunk that hold the elements set in `m`.
uint word_mask(uint m, uint u) {
#if ELEM_BITS == 8
    // 4 element bits -> one bit per byte (multiply without carries), then 0x00 / 0xFF bytes
    return ((((m >> (4u * u)) & 15u) * 0x00204081u) & 0x01010101u) * 0xFFu;
#elif ELEM_BITS == 16
    uint b = (m >> (2u * u)) & 3u;
    return ((b & 1u) * 0x0000FFFFu) | ((b >> 1u) * 0xFFFF0000u);
#elif ELEM_BITS == 32
    return ((m >> u) & 1u) * 0xFFFFFFFFu;
#else
    return ((m >> (u >> 1u)) & 1u) * 0xFFFFFFFFu;
#endif
}

// v with the elements set in m replaced by Value.
uvec4 merge_value(uvec4 v, uint m) {
    uvec4 val = VALUE4;
    [[unroll]] for (uint u = 0u; u < 4u; ++u) {
        uint wm = word_mask(m, u);
        v[u] = (val[u] & wm) | (v[u] & ~wm);
    }
    return v;
}

#if HAS_INPUT
#if ELEM_BITS <= 32
// Input element ia (in elements from the binding's start), in the low W bits.
uint in_element(uint ia) {
#if ELEM_BITS == 32
    return src[ia];
#else
    return bitfieldExtract(src[ia / E], int((ia % E) * W), ELEM_BITS);
#endif
}
#endif

// The input's N elements from flat element `first` on (a full chunk of the output).
uvec4 input_chunk(uint first) {
    uint ia = pc.in_off + first;
    if (ia % N == 0u) return src4[ia / N];  // the input at the output's 16-byte phase
    uvec4 v;
    [[unroll]] for (uint u = 0u; u < 4u; ++u) {
#if ELEM_BITS == 64
        v[u] = src[2u * (ia + (u >> 1u)) + (u & 1u)];
#else
        uint word = 0u;
        [[unroll]] for (uint i = 0u; i < E; ++i) word |= in_element(ia + u * E + i) << (i * W);
        v[u] = word;
#endif
    }
    return v;
}
#endif

// A partial chunk c (the range's first or last): only its output elements [jlo, jhi) are
// written (and only their input elements read: the aligned 16 bytes around them may lie
// past the buffer), whole words with plain stores, shared words with STORE_FIELD.
void edge_chunk(uint c, uint phase, uint end) {
    uint jlo = c * N < phase ? phase - c * N : 0u;
    uint jhi = min(N, end - c * N);
    uint first = c * N + jlo - phase;
    uint m = value_elements(first, jlo, jhi);
    uvec4 val = VALUE4;
    uint w0 = (pc.out_off / N + c) * 4u;  // first word of the chunk
    [[unroll]] for (uint u = 0u; u < 4u; ++u) {
#if ELEM_BITS == 64
        uint j = u >> 1u;
        if (j < jlo || j >= jhi) continue;
#if HAS_INPUT
        uint keep = src[2u * (pc.in_off + first + j - jlo) + (u & 1u)];
#else
        uint keep = 0u;
#endif
        uint wm = word_mask(m, u);
        dst[w0 + u] = (val[u] & wm) | (keep & ~wm);
#else
        uint a = max(jlo, u * E), b = min(jhi, u * E + E);  // the word's output elements
        if (a >= b) continue;
        uint keep = 0u;
#if HAS_INPUT
        for (uint j = a; j < b; ++j) keep |= in_element(pc.in_off + first + j - jlo) << ((j - u * E) * W);
#endif
        uint wm = word_mask(m, u);
        uint word = (val[u] & wm) | (keep & ~wm);
        uint lo = a - u * E, hi = b - u * E;
        if (hi - lo == E) {
            dst[w0 + u] = word;
        } else {
            STORE_FIELD(dst, w0 + u, lo * W, (hi - lo) * W, word >> (lo * W));
        }
#endif
    }
}

void main() {
    uint g = linear_group_id();
    if (g >= pc.ngroups) return;
    uint phase = pc.out_off % N;  // the range starts `phase` elements into its first chunk
    uint a0 = pc.out_off / N;     // that chunk, in 16-byte units
    uint end = phase + pc.total;  // chunk c holds output elements iff c * N < end
    uint lane = gl_LocalInvocationID.x;
    uint c0 = g * (256u * VECS) + lane;
    uint all_n = low_bits(N);
#if HAS_INPUT
    // Every chunk's input load is issued before the first store.
    uint m[VECS];
    uvec4 v[VECS];
    [[unroll]] for (uint k = 0u; k < VECS; ++k) {
        uint c = c0 + k * 256u;
        if (c < pc.cover && c * N >= phase && c * N + N <= end) {
            m[k] = value_elements(c * N - phase, 0u, N);
            v[k] = m[k] == all_n ? uvec4(0u) : input_chunk(c * N - phase);  // all Value: no read
        }
    }
    [[unroll]] for (uint k = 0u; k < VECS; ++k) {
        uint c = c0 + k * 256u;
        if (c >= pc.cover) break;
        if (c * N >= phase && c * N + N <= end) {
            dst4[a0 + c] = m[k] == 0u ? v[k] : merge_value(v[k], m[k]);
        } else {
            edge_chunk(c, phase, end);
        }
    }
#else
    [[unroll]] for (uint k = 0u; k < VECS; ++k) {
        uint c = c0 + k * 256u;
        if (c >= pc.cover) break;
        if (c * N >= phase && c * N + N <= end) {
            uint mk = value_elements(c * N - phase, 0u, N);
            dst4[a0 + c] = mk == 0u ? uvec4(0u) : (mk == all_n ? VALUE4 : merge_value(uvec4(0u), mk));
        } else {
            edge_chunk(c, phase, end);
        }
    }
#endif
    if (lane == 0u && g + 1u == pc.ngroups && pc.cover * N < end) edge_chunk(pc.cover, phase, end);
}
