"""The operator specs (kompute_dml/ops/spec.py) and what is derived from them.

Every test here is parametrized over `kompute_dml.ops.SPECS` (and each spec's tensor fields
from its support table), so an operator added with a spec is covered without editing this
file, except for one example descriptor per operator (EXAMPLES, checked to be complete).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.core.registry import OperatorSupport
from kompute_dml.ops import BY_NAME, COMPILERS, ONNX_PLACEMENT, SPECS
from kompute_dml.ops.contract import by_variant
from kompute_dml.ops.spec import ContractError, OnnxOp, OperatorSpec, check_plans
from kompute_dml.runtime import DispatchPlan, TransferPlan

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
F32_4D = TD(DT.FLOAT32, (1, 2, 3, 4))

# One valid descriptor per operator (or its spec's `example`), valid from the operator's first feature level on (4-D
# float32 where an early level allows only that), with every optional tensor present.
EXAMPLES = {
    "ACTIVATION_IDENTITY": lambda: kdml.ActivationIdentityDesc(F32_4D, F32_4D),
    "COPY": lambda: kdml.CopyDesc(F32_4D, F32_4D),
    "DIAGONAL_MATRIX": lambda: kdml.DiagonalMatrixDesc(TD(DT.FLOAT32, (1, 1, 3, 4)), 1, 2.0),
    "DIAGONAL_MATRIX1": lambda: kdml.DiagonalMatrix1Desc(TD(DT.FLOAT32, (3, 4)), TD(DT.FLOAT32, (3, 4)), DT.FLOAT32,
                                                         2.0, 0, 1),
    "MATRIX_MULTIPLY_INTEGER_TO_FLOAT": lambda: kdml.MatrixMultiplyIntegerToFloatDesc(
        TD(DT.INT8, (1, 1, 4, 8)), TD(DT.FLOAT32, (1, 1, 1, 1)), TD(DT.INT8, (1, 1, 1, 1)),
        TD(DT.UINT8, (1, 1, 8, 5)), TD(DT.FLOAT32, (1, 1, 1, 1)), TD(DT.UINT8, (1, 1, 1, 1)),
        TD(DT.FLOAT32, (1, 1, 4, 5)), TD(DT.FLOAT32, (1, 1, 4, 5)),
    ),
    "ELEMENT_WISE_ADD": lambda: kdml.ElementWiseAddDesc(F32_4D, F32_4D, F32_4D),
    "ELEMENT_WISE_ADD1": lambda: kdml.ElementWiseAdd1Desc(F32_4D, F32_4D, F32_4D),
    "ELEMENT_WISE_SUBTRACT": lambda: kdml.ElementWiseSubtractDesc(F32_4D, F32_4D, F32_4D),
    "ELEMENT_WISE_MULTIPLY": lambda: kdml.ElementWiseMultiplyDesc(F32_4D, F32_4D, F32_4D),
    "ELEMENT_WISE_DIVIDE": lambda: kdml.ElementWiseDivideDesc(F32_4D, F32_4D, F32_4D),
    "ELEMENT_WISE_LOGICAL_EQUALS": lambda: kdml.ElementWiseLogicalEqualsDesc(F32_4D, F32_4D, TD(DT.UINT32, (1, 2, 3, 4))),
    "ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL": lambda: kdml.ElementWiseLogicalGreaterThanOrEqualDesc(
        F32_4D, F32_4D, TD(DT.UINT8, (1, 2, 3, 4))),
    "ELEMENT_WISE_LOGICAL_AND": lambda: kdml.ElementWiseLogicalAndDesc(*[TD(DT.UINT32, (1, 2, 3, 4))] * 3),
    "CAST": lambda: kdml.CastDesc(F32_4D, TD(DT.FLOAT16, F32_4D.sizes)),
    "ELEMENT_WISE_DEQUANTIZE_LINEAR": lambda: kdml.ElementWiseDequantizeLinearDesc(
        TD(DT.UINT8, (1, 2, 3, 4)), F32_4D, TD(DT.UINT8, (1, 2, 3, 4)), F32_4D),
    "GATHER": lambda: kdml.GatherDesc(TD(DT.FLOAT32, (1, 1, 4, 3)), TD(DT.UINT32, (1, 1, 1, 5)),
                                      TD(DT.FLOAT32, (1, 1, 5, 3)), axis=2, index_dimensions=1),
    "GATHER_ELEMENTS": lambda: kdml.GatherElementsDesc(TD(DT.FLOAT32, (1, 2, 4, 3)), TD(DT.UINT32, (1, 2, 5, 3)),
                                                       TD(DT.FLOAT32, (1, 2, 5, 3)), axis=2),
    "GEMM": lambda: kdml.GemmDesc(TD(DT.FLOAT32, (1, 2, 4, 3)), TD(DT.FLOAT32, (1, 2, 5, 3)),
                                  TD(DT.FLOAT32, (1, 2, 4, 5)), TD(DT.FLOAT32, (1, 2, 4, 5)), trans_b=1, alpha=0.5,
                                  beta=2.0),
    "ELEMENT_WISE_IS_NAN": lambda: kdml.ElementWiseIsNanDesc(F32_4D, TD(DT.UINT8, (1, 2, 3, 4))),
    "ELEMENT_WISE_IF": lambda: kdml.ElementWiseIfDesc(TD(DT.UINT8, (1, 2, 3, 4)), *[TD(DT.FLOAT16, (1, 2, 3, 4))] * 3),
    "ACTIVATION_GELU": lambda: kdml.ActivationGeluDesc(F32_4D, F32_4D),
    "ACTIVATION_SOFTMAX1": lambda: kdml.ActivationSoftmax1Desc(F32_4D, F32_4D, (3,)),
    "DYNAMIC_QUANTIZE_LINEAR": lambda: kdml.DynamicQuantizeLinearDesc(
        F32_4D, TD(DT.UINT8, (1, 2, 3, 4)), TD(DT.FLOAT32, (1, 1, 1, 1)), TD(DT.UINT8, (1, 1, 1, 1))),
    "MEAN_VARIANCE_NORMALIZATION1": lambda: kdml.MeanVarianceNormalization1Desc(
        F32_4D, TD(DT.FLOAT32, (1, 2, 1, 1)), TD(DT.FLOAT32, (1, 2, 1, 1)), F32_4D, (2, 3), True, 1e-5),
    "JOIN": lambda: kdml.JoinDesc((F32_4D,), F32_4D, 1),
    "SLICE1": lambda: kdml.Slice1Desc(F32_4D, TD(DT.FLOAT32, (1, 2, 2, 2)), (0, 0, 1, 0), (1, 2, 2, 4), (1, 1, -1, 2)),
}
EXAMPLES.update({s.name: s.example for s in SPECS if s.example is not None})  # declared with the operator
IDS = [s.name for s in SPECS]
FIELD_CASES = [(s, t) for s in SPECS for t in s.support.require(HIGHEST_FEATURE_LEVEL).tensors]
FIELD_IDS = [f"{s.name}.{t.field}" for s, t in FIELD_CASES]


@pytest.fixture(scope="module")
def level_devices():
    """Devices at the feature levels the tests ask for, created on first use."""
    made: dict[FL, kdml.Device] = {}

    def get(level: FL) -> kdml.Device:
        if level not in made:
            made[level] = kdml.Device(feature_level=level)
        return made[level]

    yield get
    for d in made.values():
        d.close()


def _example(spec: OperatorSpec, field: str | None = None):
    """The spec's example, or (operators whose optional tensors exclude each other) one holding `field`."""
    if field is not None and spec.field_example is not None:
        return spec.field_example(field)
    return EXAMPLES[spec.name]()


