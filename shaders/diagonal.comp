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
// consecutive addresses. Invocation (run r, word k) handles the elements of run r that fall in
// the k-th 32-bit word the run touches (ELEMS_PER_WORD of them for 8/16-bit types, one element
// for 32/64-bit types). When all bytes of that word are elements of the run it is written
// whole, without atomics (the fast path: a packed innermost dimension); only the words a run
// shares with bytes that are not its elements (run ends, gaps, odd strides) use STORE_FIELD.
// Consecutive invocations write consecutive words: coalesced, one pass, and the no-input
// variants never read memory.

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

#if HAS_INPUT
layout(std430, binding = 0) readonly buffer InBuf { uint src[]; };
layout(std430, binding = 1) buffer OutBuf { uint dst[]; };
#else
layout(std430, binding = 0) buffer OutBuf { uint dst[]; };
#endif

#define MAX_RANK 4
layout(push_constant) uniform PC {
    uint out_off;     // 0: output element 0, in elements (binding offset / element size)
    uint in_off;      // 1: input element 0, in elements
    uint total;       // 2: invocations = runs * words_per_run
    uint words;       // 3: words per run (invocations per run)
    uint run_len;     // 4: L, elements per run
    uint rank;        // 5: dimensions (memory order, outermost first), 1..4
    uint split;       // 6: dimensions [split, rank) form a run
    uint ypos;        // 7: index of the row dimension among them (MAX_RANK: absent, y = 0)
    uint xpos;        // 8: index of the column dimension (MAX_RANK: absent, x = 0)
    uint rows_m1;     // 9: rows - 1
    uint ub;          // 10: shifted, clamped DiagonalFillBegin
    uint ue;          // 11: shifted, clamped DiagonalFillEnd
    uint normal;      // 12: End >= Begin (on the original int32 values)
    uint val_lo;      // 13: Value's bit pattern (low word; the element for sub-word types)
    uint val_hi;      // 14: high word (64-bit types)
    uint size[MAX_RANK];        // 15..18
    uint out_stride[MAX_RANK];  // 19..22
    uint in_stride[MAX_RANK];   // 23..26
} pc;

#if ELEM_BITS >= 32
#define ELEMS_PER_WORD 1u
#else
#define ELEMS_PER_WORD (32u / ELEM_BITS)
#endif

void main() {
    // Invocation index without 32-bit overflow however the grid was folded.
    uint gid = linear_group_id();
    if (pc.total == 0u || gid > (pc.total - 1u) / gl_WorkGroupSize.x) return;
    uint base_inv = gid * gl_WorkGroupSize.x;
    if (gl_LocalInvocationID.x >= pc.total - base_inv) return;
    uint inv = base_inv + gl_LocalInvocationID.x;

    uint r = inv / pc.words;
    uint k = inv - r * pc.words;

    uint coord[MAX_RANK + 1];
    coord[MAX_RANK] = 0u;  // absent row/column dimension
    // Outer coordinates from the run index.
    uint rem = r;
    uint run_base = pc.out_off;
    for (int d = int(pc.split) - 1; d >= 0; --d) {
        coord[d] = rem % pc.size[d];
        rem /= pc.size[d];
        run_base += coord[d] * pc.out_stride[d];
    }
    // Elements of this run in word k of the words it touches.
    uint phase = run_base % ELEMS_PER_WORD;
    uint lane0 = (k == 0u) ? phase : 0u;
    uint p0 = k * ELEMS_PER_WORD + lane0 - phase;  // first element (position in the run)
    if (p0 >= pc.run_len) return;
    uint n = min(ELEMS_PER_WORD - lane0, pc.run_len - p0);

    // Inner coordinates of p0.
    rem = p0;
    for (int d = int(pc.rank) - 1; d >= int(pc.split); --d) {
        coord[d] = rem % pc.size[d];
        rem /= pc.size[d];
    }
#if HAS_INPUT
    uint in_addr = pc.in_off;
    for (uint d = 0u; d < pc.rank; ++d) in_addr += coord[d] * pc.in_stride[d];
#endif
    uint out_addr = run_base + p0;  // the run is contiguous

    uint word = 0u;
    for (uint i = 0u; i < ELEMS_PER_WORD; ++i) {
        if (i >= n) break;
        uint y = coord[pc.ypos];
        uint x = coord[pc.xpos];
        uint t = x + pc.rows_m1 - y;
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
        dst[2u * out_addr] = lo;
        dst[2u * out_addr + 1u] = hi;
#elif ELEM_BITS == 32
        uint v = use_value ? pc.val_lo : 0u;
#if HAS_INPUT
        if (!use_value) v = src[in_addr];
#endif
        dst[out_addr] = v;
#else
        uint v = use_value ? pc.val_lo : 0u;
#if HAS_INPUT
        if (!use_value) {
            v = bitfieldExtract(src[in_addr / ELEMS_PER_WORD], int((in_addr % ELEMS_PER_WORD) * uint(ELEM_BITS)),
                                ELEM_BITS);
        }
#endif
        word |= (v & ((1u << ELEM_BITS) - 1u)) << ((lane0 + i) * uint(ELEM_BITS));
#endif
        // Next element of the run (row-major over the run's dimensions, with carries).
        for (int d = int(pc.rank) - 1; d >= int(pc.split); --d) {
            coord[d] += 1u;
#if HAS_INPUT
            in_addr += pc.in_stride[d];
#endif
            if (coord[d] < pc.size[d]) break;
#if HAS_INPUT
            in_addr -= coord[d] * pc.in_stride[d];
#endif
            coord[d] = 0u;
        }
        out_addr += 1u;
    }
#if ELEM_BITS < 32
    uint w = (run_base + p0) / ELEMS_PER_WORD;
    if (n == ELEMS_PER_WORD) {
        dst[w] = word;  // every byte of this word is an element of the run
    } else {
        uint bits = n * uint(ELEM_BITS);
        uint shift = lane0 * uint(ELEM_BITS);
        STORE_FIELD(dst, w, shift, bits, word >> shift);
    }
#endif
}
