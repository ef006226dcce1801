// What every matrix-product shader (matmul_int, matmul_coop, matmul_gemv, matmul_wide) reads from its
// push-constant block (MATMUL_PUSH of kompute_dml/ops/contract, written where the shader has
// KDML_PUSH_BLOCK, before this file's #include). Offsets and strides are in elements of each
// tensor's own type. Every size and stride is below 2^28 (a binding holds at most
// maxStorageBufferRange = 2^27 bytes), so the top nibbles of m, n, k and a_sb..a_sk carry the
// number of matrices T = Batch * Channel (28 bits; ops/matmul_common.matmul_push); c_flags holds
// the channel count in bits 0-25 and the flags above it (bits 29-31: each family's own).
#define LO28(x) ((x) & 0x0FFFFFFFu)
#define CHANNELS(c_flags) ((c_flags) & 0x03FFFFFFu)
#define F_A_SIGNED 0x04000000u
#define F_B_SIGNED 0x08000000u
#define F_F16 0x10000000u

uint matrix_count() {
    return (pc.m >> 28) | ((pc.n >> 28) << 4) | ((pc.k >> 28) << 8) | ((pc.a_sb >> 28) << 12)
         | ((pc.a_sc >> 28) << 16) | ((pc.a_sm >> 28) << 20) | ((pc.a_sk >> 28) << 24);
}
