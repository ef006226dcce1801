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
// chunks lane, lane + threads, ... (contiguous per load instruction), computes or loads all
// its full chunks before storing any. Row coordinates cost one magic division per outer
// dimension per invocation; within a row no division is needed.
//
// Full chunks: for the diagonals, t = x + rows - 1 - y runs over [t0, t0 + N) and the band
// test can only change where t crosses ub or ue, so a chunk crossing neither is uniform:
// Value splat, zeros, or the input's 16 bytes. Input chunks are one uvec4 load when the
// input's row is contiguous (x stride 1) and starts at the output row's 16-byte phase, one
// element repeated when x is broadcast (stride 0), else N gathered elements. Only chunks
// crossing a band edge are computed per element.

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "gpu_common.glsl"

layout(local_size_x = 256) in;

#define HAS_INPUT (MODE != 1)
#define HAS_BAND (MODE != 0)
#define W uint(ELEM_BITS)
#define N (128u / W)  // elements per 16-byte chunk
#if ELEM_BITS < 32
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

#if ELEM_BITS == 64
// One 64-bit element at x of the row (two words).
uvec2 element(uint x, uint y, uint in_row) {
#if HAS_BAND
    uint t = x + pc.rows_m1 - y;
    if (((pc.normal != 0u) != (t >= pc.ub)) != (t < pc.ue)) return uvec2(pc.val_lo, pc.val_hi);
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
    uint t = x + pc.rows_m1 - y;
    if (((pc.normal != 0u) != (t >= pc.ub)) != (t < pc.ue)) return pc.val_lo & (0xFFFFFFFFu >> (32u - W));
#endif
#if HAS_INPUT
    uint ia = in_row + x * pc.in_xs;
#if ELEM_BITS == 32
    return src[ia];
#else
    return bitfieldExtract(src[ia / E], int((ia % E) * W), ELEM_BITS);
#endif
#else
    return 0u;
#endif
}
#endif

// The N elements x0 .. x0 + N - 1 of the row, one by one.
uvec4 chunk_elements(uint x0, uint y, uint in_row) {
    uint w[4];
#if ELEM_BITS == 64
    uvec2 e0 = element(x0, y, in_row), e1 = element(x0 + 1u, y, in_row);
    w[0] = e0.x; w[1] = e0.y; w[2] = e1.x; w[3] = e1.y;
#elif ELEM_BITS == 32
    for (uint u = 0u; u < 4u; ++u) w[u] = element(x0 + u, y, in_row);
#else
    for (uint u = 0u; u < 4u; ++u) {
        uint word = 0u;
        for (uint i = 0u; i < E; ++i) word |= element(x0 + u * E + i, y, in_row) << (i * W);
        w[u] = word;
    }
#endif
    return uvec4(w[0], w[1], w[2], w[3]);
}

// A full chunk (all N elements in the row, x0 = its first x): whole-chunk cases first.
uvec4 full_chunk(uint x0, uint y, uint in_row, uint phase) {
#if HAS_BAND
    uint t0 = x0 + pc.rows_m1 - y;
    // the band test changes inside the chunk iff ub or ue lies in (t0, t0 + N)
    bool crosses = (pc.ub - t0 - 1u < N - 1u) || (pc.ue - t0 - 1u < N - 1u);
    if (crosses) return chunk_elements(x0, y, in_row);
    if (((pc.normal != 0u) != (t0 >= pc.ub)) != (t0 < pc.ue)) {
#if ELEM_BITS == 64
        return uvec4(pc.val_lo, pc.val_hi, pc.val_lo, pc.val_hi);
#else
        return uvec4(pc.val_lo);
#endif
    }
#endif
#if HAS_INPUT
    if (pc.in_xs == 1u && in_row % N == phase) return src4[(in_row + x0) / N];
    if (pc.in_xs == 0u) {  // x broadcast: one element, repeated
#if ELEM_BITS == 64
        return uvec4(src[2u * in_row], src[2u * in_row + 1u], src[2u * in_row], src[2u * in_row + 1u]);
#elif ELEM_BITS == 32
        return uvec4(src[in_row]);
#else
        uint e = bitfieldExtract(src[in_row / E], int((in_row % E) * W), ELEM_BITS);
        return uvec4(e * (0xFFFFFFFFu / ((1u << W) - 1u)));  // e in every lane of the word
#endif
    }
    return chunk_elements(x0, y, in_row);
#else
    return uvec4(0u);
#endif
}

// A partial chunk (c at a row end): element by element, only this row's bytes.
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
    uvec4 v[VECS];
    for (uint k = 0u; k < VECS; ++k) {
        uint c = c0 + k * threads;
        if (c * N >= phase && c * N + N <= end) v[k] = full_chunk(c * N - phase, y, in_row, phase);
    }
    for (uint k = 0u; k < VECS; ++k) {
        uint c = c0 + k * threads;
        if (c * N >= end) break;
        if (c * N >= phase && c * N + N <= end) {
            dst4[a0 + c] = v[k];
        } else {
            edge_chunk(c, phase, a0, y, in_row);
        }
    }
}