def _fields(names):
    """Binding names -> the table's fields (an array field's `field[i]` are `field`)."""
    return tuple(dict.fromkeys(n.partition("[")[0] for n in names))


def _retyped(t, dt):
    """t (a TensorDesc, or a tuple of them: an array field) with data type dt."""
    if isinstance(t, tuple):
        return tuple(TD(dt, x.sizes, x.strides) for x in t)
    return TD(dt, t.sizes, t.strides)


def test_every_operator_has_an_example():
    assert set(EXAMPLES) == set(BY_NAME)


def test_derived_tables():
    """The compile table, the exports and the ONNX placement come from the specs."""
    assert set(COMPILERS) == {s.desc_type for s in SPECS}
    exported_descs = {n: getattr(kdml, n) for n in kdml.__all__ if n.endswith("Desc") and n != "TensorDesc"}
    assert set(exported_descs.values()) == {s.desc_type for s in SPECS}
    # every spec's own name, and DirectML.h's aliases of them (ScatterElementsDesc is ScatterDesc) beside them
    assert {s.desc_type.__name__ for s in SPECS} <= set(exported_descs)
    for s in SPECS:
        assert getattr(kdml, s.desc_type.__name__) is s.desc_type
        for h in (*s.helpers, *(o.helper for o in s.onnx)):
            assert h in kdml.__all__, f"{s.name}: helper kdml.{h} is not exported"
    from kompute_dml.onnx_backend.values import _DEVICE_OPS

    assert _DEVICE_OPS == ONNX_PLACEMENT
    assert ONNX_PLACEMENT[("EyeLike", "")] == ("DIAGONAL_MATRIX", "eye_like", int(FL.FL_2_0))


