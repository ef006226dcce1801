"""BERT encoders with random weights (kompute_dml/bench/bert_models.py: exported, dynamically quantized and
fused exactly as kompute_dml/bench/minilm.py builds all-MiniLM-L6-v2) through the ONNX backend, for
several hidden sizes, head counts, depths, batch sizes, sequence lengths (1, 7, 13, 30: not
multiples of 8) and padded attention masks.

Oracles, for each run:
  - node by node (tests/onnx_reference.compare_nodes): every node recomputed by the exact
    reference from the backend's own inputs to it; quantized products bit for bit.
  - end to end (a): last_hidden_state against the exact reference of the same fused model
    (tests/onnx_reference.evaluator: float operators in float64 rounded once, products in int64),
    run with the backend's dynamic-quantization decisions (see below), within TOLERANCE.
  - end to end (b): against onnxruntime's CPU provider where its u8 x s8 product is exact on this
    processor (tests/ort_exactness.py), skipped with the probe's figure otherwise.

The tolerance. Where both sides quantize every activation to the same uint8 values (and scale and
zero point), the quantized products agree up to their float32 epilogue (one rounding), the
attention path (FusedMatMul, Softmax, MatMul) reaches the output only through a quantized product
and so not at all, and what reaches last_hidden_state is the float32 rounding of the 2L + 1
normalizations of the residual chain (the embeddings' LayerNormalization and two per layer), each
within FLOAT_ULPS = 16 float32 ulps of its row's scale (the node-by-node bound, compare_nodes).
Errors add along that chain, scaled by 1 / std of each normalized row (about 1: random BERT rows
have std near 1 after a normalization with gamma 1), so per row

    |ours - exact| <= 2 (2L + 1) * 16 * 2^-23 * max |exact row|        (the 2: that amplification)

which is 96 ulps of the row's largest value for one layer, 160 for two. The 34 runs of this file
showed at most 3.5 such ulps (1.2e-6 absolute on rows of magnitude 3 to 4; each run prints its figure).

Dynamic quantization makes the network discontinuous: a float32 rounding difference in a
LayerNormalization output (legitimate: 16 ulps are allowed) can put a value on the other side of a
rounding boundary of x / scale, and then one uint8 differs by one and the difference (about 1e-3
at these sizes) spreads. That is not an error, so the end-to-end reference takes the backend's
quantization decisions (its DynamicQuantizeLinear outputs; for DynamicQuantizeMatMul the
quantization of the backend's A, which node by node checks the product used) after checking that
each decision is a correct rounding of the reference's own unquantized value: the same scale
within the float32 tolerance, zero point and every uint8 within one of the reference's, and
(q - zero point) * scale within half a step (a full step where clamped to 0 or 255) of the
reference's value plus that tolerance. Where no decision differs, that is the plain exact
reference; the figures printed say how many differed and the error against the plain reference.
`test_one_flipped_quantization_is_visible` shows the tolerance is tight enough to see a single
uint8 one unit off.

torch and transformers (requirements-model.txt) build the models; without them the file skips.
The models are cached under .cache/models/ (keyed by configuration and tool versions). The default
part uses one small model (hidden 64, 1 layer, 2 heads); the wider matrix is marked slow.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch", reason="torch (requirements-model.txt) builds the random BERT models")
pytest.importorskip("transformers", reason="transformers (requirements-model.txt) builds the random BERT models")

import onnx_reference as R  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from ort_exactness import onnxruntime_exact  # noqa: E402

from kompute_dml.bench import bert_models, minilm  # noqa: E402  (minilm: with_every_value_as_output)
from kompute_dml.onnx_backend import Backend  # noqa: E402

VOCAB = 1000


def ulp_budget(layers: int) -> int:
    """Float32 ulps of a row's largest value that the end-to-end comparison allows (module docstring)."""
    return 2 * (2 * layers + 1) * R.FLOAT_ULPS


def tolerance(layers: int, exact: np.ndarray) -> np.ndarray:
    return ulp_budget(layers) * R.EPS32 * np.abs(exact).max(axis=-1, keepdims=True)


