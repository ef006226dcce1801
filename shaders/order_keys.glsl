// Order keys of float32 values (DYNAMIC_QUANTIZE_LINEAR's min / max, kompute_dml/ops/dynamic_quantize.py):
// the unsigned key of a non-NaN float32 orders as the value does (-0 below +0), so a range is two
// integer min / max folds, exact in any order. Used by dynamic_quantize.comp's own pass and by the
// kernels that write an output's partial keys beside it (mvn.comp's and float_unary.comp's KEYS
// variants). The including shader's work group has KEY_LOCAL invocations (ROOT * ROOT of them).

#ifndef KEY_LOCAL
#define KEY_LOCAL 256u
#endif
#define KEY_ROOT 16u      // KEY_ROOT * KEY_ROOT == KEY_LOCAL
#define KEY_ZERO 0x80000000u  // +0's key: a range always includes 0

// order-preserving unsigned key of a non-NaN float32 and its inverse
uint f_key(uint x) { return (x & 0x80000000u) != 0u ? ~x : (x | 0x80000000u); }
uint f_unkey(uint k) { return (k & 0x80000000u) != 0u ? (k & 0x7FFFFFFFu) : ~k; }

// one float32 value's bits folded into the running keys (NaNs left out)
void fold_key(uint bits, inout uint lo, inout uint hi) {
    if ((bits & 0x7FFFFFFFu) <= 0x7F800000u) {
        uint k = f_key(bits);
        lo = min(lo, k);
        hi = max(hi, k);
    }
}

shared uint s_key_lo[KEY_LOCAL];
shared uint s_key_hi[KEY_LOCAL];

// for invocation 0: the least lo and the greatest hi that the work group's first n invocations
// pass (n uniform, 1 .. KEY_LOCAL; every invocation calls it: barriers). Through shared memory:
// invocations 0 .. KEY_ROOT - 1 each fold every KEY_ROOT-th pair, then invocation 0 their results:
// two barriers whatever n (a tree takes log2(n), and a CPU implementation such as lavapipe switches
// between all of a group's invocations at each), KEY_ROOT consecutive invocations on consecutive words.
uvec2 reduce_keys(uint lo, uint hi, uint n) {
    uint lid = gl_LocalInvocationID.x;
    s_key_lo[lid] = lo;
    s_key_hi[lid] = hi;
    barrier();
    if (lid < KEY_ROOT) {
        for (uint i = lid + KEY_ROOT; i < n; i += KEY_ROOT) {
            lo = min(lo, s_key_lo[i]);
            hi = max(hi, s_key_hi[i]);
        }
        s_key_lo[lid] = lo;  // read by this invocation alone above
        s_key_hi[lid] = hi;
    }
    barrier();
    if (lid == 0u) {
        for (uint i = 1u; i < min(n, KEY_ROOT); ++i) {
            lo = min(lo, s_key_lo[i]);
            hi = max(hi, s_key_hi[i]);
        }
    }
    return uvec2(lo, hi);
}