def test_every_shader_family_belongs_to_an_operator():
    used = {f.key for s in SPECS for f in s.shaders}
    assert used == {f.key for f in by_variant().values()}


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_compiled_operator_follows_its_spec(level_devices, spec):
    """At the operator's first feature level and at the highest: the example compiles, its
    bindings are the spec's, and every shader dispatch is a variant of the spec's families
    with that family's push-constant words (compile_operator checks it; so does this)."""
    families = by_variant()
    for level in (spec.introduced, HIGHEST_FEATURE_LEVEL):
        op = level_devices(level).compile(EXAMPLES[spec.name]())
        assert (_fields(op.input_fields), _fields(op.output_fields)) == (spec.inputs, spec.outputs)
        for plan in op.plans:
            if isinstance(plan, DispatchPlan):
                assert plan.variant in spec.variants
                assert len(plan.push) == families[plan.variant].words


@pytest.mark.parametrize("spec", [s for s in SPECS if s.introduced > min(FL)], ids=lambda s: s.name)
def test_refused_below_its_first_level(level_devices, spec):
    below = max(level for level in FL if level < spec.introduced)
    with pytest.raises(kdml.UnsupportedError, match=f"^{spec.name}: introduced at DML_FEATURE_LEVEL_"
                       f"{spec.introduced.label}"):
        level_devices(below).compile(EXAMPLES[spec.name]())


@pytest.mark.parametrize(("spec", "tensor"), FIELD_CASES, ids=FIELD_IDS)
def test_absent_tensor(dev, spec, tensor):
    """None: required fields are refused naming the field, optional ones compile (but those tied to
    others, OperatorSpec.tied_fields: refused as required naming one of them)."""
    desc = dataclasses.replace(_example(spec, tensor.field), **{tensor.field: None})
    if tensor.kind.startswith("optional") and tensor.field not in spec.tied_fields:
        op = dev.compile(desc)
        assert op.input_fields == spec.inputs and op.output_fields == spec.outputs
    else:
        names = "|".join(spec.tied_fields) if tensor.field in spec.tied_fields else tensor.field
        with pytest.raises(kdml.InvalidArgumentError, match=f"^({names}): is required"):
            dev.compile(desc)


def _unsupported_type(spec: OperatorSpec, field: str) -> DT | None:
    allowed = spec.support.require(HIGHEST_FEATURE_LEVEL).tensor(field).types
    return next((d for d in DT if d not in allowed), None)


@pytest.mark.parametrize(("spec", "tensor"), [c for c in FIELD_CASES if _unsupported_type(c[0], c[1].field)],
                         ids=lambda c: getattr(c, "name", getattr(c, "field", "")))
def test_unsupported_type(dev, spec, tensor):
    bad = _unsupported_type(spec, tensor.field)
    assert bad is not None and dev.feature_level == HIGHEST_FEATURE_LEVEL
    desc = _example(spec, tensor.field)
    t = getattr(desc, tensor.field)
    with pytest.raises(kdml.UnsupportedError, match=rf"^{tensor.field}(\[0\])?: {spec.name} does not support {bad.name}"):
        dev.compile(dataclasses.replace(desc, **{tensor.field: _retyped(t, bad)}))


def _dims(spec: OperatorSpec, field: str) -> tuple[int, int]:
    return spec.support.require(HIGHEST_FEATURE_LEVEL).tensor(field).dims


@pytest.mark.parametrize(("spec", "tensor"), [c for c in FIELD_CASES if _dims(c[0], c[1].field) != (1, 8)],
                         ids=lambda c: getattr(c, "name", getattr(c, "field", "")))
def test_unsupported_dimension_count(dev, spec, tensor):
    lo, hi = _dims(spec, tensor.field)
    n = hi + 1 if hi < 8 else lo - 1
    desc = _example(spec, tensor.field)
    t = getattr(desc, tensor.field)
    t = TD(t[0].data_type, (1,) * n) if isinstance(t, tuple) else TD(t.data_type, (1,) * n)
    with pytest.raises(kdml.UnsupportedError, match=rf"^{tensor.field}(\[0\])?: {spec.name} supports {lo}"):
        dev.compile(dataclasses.replace(desc, **{tensor.field: (t,) if isinstance(getattr(desc, tensor.field), tuple)
                                                 else t}))


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_binding_counts(dev, spec):
    op = dev.compile(EXAMPLES[spec.name]())
    n_in, n_out = len(op.input_fields), len(op.output_fields)
    with pytest.raises(kdml.InvalidArgumentError, match=f"^inputs: {spec.name} takes {n_in} "):
        op.execute([None] * (n_in + 1), [None] * n_out)
    with pytest.raises(kdml.InvalidArgumentError, match=f"^outputs: {spec.name} takes {n_out} "):
        op.execute([None] * n_in, [None] * (n_out + 1))