# ---- quantization decisions ---------------------------------------------------------------------
def quantization_choices(model: Any, values: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each dynamic quantization's (q, scale, zero point) in a run's values, keyed by the node's first
    output: a DynamicQuantizeLinear's outputs; for a DynamicQuantizeMatMul, onnxruntime's
    quantization of the A it was given (its product is checked against exactly that, node by node)."""
    out = {}
    for n in model.graph.node:
        if n.op_type == "DynamicQuantizeLinear":
            q, s, z = (np.asarray(values[o]) for o in n.output[:3])
            out[n.output[0]] = (q, s, z)
        elif n.op_type == "DynamicQuantizeMatMul":
            out[n.output[0]] = R.dynamic_quantize_linear(values[n.input[0]])
    return out


def rounding_problem(x: np.ndarray, chosen: tuple[Any, Any, Any], budget: int) -> str:
    """Why `chosen` (q, scale, zero point) is not a correct uint8 rounding of `x` (onnxruntime's
    DynamicQuantizeLinear rules) up to `budget` float32 ulps of max |x| in x and scale; '' if it is."""
    q, s, z = (np.asarray(v) for v in chosen)
    own_q, own_s, own_z = R.dynamic_quantize_linear(x)
    x64 = np.asarray(x, np.float64)
    slack = budget * R.EPS32 * max(float(np.abs(x64).max(initial=0.0)), float(own_s))
    s64, z64 = float(s), int(z)
    if q.shape != own_q.shape:
        return f"shape {q.shape}, expected {own_q.shape}"
    if abs(s64 - float(own_s)) > budget * R.EPS32 * float(own_s):
        return f"scale {s64!r} vs {float(own_s)!r}"
    if abs(z64 - int(own_z)) > 1:
        return f"zero point {z64} vs {int(own_z)}"
    if np.abs(q.astype(np.int64) - own_q.astype(np.int64)).max(initial=0) > 1:
        return "a uint8 more than one from the reference's"
    deq = (q.astype(np.float64) - z64) * s64
    step = np.where((q == 0) | (q == 255), 1.0, 0.5) * s64
    bad = np.abs(deq - x64) > step + slack
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        return f"q[{i}] = {q[i]} dequantizes to {deq[i]!r}, more than a rounding from {x64[i]!r}"
    return ""


@dataclass
class Conditioning:
    """What the conditioned reference found: per quantization (its node's first output), how many
    uint8 values, scales and zero points of the choice differed from the reference's own, and any
    choice that was not a correct rounding."""

    differing: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(sum(d) for d in self.differing.values())

    def describe(self) -> str:
        u, s, z = (sum(d[i] for d in self.differing.values()) for i in range(3))
        return f"{u} uint8 values, {s} scales, {z} zero points"


def conditioned_evaluator(model: Any, choices: dict[str, Any], budget: int) -> tuple[ReferenceEvaluator, Conditioning]:
    """The exact reference (tests/onnx_reference.evaluator) whose dynamic quantizations return
    `choices` (quantization_choices of another run; a quantization not in it is the reference's
    own) after checking that each is a correct rounding
    of the reference's own input (rounding_problem); where a choice is the reference's own
    quantization, this is the plain exact reference."""
    log = Conditioning()

    def pick(name: str, x: np.ndarray) -> tuple[Any, Any, Any]:
        own = R.dynamic_quantize_linear(x)
        q, s, z = choices.get(name, own)
        differ = (int(np.count_nonzero(q != own[0])), int(s != own[1]), int(z != own[2]))
        if any(differ):
            log.differing[name] = differ
            why = rounding_problem(x, (q, s, z), budget)
            if why:
                log.problems.append(f"{name}: {why}")
        return np.asarray(q, np.uint8), np.asarray(s, np.float32), np.asarray(z, np.uint8)

    class DynamicQuantizeLinear(R.DynamicQuantizeLinear):
        def _run(self, x):
            return pick(self.onnx_node.output[0], x)

    class DynamicQuantizeMatMul(R.DynamicQuantizeMatMul):
        def _run(self, a, b, b_scale, b_zero_point=None, bias=None):
            q, s, z = pick(self.onnx_node.output[0], a)
            return (R.mmitf_exact(q, b, s, b_scale, z, b_zero_point, bias).value.astype(np.float32),)

    replaced = {"DynamicQuantizeLinear", "DynamicQuantizeMatMul"}
    ops = [c for c in R.CUSTOM_OPS if c.__name__ not in replaced] + [DynamicQuantizeLinear, DynamicQuantizeMatMul]
    return ReferenceEvaluator(model, new_ops=ops), log


# ---- one model, prepared once ---------------------------------------------------------------------
@dataclass
class Prepared:
    hidden: int
    layers: int
    heads: int
    path: Path
    model: Any  # the fused model
    full: Any  # the same with every value as a graph output
    rep: Any  # the backend, plain model
    rep_full: Any  # the backend, every value
    ort_full: Any  # onnxruntime, every value
    ort_plain: Any

    @property
    def names(self) -> list[str]:
        return [o.name for o in self.full.graph.output]


def prepare(hidden: int, layers: int, heads: int) -> Prepared:
    path = bert_models.build_random_bert(hidden, layers, heads, vocab=VOCAB)
    model = onnx.load(str(path))
    ops = bert_models.op_counts(path)
    # the fusions the recipe is for: Q, K, V on the shared quantized activation, the other three
    # products quantizing their own A, one Gelu per layer
    assert (ops.get("MatMulIntegerToFloat"), ops.get("DynamicQuantizeMatMul"), ops.get("Gelu")) == (
        3 * layers, 3 * layers, layers), ops
    full = minilm.with_every_value_as_output(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return Prepared(hidden, layers, heads, path, model, full, Backend.prepare(model, "CPU"),
                    Backend.prepare(full, "CPU"),
                    ort.InferenceSession(full.SerializeToString(), so, providers=["CPUExecutionProvider"]),
                    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]))


_PREPARED: dict[tuple[int, int, int], Prepared] = {}


@pytest.fixture(scope="module")
def prepared():
    """Models by (hidden, layers, heads), built (cached on disk) and prepared once per module."""

    def get(hidden: int, layers: int, heads: int) -> Prepared:
        key = (hidden, layers, heads)
        if key not in _PREPARED:
            _PREPARED[key] = prepare(*key)
        return _PREPARED[key]

    yield get
    for p in _PREPARED.values():
        p.rep.release()
        p.rep_full.release()
    _PREPARED.clear()


def feeds_for(p: Prepared, batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(repr((p.hidden, p.layers, p.heads, batch, seq)).encode()))
    return bert_models.random_feeds(batch, seq, VOCAB, rng)


def _values(names: list[str], feeds: dict[str, Any], outs: Any) -> dict[str, Any]:
    v = dict(feeds)
    v.update(zip(names, outs))
    return v


# ---- the checks -------------------------------------------------------------------------------------
def _label(p: Prepared, feeds: dict[str, np.ndarray]) -> str:
    batch, seq = feeds["input_ids"].shape
    pad = int(feeds["attention_mask"].size - feeds["attention_mask"].sum())
    return f"h{p.hidden} L{p.layers} a{p.heads} {batch}x{seq} ({pad} padded tokens)"


def check_exact(p: Prepared, batch: int, seq: int) -> None:
    """Placement, node by node, and (a): last_hidden_state against the exact reference."""
    feeds = feeds_for(p, batch, seq)
    budget = ulp_budget(p.layers)
    label = _label(p, feeds)

    # The plain model, as a user runs it; every quantized product on the device.
    (ours,) = p.rep.run(feeds)
    st = p.rep.last_run
    assert ours.shape == (batch, seq, p.hidden) and ours.dtype == np.float32
    assert st.runtime_fallbacks == 0, st.events
    on_device = {x.op_type for x in p.rep.placement if x.target == "vulkan"}
    assert {"MatMulIntegerToFloat", "DynamicQuantizeMatMul"} <= on_device, p.rep.summary()

    # Every value: node by node, and the quantization decisions.
    values = _values(p.rep_full.output_names, feeds, p.rep_full.run(feeds))
    assert np.array_equal(values["last_hidden_state"], ours), "downloading every value changed the result"
    checks = R.compare_nodes(p.model, values)
    failed = [f"node {c.index} {c.op_type} {c.name!r}: {c.message}" for c in checks if not c.ok]
    assert not failed, "\n".join(failed)
    assert sum(c.kind == "quantized product" for c in checks) == 6 * p.layers

    # (a) the exact reference, with the backend's quantization decisions where they are correct roundings
    choices = quantization_choices(p.model, values)
    ev, cond = conditioned_evaluator(p.model, choices, budget)
    exact = ev.run(None, feeds)[0].astype(np.float64)
    assert not cond.problems, "\n".join(cond.problems)
    err = np.abs(ours.astype(np.float64) - exact)
    tol = tolerance(p.layers, exact)
    ulps = float((err / (R.EPS32 * np.abs(exact).max(axis=-1, keepdims=True))).max())
    plain = ""
    if cond.total:
        exact_plain = R.evaluator(p.model).run(None, feeds)[0].astype(np.float64)
        plain = f"; vs the plain exact reference max |diff| {np.abs(ours - exact_plain).max():.3g}"
    print(f"\n{label}: vs the exact reference max |diff| {err.max():.3g} = {ulps:.2f} ulps of the row max "
          f"(allowed {budget}); quantization choices that differ from the reference's own: {cond.describe()}{plain}")
    assert (err <= tol).all(), f"{label}: max |diff| {err.max():.3g}, {ulps:.1f} ulps of the row max > {budget}"


def check_onnxruntime(p: Prepared, batch: int, seq: int) -> None:
    """(b): last_hidden_state against onnxruntime's CPU provider, where its u8 x s8 product is exact."""
    verdict = onnxruntime_exact(np.uint8, np.int8)
    if not verdict.exact:
        pytest.skip(verdict.describe())
    feeds = feeds_for(p, batch, seq)
    budget = ulp_budget(p.layers)
    label = _label(p, feeds)
    (ours,) = p.rep.run(feeds)
    values = _values(p.rep_full.output_names, feeds, p.rep_full.run(feeds))
    theirs = p.ort_plain.run(None, feeds)[0]
    ort_values = _values(p.names, feeds, p.ort_full.run(None, feeds))
    assert np.array_equal(ort_values["last_hidden_state"], theirs)
    choices = quantization_choices(p.model, values)
    ort_choices = quantization_choices(p.model, ort_values)
    differ = {k: int(np.count_nonzero(choices[k][0] != q)) + int(choices[k][1] != s) + int(choices[k][2] != z)
              for k, (q, s, z) in ort_choices.items()}
    d = np.abs(ours.astype(np.float64) - theirs)
    print(f"\n{label}: vs onnxruntime max |diff| {d.max():.3g}; {sum(differ.values())} quantization choices "
          "(uint8 values, scales, zero points) differ")
    if any(differ.values()):
        # Both legitimate roundings (ours checked against onnxruntime's unquantized value): the
        # outputs then differ by a quantization step's consequences, which (a) accounts for.
        for k, n in differ.items():
            if n:
                node = next(x for x in p.model.graph.node if x.output[0] == k)
                why = rounding_problem(ort_values[node.input[0]], choices[k], budget)
                assert not why, f"{k}: ours is not a rounding of onnxruntime's value: {why}"
        return
    # The same decisions: each side is within the tolerance of the exact reference conditioned on them.
    exact = np.abs(theirs.astype(np.float64))
    assert (d <= 2 * tolerance(p.layers, exact)).all(), f"{label}: vs onnxruntime max |diff| {d.max():.3g}"


SMALL = (64, 1, 2)
SMALL_SHAPES = [(1, 1), (2, 7), (3, 13), (2, 30)]


@pytest.mark.parametrize(("batch", "seq"), SMALL_SHAPES, ids=[f"{b}x{s}" for b, s in SMALL_SHAPES])
def test_small_bert_exact(prepared, batch, seq):
    check_exact(prepared(*SMALL), batch, seq)


@pytest.mark.parametrize(("batch", "seq"), SMALL_SHAPES, ids=[f"{b}x{s}" for b, s in SMALL_SHAPES])
def test_small_bert_onnxruntime(prepared, batch, seq):
    check_onnxruntime(prepared(*SMALL), batch, seq)


def test_one_flipped_quantization_is_visible(prepared):
    """The end-to-end tolerance sees a single uint8 one unit off in the first quantization (at the
    element nearest a rounding boundary, so the choice is still a plausible rounding), and the
    rounding check refuses a uint8 one unit off far from a boundary."""
    p = prepared(*SMALL)
    feeds = feeds_for(p, 3, 30)  # 5760 values quantized first: one of them lies near a boundary
    values = _values(p.rep_full.output_names, feeds, p.rep_full.run(feeds))
    choices = quantization_choices(p.model, values)
    first = next(n for n in p.model.graph.node if n.op_type == "DynamicQuantizeLinear")
    x = np.asarray(values[first.input[0]], np.float32)
    q, s, z = choices[first.output[0]]
    t = x.astype(np.float64) / float(s) + int(z)
    frac = np.abs(t - np.floor(t) - 0.5)  # 0 at a rounding boundary
    inside = (q > 0) & (q < 255)
    near = np.unravel_index(int(np.argmin(np.where(inside, frac, np.inf))), q.shape)
    far = np.unravel_index(int(np.argmax(np.where(inside, frac, -np.inf))), q.shape)

    flipped = q.copy()
    flipped[near] = int(q[near]) + (1 if t[near] > q[near] else -1)
    budget = ulp_budget(p.layers)
    ev, cond = conditioned_evaluator(p.model, {first.output[0]: (flipped, s, z)}, budget)
    moved = ev.run(None, feeds)[0].astype(np.float64)
    (ours,) = p.rep.run(feeds)
    err = np.abs(ours - moved)
    print(f"\none uint8 one unit off (scale {float(s):.3g}, |x / scale - boundary| = {frac[near]:.3g}): max |diff| {err.max():.3g}, "
          f"tolerance {tolerance(p.layers, moved).max():.3g}")
    assert list(cond.differing) == [first.output[0]] and cond.differing[first.output[0]][0] == 1, cond
    assert not cond.problems, cond.problems
    assert (err > tolerance(p.layers, moved)).any(), "a flipped quantization passed the end-to-end check"

    wrong = q.copy()
    wrong[far] = int(q[far]) + 1
    assert "more than a rounding" in rounding_problem(x, (wrong, s, z), budget)


# ---- the wider matrix --------------------------------------------------------------------------------
CONFIGS = [(64, 2, 4), (96, 1, 6), (96, 2, 6), (128, 1, 4), (128, 2, 2)]
SHAPES = [(1, 1), (1, 13), (2, 7), (3, 13), (2, 30), (3, 30)]


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=[f"h{h}-L{layer}-a{a}" for h, layer, a in CONFIGS])
@pytest.mark.parametrize(("batch", "seq"), SHAPES, ids=[f"{b}x{s}" for b, s in SHAPES])
def test_bert_matrix_exact(prepared, config, batch, seq):
    check_exact(prepared(*config), batch, seq)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=[f"h{h}-L{layer}-a{a}" for h, layer, a in CONFIGS])
