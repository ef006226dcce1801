"""ONNX Einsum on the device (onnx_backend/handlers_einsum.py): equations of one and two float
operands against numpy.einsum in float64, within GEMM's float32 bound (docs/gemm.md: gamma(K + 2)
of the sum of |a b| over an output's terms; a float16 output's rounding on top), on the device
with no CPU sub-graph; what it does not take (a diagonal, three operands, integers) runs on the
CPU and still equals onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402
from kompute_dml.onnx_backend.handlers_einsum import parse  # noqa: E402

U32 = 2.0 ** -24


def _model(equation: str, shapes: list[tuple[int, ...]], elem: int = T.FLOAT) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(f"x{i}", elem, list(s)) for i, s in enumerate(shapes)]
    g = helper.make_graph([helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"], equation=equation)],
                          "einsum", ins, [helper.make_tensor_value_info("y", elem, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _check(equation: str, arrays: list[np.ndarray], got: np.ndarray) -> None:
    wide = [a.astype(np.float64) for a in arrays]
    exact = np.einsum(equation, *wide)
    mags = np.einsum(equation, *[np.abs(a) for a in wide])
    terms = max(1, int(np.prod([a.size for a in arrays])) // max(1, exact.size))  # an upper bound on K per output
    k = min(terms, max(a.size for a in arrays))
    tol = (k + 2) * U32 / (1 - (k + 2) * U32) * mags * 1.0000001
    if got.dtype == np.float16:
        tol = tol + 2.0 ** -11 * np.abs(exact) + 2.0 ** -25
        terms_in, out = equation.split("->") if "->" in equation else (equation, None)
        if len(arrays) == 2 and out is not None and any(  # an operand summed first: a float16 intermediate
                c not in out and c not in other for t, other in ((terms_in.split(",")[0], terms_in.split(",")[1]),
                                                                 (terms_in.split(",")[1], terms_in.split(",")[0])) for c in t):
            tol = tol + 2.0 ** -10 * mags
    assert got.shape == exact.shape, (got.shape, exact.shape)
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= tol), f"{equation}: error {err.max():.3g} beyond {tol.reshape(-1)[np.argmax(err - tol)]:.3g}"


CASES = [
    ("ibnd,jbnd->bnij", [(5, 2, 3, 4), (6, 2, 3, 4)]),  # XLNet's scores
    ("bnij,jbnd->ibnd", [(2, 3, 5, 6), (6, 2, 3, 4)]),  # and its context
    ("ibh,hnd->ibnd", [(5, 2, 8), (8, 3, 4)]),  # a projection into heads
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,jk", [(2, 2, 3, 4), (4, 5)]),  # ellipsis of one operand, implicit output
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),  # a batch of 1 broadcast
    ("ijk,jl->il", [(2, 3, 4), (3, 5)]),  # k summed in the first operand alone
    ("i,i->", [(7,), (7,)]),  # a dot: rank 0
    ("i,j->ij", [(3,), (4,)]),  # an outer product
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)]),
    ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("abc->", [(2, 3, 4)]),
    ("abc->ca", [(2, 3, 4)]),
]


@pytest.mark.parametrize("equation, shapes", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_einsum_on_the_device_within_gemms_bound(rng, equation, shapes, dtype):
    elem = T.FLOAT if dtype == np.float32 else T.FLOAT16
    rep = Backend.prepare(_model(equation, shapes, elem), "CPU")
    assert all(p.target != CPU for p in rep.placement)
    arrays = [(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]
    got = rep.run({f"x{i}": a for i, a in enumerate(arrays)})[0]
    assert got.dtype == dtype
    _check(equation, arrays, got)
    assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0


@pytest.mark.parametrize("equation, shapes, elem", [
    ("ii->i", [(3, 3)], T.FLOAT),  # a diagonal
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], T.FLOAT),  # three operands
    ("ij,jk->ik", [(2, 3), (3, 4)], T.INT32),
])
def test_what_the_device_does_not_take_runs_on_the_cpu_and_equals_onnxruntime(rng, equation, shapes, elem):
    model = _model(equation, shapes, elem)
    dt = np.float32 if elem == T.FLOAT else np.int32
    feeds = {f"x{i}": (rng.standard_normal(s) * 3).astype(dt) for i, s in enumerate(shapes)}
    got = Backend.prepare(model, "CPU").run(feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_parse_spells_the_ellipsis_and_the_implicit_output():
    assert parse("...ij,...jk", [4, 3]) == (["ABij", "Bjk"], "ABik")
    assert parse("ba,ac", [2, 2]) == (["ba", "ac"], "bc")
    with pytest.raises(ValueError, match="names 3 dimensions of a rank-2 input"):
        parse("abc->a", [2])
    with pytest.raises(ValueError, match="2 operand terms for 1 inputs"):
        parse("ab,bc->ac", [2])


def test_a_size_mismatch_names_the_subscript(rng):
    model = _model("ij,jk->ik", [(2, 3), (4, 5)])
    with pytest.raises(ValueError, match="subscript 'j' is 3 in one operand and 4"):
        Backend.prepare(model, "CPU").run({"x0": np.ones((2, 3), np.float32), "x1": np.ones((4, 5), np.float32)})


def test_batch_dimensions_that_fold_only_packed(rng):
    """Mamba-2's chunk-state product: its second operand a Slice along the chunks of a (b, h, c, n, p)
    tensor, transposed: the batch dimensions (b, c, h) fold into GEMM's two in neither operand's
    strides, so that operand is packed first (handlers_values.gemm_foldable): no CPU fallback at a
    batch above 1."""
    b, c, l, h, p, n = 3, 2, 4, 2, 3, 5
    x0 = helper.make_tensor_value_info("x0", T.FLOAT, ["B", c, l, h, n])
    x1 = helper.make_tensor_value_info("x1", T.FLOAT, ["B", h, c + 1, n, p])
    cut = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("s", [0]), ("e", [c]), ("a", [2]))]
    g = helper.make_graph([helper.make_node("Slice", ["x1", "s", "e", "a"], ["y1"]),
                           helper.make_node("Transpose", ["y1"], ["t1"], perm=[0, 2, 1, 4, 3]),
                           helper.make_node("Einsum", ["x0", "t1"], ["y"], equation="bclhn,bchpn->bclhp")],
                          "einsum", [x0, x1], [helper.make_tensor_value_info("y", T.FLOAT, None)], cut)
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), "CPU")
    for batch in (1, b):
        a0 = rng.standard_normal((batch, c, l, h, n)).astype(np.float32)
        a1 = rng.standard_normal((batch, h, c + 1, n, p)).astype(np.float32)
        got = rep.run({"x0": a0, "x1": a1})[0]
        _check("bclhn,bchpn->bclhp", [a0, a1[:, :, :c].transpose(0, 2, 1, 4, 3)], got)
        assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
