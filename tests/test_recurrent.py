"""RNN, LSTM and GRU (ops/rnn.py, lstm.py, gru.py) against a float64 numpy reference of their pages' formulas
(tests/recurrent_reference.py) within |got - ref| <= TOL[type] * (1 + |ref|) (docs/recurrent.md), every
direction, the default and other activations, biases / initial states / peepholes / sequence lengths present
or absent, FLOAT32 and FLOAT16, strided views; outputs poisoned first, elements past a sequence's length
exactly 0, every byte outside the outputs unchanged; refused descriptors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from recurrent_reference import GATES, PER, reference

import kompute_dml as kdml
from kompute_dml.ops.gru import GruDesc
from kompute_dml.ops.lstm import LstmDesc
from kompute_dml.ops.rnn import RnnDesc

DT = kdml.DataType
TD = kdml.TensorDesc
TOL = {DT.FLOAT32: 2e-5, DT.FLOAT16: 2e-2}
DESCS = {"RNN": RnnDesc, "LSTM": LstmDesc, "GRU": GruDesc}
SIG, TANH = kdml.ActivationSigmoidDesc(None, None), kdml.ActivationTanhDesc(None, None)
DEFAULT = {"RNN": (TANH,), "LSTM": (SIG, TANH, TANH), "GRU": (SIG, TANH)}


def values(rng, kind, steps, batch, inp, hid, dirs, dt):
    g = GATES[kind]
    scale = 0.6 / np.sqrt(hid)
    v = {"input_tensor": rng.standard_normal((1, steps, batch, inp)),
         "weight_tensor": rng.standard_normal((1, dirs, g * hid, inp)) * scale,
         "recurrence_tensor": rng.standard_normal((1, dirs, g * hid, hid)) * scale,
         "bias_tensor": rng.standard_normal((1, 1, dirs, 2 * g * hid)) * 0.5,
         "hidden_init_tensor": rng.standard_normal((1, dirs, batch, hid)) * 0.5,
         "cell_mem_init_tensor": rng.standard_normal((1, dirs, batch, hid)) * 0.5,
         "peephole_tensor": rng.standard_normal((1, 1, dirs, 3 * hid)) * 0.5}
    v = {k: a.astype(dt.numpy_dtype) for k, a in v.items()}
    v["sequence_lengths_tensor"] = rng.integers(0, steps + 1, (1, 1, 1, batch)).astype(np.uint32)
    return v


def run(dev, rng, kind, direction, dt=DT.FLOAT32, shape=(3, 2, 3, 5), absent=(), acts=None, strided=False, **extra):
    steps, batch, inp, hid = shape
    dirs = 2 if direction == 2 else 1
    cls = DESCS[kind]
    support = kdml.ops.BY_DESC[cls].support
    vals = values(rng, kind, steps, batch, inp, hid, dirs, dt)
    acts = acts or DEFAULT[kind] * dirs
    tensors, host = [], {}
    for f in support.inputs:
        if f in absent:
            tensors.append(None)
            continue
        a = vals[f]
        d = TD(DT.UINT32 if f == "sequence_lengths_tensor" else dt, a.shape,
               random_strides(rng, a.shape, allow_broadcast=False) if strided else None)
        tensors.append(place(dev, rng, d, a)[0])
        host[f] = a
    ref_y, ref_h, ref_c = reference(kind, host["input_tensor"], host["weight_tensor"], host["recurrence_tensor"],
                                    host.get("bias_tensor"), host.get("hidden_init_tensor"),
                                    host.get("sequence_lengths_tensor"), acts, direction,
                                    c0=host.get("cell_mem_init_tensor"), p=host.get("peephole_tensor"),
                                    clip=extra.get("clip_threshold") if extra.get("use_clip_threshold") else None,
                                    coupled=bool(extra.get("couple_input_forget")), lbr=bool(extra.get("linear_before_reset")))
    refs = {"output_sequence_tensor": ref_y, "output_single_tensor": ref_h, "output_cell_single_tensor": ref_c}
    outs, befores = [], []
    for f in support.outputs:
        if f in absent:
            outs.append(None)
            befores.append(None)
            continue
        shp = refs[f].shape
        t = place(dev, rng, TD(dt, shp, random_strides(rng, shp, allow_broadcast=False) if strided else None))[0]
        befores.append(poison_against(t, refs[f], rng))
        outs.append(t)
    desc = cls(*(t.desc if t is not None else None for t in (*tensors, *outs)), acts, direction, **extra)
    dev.compile(desc).execute(tensors, outs)
    lens = host.get("sequence_lengths_tensor")
    for f, t, before in zip(support.outputs, outs, befores):
        if t is None:
            continue
        got = read_logical(assert_outside_unchanged(t, before), t.offset, t.desc).astype(np.float64)
        want = refs[f]
        err = np.abs(got - want) / (1 + np.abs(want))
        assert err.max() <= TOL[dt], f"{f}: error {err.max():.3g} over {TOL[dt]}"
        if f == "output_sequence_tensor" and lens is not None:  # past a sequence's length: exactly +0
            past = np.arange(steps)[:, None, None, None] >= lens.reshape(1, 1, -1, 1)
            bits = read_logical(t.buffer.read(), t.offset, t.desc).view(f"u{dt.size}")
            assert (bits[np.broadcast_to(past, got.shape)] == 0).all()
    return desc


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("direction", [0, 1, 2], ids=["forward", "backward", "bidirectional"])
@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_every_tensor_strided(dev, rng, kind, direction, dt):
    extra = {"LSTM": {"clip_threshold": 0.8, "use_clip_threshold": True}, "GRU": {"linear_before_reset": direction == 2},
             "RNN": {}}[kind]
    run(dev, rng, kind, direction, dt, strided=True, **extra)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_optional_tensors_absent(dev, rng, kind):
    absent = ("bias_tensor", "hidden_init_tensor", "cell_mem_init_tensor", "sequence_lengths_tensor", "peephole_tensor")
    run(dev, rng, kind, 2, absent=absent)
    run(dev, rng, kind, 0, absent=("output_sequence_tensor",), shape=(2, 3, 2, 4))
    run(dev, rng, kind, 1, absent=("output_single_tensor", "output_cell_single_tensor", "sequence_lengths_tensor"))


@pytest.mark.parametrize("variant", ["coupled", "coupled-clip", "no-peephole", "one-step"])
def test_lstm_variants(dev, rng, variant):
    extra = {"couple_input_forget": "coupled" in variant}
    if "clip" in variant:
        extra.update(clip_threshold=0.3, use_clip_threshold=True)
    absent = ("peephole_tensor",) if variant == "no-peephole" else ()
    run(dev, rng, "LSTM", 2, shape=(1, 3, 2, 4) if variant == "one-step" else (3, 2, 3, 5), absent=absent, **extra)


@pytest.mark.parametrize("lbr", [False, True], ids=["reset-first", "linear-before-reset"])
def test_gru_linear_before_reset(dev, rng, lbr):
    run(dev, rng, "GRU", 0, linear_before_reset=lbr)
    run(dev, rng, "GRU", 1, DT.FLOAT16, absent=("bias_tensor",), linear_before_reset=lbr)


OTHER = (kdml.ActivationReluDesc(None, None), kdml.ActivationLeakyReluDesc(None, None, 0.1),
         kdml.ActivationHardSigmoidDesc(None, None, 0.2, 0.5), kdml.ActivationScaledTanhDesc(None, None, 1.5, 0.7),
         kdml.ActivationSoftsignDesc(None, None), kdml.ActivationLinearDesc(None, None, 0.5, 0.1),
         kdml.ActivationEluDesc(None, None, 0.9), kdml.ActivationIdentityDesc(None, None),
         kdml.ActivationThresholdedReluDesc(None, None, 0.2), kdml.ActivationSoftplusDesc(None, None, 2.0))


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_other_activations(dev, rng, kind):
    n = PER[kind] * 2
    for start in range(0, len(OTHER), n):
        acts = tuple(OTHER[(start + k) % len(OTHER)] for k in range(n))
        run(dev, rng, kind, 2, acts=acts, shape=(2, 2, 3, 4))


def _lstm(**kw):
    f = DT.FLOAT32
    base = dict(input_tensor=TD(f, (1, 2, 2, 3)), weight_tensor=TD(f, (1, 1, 8, 3)), recurrence_tensor=TD(f, (1, 1, 8, 2)),
                bias_tensor=None, hidden_init_tensor=None, cell_mem_init_tensor=None, sequence_lengths_tensor=None,
                peephole_tensor=None, output_sequence_tensor=TD(f, (2, 1, 2, 2)), output_single_tensor=None,
                output_cell_single_tensor=None, activation_descs=(SIG, TANH, TANH))
    return LstmDesc(**{**base, **kw})


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"activation_descs": (SIG, TANH)}, kdml.InvalidArgumentError, "^activation_descs: ActivationDescCount must be 3"),
    ({"activation_descs": [SIG, TANH, TANH]}, kdml.InvalidArgumentError, "^activation_descs: must be a tuple"),
    ({"activation_descs": (SIG, TANH, kdml.ActivationSoftmaxDesc(None, None))}, kdml.UnsupportedError,
     r"^activation_descs\[2\]: "),
    ({"activation_descs": (SIG, kdml.ElementWiseClipDesc(None, None, None, 0, 1), TANH)}, kdml.UnsupportedError,
     r"^activation_descs\[1\]: "),
    ({"activation_descs": (SIG, TANH, kdml.ActivationTanhDesc(TD(DT.FLOAT32, (1, 1, 2, 2)), None))},
     kdml.InvalidArgumentError, r"^activation_descs\[2\]: an activation's tensors must be None"),
    ({"activation_descs": (kdml.ActivationSoftplusDesc(None, None, 0.5), TANH, TANH)}, kdml.InvalidArgumentError,
     r"^activation_descs\[0\]\.steepness"),
    ({"direction": 3}, kdml.InvalidArgumentError, "^direction: "),
    ({"direction": 2}, kdml.InvalidArgumentError, "^weight_tensor.sizes: must be"),
    ({"input_tensor": TD(DT.FLOAT32, (2, 2, 2, 3))}, kdml.InvalidArgumentError, "^input_tensor.sizes"),
    ({"recurrence_tensor": TD(DT.FLOAT32, (1, 1, 6, 2))}, kdml.InvalidArgumentError, "^recurrence_tensor.sizes"),
    ({"bias_tensor": TD(DT.FLOAT32, (1, 1, 1, 8))}, kdml.InvalidArgumentError, "^bias_tensor.sizes"),
    ({"peephole_tensor": TD(DT.FLOAT32, (1, 1, 1, 8))}, kdml.InvalidArgumentError, "^peephole_tensor.sizes"),
    ({"sequence_lengths_tensor": TD(DT.UINT32, (1, 1, 2, 1))}, kdml.InvalidArgumentError, "^sequence_lengths_tensor.sizes"),
    ({"output_sequence_tensor": TD(DT.FLOAT32, (2, 1, 2, 3))}, kdml.InvalidArgumentError, "^output_sequence_tensor.sizes"),
    ({"output_single_tensor": TD(DT.FLOAT16, (1, 1, 2, 2))}, kdml.InvalidArgumentError, "^output_single_tensor.data_type"),
    ({"output_sequence_tensor": TD(DT.FLOAT32, (2, 1, 2, 2), (0, 0, 1, 0))}, kdml.InvalidArgumentError,
     "^output_sequence_tensor"),
    ({"sequence_lengths_tensor": TD(DT.INT32, (1, 1, 1, 2))}, kdml.UnsupportedError, "^sequence_lengths_tensor: LSTM does not"),
    ({"input_tensor": TD(DT.FLOAT32, (2, 2, 3))}, kdml.UnsupportedError, "^input_tensor: LSTM supports 4"),
    ({"use_clip_threshold": True, "clip_threshold": -1.0}, kdml.InvalidArgumentError, "^clip_threshold: "),
    ({"use_clip_threshold": True, "clip_threshold": float("nan")}, kdml.InvalidArgumentError, "^clip_threshold: "),
    ({"couple_input_forget": "yes"}, kdml.InvalidArgumentError, "^couple_input_forget"),
])
def test_refused(dev, change, error, match):
    with pytest.raises(error, match=match):
        dev.compile(_lstm(**change))


def test_refused_gru_rnn(dev):
    f = DT.FLOAT32
    g = GruDesc(TD(f, (1, 2, 2, 3)), TD(f, (1, 1, 6, 3)), TD(f, (1, 1, 6, 2)), None, None, None, TD(f, (2, 1, 2, 2)), None,
                (SIG, TANH, TANH))
    with pytest.raises(kdml.InvalidArgumentError, match="^activation_descs: ActivationDescCount must be 2"):
        dev.compile(g)
    r = RnnDesc(TD(f, (1, 2, 2, 3)), TD(f, (1, 1, 2, 3)), TD(f, (1, 1, 2, 2)), None, None, None, None, None, (TANH, TANH))
    with pytest.raises(kdml.InvalidArgumentError, match="^activation_descs: ActivationDescCount must be 1"):
        dev.compile(r)
    with pytest.raises(kdml.InvalidArgumentError, match="^linear_before_reset"):
        dev.compile(GruDesc(*(g.__dict__[k] for k in list(g.__dict__)[:8]), (SIG, TANH), 0, 2.5))


def test_feature_level_of_an_activation(rng):
    """An activation is validated as its own operator at the device's level (ACTIVATION_CELU needs 3_0)."""
    with kdml.Device(feature_level=kdml.FeatureLevel.FL_2_0) as d:
        with pytest.raises(kdml.UnsupportedError, match=r"^activation_descs\[0\]\."):
            d.compile(_lstm(activation_descs=(kdml.ActivationCeluDesc(None, None, 1.0), TANH, TANH)))
        run(d, rng, "LSTM", 0, shape=(2, 2, 3, 4))  # the sequence-length steps run below IF's level too
