// ROI_ALIGN1's sampling (docs/roi_align.md), shared by shaders/roi_align.comp (the forward) and
// shaders/grad_roi_align.comp (its gradient, which must recompute the forward's sample coordinates,
// counts and values bit for bit). The includer provides: the push block `pc` with min_s, max_s,
// flags (1 MAX, 2 NEAREST_NEIGHBOR, 4 AlignRegionsToCorners, 8 regions at least one pixel: ROI_ALIGN1's extension), out_off, in_off, oob, ih, iw, xs[4];
// the input's buffer x_buf and LOAD(buf, e); f32_exact.glsl.

// a / b correctly rounded on every device (integer code, f32_exact.glsl: GLSL's division may be 2.5 ulp off)
float rdiv(float a, float b) { return uintBitsToFloat(f32_div_bits(floatBitsToUint(a), floatBitsToUint(b))); }

// samples per output along an axis: clamp(ceil(|size| / out), min, max); a NaN size gives the minimum
uint samples(float size, uint out_n) {
    float q = rdiv(abs(size), float(out_n));
    float c = ceil(q);
    if (!(c > float(pc.min_s))) return pc.min_s;
    if (c >= float(pc.max_s)) return pc.max_s;
    return uint(c);
}

// the sample step along an axis of `size` over `count` samples
float step_of(float size, uint count) {
    if ((pc.flags & 4u) != 0u) {
        float s = count > 1u ? rdiv(size, float(count - 1u)) : 0.0;
        return s;
    }
    return rdiv(size, float(count));
}

// input coordinate of sample index s along an axis starting at `start`
float coord(uint s, float step_, float start) {
    float shift = (pc.flags & 4u) != 0u ? 0.0 : pc.out_off;
    precise float t = (float(s) - shift) * step_;
    precise float u = t + start;
    precise float v = u - pc.in_off;
    return v;
}

float sample_at(uint base, float x, float y) {
    float w = float(pc.iw), h = float(pc.ih);
    if (!(x >= -1.0 && x <= w && y >= -1.0 && y <= h)) return pc.oob;  // NaN too
    float cx = clamp(x, 0.0, w - 1.0), cy = clamp(y, 0.0, h - 1.0);
    uint x0 = uint(cx), y0 = uint(cy);  // cx, cy >= 0: truncation is floor
    if ((pc.flags & 2u) != 0u) {  // nearest: half up (cx - x0 is exact)
        uint xi = min(x0 + uint(cx - float(x0) >= 0.5), pc.iw - 1u);
        uint yi = min(y0 + uint(cy - float(y0) >= 0.5), pc.ih - 1u);
        return LOAD(x_buf, base + yi * pc.xs[2] + xi * pc.xs[3]);
    }
    uint x1 = min(x0 + 1u, pc.iw - 1u), y1 = min(y0 + 1u, pc.ih - 1u);
    precise float lx = cx - float(x0), ly = cy - float(y0);
    precise float hx = 1.0 - lx, hy = 1.0 - ly;
    uint r0 = base + y0 * pc.xs[2], r1 = base + y1 * pc.xs[2];
    float v00 = LOAD(x_buf, r0 + x0 * pc.xs[3]), v01 = LOAD(x_buf, r0 + x1 * pc.xs[3]);
    float v10 = LOAD(x_buf, r1 + x0 * pc.xs[3]), v11 = LOAD(x_buf, r1 + x1 * pc.xs[3]);
    precise float w00 = hy * hx, w01 = hy * lx, w10 = ly * hx, w11 = ly * lx;
    precise float p00 = w00 * v00, p01 = w01 * v01, p10 = w10 * v10, p11 = w11 * v11;
    precise float s = p00 + p01;
    precise float s2 = s + p10;
    precise float s3 = s2 + p11;
    return s3;
}