@pytest.mark.parametrize(("batch", "seq"), SHAPES, ids=[f"{b}x{s}" for b, s in SHAPES])
def test_bert_matrix_onnxruntime(prepared, config, batch, seq):
    check_onnxruntime(prepared(*config), batch, seq)


def test_shape_siblings_prepared_for_a_bert_are_valid(prepared, monkeypatch):
    """With the GPUs' policy of preparing shape siblings (siblings.prepare_siblings), every
    pipeline a small BERT's first plans create is valid Vulkan (the validation layer fails the
    test otherwise: on the H100 the matmul_gemv configurations once became siblings of each
    other and gave a zero-length array), and the outputs equal the unprepared backend's."""
    import dataclasses

    p = prepared(*SMALL)
    rep = Backend.prepare(p.model, "CPU")
    dev = rep.device
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, prepare_siblings=True))
    monkeypatch.setattr(dev.engine, "prepared_variants", set())
    try:
        for batch, seq in ((1, 1), (2, 7)):
            feeds = feeds_for(p, batch, seq)
            got = rep.run(feeds)
            want = p.rep.run(feeds)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
        assert dev.engine.prepared_variants
    finally:
        rep.release()


def test_a_longer_sequence_creates_no_pipeline_where_the_policy_prepares_ahead(prepared, monkeypatch):
    """Where the policy prepares for other shapes (GPUs), a model's first plan also creates the
    pipelines its operators' specs plan ahead (OperatorSpec.ahead: the integer products at other row
    counts, as the policy's table picks them; normalization in its other layout), so a longer
    sequence's first run creates none, and its outputs equal the unprepared backend's. Here with the
    GPUs' automatic product table (gemv for few rows, then the tiled "gpu" family) and weight layout
    (transposed for products of many rows) on this device."""
    import dataclasses

    from kompute_dml.runtime import pipelines
    from kompute_dml.runtime.policy import GEMV_MAX_M

    p = prepared(*SMALL)
    rep = Backend.prepare(p.model, "CPU")
    dev = rep.device
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, prepare_siblings=True, matmul_family="gpu",
                                                                weights="columns", gemv_max_m=GEMV_MAX_M,
                                                                gemv_k_contiguous=True))
    monkeypatch.setattr(dev.engine, "prepared_variants", set())
    created: list[str] = []
    program, prepare_many = pipelines.Programs.program, pipelines.Programs.prepare_many

    def new(self, plan):
        return not self.has(plan)

    def noting(self, plan):
        if new(self, plan):
            created.append(plan.variant)
        return program(self, plan)

    def noting_many(self, plans, threads):  # a recording's and the siblings' pipelines, made together
        created.extend(dict.fromkeys(p.variant for p in plans if new(self, p)))
        return prepare_many(self, plans, threads)

    monkeypatch.setattr(pipelines.Programs, "program", noting)
    monkeypatch.setattr(pipelines.Programs, "prepare_many", noting_many)
    try:
        rep.run(feeds_for(p, 1, 1))
        dev.engine.programs.wait()  # the siblings are made on a thread of their own (Programs.prepare_later)
        assert any(v.startswith("mmi_gpu") for v in created), created  # prepared ahead: M = 1 takes gemv
        for batch, seq in ((2, 30), (3, 40)):  # M = 60: gemv (tiny products), M = 120: the tiled family
            created.clear()
            feeds = feeds_for(p, batch, seq)
            got = rep.run(feeds)
            assert created == [], f"{batch}x{seq} created {created}"
            for g, w in zip(got, p.rep.run(feeds)):
                np.testing.assert_array_equal(g, w)
    finally:
        rep.release()


