"""One spec per operator: what an operator is, declared once at the end of its module (`SPECS`).

An `OperatorSpec` joins the descriptor class, the seed's support table (whose tensor fields,
in order, are the binding order: inputs then outputs), the compile function, the shader
families its plans dispatch (kompute_dml/ops/contract), the functional helpers and the ONNX
nodes placed on it. `kompute_dml.ops` collects the specs into SPECS; the compile table,
`kompute-dml info`, the README support matrix (tools/gen_docs.py), the ONNX placement and the
spec-driven tests (tests/test_specs.py) are derived from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.dtypes import FeatureLevel
from ..core.errors import DeviceError
from ..core.registry import OperatorSupport
from ..runtime import DispatchPlan
from ..runtime.shaders import check_capabilities
from .contract import ShaderFamily, by_variant

_FAMILY_OF = by_variant()


class ContractError(DeviceError):
    """A dispatch plan disagrees with the host/shader contract: a kompute_dml bug, refused
    before anything is recorded."""


@dataclass(frozen=True)
class OnnxOp:
    """An ONNX node type the backend runs on this operator, through kdml.<helper>."""

    op_type: str
    domain: str  # "" for the default (ai.onnx) domain, e.g. "com.microsoft"
    helper: str
    # a node shape the backend runs through one generic handler (onnx_backend/handlers.py KINDS), so
    # the operator module's declaration is all it takes: "float_unary" (one float32 / float16
    # input, an output of its shape and type, no attributes), "unary" (the same, of the types its
    # check allows), "binary" (two operands of one type,
    # numpy-broadcast, an output of that type), "compare" (the same, a boolean output); "" for
    # node types with handlers of their own
    kind: str = ""
    # the element types the node must have (ops/onnx_types.py; None: its kind's rule, if any)
    check: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class OperatorSpec:
    desc_type: type
    support: OperatorSupport
    compile: Callable[..., Any]  # (Device, descriptor) -> CompiledOperator
    shaders: tuple[ShaderFamily, ...]  # every family a plan of this operator may dispatch
    helpers: tuple[str, ...] = ()  # kdml functional helpers built on it
    onnx: tuple[OnnxOp, ...] = ()
    # (Device, CompiledOperator, done) -> the dispatch plans other shapes of the same operands take
    # (a product's tiles for other row counts, a normalization's other layout), whose pipelines the
    # ONNX backend creates at a model's first plans (siblings.prepare_siblings); `done`, a set
    # per device, lets the function skip what it prepared before (it adds its own keys).
    ahead: Callable[[Any, Any, set[Any]], Sequence[DispatchPlan]] | None = None
    # () -> a valid descriptor at the operator's first feature level, every optional tensor present
    # (4-D float32 where an early level allows only that): the spec-parametrized tests' example
    example: Callable[[], Any] | None = None
    # (field) -> a valid descriptor in which `field` is present, for operators whose optional
    # tensors exclude each other (MULTIHEAD_ATTENTION's stacked forms); None: `example`
    field_example: Callable[[str], Any] | None = None
    # optional fields whose absence alone breaks a rule that ties them to others (MULTIHEAD_ATTENTION:
    # one query / key / value form, past key and value together): removed from their field_example,
    # refused as required naming one of them (tests/test_specs.py)
    tied_fields: tuple[str, ...] = ()
    # Device.compile's execution flags the compile function takes as keywords (DirectML's
    # DML_EXECUTION_FLAGS at CompileOperator: "allow_half_precision"); an operator that does not
    # list a flag compiles as without it (DirectML's flags allow, never require)
    flags: tuple[str, ...] = ()
    variants: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", frozenset(v for fam in self.shaders for v in fam.variants))
        if not dataclasses.is_dataclass(self.desc_type):
            raise TypeError(f"{self.name}: the descriptor {self.desc_type!r} is not a dataclass")
        annotations = {f.name: str(f.type) for f in dataclasses.fields(self.desc_type)}
        order = [n for n in annotations if n in self.fields]
        if order != list(self.fields):
            raise TypeError(f"{self.name}: {self.desc_type.__name__}'s tensor fields {order} differ from the support "
                            f"table's {list(self.fields)} (names and binding order)")
        for t in self.support.levels[-1].tensors:  # a field optional from some level on is annotated `| None`
            ann = annotations[t.field]
            optional = "None" in ann
            if "TensorDesc" not in ann or optional != t.kind.startswith("optional"):
                raise TypeError(f"{self.name}: {self.desc_type.__name__}.{t.field} is annotated {ann!r}, the table "
                                f"says {t.kind!r}")

    @property
    def name(self) -> str:
        return self.support.name

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.support.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.support.outputs

    @property
    def fields(self) -> tuple[str, ...]:
        return self.support.fields

    @property
    def introduced(self) -> FeatureLevel:
        return self.support.introduced


def check_plans(spec: OperatorSpec, plans: Sequence[Any], capabilities: frozenset[str] | None = None) -> None:
    """ContractError unless every shader dispatch names a variant of one of the spec's families
    and carries exactly that family's push-constant words (transfer plans have no shader);
    UnsupportedError where a variant needs a capability outside `capabilities` (the device's)."""
    for plan in plans:
        if not isinstance(plan, DispatchPlan):
            continue
        if capabilities is not None:
            check_capabilities(plan.variant, capabilities)
        push = plan.push
        fam = _FAMILY_OF.get(plan.variant)
        if fam is None or plan.variant not in spec.variants:
            keys = ", ".join(f.key for f in spec.shaders)
            raise ContractError(f"{spec.name}: planned shader variant {plan.variant!r}, which none of its shader "
                                f"families ({keys}; kompute_dml/ops/contract) names")
        if len(push) != fam.words:
            raise ContractError(f"{spec.name}: variant {plan.variant!r} planned with {len(push)} push-constant words, "
                                f"shaders/{fam.source} declares {fam.words} (kompute_dml/ops/contract, {fam.key})")


def family_of(variant: str) -> ShaderFamily | None:
    """The shader family that names `variant` (None: no family does)."""
    return _FAMILY_OF.get(variant)


def onnx_ops(specs: Sequence[OperatorSpec]) -> dict[tuple[str, str], OnnxOp]:
    """(ONNX op type, domain) -> its OnnxOp declaration."""
    return {(node.op_type, node.domain): node for spec in specs for node in spec.onnx}


def onnx_placement(specs: Sequence[OperatorSpec]) -> dict[tuple[str, str], tuple[str, str, int]]:
    """(ONNX op type, domain) -> (operator name, kdml helper, the operator's lowest feature level)."""
    out: dict[tuple[str, str], tuple[str, str, int]] = {}
    for spec in specs:
        for node in spec.onnx:
            key = (node.op_type, node.domain)
            if key in out:
                raise ValueError(f"ONNX {node.op_type} is placed on both {out[key][0]} and {spec.name}")
            out[key] = (spec.name, node.helper, int(spec.introduced))
    return out
