// Helpers of the "gpu" memory-kernel family (DevicePolicy.memory_kernel == "gpu"):
// copy_vec.comp, mem_rows.comp, copy_tile.comp. Like common.glsl, 32-bit words only.

// Chunks (16-byte vectors) each invocation moves: several independent loads in flight per
// invocation, issued before any store. A specialization constant (DispatchPlan.spec), so one
// SPIR-V module serves every setting the host picks.
layout(constant_id = 0) const uint VECS = 4u;

// n / d for a run-time invariant d without a hardware division (Granlund & Montgomery,
// "Division by invariant integers using multiplication", fig. 4.1): exact for every 32-bit
// n. The host (ops.diagonal.div_magic) computes magic = floor(2^32 (2^l - d) / d) + 1 and
// sh = (l - 1) << 1 | min(l, 1), l = ceil(log2 d); d = 1 gives magic 1, sh 0.
uint gpu_fast_div(uint n, uint magic, uint sh) {
    uint hi, lo;
    umulExtended(n, magic, hi, lo);
    return (hi + ((n - hi) >> (sh & 1u))) >> (sh >> 1);
}
