// GATHER's index rule (shaders/gather.comp, gather_check.comp; docs/gather.md), shared so that the
// check and the gather agree on which indices are inside the axis. The including shader declares
// b_buf (the indices as 32-bit words) and pc.axis_len, and defines IDX_BITS / IDX_SIGNED.

// the index at element e of the indices -> its position along the axis; false where it is
// outside the axis (then pos is unused). A negative index of a signed type counts from the end.
bool axis_pos(uint e, out uint pos) {
#if IDX_BITS == 64
    uint lo = b_buf[2u * e], hi = b_buf[2u * e + 1u];
#else
    uint lo = b_buf[e];
#if IDX_SIGNED
    uint hi = int(lo) < 0 ? 0xFFFFFFFFu : 0u;
#else
    uint hi = 0u;
#endif
#endif
    pos = lo;
    if (hi == 0u) return lo < pc.axis_len;
#if IDX_SIGNED
    // hi all ones: the value is lo - 2^32, its magnitude 2^32 - lo (lo != 0)
    if (hi == 0xFFFFFFFFu && lo != 0u && (0u - lo) <= pc.axis_len) {
        pos = pc.axis_len - (0u - lo);
        return true;
    }
#endif
    return false;
}
