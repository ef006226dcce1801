"""ROI_ALIGN_GRAD (ops/grad_roi_align.py, shaders/grad_roi_align.comp) against an independent numpy
reference that recomputes ROI_ALIGN1's samples in float32 and adds each sample's contributions in the
module's order (region, X sample, Y sample, corner): the output's bits, FLOAT32 and FLOAT16, AVERAGE
and MAX (ties, a NaN), both interpolations, offsets, corners, sample bounds, regions outside the
image, empty and inverted, batch indices out of range; strided views at offsets, a strided output
poisoned first (every byte outside it unchanged); the adjoint identity <ROI_ALIGN1(x), g> ==
<x, ROI_ALIGN_GRAD(g)> within a float64 bound on the device's own forward; torchvision's roi_align
autograd (aligned=True); the page's example; the CPU loop budget; refused descriptors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import grad_roi_align as gra
from kompute_dml.ops import roi_align as ra

DT = kdml.DataType
TD = kdml.TensorDesc
RF, IM = kdml.ReduceFunction, kdml.InterpolationMode
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}
F = np.float32
U = 2.0 ** -24


def _axis(start, size, o, lo, hi, align, opo, ipo):
    """(samples per output, every sample's coordinate) along an axis, float32 as ROI_ALIGN1."""
    q = np.ceil(F(abs(size)) / F(o))
    n = lo if not q > lo else hi if q >= hi else int(q)
    k = o * n
    st = (F(size / F(k - 1)) if k > 1 else F(0)) if align else F(size / F(k))
    shift = F(0 if align else opo)
    return n, [F(F(F(F(s) - shift) * st + start) - F(ipo)) for s in range(k)]


def _corners(X, Y, h, w, nearest):
    """[((row, col), weight or None)] a sample reads, in the order 00, 01, 10, 11; [] outside."""
    if not (X >= -1 and F(w) >= X and Y >= -1 and F(h) >= Y):
        return []
    cx, cy = min(max(X, F(0)), F(w - 1)), min(max(Y, F(0)), F(h - 1))
    x0, y0 = int(cx), int(cy)
    if nearest:
        return [((min(y0 + int(cy - F(y0) >= 0.5), h - 1), min(x0 + int(cx - F(x0) >= 0.5), w - 1)), None)]
    x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
    lx, ly = F(cx - F(x0)), F(cy - F(y0))
    hx, hy = F(1 - lx), F(1 - ly)
    return [((y0, x0), F(hy * hx)), ((y0, x1), F(hy * lx)), ((y1, x0), F(ly * hx)), ((y1, x1), F(ly * lx))]


def reference(x, g, rois, bidx, shape, *, fn="avg", nearest=False, sx=1.0, sy=1.0, ipo=0.5, opo=-0.5, lo=1, hi=ra.UINT_MAX,
              align=False):
    """(float32 result, float64 sum of |terms| per element, most terms an element or output adds)."""
    n, c, h, w = shape
    lo, hi = min(lo, ra.MAX_SAMPLES), min(hi, ra.MAX_SAMPLES)
    gf = g.astype(F)
    xf = None if x is None else x.astype(F)
    y = np.zeros(shape, F)
    mag = np.zeros(shape)
    terms = np.zeros(shape, int)
    most = 1
    _, _, oh, ow = g.shape
    for r in range(len(rois)):
        x1, y1, x2, y2 = (F(F(v) * F(s)) for v, s in zip(rois[r].astype(F), (sx, sy, sx, sy)))
        b = int(bidx[r])
        if b >= n:
            continue
        nx, xs = _axis(x1, F(x2 - x1), ow, lo, hi, align, opo, ipo)
        ny, ys = _axis(y1, F(y2 - y1), oh, lo, hi, align, opo, ipo)
        most = max(most, 4 * nx * ny)
        win = {}
        if fn == "max":  # the forward's winner per output and channel: the first largest, the first NaN
            for oy in range(oh):
                for ox in range(ow):
                    best, at = None, np.full(c, -1)
                    for i in range(nx):
                        for j in range(ny):
                            cs = _corners(xs[ox * nx + i], ys[oy * ny + j], h, w, nearest)
                            if not cs:
                                v = np.zeros(c, F)  # OutOfBoundsInputValue 0
                            elif nearest:
                                v = xf[b, :, cs[0][0][0], cs[0][0][1]]
                            else:
                                p = [wt * xf[b, :, yi, xi] for (yi, xi), wt in cs]
                                v = ((p[0] + p[1]) + p[2]) + p[3]
                            take = np.ones(c, bool) if best is None else ~np.isnan(best) & (np.isnan(v) | (v > best))
                            best = v.copy() if best is None else np.where(take, v, best)
                            at = np.where(take, i * ny + j, at)
                    win[oy, ox] = at
        for s in range(ow * nx):
            ox, i = divmod(s, nx)
            for t in range(oh * ny):
                oy, j = divmod(t, ny)
                cs = _corners(xs[s], ys[t], h, w, nearest)
                if not cs:
                    continue
                gv = gf[r, :, oy, ox]
                sel = win[oy, ox] == i * ny + j if fn == "max" else np.ones(c, bool)
                gs = gv if fn == "max" else (gv / F(nx * ny)).astype(F)
                for (yi, xi), wt in cs:
                    term = gs if wt is None else (wt * gs).astype(F)
                    y[b, sel, yi, xi] = y[b, sel, yi, xi] + term[sel]
                    mag[b, sel, yi, xi] += np.abs(term[sel].astype(np.float64))
                    terms[b, sel, yi, xi] += 1
    return y, mag, max(most, int(terms.max()))


def _rois(rng, k, h, w):
    """ROIs inside, across and outside a (h, w) image, empty and inverted ones."""
    base = rng.uniform(-0.3, 1.0, (k, 4)) * [w, h, w, h]
    base[:, 2:] = base[:, :2] + rng.uniform(0.3, 1.2, (k, 2)) * [w, h]
    special = np.array([[1.0, 1.0, 1.0, 1.0], [w - 1.5, h - 0.5, 0.5, 1.25], [-3.0, -4.0, -1.5, -2.0],
                        [w + 0.25, 1, w + 4, h + 6], [0, 0, w, h]])
    return np.concatenate([base, special])[rng.permutation(k + len(special))].astype(F)


def _desc(xd, gd, rd, bd, yd, opt, yr=None):
    return gra.RoiAlignGradDesc(xd, gd, rd, bd, yd, yr, RF.MAX if opt.get("fn") == "max" else RF.AVERAGE,
                                IM.NEAREST_NEIGHBOR if opt.get("nearest") else IM.LINEAR, opt.get("sx", 1.0), opt.get("sy", 1.0),
                                opt.get("ipo", 0.5), opt.get("opo", -0.5), opt.get("lo", 1), opt.get("hi", ra.UINT_MAX),
                                opt.get("align", False))


# (N, C, H, W, output (h, w), options)
CASES = [
    (2, 3, 7, 9, (3, 2), {}),
    (1, 2, 6, 5, (2, 3), {"fn": "max"}),
    (3, 2, 5, 8, (2, 2), {"nearest": True, "sx": 0.5, "sy": 1.25}),
    (1, 2, 8, 6, (4, 3), {"ipo": 0.0, "opo": 0.0, "lo": 2, "hi": 2}),
    (2, 1, 6, 7, (3, 3), {"align": True, "lo": 1, "hi": 3, "fn": "max", "nearest": True}),
    (1, 2, 9, 9, (2, 2), {"align": True, "lo": 3}),
    (2, 2, 4, 4, (1, 1), {"lo": 1, "hi": 1000}),  # regions of many samples
    (1, 3, 5, 6, (2, 2), {"fn": "max", "sx": 1.5, "lo": 2, "hi": 3}),
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_grad_against_numpy(dev, rng, case, dt):
    n, c, h, w, (oh, ow), opt = CASES[case]
    npd = NP[dt]
    is_max = opt.get("fn") == "max"
    # MAX: small integers, so samples tie (the first wins); case 1 holds a NaN (the first NaN wins)
    x = (rng.integers(-2, 3, (n, c, h, w)) if is_max else rng.standard_normal((n, c, h, w)) * 3).astype(npd)
    if case == 1:
        x[0, 0, 2, 2] = np.nan
    rois = _rois(rng, 4, h, w).astype(npd)
    k = len(rois)
    g = rng.standard_normal((k, c, oh, ow)).astype(npd)
    bidx = rng.integers(0, n, k).astype(np.uint32)
    bidx[k // 2] = n + int(rng.integers(0, 3))  # out of range: nothing passed on
    want = reference(x, g, rois, bidx, (n, c, h, w), **opt)[0].astype(npd)
    xd = TD(dt, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    gd = TD(dt, g.shape, random_strides(rng, g.shape, allow_broadcast=False))
    r_lead = (1,) * (case % 3)
    rd = TD(dt, r_lead + rois.shape, (7,) * len(r_lead) + random_strides(rng, rois.shape, allow_broadcast=False))
    b_lead = (1,) * (case % 4)
    bd = TD(DT.UINT32, b_lead + bidx.shape, (3,) * len(b_lead) + (int(rng.integers(1, 3)),))
    tx, _ = place(dev, rng, xd, x)
    tg, _ = place(dev, rng, gd, g)
    tr, _ = place(dev, rng, rd, rois.reshape(rd.sizes))
    tb, _ = place(dev, rng, bd, bidx.reshape(bd.sizes))
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    with_x = is_max or case % 2 == 0  # AVERAGE never reads InputTensor: absent in some cases
    dev.compile(_desc(xd if with_x else None, gd, rd, bd, yd, opt)).execute([tx if with_x else None, tg, tr, tb], [ty, None])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("fn", ["avg", "max"])
@pytest.mark.parametrize("case", [0, 3, 5, 6])
def test_adjoint_identity(dev, rng, case, fn):
    """<ROI_ALIGN1(x), g> == <x, ROI_ALIGN_GRAD(g)> (MAX: for the forward's winners, the forward is
    linear in x too) on the device's own forward, within the float32 sums' float64 bound."""
    n, c, h, w, (oh, ow), opt = CASES[case]
    opt = {**opt, "fn": fn}
    x = rng.standard_normal((n, c, h, w)).astype(F)
    rois = _rois(rng, 3, h, w)
    g = rng.standard_normal((len(rois), c, oh, ow)).astype(F)
    bidx = rng.integers(0, n + 1, len(rois)).astype(np.uint32)
    bidx[np.all(rois == [0, 0, w, h], axis=1)] = 0  # the whole image's ROI reads one (a zero gradient else, by chance)
    tx, tr, tb, tg = (dev.tensor(a) for a in (x, rois, bidx, g))
    fwd = ra.RoiAlign1Desc(tx.desc, tr.desc, tb.desc, TD(DT.FLOAT32, g.shape), RF.MAX if fn == "max" else RF.AVERAGE,
                           IM.NEAREST_NEIGHBOR if opt.get("nearest") else IM.LINEAR, opt.get("sx", 1.0), opt.get("sy", 1.0),
                           opt.get("ipo", 0.5), opt.get("opo", -0.5), 0.0, opt.get("lo", 1), opt.get("hi", ra.UINT_MAX),
                           opt.get("align", False))
    ty, tdx = dev.empty(g.shape), dev.empty(x.shape)
    dev.compile(fwd).execute([tx, tr, tb], [ty])
    dev.compile(_desc(tx.desc, tg.desc, tr.desc, tb.desc, tdx.desc, opt)).execute([tx, tg, tr, tb], [tdx, None])
    lhs = float(np.sum(ty.numpy().astype(np.float64) * g))
    rhs = float(np.sum(x.astype(np.float64) * tdx.numpy()))
    _, mag, most = reference(x, np.abs(g), rois, bidx, x.shape, **opt)
    bound = 2 * (most + 4) * U * float(np.sum(np.abs(x) * mag)) + 1e-30
    assert abs(lhs - rhs) <= bound, (lhs, rhs, bound)
    assert np.any(tdx.numpy() != 0)


@pytest.mark.parametrize("ratio, scale", [(0, 1.0), (2, 0.5), (3, 1.0)])
def test_against_torchvision(dev, rng, ratio, scale):
    """torchvision's roi_align(aligned=True) is ROI_ALIGN1 with offsets 0.5 / -0.5, AVERAGE, LINEAR,
    sampling_ratio s as Minimum = Maximum = s (0: adaptive): its autograd's input gradient; its
    coordinates are rounded otherwise (within 1e-5). Regions whose samples stay within [-1, W] x [-1, H]:
    torchvision 0.28's CPU kernel reads samples below -1 as clamped to the edge (its forward differs
    there from onnxruntime's and ROI_ALIGN1's OutOfBoundsInputValue)."""
    torch = pytest.importorskip("torch")
    tv_ops = pytest.importorskip("torchvision.ops")
    x = rng.standard_normal((2, 3, 9, 11)).astype(F)
    rois = np.array([[0, 0, 8, 8], [2.5, 1.25, 10, 7], [1, 3, 6.5, 8.75], [4, 4, 8, 5], [-0.5, -0.25, 3, 4]], F) / scale
    bidx = np.array([0, 1, 1, 0, 1], np.uint32)
    g = rng.standard_normal((len(rois), 3, 3, 4)).astype(F)
    xt = torch.tensor(x, requires_grad=True)
    boxes = torch.tensor(np.concatenate([bidx[:, None].astype(F), rois], 1))
    tv_ops.roi_align(xt, boxes, (3, 4), spatial_scale=scale, sampling_ratio=ratio, aligned=True).backward(torch.tensor(g))
    lo, hi = (ratio, ratio) if ratio else (1, ra.UINT_MAX)
    opt = {"sx": scale, "sy": scale, "lo": lo, "hi": hi}
    tg, tr, tb = (dev.tensor(a) for a in (g, rois, bidx))
    tdx = dev.empty(x.shape)
    dev.compile(_desc(None, tg.desc, tr.desc, tb.desc, tdx.desc, opt)).execute([None, tg, tr, tb], [tdx, None])
    np.testing.assert_allclose(tdx.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(tdx.numpy(), reference(None, g, rois, bidx, x.shape, **opt)[0])


def test_page_example(dev):
    """The page's nearest-neighbour example: ROI_ALIGN1 with OutputPixelOffset 0, InputPixelOffset 0.5
    and one sample per output gives its forward output; the gradient is the page's."""
    rois = np.array([[0, 0, 2, 2], [2, 0, 4, 2], [0, 2, 2, 4], [2, 2, 4, 4]], F)
    bidx = np.zeros(4, np.uint32)
    g = np.arange(1, 13, dtype=F).reshape(4, 1, 1, 3)
    x = np.arange(1, 17, dtype=F).reshape(1, 1, 4, 4)
    opt = {"nearest": True, "opo": 0.0, "lo": 1, "hi": 1}
    tx, tr, tb, tg = (dev.tensor(a) for a in (x, rois, bidx, g))
    ty = dev.empty((4, 1, 1, 3))
    dev.compile(ra.RoiAlign1Desc(tx.desc, tr.desc, tb.desc, ty.desc, RF.AVERAGE, IM.NEAREST_NEIGHBOR, 1.0, 1.0, 0.5, 0.0, 0.0,
                                 1, 1)).execute([tx, tr, tb], [ty])
    np.testing.assert_array_equal(ty.numpy().reshape(4, 3), [[1, 1, 2], [3, 3, 4], [9, 9, 10], [11, 11, 12]])
    tdx = dev.empty(x.shape)
    dev.compile(_desc(None, tg.desc, tr.desc, tb.desc, tdx.desc, opt)).execute([None, tg, tr, tb], [tdx, None])
    np.testing.assert_array_equal(tdx.numpy().reshape(4, 4), [[3, 3, 9, 6], [0, 0, 0, 0], [15, 9, 21, 12], [0, 0, 0, 0]])


def test_cpu_loop_budget(dev):
    """An empty region with 240 x 240 samples per output: every sample reads one element, more than a
    CPU device's invocation may walk: NaN there (never a partial sum), the rest exact; too many
    regions for the searches alone are refused."""
    if dev.device_type != "cpu":
        pytest.skip("GPUs have no loop budget")
    rois = np.array([[2.0, 1.0, 2.0, 1.0], [0, 0, 1, 1]], F)
    g = np.ones((2, 1, 2, 2), F)
    tg, tr, tb = dev.tensor(g), dev.tensor(rois), dev.tensor(np.zeros(2, np.uint32))
    tdx = dev.empty((1, 1, 4, 4))
    opt = {"lo": 240, "hi": 240}
    dev.compile(_desc(None, tg.desc, tr.desc, tb.desc, tdx.desc, opt)).execute([None, tg, tr, tb], [tdx, None])
    got = tdx.numpy()[0, 0]
    nan = np.isnan(got)
    assert nan[1, 2] and nan.sum() >= 1
    want = reference(None, g, rois[1:], np.zeros(1, np.uint32), (1, 1, 4, 4), **opt)[0][0, 0]
    np.testing.assert_array_equal(got[~nan], want[~nan])
    gd = TD(DT.FLOAT32, (5000, 1, 2, 2))
    with pytest.raises(kdml.UnsupportedError, match="input_gradient_tensor"):
        dev.compile(_desc(None, gd, TD(DT.FLOAT32, (5000, 4)), TD(DT.UINT32, (5000,)), tdx.desc, {}))


def _base(**over):
    f32 = DT.FLOAT32
    d = {"input_tensor": TD(f32, (1, 2, 5, 5)), "input_gradient_tensor": TD(f32, (3, 2, 2, 2)), "roi_tensor": TD(f32, (3, 4)),
         "batch_indices_tensor": TD(DT.UINT32, (3,)), "output_gradient_tensor": TD(f32, (1, 2, 5, 5))}
    d.update(over)
    return gra.RoiAlignGradDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"roi_tensor": TD(DT.FLOAT16, (3, 4))}, kdml.InvalidArgumentError, "roi_tensor.data_type"),
    ({"input_tensor": TD(DT.FLOAT16, (1, 2, 5, 5))}, kdml.InvalidArgumentError, "input_tensor.data_type"),
    ({"output_gradient_tensor": TD(DT.FLOAT16, (1, 2, 5, 5))}, kdml.InvalidArgumentError, "output_gradient_tensor.data_type"),
    ({"output_roi_gradient_tensor": TD(DT.FLOAT32, (3, 4))}, kdml.UnsupportedError, "output_roi_gradient_tensor"),
    ({"output_gradient_tensor": None, "output_roi_gradient_tensor": TD(DT.FLOAT32, (3, 4))}, kdml.UnsupportedError,
     "output_roi_gradient_tensor"),
    ({"output_gradient_tensor": None}, kdml.InvalidArgumentError, "output_gradient_tensor"),
    ({"input_tensor": None, "reduction_function": RF.MAX}, kdml.InvalidArgumentError, "input_tensor"),
    ({"input_tensor": TD(DT.FLOAT32, (1, 2, 5, 6))}, kdml.InvalidArgumentError, "input_tensor.sizes"),
    ({"output_gradient_tensor": TD(DT.FLOAT32, (1, 3, 5, 5)), "input_tensor": None}, kdml.InvalidArgumentError,
     "output_gradient_tensor.sizes"),
    ({"roi_tensor": TD(DT.FLOAT32, (3, 5))}, kdml.InvalidArgumentError, "roi_tensor.sizes"),
    ({"roi_tensor": TD(DT.FLOAT32, (2, 3, 4))}, kdml.InvalidArgumentError, "roi_tensor.sizes"),
    ({"batch_indices_tensor": TD(DT.UINT32, (2,))}, kdml.InvalidArgumentError, "batch_indices_tensor.sizes"),
    ({"reduction_function": RF.SUM}, kdml.InvalidArgumentError, "reduction_function"),
    ({"interpolation_mode": 7}, kdml.InvalidArgumentError, "interpolation_mode"),
    ({"minimum_samples_per_output": 0}, kdml.InvalidArgumentError, "minimum_samples_per_output"),
    ({"minimum_samples_per_output": 5, "maximum_samples_per_output": 4}, kdml.InvalidArgumentError,
     "minimum_samples_per_output"),
    ({"spatial_scale_y": "1"}, kdml.InvalidArgumentError, "spatial_scale_y"),
    ({"batch_indices_tensor": TD(DT.INT32, (3,))}, kdml.UnsupportedError, "batch_indices_tensor"),
    ({"input_gradient_tensor": TD(DT.INT32, (3, 2, 2, 2))}, kdml.UnsupportedError, "input_gradient_tensor"),
    ({"output_gradient_tensor": TD(DT.FLOAT32, (1, 2, 5, 5), (50, 25, 0, 1)), "input_tensor": None},
     kdml.InvalidArgumentError, "output_gradient_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match="^" + field.replace(".", r"\.")):
        dev.compile(_base(**over))
    assert dev.compile(_base()) is not None


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError, match="4_1"):
        compile_at_level(kdml.FeatureLevel.FL_4_0, _base())
