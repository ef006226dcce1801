"""ROI_ALIGN1 / ROI_ALIGN (ops/roi_align.py, shaders/roi_align.comp) against an independent numpy
reference that follows the shader's float32 order (each product, sum and division rounded once; the
average's sum X outer, Y inner): the output's bits, FLOAT32 and FLOAT16; strided inputs, ROI and
batch-index tensors of every allowed rank, a strided output poisoned first (every byte outside it
unchanged); regions outside the image, empty and inverted, batch indices out of range, both
reductions and interpolations, pixel offsets, aligned corners, sample bounds; refused descriptors
with the field they name; the helper against onnxruntime; ONNX RoiAlign's node test cases."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import roi_align as ra

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}
F = np.float32


def reference(x, rois, bidx, oh, ow, *, fn="avg", nearest=False, sx=1.0, sy=1.0, ipo=0.5, opo=-0.5, oob=0.0, lo=1,
              hi=ra.UINT_MAX, align=False, one=False):
    """(R, C, oh, ow) float32, every operation rounded to float32 in the shader's order (`one`: regions below
    one pixel taken as one, ROI_ALIGN1's min_region_one extension: onnxruntime's output_half_pixel)."""
    n, c, h, w = x.shape
    xf = x.astype(F)
    lo, hi = min(lo, ra.MAX_SAMPLES), min(hi, ra.MAX_SAMPLES)
    out = np.empty((len(rois), c, oh, ow), F)

    def count(size, o):
        q = np.ceil(F(abs(size)) / F(o))
        return lo if not q > lo else hi if q >= hi else int(q)

    def step(size, k):
        if align:
            return F(size / F(k - 1)) if k > 1 else F(0)
        return F(size / F(k))

    def coord(s, st, start):
        return F(F(F(F(s) - F(0 if align else opo)) * st + start) - F(ipo))

    def sample(img, X, Y):
        if not (X >= -1 and F(w) >= X and Y >= -1 and F(h) >= Y):
            return np.full(c, F(oob))
        cx, cy = min(max(X, F(0)), F(w - 1)), min(max(Y, F(0)), F(h - 1))
        x0, y0 = int(cx), int(cy)
        if nearest:
            xi = min(x0 + int(cx - F(x0) >= 0.5), w - 1)
            yi = min(y0 + int(cy - F(y0) >= 0.5), h - 1)
            return img[:, yi, xi]
        x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
        lx, ly = F(cx - F(x0)), F(cy - F(y0))
        hx, hy = F(1 - lx), F(1 - ly)
        p = [F(hy * hx) * img[:, y0, x0], F(hy * lx) * img[:, y0, x1], F(ly * hx) * img[:, y1, x0], F(ly * lx) * img[:, y1, x1]]
        return ((p[0] + p[1]) + p[2]) + p[3]

    for r in range(len(rois)):
        x1, y1, x2, y2 = (F(F(v) * F(s)) for v, s in zip(rois[r].astype(F), (sx, sy, sx, sy)))
        wx, wy = F(x2 - x1), F(y2 - y1)
        if one:
            wx, wy = (F(1) if v < 1 else v for v in (wx, wy))
        if bidx[r] >= n:
            out[r] = F(oob)
            continue
        nx, ny = count(wx, ow), count(wy, oh)
        stx, sty = step(wx, ow * nx), step(wy, oh * ny)
        for oy in range(oh):
            for ox in range(ow):
                acc = np.zeros(c, F)
                best = None
                for i in range(nx):
                    X = coord(ox * nx + i, stx, x1)
                    for j in range(ny):
                        v = sample(xf[bidx[r]], X, coord(oy * ny + j, sty, y1))
                        acc = acc + v
                        if best is None:
                            best = v.copy()
                        else:
                            best = np.where(~np.isnan(best) & (np.isnan(v) | (v > best)), v, best)
                out[r, :, oy, ox] = best if fn == "max" else acc / F(nx * ny)
    return out


def _rois(rng, k, h, w):
    """ROIs inside, across and outside a (h, w) image, empty and inverted ones."""
    base = rng.uniform(-0.3, 1.0, (k, 4)) * [w, h, w, h]
    base[:, 2:] = base[:, :2] + rng.uniform(0.3, 1.2, (k, 2)) * [w, h]
    special = np.array([[1.0, 1.0, 1.0, 1.0], [w - 1.5, h - 0.5, 0.5, 1.25], [-3.0, -4.0, -1.5, -2.0],
                        [w + 0.25, 1, w + 4, h + 6], [0, 0, w, h]])
    return np.concatenate([base, special])[rng.permutation(k + len(special))].astype(F)


# (N, C, H, W, output (h, w), options)
CASES = [
    (2, 3, 7, 9, (3, 2), {}),
    (1, 2, 6, 5, (2, 3), {"fn": "max"}),
    (3, 2, 5, 8, (2, 2), {"nearest": True, "sx": 0.5, "sy": 1.25}),
    (1, 3, 8, 6, (4, 3), {"ipo": 0.0, "opo": 0.0, "lo": 2, "hi": 2, "oob": -7.5}),
    (2, 1, 6, 7, (3, 3), {"align": True, "lo": 1, "hi": 3, "fn": "max", "nearest": True}),
    (1, 2, 9, 9, (2, 2), {"align": True, "lo": 3}),
    (2, 2, 4, 4, (1, 1), {"lo": 1, "hi": 1000}),  # regions of many samples
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_roi_align1_against_numpy(dev, rng, case, dt):
    n, c, h, w, (oh, ow), opt = CASES[case]
    npd = NP[dt]
    x = (rng.standard_normal((n, c, h, w)) * 3).astype(npd)
    x.reshape(-1)[:2] = (np.inf if case == 1 else -0.0, 1e-3)
    rois = _rois(rng, 4, h, w).astype(npd)
    k = len(rois)
    bidx = rng.integers(0, n, k).astype(np.uint32)
    bidx[k // 2] = n + int(rng.integers(0, 3))  # out of range: OutOfBoundsInputValue
    want = reference(x, rois, bidx, oh, ow, **opt).astype(npd)
    r_lead = (1,) * (case % 3)
    xd = TD(dt, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    rd = TD(dt, r_lead + rois.shape, (7,) * len(r_lead) + random_strides(rng, rois.shape, allow_broadcast=False))
    b_lead = (1,) * (case % 4)
    bd = TD(DT.UINT32, b_lead + bidx.shape, (3,) * len(b_lead) + (int(rng.integers(1, 3)),))
    tx, _ = place(dev, rng, xd, x)
    tr, _ = place(dev, rng, rd, rois.reshape(rd.sizes))
    tb, _ = place(dev, rng, bd, bidx.reshape(bd.sizes))
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    RF, IM = kdml.ReduceFunction, kdml.InterpolationMode
    desc = ra.RoiAlign1Desc(xd, rd, bd, yd, RF.MAX if opt.get("fn") == "max" else RF.AVERAGE,
                            IM.NEAREST_NEIGHBOR if opt.get("nearest") else IM.LINEAR, opt.get("sx", 1.0), opt.get("sy", 1.0),
                            opt.get("ipo", 0.5), opt.get("opo", -0.5), opt.get("oob", 0.0), opt.get("lo", 1),
                            opt.get("hi", ra.UINT_MAX), opt.get("align", False))
    dev.compile(desc).execute([tx, tr, tb], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_roi_align_first_version(dev, rng):
    """ROI_ALIGN is ROI_ALIGN1 with offsets 0.5 / -0.5 and regions not aligned to corners."""
    x = rng.standard_normal((2, 2, 6, 6)).astype(F)
    rois = _rois(rng, 3, 6, 6)
    bidx = rng.integers(0, 2, len(rois)).astype(np.uint32)
    want = reference(x, rois, bidx, 2, 3, fn="max", sx=0.75, sy=1.5, oob=2.0, lo=2, hi=4)
    tx, tr, tb = (dev.tensor(a) for a in (x, rois, bidx))
    ty = dev.empty(want.shape)
    desc = ra.RoiAlignDesc(tx.desc, tr.desc, tb.desc, ty.desc, kdml.ReduceFunction.MAX, kdml.InterpolationMode.LINEAR,
                           0.75, 1.5, 2.0, 2, 4)
    dev.compile(desc).execute([tx, tr, tb], [ty])
    np.testing.assert_array_equal(ty.numpy().view(np.uint32), want.view(np.uint32))
    with pytest.raises(kdml.UnsupportedError, match="3_0"):
        compile_at_level(kdml.FeatureLevel.FL_2_1, desc)


def _desc(**over):
    f32 = DT.FLOAT32
    d = {"input_tensor": TD(f32, (1, 2, 5, 5)), "roi_tensor": TD(f32, (3, 4)), "batch_indices_tensor": TD(DT.UINT32, (3,)),
         "output_tensor": TD(f32, (3, 2, 2, 2))}
    d.update(over)
    return ra.RoiAlign1Desc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"roi_tensor": TD(DT.FLOAT16, (3, 4))}, kdml.InvalidArgumentError, "roi_tensor.data_type"),
    ({"output_tensor": TD(DT.FLOAT16, (3, 2, 2, 2))}, kdml.InvalidArgumentError, "output_tensor.data_type"),
    ({"roi_tensor": TD(DT.FLOAT32, (3, 5))}, kdml.InvalidArgumentError, "roi_tensor.sizes"),
    ({"roi_tensor": TD(DT.FLOAT32, (2, 3, 4))}, kdml.InvalidArgumentError, "roi_tensor.sizes"),
    ({"batch_indices_tensor": TD(DT.UINT32, (2,))}, kdml.InvalidArgumentError, "batch_indices_tensor.sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (3, 3, 2, 2))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"reduction_function": kdml.ReduceFunction.SUM}, kdml.InvalidArgumentError, "reduction_function"),
    ({"interpolation_mode": 7}, kdml.InvalidArgumentError, "interpolation_mode"),
    ({"minimum_samples_per_output": 0}, kdml.InvalidArgumentError, "minimum_samples_per_output"),
    ({"minimum_samples_per_output": 5, "maximum_samples_per_output": 4}, kdml.InvalidArgumentError,
     "minimum_samples_per_output"),
    ({"spatial_scale_x": "1"}, kdml.InvalidArgumentError, "spatial_scale_x"),
    ({"batch_indices_tensor": TD(DT.INT32, (3,))}, kdml.UnsupportedError, "batch_indices_tensor"),
    ({"input_tensor": TD(DT.INT32, (1, 2, 5, 5))}, kdml.UnsupportedError, "input_tensor"),
    ({"input_tensor": TD(DT.FLOAT32, (1, 1, 2, 5, 5))}, kdml.UnsupportedError, "input_tensor"),
    ({"output_tensor": TD(DT.FLOAT32, (3, 2, 2, 2), (8, 4, 0, 1))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError, match="4_0"):
        compile_at_level(kdml.FeatureLevel.FL_3_1, _desc())


ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def _ort_roi_align(x, rois, bidx, oh, ow, ctm, ratio, scale):
    from onnx import TensorProto, helper
    from onnx_node_cases import one_node_model
    node = helper.make_node("RoiAlign", ["X", "R", "B"], ["y"], coordinate_transformation_mode=ctm, mode="avg",
                            output_height=oh, output_width=ow, sampling_ratio=ratio, spatial_scale=scale)
    model = one_node_model(node, [("X", TensorProto.FLOAT, x.shape), ("R", TensorProto.FLOAT, rois.shape),
                                  ("B", TensorProto.INT64, bidx.shape)], TensorProto.FLOAT, opset=16)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"X": x, "R": rois, "B": bidx})[0]


@pytest.mark.parametrize("ctm, ratio, scale", [("half_pixel", 0, 1.0), ("half_pixel", 2, 0.5),
                                               ("output_half_pixel", 3, 1.0)])
def test_helper_against_onnxruntime(dev, rng, ctm, ratio, scale):
    x = rng.standard_normal((2, 3, 10, 12)).astype(F)
    # the last two regions below one pixel: output_half_pixel takes them as one (onnxruntime, min_region_one)
    rois = np.array([[0, 0, 9, 9], [2.5, 1.25, 11, 7], [1, 3, 6.5, 9.75], [4, 4, 8, 5], [3.2, 4.1, 3.4, 4.2],
                     [1, 1, 1.5, 7]], F) / scale
    bidx = np.array([0, 1, 1, 0, 1, 0], np.int64)
    want = _ort_roi_align(x, rois, bidx, 3, 4, ctm, ratio, scale)
    lo, hi = (ratio, ratio) if ratio else (1, ra.UINT_MAX)
    one = ctm == "output_half_pixel"
    y = kdml.roi_align(x, rois, dev.tensor(bidx), (3, 4), spatial_scale=scale,
                       input_pixel_offset=0.5 if ctm == "half_pixel" else 0.0, min_samples=lo, max_samples=hi,
                       min_region_one=one, device=dev)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)  # onnxruntime's coordinates round otherwise
    np.testing.assert_array_equal(y.numpy(), reference(x, rois, bidx, 3, 4, sx=scale, sy=scale, lo=lo, hi=hi,
                                                       ipo=0.5 if ctm == "half_pixel" else 0.0, one=one))
    with pytest.raises(kdml.InvalidArgumentError, match="batch_indices"):
        kdml.roi_align(x, rois, np.array([0, -1, 0, 0]), (3, 4), device=dev)


from onnx_node_cases import node_cases, run_on_device  # noqa: E402

ROI, ROI_NAMES = node_cases(r"^test_roialign.*_cpu$", __name__)


@pytest.mark.parametrize("name", ROI_NAMES)
def test_onnx_roialign_node_cases(name):
    if "mode_max" in name:  # ONNX's max mode stays on the CPU (ops/roi_align._roi_rule); the case passes there
        from onnx_node_cases import run_case
        (rep,) = run_case(ROI, name)
        assert {p.target for p in rep.placement} == {"cpu"}, rep.summary()
        return
    (rep,) = run_on_device(ROI, name)
    assert "ROI_ALIGN1" in rep.summary()


def test_onnx_output_half_pixel_takes_small_regions_as_one_pixel():
    """ONNX RoiAlign in output_half_pixel mode (torchvision's aligned=False detection exports) on the device:
    regions below one pixel as onnxruntime takes them (ROI_ALIGN1's min_region_one)."""
    from onnx import TensorProto, helper
    from onnx_node_cases import one_node_model

    from kompute_dml.onnx_backend import Backend
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 10, 10)).astype(F)
    rois = np.array([[1.0, 1.0, 1.5, 1.3], [2, 2, 8, 8], [3.2, 4.1, 3.4, 4.2]], F)
    bidx = np.zeros(3, np.int64)
    node = helper.make_node("RoiAlign", ["X", "R", "B"], ["y"], coordinate_transformation_mode="output_half_pixel",
                            output_height=2, output_width=2, sampling_ratio=0, spatial_scale=1.0)
    model = one_node_model(node, [("X", TensorProto.FLOAT, x.shape), ("R", TensorProto.FLOAT, rois.shape),
                                  ("B", TensorProto.INT64, bidx.shape)], TensorProto.FLOAT, opset=16)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"X": x, "R": rois, "B": bidx})[0]
    rep = Backend.prepare(model)
    got = rep.run({"X": x, "R": rois, "B": bidx})[0]
    assert [p.target for p in rep.placement] == ["vulkan"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