def test_plan_memory_does_not_grow_with_depth(prepared):
    """A plan's device buffers are reused from layer to layer: a handler's temporaries (the
    quantized activation of a DynamicQuantizeMatMul, its scale and zero point) are free once its
    node is recorded, and a grouped Q, K, V product once its last view dies (PlanContext.end_node,
    hold_for_members). So three layers need the buffers of two, and the three-layer model is still
    exact end to end (the whole-graph plan against the every-value plan, node by node and the
    reference: check_exact). (Two, not one: a normalization's or GELU's partial keys live as long
    as its output (handlers_nn.with_keys), and only from a second layer on does a layer's last
    keys buffer meet the next layer's: one more small buffer, once.)"""
    hidden, _, heads = SMALL
    sizes = {}
    for layers in (2, 3):
        p = prepared(hidden, layers, heads)
        p.rep.release()  # fresh plans: no buffers left from other tests' shapes
        p.rep.run(feeds_for(p, 2, 7))
        (plan,) = [x for x in p.rep.state.plans.values() if x is not None]
        sizes[layers] = plan.device_bytes
    assert sizes[3] == sizes[2], sizes
    check_exact(prepared(hidden, 3, heads), 2, 7)


def test_attention_probabilities_are_written_over_their_scores(prepared, monkeypatch):
    """The fused masked softmax writes its output over the attention scores, which nothing reads
    after it (PlanContext.out_tensor's `over`): the plan needs fewer device bytes than with a
    buffer of its own, and every output bit is the same."""
    from kompute_dml.onnx_backend.plan_context import PlanContext

    p = prepared(*SMALL)
    feeds = feeds_for(p, 3, 40)  # scores of 3 x 2 x 40 x 40 float32: larger than every other value
    results = {}
    for in_place in (True, False):
        if not in_place:
            monkeypatch.setattr(PlanContext, "_writable", lambda *a: False)
        p.rep.release()
        out = p.rep.run(feeds)[0]
        (plan,) = [x for x in p.rep.state.plans.values() if x is not None]
        results[in_place] = (plan.device_bytes, out.view(np.uint32).copy())
    monkeypatch.undo()
    p.rep.release()
    assert results[True][0] < results[False][0], results
    assert np.array_equal(results[True][1], results[False][1])