def _plan(variant: str, words: int) -> DispatchPlan:
    return DispatchPlan(variant=variant, bindings=(0, 1), push=(0,) * words, groups=(1, 1, 1), writes=(1,))


def test_check_plans_refuses_drift():
    spec = BY_NAME["COPY"]
    check_plans(spec, [_plan("copy_vec", 3), TransferPlan("copy", (0, 1), np.zeros((1, 3), np.int64), (1,))])
    with pytest.raises(ContractError, match="^COPY: planned shader variant 'copy_b128'"):
        check_plans(spec, [_plan("copy_b128", 28)])
    with pytest.raises(ContractError, match="^COPY: planned shader variant 'diag_b32'"):
        check_plans(spec, [_plan("diag_b32", 30)])  # another operator's
    with pytest.raises(ContractError, match=r"^COPY: variant 'copy_vec' planned with 4 push-constant words, .* 3"):
        check_plans(spec, [_plan("copy_vec", 4)])


def test_spec_refuses_a_descriptor_that_disagrees_with_its_table():
    @dataclasses.dataclass(frozen=True)
    class Swapped:
        output_tensor: TD
        input_tensor: TD

    @dataclasses.dataclass(frozen=True)
    class NotOptional:
        input_tensor: TD
        output_tensor: TD

    identity = BY_NAME["ACTIVATION_IDENTITY"]
    with pytest.raises(TypeError, match="binding order"):
        OperatorSpec(Swapped, identity.support, identity.compile, identity.shaders)
    diag1 = BY_NAME["DIAGONAL_MATRIX1"]
    with pytest.raises(TypeError, match="optional input"):
        OperatorSpec(NotOptional, diag1.support, diag1.compile, diag1.shaders)
    with pytest.raises(ValueError, match="inputs must precede outputs"):
        OperatorSupport("X", None, (dataclasses.replace(
            identity.support.levels[0], tensors=identity.support.levels[0].tensors[::-1]),))


def test_onnx_placement_refuses_two_operators_for_one_node():
    from kompute_dml.ops.spec import onnx_placement

    a, b = BY_NAME["COPY"], BY_NAME["ACTIVATION_IDENTITY"]
    twice = dataclasses.replace(b, onnx=(OnnxOp("Identity", "", "identity"),))
    with pytest.raises(ValueError, match="Identity is placed on both COPY and ACTIVATION_IDENTITY"):
        onnx_placement([a, twice])


def test_info_json_lists_the_specs():
    from kompute_dml.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["info", "--json"]) == 0
    info = json.loads(out.getvalue())
    assert [o["operator"] for o in info["operators"]] == [s.name for s in SPECS]
    for o, s in zip(info["operators"], SPECS):
        assert (o["inputs"], o["outputs"], o["variants"]) == (list(s.inputs), list(s.outputs), sorted(s.variants))
    assert {r["operator"] for r in info["support"]} == set(BY_NAME)


def test_every_placed_onnx_node_type_has_a_handler():
    """A node type an operator module declares (OperatorSpec.onnx) is run by a handler: its kind's
    or its own (onnx_backend/handlers*.py); a declaration without either would fail at the run."""
    pytest.importorskip("onnx")
    from kompute_dml.onnx_backend.handlers import HANDLERS

    assert sorted(op for op, _domain in ONNX_PLACEMENT if op not in HANDLERS) == []


def test_handler_tables_are_discovered_and_never_overlap(monkeypatch):
    """The ONNX backend's handler table is every handler module's *_HANDLERS dicts, found by name (a
    new module's table joins without an edit elsewhere); one node type in two tables is refused."""
    from kompute_dml.onnx_backend import handlers, handlers_dft

    by_type, by_domain = handlers._module_tables()
    assert by_type == handlers.HANDLERS and by_domain == handlers.DOMAIN_HANDLERS
    assert handlers.HANDLERS["STFT"] is handlers_dft.DFT_HANDLERS["STFT"]
    assert ("Attention", "") in handlers.DOMAIN_HANDLERS and "Attention" in handlers.HANDLERS
    monkeypatch.setattr(handlers_dft, "EXTRA_HANDLERS", {"Conv": handlers_dft.DFT_HANDLERS["DFT"]}, raising=False)
    with pytest.raises(TypeError, match="'Conv' has a handler in .*handlers_dft.EXTRA_HANDLERS"):
        handlers._module_tables()
