// Shared helpers for kompute_dml compute shaders.
// Every buffer is an array of 32-bit words: no 8/16/64-bit storage or arithmetic
// capability is used, because kp enables no optional device features.

// Work-group index over a 2-D grid (large dispatches are folded into y so that no
// dimension exceeds maxComputeWorkGroupCount).
uint linear_group_id() {
    return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
}

// Replace the `bits`-wide field at bit `shift` of word `w` of buffer `buf`
// without touching the other bits of that word. Two atomics: the field is cleared,
// then set; other invocations only ever touch their own fields of the word, so the
// result is exact whatever the interleaving.
#define STORE_FIELD(buf, w, shift, bits, value)                                      \
    {                                                                                \
        uint mask_ = ((bits) == 32u) ? 0xFFFFFFFFu : (((1u << (bits)) - 1u) << (shift)); \
        atomicAnd(buf[w], ~mask_);                                                   \
        atomicOr(buf[w], ((value) << (shift)) & mask_);                              \
    }
