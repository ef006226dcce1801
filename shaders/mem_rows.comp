#version 450
// Row-tiled memory kernels for GPUs (DevicePolicy.memory_kernel == "gpu"): a strided COPY /
// ACTIVATION_IDENTITY whose output rows are contiguous, and DIAGONAL_MATRIX /
// DIAGONAL_MATRIX1 (see diagonal.comp for the band test and its unsigned domain).
//
// @variant rows_copy_b8     ELEM_BITS=8  MODE=0
// @variant rows_copy_b16    ELEM_BITS=16 MODE=0
// @variant rows_copy_b32    ELEM_BITS=32 MODE=0
// @variant rows_copy_b64    ELEM_BITS=64 MODE=0
// @variant rows_diag_b8     ELEM_BITS=8  MODE=1
// @variant rows_diag_b16    ELEM_BITS=16 MODE=1
// @variant rows_diag_b32    ELEM_BITS=32 MODE=1
// @variant rows_diag_b64    ELEM_BITS=64 MODE=1
// @variant rows_diag_in_b8  ELEM_BITS=8  MODE=2
// @variant rows_diag_in_b16 ELEM_BITS=16 MODE=2
// @variant rows_diag_in_b32 ELEM_BITS=32 MODE=2
// @variant rows_diag_in_b64 ELEM_BITS=64 MODE=2
//
// MODE 0: output = input; 1: output = band ? Value : 0; 2: output = band ? Value : input.
//
// The output is a set of rows: x (the innermost dimension, output stride 1) by up to three
// outer dimensions (batch, and y for the diagonals), with any strides. Each row is cut along
// the buffer's 16-byte grid into chunks; a chunk whose 16 bytes are all elements of the row
// is "full" and written with one uvec4 store, the (at most two) partial chunks at a row's
// ends word by word, with STORE_FIELD for a word the row shares with other bytes, so bytes
// outside the output never change. A work group covers a span of 256 * VECS chunks of one
// row (short rows: 2^k threads per row, several rows per group); invocation `lane` takes
// chunks lane, lane + threads, ... (contiguous per store instruction). The spans cover the
// ceil(cols / N) chunks of a row that starts on the grid; a row starting mid-chunk can touch
// one more, always partial, which lane 0 of the row's last span writes (so a row of whole
// chunks has no work group without work). Row coordinates cost one magic division per outer
// dimension per invocation; within a row no division is needed.
//
// Full chunks are computed a word at a time for every element width, the same work for 8-bit
// as for 32-bit elements: for the diagonals, t = x + rows - 1 - y runs over [t0, t0 + N) and
// the elements taking Value are those whose t is inside (normal band, End >= Begin) or
// outside (End < Begin) [band_lo, band_hi), an element range [r0, r1) of the chunk; a chunk
// entirely on one side is the Value splat or the input's (or zero's) 16 bytes, a chunk
// crossing an edge is merged word by word with bit masks of [r0, r1). Input chunks are one
// uvec4 load when the input's row is contiguous (x stride 1) and starts at the output row's
// 16-byte phase, one element repeated when x is broadcast (stride 0), else N gathered
// elements; a chunk entirely of Value reads no input. MODE 1 has no loads and stores each
// chunk as it is computed; the modes with an input issue all their chunks' loads first.

#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "gpu_common.glsl"

layout(local_size_x = 256) in;

#define HAS_INPUT (MODE != 1)
#define HAS_BAND (MODE != 0)
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

layout(push_constant) uniform PC {  // 27 words = 108 bytes
    uint out_off;      // 0: output element 0, in elements (binding offset / element size)
    uint in_off;       // 1: input element 0, in elements
    uint ngroups;      // 2: work groups with work (a folded grid may have more)
    uint cols;         // 3: elements per row
    uint nrows;        // 4: rows (product of the outer sizes)
    uint spans;        // 5: work groups per block of rows
    uint spans_magic;  // 6
    uint packed;       // 7: 6-bit division shifts (spans, size[0..2]) | ypos << 24 | tpr_log2 << 26
    uint in_xs;        // 8: input stride of x, in elements
    uint rows_m1;      // 9: rows - 1 (diagonals)
    uint ub;           // 10: shifted, clamped DiagonalFillBegin (see diagonal.comp)
    uint ue;           // 11: shifted, clamped DiagonalFillEnd
    uint normal;       // 12: End >= Begin
    uint val_lo;       // 13: Value: its bit pattern repeated over a word (sub-word types) / low word
    uint val_hi;       // 14: high word (64-bit types)
    uint size[3];      // 15..17: outer dimensions, outermost first (1 where unused)
    uint magic[3];     // 18..20: their division magics
    uint out_stride[3];  // 21..23
    uint in_stride[3];   // 24..26
} pc;
// ypos: which outer dimension is y (3: none, y == 0); tpr_log2: log2 of the invocations per row.