def test_values_beyond_the_largest_buffer_run_on_the_cpu(prepared, monkeypatch):
    """A value larger than one storage-buffer binding of the device (lavapipe: 128 MiB of attention
    scores at 70 x 512) runs on the device where its operator splits it over dispatches
    (docs/large_values.md); a node whose operator takes it whole goes to the CPU with the reason in
    the run's events, instead of an error: here on a device whose bindings are made to stop at
    128 KiB. The plan refused on the way keeps none of the buffers it allocated."""
    p = prepared(*SMALL)
    feeds = feeds_for(p, 3, 100)  # scores 240,000 bytes, the Gelu's input 307,200; weights <= 64,000
    p.rep.release()
    import types

    limits = dict(p.rep.device.limits, max_storage_buffer_range=131072)
    monkeypatch.setattr(p.rep.device, "limits", types.MappingProxyType(limits))
    out = p.rep.run(feeds)[0]
    monkeypatch.undo()
    assert not p.rep.state.plan_buffers  # the refused plan's buffers went with it, free for the nodes' run
    p.rep.release()
    st = p.rep.last_run
    assert st.runtime_fallbacks > 0 and any("beyond one storage-buffer binding" in e for e in st.events)
    ref = p.ort_plain.run(None, feeds)[0]
    assert np.abs(out - ref).max() < 0.05
