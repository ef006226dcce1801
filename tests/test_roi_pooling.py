"""ROI_POOLING (ops/roi_pooling.py, shaders/roi_pooling.comp) against an independent numpy reference of
the page's equations (Python integers; the maximum exact): FLOAT32 and FLOAT16, strided inputs and
ROIs, a strided output poisoned first (every byte outside it unchanged); regions outside the image,
inverted ones, batch indices out of range, NaN and infinities; refused descriptors with the field
they name; the helper against onnxruntime's MaxRoiPool and on the device through the ONNX backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import roi_pooling as rp

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}


def reference(x, rois, ph, pw, scale):
    n, c, h, w = x.shape
    out = np.zeros((len(rois), c, ph, pw), x.dtype)

    def rnd(v):
        s = float(np.float32(np.float32(v) * np.float32(scale)))
        return int(math.copysign(math.floor(abs(s) + 0.5), s))

    for r, (b, *coords) in enumerate(rois.astype(np.float32)):
        if not -1 < b < n:
            continue
        x1, y1, x2, y2 = (rnd(v) for v in coords)
        rw, rh = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
        for py in range(ph):
            hs = min(max(py * rh // ph + y1, 0), h)
            he = min(max(-(-(py + 1) * rh // ph) + y1, 0), h)
            for px in range(pw):
                ws = min(max(px * rw // pw + x1, 0), w)
                we = min(max(-(-(px + 1) * rw // pw) + x1, 0), w)
                if he > hs and we > ws:
                    win = x[int(b), :, hs:he, ws:we].reshape(c, -1)
                    nan = np.isnan(win)
                    out[r, :, py, px] = np.where(nan.any(1), np.nan, np.max(np.where(nan, -np.inf, win), axis=1))
    return out


def _rois(rng, k, n, h, w):
    xy = rng.uniform(-2, 1.1, (k, 2)) * [w, h]
    wh = rng.uniform(0.1, 1.0, (k, 2)) * [w, h]
    rois = np.concatenate([rng.integers(0, n, (k, 1)), xy, xy + wh], axis=1)
    special = [[0, 2.5, 1.5, 0.5, 0.49], [n, 0, 0, 3, 3], [n - 0.5, -5, -5, -1, -2], [-0.75, w - 1, h - 1, w + 5, h + 5],
               [0, -1.5, 0.5, w * 2, 2.5]]
    return np.concatenate([rois, special]).astype(np.float32)


CASES = [(2, 3, 8, 9, (2, 3), 1.0), (1, 2, 7, 6, (3, 3), 0.5), (3, 1, 5, 5, (1, 1), 2.0), (1, 4, 9, 7, (4, 2), 0.625)]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_roi_pooling_against_numpy(dev, rng, case, dt):
    n, c, h, w, (ph, pw), scale = CASES[case]
    npd = NP[dt]
    x = (rng.standard_normal((n, c, h, w)) * 4).astype(npd)
    x.reshape(-1)[[1, 5, 9]] = (np.nan if case == 1 else 1.5, np.inf, -np.inf)
    rois = (_rois(rng, 5, n, h, w) / scale).astype(npd)
    want = reference(x, rois, ph, pw, scale)
    xd = TD(dt, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    rd = TD(dt, (1, 1, *rois.shape), (0, 0, *random_strides(rng, rois.shape, allow_broadcast=False)))
    tx, _ = place(dev, rng, xd, x)
    tr, _ = place(dev, rng, rd, rois.reshape(rd.sizes))
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(rp.RoiPoolingDesc(xd, rd, yd, scale, (ph, pw))).execute([tx, tr], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def _desc(**over):
    f32 = DT.FLOAT32
    d = {"input_tensor": TD(f32, (1, 2, 6, 6)), "roi_tensor": TD(f32, (1, 1, 3, 5)), "output_tensor": TD(f32, (3, 2, 2, 2)),
         "spatial_scale": 1.0, "pooled_size": (2, 2)}
    d.update(over)
    return rp.RoiPoolingDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"roi_tensor": TD(DT.FLOAT16, (1, 1, 3, 5))}, kdml.InvalidArgumentError, "roi_tensor.data_type"),
    ({"output_tensor": TD(DT.FLOAT16, (3, 2, 2, 2))}, kdml.InvalidArgumentError, "output_tensor.data_type"),
    ({"roi_tensor": TD(DT.FLOAT32, (1, 1, 3, 4))}, kdml.InvalidArgumentError, "roi_tensor.sizes"),
    ({"roi_tensor": TD(DT.FLOAT32, (1, 2, 3, 5))}, kdml.InvalidArgumentError, "roi_tensor.sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (3, 2, 2, 3))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"pooled_size": (2,)}, kdml.InvalidArgumentError, "pooled_size"),
    ({"pooled_size": (0, 2)}, kdml.InvalidArgumentError, "pooled_size"),
    ({"pooled_size": (40000, 2)}, kdml.UnsupportedError, "pooled_size"),
    ({"spatial_scale": None}, kdml.InvalidArgumentError, "spatial_scale"),
    ({"roi_tensor": TD(DT.FLOAT32, (3, 5))}, kdml.UnsupportedError, "roi_tensor"),
    ({"input_tensor": TD(DT.INT32, (1, 2, 6, 6))}, kdml.UnsupportedError, "input_tensor"),
    ({"output_tensor": TD(DT.FLOAT32, (3, 2, 2, 2), (4, 2, 1, 0))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None


def test_cpu_loop_bound(dev):
    big = _desc(input_tensor=TD(DT.FLOAT32, (1, 2, 300, 300)))
    if dev.device_type == "cpu":
        with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
            dev.compile(big)
    else:
        dev.compile(big)


def test_feature_level():
    compile_at_level(kdml.FeatureLevel.FL_1_0, _desc())


ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def test_helper_and_onnx_against_onnxruntime(dev, rng):
    from onnx import TensorProto, helper
    from onnx_node_cases import one_node_model

    from kompute_dml.onnx_backend import Backend
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = np.array([[0, 0, 0, 9, 9], [1, 2.4, 1.6, 11, 7], [1, 1, 3, 6.5, 9.75], [0, 4, 4, 8, 5], [1, -3, -2, 20, 14]],
                    np.float32) * np.float32([1, 2, 2, 2, 2])
    node = helper.make_node("MaxRoiPool", ["X", "R"], ["y"], pooled_shape=[3, 2], spatial_scale=0.5)
    model = one_node_model(node, [("X", TensorProto.FLOAT, x.shape), ("R", TensorProto.FLOAT, rois.shape)],
                           TensorProto.FLOAT, opset=17)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x, "R": rois})[0]
    got = kdml.roi_pool(x, rois.astype(np.float32), (3, 2), spatial_scale=0.5, device=dev).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, reference(x, rois.astype(np.float32), 3, 2, 0.5))
    rep = Backend.prepare(model, "CPU")
    np.testing.assert_array_equal(rep.run([x, rois.astype(np.float32)])[0], want)
    assert {p.target for p in rep.placement} == {"vulkan"} and "ROI_POOLING" in rep.summary(), rep.summary()
