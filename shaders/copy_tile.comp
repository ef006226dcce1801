#version 450
// Transposing COPY / ACTIVATION_IDENTITY for GPUs (DevicePolicy.memory_kernel == "gpu"):
// the output's contiguous dimension B (output stride 1) is strided in the input, and
// another dimension A is the input's contiguous one (input stride 1).
//
// @variant copy_tile_b8   ELEM_BITS=8
// @variant copy_tile_b16  ELEM_BITS=16
// @variant copy_tile_b32  ELEM_BITS=32
// @variant copy_tile_b64  ELEM_BITS=64
//
// A work group moves one tile of 32 A-positions by 32 output words of B (32 * E elements of
// E per word; 16 of 64 bits) through shared memory: it reads the tile along A (contiguous in
// the input: a subgroup reads one block per instruction), then writes it along B (one
// 128-byte block of output words per instruction). The shared rows are padded to an odd
// pitch and sub-word elements laid out lane-major, so neither phase has bank conflicts.
// Up to two further (batch) dimensions index the tiles. The host guarantees that every
// output line (a fixed A and batch position) starts on a word boundary, so a word holds
// elements of one line only: whole words are plain stores, and only the last word of a
// line can be partial (STORE_FIELD keeps the bytes after the line).

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "gpu_common.glsl"

layout(local_size_x = 256) in;

#define W uint(ELEM_BITS)
#if ELEM_BITS == 64
#define TB 16u          // B extent of a tile, in elements
#define PITCH 33u       // shared words per A-position (2 per element + 1 pad)
#elif ELEM_BITS == 32
#define TB 32u
#define PITCH 33u
#else
#define E (32u / W)     // elements per word
#define TB (32u * E)
#define PITCH (TB + 1u) // one shared word per element + 1 pad
#endif
#define TA 32u          // A extent of a tile

layout(std430, binding = 0) readonly buffer InBuf { uint src[]; };
layout(std430, binding = 1) buffer OutBuf { uint dst[]; };

layout(push_constant) uniform PC {  // 20 words = 80 bytes
    uint out_off;       // 0: output element 0, in elements
    uint in_off;        // 1: input element 0, in elements
    uint ngroups;       // 2: tiles (work groups with work)
    uint size_a;        // 3
    uint size_b;        // 4
    uint in_stride_b;   // 5: input stride of B (A's is 1)
    uint out_stride_a;  // 6: output stride of A (B's is 1)
    uint tiles_a;       // 7
    uint tiles_b;       // 8
    uint magic_b;       // 9: division magic of tiles_b
    uint magic_a;       // 10: of tiles_a
    uint shifts;        // 11: 6-bit shifts: tiles_b, tiles_a, batch size[1]
    uint bsize[2];      // 12, 13: batch dimensions, outer first (1 where unused)
    uint bmagic1;       // 14: division magic of bsize[1]
    uint bin[2];        // 15, 16: their input strides
    uint bout[2];       // 17, 18: their output strides
    uint pad_;          // 19
} pc;

shared uint tile[TA * PITCH];

void main() {
    uint g = linear_group_id();
    if (g >= pc.ngroups) return;  // whole groups only: no invocation skips the barrier
    uint q = gpu_fast_div(g, pc.magic_b, pc.shifts & 63u);
    uint tb = g - q * pc.tiles_b;
    uint batch = gpu_fast_div(q, pc.magic_a, (pc.shifts >> 6) & 63u);
    uint ta = q - batch * pc.tiles_a;
    uint b0 = gpu_fast_div(batch, pc.bmagic1, (pc.shifts >> 12) & 63u);
    uint b1 = batch - b0 * pc.bsize[1];
    uint in_base = pc.in_off + b0 * pc.bin[0] + b1 * pc.bin[1];
    uint out_base = pc.out_off + b0 * pc.bout[0] + b1 * pc.bout[1];

    uint tx = gl_LocalInvocationID.x & 31u, ty = gl_LocalInvocationID.x >> 5;
    // Read: invocation (tx, ty) takes A-position tx of B-lines ty, ty + 8, ...
    uint a = ta * TA + tx;
    if (a < pc.size_a) {
        for (uint bl = ty; bl < TB; bl += 8u) {
            uint b = tb * TB + bl;
            if (b >= pc.size_b) break;
            uint ia = in_base + b * pc.in_stride_b + a;
#if ELEM_BITS == 64
            tile[tx * PITCH + 2u * bl] = src[2u * ia];
            tile[tx * PITCH + 2u * bl + 1u] = src[2u * ia + 1u];
#elif ELEM_BITS == 32
            tile[tx * PITCH + bl] = src[ia];
#else
            tile[tx * PITCH + (bl % E) * 32u + bl / E] = bitfieldExtract(src[ia / E], int((ia % E) * W), ELEM_BITS);
#endif
        }
    }
    memoryBarrierShared();
    barrier();
    // Write: invocation (tx, ty) takes output word tx of the tile's lines ty, ty + 8, ...
    for (uint al = ty; al < TA; al += 8u) {
        uint a2 = ta * TA + al;
        if (a2 >= pc.size_a) break;
        uint line = out_base + a2 * pc.out_stride_a;  // first element of the output line
#if ELEM_BITS == 64
        uint b = tb * TB + (tx >> 1);
        if (b < pc.size_b) dst[2u * (line + b) + (tx & 1u)] = tile[al * PITCH + tx];
#elif ELEM_BITS == 32
        uint b = tb * TB + tx;
        if (b < pc.size_b) dst[line + b] = tile[al * PITCH + tx];
#else
        uint b = tb * TB + tx * E;  // the word's first element
        if (b >= pc.size_b) continue;
        uint n = min(E, pc.size_b - b);
        uint word = 0u;
        for (uint i = 0u; i < E; ++i) {
            if (i < n) word |= tile[al * PITCH + i * 32u + tx] << (i * W);
        }
        if (n == E) {
            dst[(line + b) / E] = word;
        } else {
            STORE_FIELD(dst, (line + b) / E, 0u, n * W, word);
        }
#endif
    }
}