// Bits [0, n) of a word, n <= 32.
uint low_bits(uint n) { return n >= 32u ? 0xFFFFFFFFu : (1u << n) - 1u; }

#if ELEM_BITS == 64
#define VALUE4 uvec4(pc.val_lo, pc.val_hi, pc.val_lo, pc.val_hi)
#else
#define VALUE4 uvec4(pc.val_lo)
#endif

#if HAS_BAND
// The band as one t-range: End >= Begin gives Value inside [ub, ue), End < Begin (then
// ue <= ub after the host's monotone clamping) Value outside [ue, ub).
bool band_normal() { return pc.normal != 0u; }
uint band_lo() { return band_normal() ? pc.ub : pc.ue; }
uint band_hi() { return band_normal() ? pc.ue : pc.ub; }
bool use_value(uint t) { return (t >= band_lo() && t < band_hi()) == band_normal(); }

// The chunk element j whose t = t0 + j is the first at or past b, clamped to [0, N].
uint chunk_index(uint b, uint t0) { return b > t0 ? min(b - t0, N) : 0u; }

// The bits of word u (0..3) of a chunk that hold its elements [r0, r1) (0 <= r0 <= r1 <= N).
uint range_mask(uint u, uint r0, uint r1) {
#if ELEM_BITS == 64
    uint e = u >> 1u;
    return (e >= r0 && e < r1) ? 0xFFFFFFFFu : 0u;
#else
    uint first = u * E;
    uint lo = clamp(r0, first, first + E) - first;
    uint hi = clamp(r1, first, first + E) - first;
    return low_bits(hi * W) & ~low_bits(lo * W);
#endif
}
#endif

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

// The input's N elements under a full chunk whose first element is x0 of the row.
uvec4 input_chunk(uint x0, uint in_row, uint phase) {
    if (pc.in_xs == 1u && in_row % N == phase) return src4[(in_row + x0) / N];
    if (pc.in_xs == 0u) {  // x broadcast: one element, repeated
#if ELEM_BITS == 64
        return uvec4(src[2u * in_row], src[2u * in_row + 1u], src[2u * in_row], src[2u * in_row + 1u]);
#else
        return uvec4(in_element(in_row) * (0xFFFFFFFFu / low_bits(W)));  // in every lane of the word
#endif
    }
    uvec4 v;
    [[unroll]] for (uint u = 0u; u < 4u; ++u) {
#if ELEM_BITS == 64
        v[u] = src[2u * (in_row + (x0 + (u >> 1u)) * pc.in_xs) + (u & 1u)];
#else
        uint word = 0u;
        [[unroll]] for (uint i = 0u; i < E; ++i) word |= in_element(in_row + (x0 + u * E + i) * pc.in_xs) << (i * W);
        v[u] = word;
#endif
    }
    return v;
}
#endif

// A full chunk (all N elements in the row, x0 = its first x).
uvec4 full_chunk(uint x0, uint y, uint in_row, uint phase) {
#if HAS_BAND
    uint t0 = x0 + pc.rows_m1 - y;
    uint r0 = chunk_index(band_lo(), t0), r1 = chunk_index(band_hi(), t0);
    bool whole = r0 == 0u && r1 == N, empty = r0 == r1;  // [r0, r1) covers the chunk / none of it
    if (band_normal() ? whole : empty) return VALUE4;
#endif
#if HAS_INPUT
    uvec4 v = input_chunk(x0, in_row, phase);
#else
    uvec4 v = uvec4(0u);
#endif
#if HAS_BAND
    if (!(band_normal() ? empty : whole)) {  // an edge crosses the chunk
        uvec4 val = VALUE4;
        uint flip = band_normal() ? 0u : 0xFFFFFFFFu;
        [[unroll]] for (uint u = 0u; u < 4u; ++u) {
            uint m = range_mask(u, r0, r1) ^ flip;
            v[u] = (val[u] & m) | (v[u] & ~m);
        }
    }
#endif
    return v;
}

#if ELEM_BITS == 64
// One 64-bit element at x of the row (two words).
uvec2 element(uint x, uint y, uint in_row) {
#if HAS_BAND
    if (use_value(x + pc.rows_m1 - y)) return uvec2(pc.val_lo, pc.val_hi);
#endif
#if HAS_INPUT
    uint ia = in_row + x * pc.in_xs;
    return uvec2(src[2u * ia], src[2u * ia + 1u]);
#else
    return uvec2(0u);
#endif
}
#else
// One element at x of the row, in the low W bits.
uint element(uint x, uint y, uint in_row) {
#if HAS_BAND
    if (use_value(x + pc.rows_m1 - y)) return pc.val_lo & (0xFFFFFFFFu >> (32u - W));
#endif
#if HAS_INPUT
    return in_element(in_row + x * pc.in_xs);
#else
    return 0u;
#endif
}
#endif

