"""DYNAMIC_QUANTIZE_LINEAR (ops/dynamic_quantize.py, shaders/dynamic_quantize.comp) bit for bit against
the independent numpy float32 reference (tests/quantize_reference.py, written from ONNX Runtime's
source) and against onnxruntime's own DynamicQuantizeLinear: FLOAT32 and FLOAT16 inputs, UINT8 and
INT8 outputs, 1-8 dimensions, strided and broadcast inputs, strided outputs, random offsets with
guard bytes, poisoned outputs (every other byte unchanged), outputs sharing a buffer; adversarial
data (ties after the division, near-ties that need a correctly rounded quotient, zero point ties,
all-equal, one-signed, single elements, subnormal / huge magnitudes, infinities, NaN); inputs of
millions of elements (the capped min / max grid); the two dispatches; recordings; refusals; the
helper; the shared correctly rounded division (ELEMENT_WISE_DIVIDE); dynamic_quantize_linear chained
into matmul_integer_to_float against onnxruntime's DynamicQuantizeMatMul; the ONNX backend."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import element_byte_positions, place, poison_against, random_strides, random_values, read_logical
from quantize_reference import dynamic_quantize_ref, quant_range

import kompute_dml as kdml
from kompute_dml.ops import dynamic_quantize as dq_op

ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
Desc = kdml.DynamicQuantizeLinearDesc
IN_TYPES = [DT.FLOAT32, DT.FLOAT16]
OUT_TYPES = [DT.UINT8, DT.INT8]
F32 = np.float32
TINY = np.finfo(np.float32).smallest_subnormal


# ---- onnxruntime ---------------------------------------------------------------------------------
_sessions: dict[str, object] = {}


def _session(model) -> object:
    key = model.SerializeToString()
    if key not in _sessions:
        _sessions[key] = ort.InferenceSession(key, providers=["CPUExecutionProvider"])
    return _sessions[key]


def _dql_model():
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, None)],
                          [helper.make_tensor_value_info(n, t, None) for n, t in (("y", T.UINT8), ("s", T.FLOAT),
                                                                                  ("z", T.UINT8))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def ort_dql(x: np.ndarray) -> tuple[np.ndarray, np.float32, int]:
    y, s, z = _session(_dql_model()).run(None, {"x": np.asarray(x, np.float32)})
    return y, F32(s), int(z)


def _bits(v) -> int:
    return int(np.asarray(v, np.float32).view(np.uint32))


def assert_same(got, want, what: str) -> None:
    (gy, gs, gz), (wy, ws, wz) = got, want
    assert _bits(gs) == _bits(ws), f"{what}: scale {gs!r} != {ws!r}"
    assert int(gz) == int(wz), f"{what}: zero point {gz} != {wz}"
    bad = np.nonzero(np.asarray(gy).reshape(-1) != np.asarray(wy).reshape(-1))[0]
    assert bad.size == 0, f"{what}: {bad.size} quantized values differ, first at {bad[:5].tolist()}"


def device_dql(dev, x, data_type=DT.UINT8):
    y, s, z = kdml.dynamic_quantize_linear(x, data_type=data_type, device=dev)
    return y.numpy(), F32(s.numpy()[0]), int(z.numpy()[0])


# ---- the operator on random layouts ---------------------------------------------------------------
def random_sizes(rng, rank: int, max_elems: int = 400) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def random_data(rng, dt: DT, sizes) -> np.ndarray:
    """Random values of one of several kinds (edge values mixed in, one-signed, constant, normal)."""
    kind = int(rng.integers(0, 5))
    if kind == 0:
        return random_values(rng, dt, sizes)
    scale = 10.0 ** rng.integers(-3, 4)
    v = rng.standard_normal(sizes) * scale
    if kind == 1:
        v = np.abs(v)
    elif kind == 2:
        v = -np.abs(v)
    elif kind == 3:
        v = np.full(sizes, v.reshape(-1)[0])
    return v.astype(dt.numpy_dtype)


def _descs(rng, src: DT, dst: DT, sizes, x_strides, y_strides):
    rank = len(sizes)
    xd = TD(src, sizes, (random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.6 else None)
            if x_strides == "random" else x_strides)
    yd = TD(dst, sizes, (random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.5 else None)
            if y_strides == "random" else y_strides)
    ones = (1,) * rank
    sd = TD(DT.FLOAT32, ones, None if rng.random() < 0.5 else tuple(int(v) for v in rng.integers(0, 4, rank)))
    zd = TD(dst, ones, None if rng.random() < 0.5 else tuple(int(v) for v in rng.integers(0, 4, rank)))
    return xd, yd, sd, zd


def run(dev, rng, src: DT, dst: DT, sizes, values=None, *, x_strides="random", y_strides="random"):
    """Place the input and the three outputs (each at a random offset with guard bytes), poison the
    outputs against the reference, execute, check every output's bits, every other byte of their
    buffers and the input buffer; returns the reference."""
    xd, yd, sd, zd = _descs(rng, src, dst, sizes, x_strides, y_strides)
    v = random_data(rng, src, sizes) if values is None else values
    x, xraw = place(dev, rng, xd, v)
    outs = [place(dev, rng, d)[0] for d in (yd, sd, zd)]
    ry, rs, rz = dynamic_quantize_ref(read_logical(xraw, x.offset, xd), dst.numpy_dtype)
    expected = [ry, np.full((1,) * len(sizes), rs, np.float32), np.full((1,) * len(sizes), rz, dst.numpy_dtype)]
    befores = [poison_against(t, e, rng) for t, e in zip(outs, expected)]
    dev.compile(Desc(xd, yd, sd, zd)).execute([x], outs)
    for t, before, e in zip(outs, befores, expected):
        _assert_output(t, before, e)
    assert x.buffer.read() == xraw
    return ry, rs, rz


def _assert_output(t, before: bytes, expected: np.ndarray, others=()) -> None:
    """t's elements equal `expected` bit for bit; every byte of its buffer outside t (and the
    tensors `others` in the same buffer) as in `before`."""
    after = np.frombuffer(t.buffer.read(), np.uint8)
    mask = np.ones(after.size, bool)
    for u in (t, *others):
        mask[element_byte_positions(u.offset, u.desc)] = False
    changed = np.nonzero((after != np.frombuffer(before, np.uint8)) & mask)[0]
    assert changed.size == 0, f"{changed.size} bytes outside the outputs changed, first at {changed[:8]}"
    got = read_logical(after, t.offset, t.desc)
    want = np.ascontiguousarray(np.broadcast_to(expected, t.desc.sizes), dtype=t.desc.data_type.numpy_dtype)
    bad = np.argwhere(got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}"))
    assert bad.size == 0, f"{len(bad)} elements differ, first at {bad[:4].tolist()}: got {got[tuple(bad[0])]}, " \
                          f"want {want[tuple(bad[0])]}"


@pytest.mark.parametrize("dst", OUT_TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("src", IN_TYPES, ids=lambda d: d.name)
def test_every_type_and_rank(dev, rng, src, dst):
    for rank in range(1, 9):
        for _ in range(3):
            run(dev, rng, src, dst, random_sizes(rng, rank))


def test_packed_lengths(dev, rng):
    """Packed input and output (16-byte loads of 4 FLOAT32 / 8 FLOAT16 elements, 4 loads per
    quantizing invocation, 1024 per work group): lengths around those steps, at random 16-byte
    aligned offsets."""
    for n in [*range(1, 41), 255, 256, 257, 4095, 4096, 4097, 8191, 8192, 8193, 3 * 8192 + 5]:
        for src in IN_TYPES:
            run(dev, rng, src, OUT_TYPES[n % 2], (n,), x_strides=None, y_strides=None)


@pytest.mark.parametrize("geometry", [(1024, 2), (1024, 1), (256, 1)], ids=lambda g: f"{g[0]}x{g[1]}")
def test_every_geometry(dev, rng, geometry):
    """The policy's other geometries (DevicePolicy.dql_geometry: more min / max groups; dql_quant's
    _v2 / _v1 variants, 2 / 1 loads per invocation): lengths around their steps and past the
    MAX_PARTS cap, packed at random aligned offsets and strided, bit for bit the reference."""
    per_group, units = geometry
    policy = dev.policy
    dev.policy = dataclasses.replace(policy, dql_geometry=geometry)
    try:
        step = 256 * units * 4  # FLOAT32 elements per quantizing work group
        for n in (1, 17, step - 1, step + 3, per_group * 3 + 5, dq_op.MAX_PARTS * per_group + 4 * step + 9):
            for src in IN_TYPES:
                run(dev, rng, src, OUT_TYPES[n % 2], (n,), x_strides=None, y_strides=None)
        variant = dev.compile(Desc(TD(DT.FLOAT32, (4096,)), TD(DT.UINT8, (4096,)), TD(DT.FLOAT32, (1,)),
                                   TD(DT.UINT8, (1,)))).plans[1].variant
        assert variant.endswith({4: "_v", 2: "_v2", 1: "_v1"}[units])
        run(dev, rng, DT.FLOAT32, DT.UINT8, (per_group // 3, 5))  # random strides: the element variants
    finally:
        dev.policy = policy


def test_host_unfriendly_layouts(dev, rng):
    """8 dimensions of size >= 2 that do not merge, inputs broadcast along some of them."""
    sizes = (2, 3, 2, 2, 3, 2, 2, 3)
    for src in IN_TYPES:
        for dst in OUT_TYPES:
            run(dev, rng, src, dst, sizes, x_strides=random_strides(rng, sizes, allow_broadcast=True, max_gap=2),
                y_strides=random_strides(rng, sizes, allow_broadcast=False, max_gap=2))


def test_outputs_sharing_one_buffer(dev, rng):
    """The output, scale and zero point interleaved in one buffer (the zero point's byte in a word
    of the output's elements): each written, no other byte changed."""
    sizes = (3, 5)
    xd = TD(DT.FLOAT32, sizes)
    yd = TD(DT.UINT8, sizes, (17, 3))  # elements at bytes 17 i + 3 j: 16 and 32 are not among them
    sd, zd = TD(DT.FLOAT32, (1, 1)), TD(DT.UINT8, (1, 1))
    raw = rng.integers(0, 256, 128, dtype=np.uint8)
    buf = dev.buffer(raw.tobytes())
    y, s, z = kdml.Tensor(buf, yd, 0), kdml.Tensor(buf, sd, 64), kdml.Tensor(buf, zd, 16)  # z in y's span
    x = dev.tensor(rng.standard_normal(sizes).astype(np.float32))
    ry, rs, rz = dynamic_quantize_ref(x.numpy(), np.uint8)
    before = poison_against(y, ry, rng)
    dev.compile(Desc(xd, yd, sd, zd)).execute([x], [y, s, z])
    for t, e in ((y, ry), (s, np.array(rs)), (z, np.array(rz, np.uint8))):
        _assert_output(t, before, e, others=(y, s, z))


def test_refusals(dev):
    x = TD(DT.FLOAT32, (2, 3))
    y, s, z = TD(DT.UINT8, (2, 3)), TD(DT.FLOAT32, (1, 1)), TD(DT.UINT8, (1, 1))
    cases = [
        (Desc(x, y, TD(DT.FLOAT32, (1,)), z), kdml.InvalidArgumentError, r"^output_scale_tensor\.sizes: dimension count"),
        (Desc(x, TD(DT.UINT8, (2, 3, 1)), s, z), kdml.InvalidArgumentError, r"^output_tensor\.sizes: dimension count"),
        (Desc(x, y, s, TD(DT.UINT8, (1,))), kdml.InvalidArgumentError, r"^output_zero_point_tensor\.sizes: dimension"),
        (Desc(x, TD(DT.UINT8, (3, 2)), s, z), kdml.InvalidArgumentError, r"^output_tensor\.sizes: must equal input_tensor's"),
        (Desc(x, y, TD(DT.FLOAT32, (1, 2)), z), kdml.InvalidArgumentError, r"^output_scale_tensor\.sizes: must hold one"),
        (Desc(x, y, s, TD(DT.UINT8, (2, 1))), kdml.InvalidArgumentError, r"^output_zero_point_tensor\.sizes: must hold"),
        (Desc(x, y, s, TD(DT.INT8, (1, 1))), kdml.InvalidArgumentError,
         r"^output_zero_point_tensor\.data_type: must equal output_tensor's \(UINT8\), got INT8"),
        (Desc(x, TD(DT.UINT8, (2, 3), (0, 1)), s, z), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
        (Desc(TD(DT.INT32, (2, 3)), y, s, z), kdml.UnsupportedError, r"^input_tensor: DYNAMIC_QUANTIZE_LINEAR does not"),
        (Desc(x, TD(DT.UINT16, (2, 3)), s, z), kdml.UnsupportedError, r"^output_tensor: DYNAMIC_QUANTIZE_LINEAR does"),
        (Desc(x, y, TD(DT.FLOAT16, (1, 1)), z), kdml.UnsupportedError, r"^output_scale_tensor: DYNAMIC_QUANTIZE_LINEAR"),
    ]
    for desc, err, pattern in cases:
        with pytest.raises(err, match=pattern):
            dev.compile(desc)
    low = kdml.Device(feature_level=FL.FL_3_1)
    try:
        with pytest.raises(kdml.UnsupportedError, match=r"^DYNAMIC_QUANTIZE_LINEAR: introduced at DML_FEATURE_LEVEL_4_0"):
            low.compile(Desc(x, y, s, z))
        assert kdml.Device(feature_level=FL.FL_4_0).compile(Desc(x, y, s, z)).plans
    finally:
        low.close()


# ---- the arithmetic, against onnxruntime and the reference ---------------------------------------------
def _near_ties(rng, count: int) -> np.ndarray:
    """Data whose scale comes from its own range and whose other elements are the float32 values
    nearest (k + 1/2) * scale and their neighbours: quotients at or within a few ulps of a rounding
    tie, where a quotient off by one ulp rounds the other way."""
    lo = F32(-rng.uniform(0.1, 100) * 10.0 ** rng.integers(-20, 20))
    hi = F32(rng.uniform(0.1, 100) * 10.0 ** rng.integers(-20, 20))
    lo, hi = (lo, hi) if rng.random() < 0.8 else (F32(0), hi)
    scale = F32(F32(hi - lo) / F32(255))
    k = rng.integers(-255, 255, count).astype(np.float64)
    base = ((k + 0.5) * np.float64(scale)).astype(np.float32)
    step = rng.integers(-2, 3, count)
    v = np.nextafter(base, np.where(step > 0, np.inf, -np.inf).astype(np.float32))
    v = np.where(step == 0, base, v)
    v = np.where(np.abs(step) == 2, np.nextafter(v, np.where(step > 0, np.inf, -np.inf).astype(np.float32)), v)
    v = np.clip(v, lo, hi).astype(np.float32)
    return np.concatenate([[lo, hi], v]).astype(np.float32)


ADVERSARIAL = {
    "normal": lambda rng: rng.standard_normal((33, 47)),
    "wide": lambda rng: rng.standard_normal(1000) * 1e4,
    "positive": lambda rng: rng.uniform(0.5, 3.0, 999),
    "negative": lambda rng: rng.uniform(-4.0, -0.1, 999),
    "all_equal_positive": lambda rng: np.full(77, 3.25),
    "all_equal_negative": lambda rng: np.full(77, -0.1),
    "zeros": lambda rng: np.zeros(50),
    "negative_zeros": lambda rng: -np.zeros(50),
    "single": lambda rng: np.array([2.5]),
    "single_negative": lambda rng: np.array([-7.0]),
    # x / scale exactly k + 1/2 (scale 2^-4, zero point 0): ties to even
    "ties": lambda rng: np.array([0.0, 255 / 16, *((np.arange(255) + 0.5) / 16)]),
    # zero point ties: lo / scale = -(z + 1/2) with scale 2^-4 (hi - lo = 255 / 16)
    "zero_point_tie_even": lambda rng: np.array([-10.5 / 16, 244.5 / 16, 0.0]),
    "zero_point_tie_odd": lambda rng: np.array([-11.5 / 16, 243.5 / 16, 1.0]),
    "near_ties": lambda rng: _near_ties(rng, 4000),
    "huge": lambda rng: np.clip(rng.standard_normal(1000), -3.4, 3.4) * 1e38,
    "max_range": lambda rng: np.array([3.4028235e38, -3.4028235e38, 1.0, -1.0]),
    "tiny_normal": lambda rng: rng.standard_normal(1000) * 1e-37,
    "subnormal": lambda rng: rng.integers(-1000, 1000, 300) * TINY.astype(np.float64),
    "smallest_subnormal": lambda rng: np.array([-TINY, 0.0, TINY, 3 * TINY]),
    "magnitudes": lambda rng: np.concatenate([rng.standard_normal(100) * 1e-30, [1e30, -3e-39]]),
    "plus_inf": lambda rng: np.array([np.inf, 1.0, -1.0, 0.5] * 9),
    "minus_inf": lambda rng: np.array([-np.inf, 1.0, -1.0, 0.5] * 9),
    "both_inf": lambda rng: np.array([-np.inf, np.inf, 0.5, 0.0] * 9),
}


@pytest.mark.parametrize("kind", list(ADVERSARIAL))
def test_matches_onnxruntime(dev, rng, kind):
    """UINT8 from FLOAT32: the device and the reference both equal onnxruntime's DynamicQuantizeLinear
    bit for bit (scale, zero point, every quantized value)."""
    x = np.asarray(ADVERSARIAL[kind](rng), np.float32)
    theirs = ort_dql(x)
    assert_same(dynamic_quantize_ref(x, np.uint8), theirs, f"reference vs onnxruntime ({kind})")
    assert_same(device_dql(dev, x), theirs, f"kompute_dml vs onnxruntime ({kind})")


def test_near_ties_need_correct_rounding(dev, rng):
    """Many quotients within two ulps of a tie: equal to onnxruntime; a quotient from x * (1 / scale)
    (one more rounding) would have given other values, so these inputs do test the division."""
    x = np.concatenate([_near_ties(rng, 2000) for _ in range(20)])
    parts = np.split(x, 20)
    sloppy_differs = 0
    for p in parts:
        y, s, z = ort_dql(p)
        assert_same(device_dql(dev, p), (y, s, z), "near ties")
        with np.errstate(all="ignore"):
            approx = np.clip(np.rint(p * (F32(1) / s)) + z, 0, 255).astype(np.uint8)
        sloppy_differs += int((approx != y).sum())
    assert sloppy_differs > 0


def test_nan_inputs(dev, rng):
    """NaN elements are left out of the range and quantize to qmin; an all-NaN input gives scale 1
    and zero point qmin. onnxruntime agrees on short inputs (its scalar min / max loop skips NaN);
    its vectorized loop keeps or drops a NaN by position, so longer inputs are compared with the
    reference only."""
    for x in ([np.nan], [np.nan, np.nan], [np.nan, 1.0, 2.0], [1.0, 2.0, np.nan], [1.0, np.nan, -3.0]):
        x = np.array(x, np.float32)
        assert_same(device_dql(dev, x), ort_dql(x), f"{x} vs onnxruntime")
    x = rng.standard_normal(1000).astype(np.float32)
    x[rng.choice(1000, 50, replace=False)] = np.nan
    x[7] = -np.nan
    for dst in OUT_TYPES:
        want = dynamic_quantize_ref(x, dst.numpy_dtype)
        got = device_dql(dev, x, dst)
        assert_same(got, want, f"NaN {dst.name}")
        assert (got[0][np.isnan(x)] == quant_range(dst.numpy_dtype)[0]).all()
    y, s, z = device_dql(dev, np.full(9, np.nan, np.float32), DT.INT8)
    assert (s, z) == (1.0, -128) and (y == -128).all()


def test_float16_input(dev, rng):
    """FLOAT16 inputs equal the FLOAT32 quantization of their exact float32 values (onnxruntime's
    DynamicQuantizeLinear takes float32 only: it is given the converted values)."""
    f16 = np.finfo(np.float16)
    for x in (rng.standard_normal(1000) * 100, rng.uniform(0, 6e4, 500), np.array([f16.smallest_subnormal, -1.0]),
              np.array([65504.0, -65504.0, 0.5]), np.array([np.inf, 2.0, -1.0]), rng.standard_normal(7) * 1e-6):
        x16 = x.astype(np.float16)
        theirs = ort_dql(x16.astype(np.float32))
        assert_same(dynamic_quantize_ref(x16, np.uint8), theirs, "float16 reference")
        assert_same(device_dql(dev, x16), theirs, "float16")


def test_int8_hand_computed(dev):
    """INT8 (DirectML's qmin -128, qmax 127, asymmetric): [-1, 0, 1, 3]: scale 4 / 255, zero point
    round(-128 + 63.75) = -64, y = round(x * 63.75) - 64."""
    x = np.array([-1.0, 0.0, 1.0, 3.0], np.float32)
    y, s, z = device_dql(dev, x, DT.INT8)
    assert _bits(s) == _bits(F32(4) / F32(255)) and z == -64
    assert y.tolist() == [-128, -64, 0, 127]
    y, s, z = device_dql(dev, np.array([2.0, 5.0], np.float32), DT.INT8)  # all positive: zero point qmin
    assert z == -128 and y.tolist() == [-26, 127]  # 2 / (5 / 255) = 102 -> -128 + 102


@pytest.mark.parametrize("dst", OUT_TYPES, ids=lambda d: d.name)
def test_int8_and_uint8_agree_with_the_reference(dev, rng, dst):
    for kind in ADVERSARIAL:
        x = np.asarray(ADVERSARIAL[kind](rng), np.float32)
        assert_same(device_dql(dev, x, dst), dynamic_quantize_ref(x, dst.numpy_dtype), f"{dst.name} {kind}")


def test_many_work_groups(dev, rng):
    """Inputs over several million elements: the groups' partial keys (the MAX_PARTS cap and several
    elements per invocation) reduce to the extremes wherever they are; strided inputs too."""
    n = dq_op.MAX_PARTS * dq_op.ELEMENTS_PER_GROUP + 12345
    x = rng.uniform(-1, 1, n).astype(np.float32)
    for pos in (0, n - 1, n // 2 + 7):
        x[pos] = F32(-40.0)
        x[(pos * 31 + 5) % n] = F32(77.0)
        assert_same(device_dql(dev, x), ort_dql(x), f"extremes at {pos}")
        x[pos] = F32(0.5)
        x[(pos * 31 + 5) % n] = F32(0.5)
    t = dev.tensor(x)
    view = kdml.Tensor(t.buffer, TD(DT.FLOAT32, (n // 6, 3), (6, 2)), 0)  # every other element, by rows
    assert_same(device_dql(dev, view), ort_dql(x[: (n // 6) * 6].reshape(-1, 6)[:, ::2]), "strided")


@pytest.mark.parametrize("src", IN_TYPES, ids=lambda d: d.name)
def test_capped_min_max_grid(dev, rng, src):
    """Over 2 x MAX_PARTS x ELEMENTS_PER_GROUP elements: dql_minmax's grid is capped at MAX_PARTS
    groups, which sweep the input several times (packed: UNITS loads in flight per step), and
    every dql_quant group reduces all MAX_PARTS partial keys. The minimum in the last group's
    share of several sweeps in turn (each of the packed variant's UNITS loads of a step, the last
    whole sweep), then in the last, partial, sweep and among the packed variant's last elements;
    the maximum in the last element; packed and strided; bit for bit the
    reference, outputs poisoned, every other byte unchanged (run)."""
    parts, n = dq_op.MAX_PARTS, 2 * dq_op.MAX_PARTS * dq_op.ELEMENTS_PER_GROUP + 37
    epv = 16 // src.size  # elements per 16-byte load
    # (sizes, input strides, elements per invocation and sweep): the grid-stride loops step over
    # 16-byte loads (packed) or elements, 256 invocations a group
    for dst, (sizes, x_str, per) in zip(OUT_TYPES, (((n,), None, epv), ((n // 3, 3), (6, 2), 1))):
        count, sweep = int(np.prod(sizes)), parts * 256 * per
        ones = (1,) * len(sizes)
        plans = dq_op.plan_dynamic_quantize(Desc(TD(src, sizes, x_str), TD(dst, sizes), TD(DT.FLOAT32, ones),
                                                 TD(dst, ones)), 65535)
        assert plans[0].groups == (parts, 1, 1) and plans[0].variant.endswith("_v") == (x_str is None)
        base = rng.uniform(-1, 1, count)
        base[-1] = 77.0
        sweeps = count // sweep  # whole ones; the first four are the packed variant's first step
        for pos in [(j * parts + parts - 1) * 256 * per + 7 * per + per // 2 for j in {0, 1, 2, 3, sweeps - 1}] + \
                   [sweeps * sweep + 3, count - 2]:
            v = base.copy()
            v[pos] = -40.0
            run(dev, rng, src, dst, sizes, v.reshape(sizes).astype(src.numpy_dtype), x_strides=x_str, y_strides=None)


def test_two_dispatches(dev):
    """The quantizing dispatch derives the scale and zero point itself: min / max keys, then
    quantization, whatever the types and layout."""
    for src, dst, sizes, x_str in ((DT.FLOAT32, DT.UINT8, (7,), None), (DT.FLOAT16, DT.INT8, (300, 50), (1, 300)),
                                   (DT.FLOAT32, DT.INT8, (5_000_000,), None)):
        ones = (1,) * len(sizes)
        op = dev.compile(Desc(TD(src, sizes, x_str), TD(dst, sizes), TD(DT.FLOAT32, ones), TD(dst, ones)))
        assert [p.variant.split("_")[1] for p in op.plans] == ["minmax", "quant"]


def test_repeated_and_recorded_executions(dev, rng):
    """The scratch is the compiled operator's: executions one after another, and several in one
    recording (barriers between them), each see only their own input."""
    xd, yd, sd, zd = TD(DT.FLOAT32, (300,)), TD(DT.UINT8, (300,)), TD(DT.FLOAT32, (1,)), TD(DT.UINT8, (1,))
    op = dev.compile(Desc(xd, yd, sd, zd))
    xs = [(rng.standard_normal(300) * 10.0 ** k).astype(np.float32) for k in range(-2, 3)]
    outs = [[dev.empty(d) for d in (yd, sd, zd)] for _ in xs]
    for x, o in zip(xs, outs):
        op.execute([dev.tensor(x)], o)
        assert_same((o[0].numpy(), o[1].numpy()[0], o[2].numpy()[0]), ort_dql(x), "eager")
    ins = [dev.tensor(x[::-1].copy()) for x in xs]
    with dev.record() as rec:
        for t, o in zip(ins, outs):
            rec.execute(op, [t], o)
    for x, o in zip(xs, outs):
        assert_same((o[0].numpy(), o[1].numpy()[0], o[2].numpy()[0]), ort_dql(x[::-1]), "recorded")


def test_scratch_is_not_read_before_it_is_written(dev, rng):
    """The operator's scratch (the groups' min / max keys) is not zeroed when it is compiled:
    with every word poisoned first (0xFFFFFFFF and 0: keys that would win a min or a max), each
    execution still equals the reference bit for bit, for one group and for MAX_PARTS groups."""
    for n in (300, dq_op.MAX_PARTS * dq_op.ELEMENTS_PER_GROUP + 5):
        xd, yd, sd, zd = TD(DT.FLOAT32, (n,)), TD(DT.UINT8, (n,)), TD(DT.FLOAT32, (1,)), TD(DT.UINT8, (1,))
        op = dev.compile(Desc(xd, yd, sd, zd))
        (scratch,) = op.constants
        for poison in (0xFF, 0x00):
            scratch.buffer.write(np.full(scratch.buffer.nbytes, poison, np.uint8))
            x = (rng.standard_normal(n) * 3).astype(np.float32)
            outs = [dev.empty(d) for d in (yd, sd, zd)]
            op.execute([dev.tensor(x)], outs)
            assert_same((outs[0].numpy(), outs[1].numpy()[0], outs[2].numpy()[0]), ort_dql(x), f"n={n}")


# ---- the helper ------------------------------------------------------------------------------------------
def test_helper(dev, rng):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    y, s, z = kdml.dynamic_quantize_linear(x, device=dev)
    assert (y.shape, y.dtype, s.shape, s.dtype, z.shape, z.dtype) == ((4, 5, 6), np.uint8, (1,), np.float32, (1,),
                                                                      np.uint8)
    assert_same((y.numpy(), s.numpy()[0], z.numpy()[0]), ort_dql(x), "helper")
    # Python data becomes FLOAT32; INT8 on request
    y, s, z = kdml.dynamic_quantize_linear([[0.1, -2.0], [3.0, 0.0]], data_type="INT8", device=dev)
    assert y.dtype == np.int8 and z.dtype == np.int8
    assert_same((y.numpy(), s.numpy()[0], z.numpy()[0]),
                dynamic_quantize_ref(np.array([[0.1, -2.0], [3.0, 0.0]], np.float32), np.int8), "python data")
    # out=, scale_out=, zero_point_out= (a strided output, one-element tensors of other sizes)
    buf = dev.buffer(256)
    out = kdml.Tensor(buf, TD(DT.UINT8, (4, 5, 6), (64, 8, 1)), 0)
    sc = kdml.Tensor(dev.buffer(64), TD(DT.FLOAT32, (1, 1)), 16)
    zp = dev.empty(TD(DT.UINT8, (1,)))
    r = kdml.dynamic_quantize_linear(dev.tensor(x), out=out, scale_out=sc, zero_point_out=zp)
    assert r[0] is out and r[1] is sc and r[2] is zp
    assert_same((out.numpy(), sc.numpy().reshape(-1)[0], zp.numpy()[0]), ort_dql(x), "out=")
    with pytest.raises(kdml.InvalidArgumentError, match=r"^scale_out: data type must be FLOAT32"):
        kdml.dynamic_quantize_linear(x, scale_out=zp, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^zero_point_out: must hold one element"):
        kdml.dynamic_quantize_linear(x, zero_point_out=dev.empty(TD(DT.UINT8, (2,))), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^out: sizes must be \(4, 5, 6\)"):
        kdml.dynamic_quantize_linear(x, out=dev.empty(TD(DT.UINT8, (4, 30))), device=dev)
    with pytest.raises(kdml.UnsupportedError, match=r"^input_tensor: DYNAMIC_QUANTIZE_LINEAR does not support FLOAT64"):
        kdml.dynamic_quantize_linear(np.zeros(3), device=dev)


# ---- the shared correctly rounded division (shaders/f32_exact.glsl) --------------------------------------
def _random_bits(rng, n: int) -> np.ndarray:
    """float32 bit patterns of every exponent (subnormals, infinities and NaNs included)."""
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    small = rng.random(n) < 0.25  # more subnormals and zeros than uniform bits give
    bits[small] &= np.uint32(0x807FFFFF) if rng.random() < 0.5 else np.uint32(0x80000FFF)
    return bits


def test_division_is_correctly_rounded(dev, rng):
    """ELEMENT_WISE_DIVIDE shares the quotient's code: FLOAT32 bit for bit numpy's IEEE division
    (subnormal results too), FLOAT16 bit for bit the float64 quotient rounded once to float16."""
    a, b = _random_bits(rng, 200_000).view(np.float32), _random_bits(rng, 200_000).view(np.float32)
    with np.errstate(all="ignore"):
        b[:1000] = a[:1000] * F32(3)  # quotients near 1/3
        for i, steps in enumerate((-2, -1, 1, 2)):  # quotients next to 1, where the spacing changes
            part = slice(1000 * (i + 2), 1000 * (i + 3))
            a[part] = b[part]
            for _ in range(abs(steps)):
                a[part] = np.nextafter(a[part], np.float32(np.inf if steps > 0 else 0))
    got = kdml.div(a, b, device=dev).numpy()
    with np.errstate(all="ignore"):
        want = a / b
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{int((~same).sum())} quotients differ, first {a[~same][:3]} / {b[~same][:3]}"
    h = rng.integers(0, 2**16, (2, 100_000), dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = kdml.div(h[0], h[1], device=dev).numpy()
    with np.errstate(all="ignore"):
        want = (h[0].astype(np.float64) / h[1].astype(np.float64)).astype(np.float16)
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{int((~same).sum())} float16 quotients differ"


# ---- chained into MATRIX_MULTIPLY_INTEGER_TO_FLOAT: onnxruntime's DynamicQuantizeMatMul ------------------
@pytest.mark.parametrize("b_type", [np.uint8, np.int8], ids=["u8", "s8"])
def test_chain_into_matmul_integer_to_float(dev, rng, b_type):
    """dynamic_quantize_linear's (1,) scale and zero point go straight into matmul_integer_to_float
    as a_scale / a_zero_point; the product equals the exact int64 reference (onnx_reference) and,
    where tests/ort_exactness.py finds onnxruntime exact on this processor, onnxruntime's
    DynamicQuantizeMatMul bit for bit."""
    from onnx_reference import assert_product, mmitf_exact
    from ort_exactness import skip_unless_exact

    m, k, n = 12, 64, 24
    a = (rng.standard_normal((2, m, k)) * 3).astype(np.float32)
    info = np.iinfo(b_type)
    b = rng.integers(info.min, info.max + 1, (k, n)).astype(b_type)
    b_scale = rng.uniform(0.001, 0.05, n).astype(np.float32)
    b_zp = rng.integers(info.min, info.max + 1, n).astype(b_type)
    bias = rng.uniform(-1, 1, n).astype(np.float32)
    q, s, z = kdml.dynamic_quantize_linear(dev.tensor(a))
    got = kdml.matmul_integer_to_float(q, dev.tensor(b), s, b_scale, z, b_zp, bias).numpy()
    ry, rs, rz = dynamic_quantize_ref(a, np.uint8)
    assert_product(got, mmitf_exact(ry, b, rs, b_scale, np.uint8(rz), b_zp, bias), what="kompute_dml")
    skip_unless_exact(np.uint8, b_type, "DynamicQuantizeMatMul")  # the exact comparison above has run
    node = helper.make_node("DynamicQuantizeMatMul", ["A", "B", "bs", "bz", "bias"], ["Y"], domain="com.microsoft")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", T.FLOAT, list(a.shape))],
                          [helper.make_tensor_value_info("Y", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(v, nm) for v, nm in
                                       ((b, "B"), (b_scale, "bs"), (b_zp, "bz"), (bias, "bias"))])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    (theirs,) = _session(model).run(None, {"A": a})
    assert theirs.view(np.uint32).tolist() == got.view(np.uint32).tolist()


# ---- the ONNX backend --------------------------------------------------------------------------------------
def test_onnx_dynamic_quantize_linear_on_the_device(rng):
    """DynamicQuantizeLinear nodes run on DYNAMIC_QUANTIZE_LINEAR; a MatMulIntegerToFloat reading
    their outputs binds them where they are (nothing uploaded for it); results equal onnxruntime's."""
    from kompute_dml.onnx_backend import VULKAN, Backend

    k, n = 32, 16
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulIntegerToFloat", ["q", "B", "s", "bs", "z"], ["Y"], domain="com.microsoft")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [5, k])],
                          [helper.make_tensor_value_info("q", T.UINT8, None), helper.make_tensor_value_info("s", T.FLOAT, None),
                           helper.make_tensor_value_info("z", T.UINT8, None), helper.make_tensor_value_info("Y", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.float32(0.01), "bs")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    rep = Backend.prepare(model, "CPU")
    assert [p.target for p in rep.placement] == [VULKAN, VULKAN]
    assert rep.placement[0].operator == "DYNAMIC_QUANTIZE_LINEAR"
    for kind in ("normal", "near_ties", "minus_inf", "zeros"):
        x = np.resize(np.asarray(ADVERSARIAL[kind](rng), np.float32), (5, k))
        q, s, z, y = rep.run({"x": x})
        assert rep.last_run.runtime_fallbacks == 0 and rep.last_run.uploads == 1  # x only
        assert np.shape(s) == () and np.shape(z) == ()
        oq, os_, oz = ort_dql(x)
        assert_same((q, s, z), (oq, os_, oz), f"backend {kind}")
        if np.isfinite(os_) and os_ > 0:  # u8 x u8: onnxruntime's product is exact on every CPU
            (theirs,) = _session(model).run(None, {"x": x})[3:]
            assert theirs.view(np.uint32).tolist() == y.view(np.uint32).tolist()
