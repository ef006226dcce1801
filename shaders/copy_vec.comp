#version 450
// Packed byte-range copy for GPUs (DevicePolicy.memory_kernel == "gpu"): the fast path of
// ACTIVATION_IDENTITY / COPY when both tensors are dense in the same element order.
//
// @variant copy_vec
//
// A work group moves 256 * VECS consecutive 16-byte vectors; invocation i takes vectors
// i, i + 256, ... (each load instruction of a subgroup reads one contiguous block), issues
// all its loads before its first store, and checks each index against the count (only the
// last group is partial; a folded 2-D grid's extra groups find nothing to do). The 1..15
// bytes after the last whole vector are copy_packed_tail's. lavapipe keeps copy_packed,
// whose branch-free body suits its per-lane loops better (see copy_packed.comp).

#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "gpu_common.glsl"

layout(local_size_x = 256) in;

// Offsets are multiples of 16 bytes, so the uvec4 views are aligned.
layout(std430, binding = 0) readonly buffer InBuf4 { uvec4 src4[]; };
layout(std430, binding = 1) writeonly buffer OutBuf4 { uvec4 dst4[]; };

layout(push_constant) uniform PC {
    uint in_off;   // in 16-byte units
    uint out_off;  // in 16-byte units
    uint count;    // whole vectors to copy
} pc;

void main() {
    uint first = linear_group_id() * (gl_WorkGroupSize.x * VECS) + gl_LocalInvocationID.x;
    uvec4 v[VECS];
    for (uint k = 0u; k < VECS; ++k) {
        uint i = first + k * gl_WorkGroupSize.x;
        if (i < pc.count) v[k] = src4[pc.in_off + i];
    }
    for (uint k = 0u; k < VECS; ++k) {
        uint i = first + k * gl_WorkGroupSize.x;
        if (i < pc.count) dst4[pc.out_off + i] = v[k];
    }
}