// A partial chunk (c at a row end): element by element, only this row's bytes (and only
// this row's input elements are read: the aligned 16 bytes around them may lie past the
// input's buffer).
void edge_chunk(uint c, uint phase, uint a0, uint y, uint in_row) {
    uint w0 = (a0 + c) * 4u;  // first word of the chunk
#if ELEM_BITS == 64
    for (uint i = 0u; i < 2u; ++i) {
        uint pos = c * 2u + i;
        if (pos < phase || pos - phase >= pc.cols) continue;
        uvec2 e = element(pos - phase, y, in_row);
        dst[w0 + 2u * i] = e.x;
        dst[w0 + 2u * i + 1u] = e.y;
    }
#elif ELEM_BITS == 32
    for (uint u = 0u; u < 4u; ++u) {
        uint pos = c * 4u + u;
        if (pos < phase || pos - phase >= pc.cols) continue;
        dst[w0 + u] = element(pos - phase, y, in_row);
    }
#else
    for (uint u = 0u; u < 4u; ++u) {
        uint word = 0u, lo = E, hi = 0u;  // lanes [lo, hi) of this word are row elements
        for (uint i = 0u; i < E; ++i) {
            uint pos = c * N + u * E + i;
            if (pos < phase || pos - phase >= pc.cols) continue;
            word |= element(pos - phase, y, in_row) << (i * W);
            lo = min(lo, i);
            hi = i + 1u;
        }
        if (hi == 0u) continue;
        if (lo == 0u && hi == E) {
            dst[w0 + u] = word;
        } else {
            STORE_FIELD(dst, w0 + u, lo * W, (hi - lo) * W, word >> (lo * W));
        }
    }
#endif
}

void main() {
    uint g = linear_group_id();
    if (g >= pc.ngroups) return;
    uint rb = gpu_fast_div(g, pc.spans_magic, pc.packed & 63u);
    uint span = g - rb * pc.spans;
    uint tpr_log2 = (pc.packed >> 26) & 15u;
    uint row = (rb << (8u - tpr_log2)) + (gl_LocalInvocationID.x >> tpr_log2);
    if (row >= pc.nrows) return;
    uint lane = gl_LocalInvocationID.x & ((1u << tpr_log2) - 1u);

    // The row's coordinates: its first element in the output and the input, and y.
    uint ypos = (pc.packed >> 24) & 3u;
    uint rem = row, out_row = pc.out_off, in_row = pc.in_off, y = 0u;
    for (int d = 2; d >= 0; --d) {
        uint q = gpu_fast_div(rem, pc.magic[d], (pc.packed >> (6 * d + 6)) & 63u);
        uint cd = rem - q * pc.size[d];
        rem = q;
        out_row += cd * pc.out_stride[d];
        in_row += cd * pc.in_stride[d];
        if (uint(d) == ypos) y = cd;
    }
    uint phase = out_row % N;  // the row starts `phase` elements into its first chunk
    uint a0 = out_row / N;     // that chunk, in 16-byte units
    uint end = pc.cols + phase;  // chunk c holds row elements iff c * N < end

    uint threads = 1u << tpr_log2;
    uint c0 = span * (threads * VECS) + lane;
#if HAS_INPUT
    uvec4 v[VECS];
    [[unroll]] for (uint k = 0u; k < VECS; ++k) {
        uint c = c0 + k * threads;
        if (c * N >= phase && c * N + N <= end) v[k] = full_chunk(c * N - phase, y, in_row, phase);
    }
    [[unroll]] for (uint k = 0u; k < VECS; ++k) {
        uint c = c0 + k * threads;
        if (c * N >= end) break;
        if (c * N >= phase && c * N + N <= end) {
            dst4[a0 + c] = v[k];
        } else {
            edge_chunk(c, phase, a0, y, in_row);
        }
    }
#else
    [[unroll]] for (uint k = 0u; k < VECS; ++k) {
        uint c = c0 + k * threads;
        if (c * N >= end) break;
        if (c * N >= phase && c * N + N <= end) {
            dst4[a0 + c] = full_chunk(c * N - phase, y, in_row, phase);
        } else {
            edge_chunk(c, phase, a0, y, in_row);
        }
    }
#endif
    if (lane == 0u && span + 1u == pc.spans) {  // the partial chunk past the spans (see the header)
        uint c = pc.spans * (threads * VECS);
        if (c * N < end) edge_chunk(c, phase, a0, y, in_row);
    }
}
