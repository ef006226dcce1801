"""Node chains that one kompute_dml operator runs in one dispatch, found when a model is prepared.

Each pattern is one declaration (PATTERNS): its node types in chain order, the edges that join
them (which input of a later node reads the first output of an earlier one), a static check of
attributes and constants, and the fused run. `fusion_match.find_fusions` matches them where every
intermediate value (the first output of every node but the last) is read only by those edges
(no other node, no second use, no subgraph) and is not a graph output, the nodes have no other
outputs in use and all run on the device; anything else is left node by node.

The chain's last node (the carrier) runs the fused work: every value the chain reads from
outside exists by then (the others come before it in any topological order), and the
intermediates are never produced. Both executors (node by node in rep.py, the whole-graph
program in device_graph.py) call `Fusion.run` at the carrier and skip the absorbed nodes, so
both give the same bits. What only the run's values decide (types, shapes, the kernel's limits)
is checked there: where the fused kernel does not apply, `run` raises Unfused before recording
anything and the executor runs the chain's nodes one by one instead.

The fused kernels are the operators' kompute_dml extensions. docs/onnx.md's fusion table lists every
pattern with its conditions; all give the unfused bits but the attention, RMS normalization and
GELU chains, the squeeze-and-excitation gate and the experts' products (within tolerance). Chains with
modules of their own: fusion_attention.py, fusion_bias.py, fusion_bias_gelu.py, fusion_experts.py,
fusion_gelu.py, fusion_qconv.py, fusion_qdq.py, fusion_quant.py, fusion_rmsnorm.py,
fusion_rotary.py, fusion_scale.py, fusion_se.py, fusion_swish.py, fusion_transpose.py.
A chain that runs unfused runs the shorter chains matched inside it (Fusion.within: the attention's
MatMul -> Mul as one GEMM) and its other nodes one by one. Here:
- Add(a, b) -> LayerNormalization(axis = last): MEAN_VARIANCE_NORMALIZATION1 with a skip (the sum
  rounded as ELEMENT_WISE_ADD1 rounds it; kdml.skip_layer_norm), also where nodes after the chain
  read the sum (a residual stream: the same dispatch writes it, Pattern.shared);
- Add(scores, mask) -> Softmax(axis = last) -> IsNaN -> Where(isnan, 0, softmax): ACTIVATION_SOFTMAX1
  with its mask and NaN -> 0; the Where's constant +0.0 (Where copies its bits, the kernel writes +0);
- Conv -> an activation of handlers_activation.FUSED_TYPES: CONVOLUTION's fused activation, the
  standalone operator's bits of the rounded Conv output; BatchNormalization -> Relu likewise;
- Add -> Relu: ELEMENT_WISE_ADD1 with its fused ReLU (the sum's bits, then ReLU's).
(com.microsoft SkipLayerNormalization needs no pattern: its handler is one dispatch.)
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.functional.elementwise import broadcast_view

from .fusion_attention import attention_patterns
from .fusion_bias import matmul_bias_patterns
from .fusion_bias_gelu import matmul_bias_gelu_patterns
from .fusion_experts import experts_patterns
from .fusion_gelu import gelu_patterns
from .fusion_qconv import check_qdq_conv, run_qdq_conv
from .fusion_qdq import check_qdq_matmul, check_qdq_pair, run_qdq_matmul, run_qdq_pair
from .fusion_quant import check_integer_product, run_integer_product
from .fusion_rmsnorm import rms_norm_patterns
from .fusion_rotary import rotary_patterns
from .fusion_scale import matmul_scale_patterns
from .fusion_se import se_patterns
from .fusion_swish import swish_patterns
from .fusion_transpose import matmul_transpose_patterns
from .graph import _attr, _node_inputs, positive_zero_constant
from .handlers_activation import FUSED_TYPES
from .handlers_conv import run_conv_activation
from .handlers_nn import _floats, _opset, keys_for, with_keys
from .handlers_pool import batch_norm_node
from .handlers_values import as_device
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape, at_node

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


class StepExecutor(Protocol):
    """What an executor (rep.py node by node, device_graph.py's plan) does for `Fusions.step`."""

    def node(self, i: int) -> None: ...  # run (or record) node i alone, its outputs kept

    def scoped(self, fusion: Fusion) -> contextlib.AbstractContextManager[Any]: ...  # a chain's profile scope

    def chain_done(self, fusion: Fusion, outs: list[Any]) -> None: ...  # keep the carrier's outputs

    # the chain's run (run(ctx): Fusion.run on the executor's context), or its trace replayed (the plan's)
    def run_chain(self, fusion: Fusion, run: Callable[[Any], list[Any]]) -> list[Any]: ...

    def drop(self, name: str) -> None: ...  # an unfused chain's intermediate, no longer read


class Unfused(Exception):
    """The fused kernel does not take this run's values: run the chain's nodes one by one."""


@dataclasses.dataclass(frozen=True)
class Pattern:
    name: str  # the chain's node types joined by "+": its label in summaries and profiles
    ops: tuple[str, ...]  # node types (default domain), chain order
    edges: tuple[tuple[int, int, int], ...]  # (producer, consumer, consumer's input index) in the chain
    operator: str  # the DirectML operator the fused dispatch runs on
    check: Callable[[BackendRep, list[onnx.NodeProto]], str]  # why not to fuse ("" to fuse)
    run: Callable[[Any, list[onnx.NodeProto], Callable[[str], Any], RunStats], list[Any]]  # the carrier's outputs
    ms_ops: frozenset[str] = frozenset()  # node types of the chain in the com.microsoft domain (FusedMatMul)
    # chain positions whose output other nodes also read, all after the carrier: the run returns
    # it after the carrier's outputs (a residual sum that a skip normalization also writes)
    shared: tuple[int, ...] = ()
    # False: never matched inside a longer chain (Fusion.within), which runs under the same run-time
    # conditions (an attention inside the same attention with its Transpose): the longer one's products'
    # chains take its nodes instead
    nested: bool = True


@dataclasses.dataclass(frozen=True)
class Fusion:
    """One matched chain: its node indices in chain order (the last is the carrier)."""

    pattern: Pattern
    nodes: tuple[int, ...]
    inputs: tuple[str, ...]  # the values it reads from outside the chain
    intermediates: tuple[str, ...]
    shared: tuple[str, ...] = ()  # values made inside the chain that later nodes read (Pattern.shared)
    within: tuple[Fusion, ...] = ()  # shorter chains of its nodes, fused where it runs unfused

    @property
    def carrier(self) -> int:
        return self.nodes[-1]

    def scope(self, graph: onnx.GraphProto) -> str:
        """Its profile scope: the carrier's index, the chain's label, the carrier's name."""
        return f"{self.carrier} {self.pattern.name} {graph.node[self.carrier].name}"

    def run(self, ctx: NodeContext, graph: onnx.GraphProto, lookup: Callable[[str], Any], stats: RunStats) -> list[Any]:
        """The carrier's outputs, in one dispatch; Unfused where this run's values do not fit."""
        try:
            return self.pattern.run(ctx, [graph.node[i] for i in self.nodes], lookup, stats)
        except (FallbackNeeded, kdml.UnsupportedError) as e:  # raised before anything is recorded
            raise Unfused(str(e)) from None


# ---- the fused runs ------------------------------------------------------------------------
def _input(lookup: Callable[[str], Any], node: onnx.NodeProto, i: int) -> Any:
    return lookup(node.input[i]) if i < len(node.input) and node.input[i] else None


def _last_axis(axis: int, rank: int) -> bool:
    return axis in (-1, rank - 1)


def _sum_operands(ctx: NodeContext, add: onnx.NodeProto, lookup: Callable[[str], Any],
                  stats: RunStats) -> tuple[kdml.Tensor, kdml.Tensor, tuple[int, ...], np.dtype]:
    """The Add's operands on the device, the first broadcast to the sum's shape (the operators
    take the sum's sizes for their input), and that shape and type."""
    a, b = (_input(lookup, add, i) for i in range(2))
    dt = _floats(add, [a, b])
    try:
        shape = tuple(np.broadcast_shapes(_value_shape(a), _value_shape(b)))
    except ValueError as e:
        raise ValueError(f"Add {add.name!r}: operand shapes do not broadcast: {e}") from None
    if not shape:
        raise Unfused("a rank-0 sum")
    ta, tb = (as_device(ctx, v, stats, add.input[i]).tensor for i, v in enumerate((a, b)))
    return broadcast_view(ta, shape, "a"), tb, shape, dt


def _run_add_layer_norm(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                        stats: RunStats, keep_sum: bool = False) -> list[Any]:
    add, ln = nodes
    x, skip, shape, dt = _sum_operands(ctx, add, lookup, stats)
    if not _last_axis(int(_attr(ln, "axis", -1)), len(shape)):
        raise Unfused("LayerNormalization over more than the last axis")
    params = [_input(lookup, ln, i) for i in (1, 2)]  # scale, bias
    if any(v is not None and _value_dtype(v) != dt for v in params):
        raise Unfused("LayerNormalization's operand types differ")
    scale, beta = (None if v is None else as_device(ctx, v, stats, ln.input[i]).tensor for i, v in zip((1, 2), params))
    out, total = ctx.out_tensor(shape, dt), ctx.out_tensor(shape, dt) if keep_sum else False
    keys = keys_for(ctx, ln.output[0], shape, dt)
    kdml.skip_layer_norm(x, skip, scale, None, beta, epsilon=float(_attr(ln, "epsilon", 1e-5)), sum_out=total,
                         out=out, keys_out=keys, device=ctx.device)
    kept = [None] * (len(ln.output) - 1) + [DeviceValue(total, shape, dt)] if keep_sum else []  # Pattern.shared
    return [with_keys(ctx, DeviceValue(out, shape, dt), keys), *kept]


def _run_masked_softmax(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                        stats: RunStats) -> list[Any]:
    add, smx, _isnan, where = nodes
    x, mask, shape, dt = _sum_operands(ctx, add, lookup, stats)
    rank = len(shape)
    if not _last_axis(int(_attr(smx, "axis", -1 if _opset(ctx.prepared.model) >= 13 else 1)), rank):
        raise Unfused("Softmax over another axis than the last")
    zero = _input(lookup, where, 1)
    if _value_dtype(zero) != dt or tuple(np.broadcast_shapes(shape, _value_shape(zero))) != shape:
        raise Unfused(f"Where's constant of type {_value_dtype(zero)}, shape {_value_shape(zero)}")
    # the probabilities over the scores where nothing else reads them (PlanContext.out_tensor)
    out = ctx.out_tensor(shape, dt, over=_input(lookup, add, 0))
    y = kdml.softmax(x, mask=mask, nan_to_zero=True, out=out, device=ctx.device)
    return [DeviceValue(y, shape, dt)]


def _run_batch_norm_relu(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                         stats: RunStats) -> list[Any]:
    bn = nodes[0]
    return batch_norm_node(ctx, bn, [_input(lookup, bn, i) for i in range(5)], stats, True)


def _run_add_relu(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                  stats: RunStats) -> list[Any]:
    """Add -> Relu as ELEMENT_WISE_ADD1 with its fused ReLU (a ResNet block's end): the sum's bits,
    then ReLU's, in one dispatch."""
    if ctx.device.feature_level < kdml.FeatureLevel.FL_2_0:
        raise Unfused("ELEMENT_WISE_ADD1 needs feature level 2_0")
    a, b, shape, dt = _sum_operands(ctx, nodes[0], lookup, stats)
    y = kdml.add(a, b, activation=_RELU, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(y, shape, dt)]


_RELU = kdml.ActivationReluDesc(None, None)


# ---- the static checks ---------------------------------------------------------------------
def _float_sum(rep: BackendRep, add: onnx.NodeProto) -> str:
    dts = {rep._elem_dtype(n) for n in add.input}
    return "" if dts <= _FLOAT_OUT | {None} else f"Add of {sorted(map(str, dts - {None}))}"


def _check_add_layer_norm(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    ln = nodes[1]
    if _float_sum(rep, nodes[0]):
        return _float_sum(rep, nodes[0])
    rank = rep._declared_rank(ln.input[0])
    axis = int(_attr(ln, "axis", -1))
    if axis != -1 and (rank is None or axis != rank - 1):
        return f"LayerNormalization axis {axis} (rank {rank}) is not the last"
    return ""


def _check_conv_act(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    dts = {rep._elem_dtype(name) for name in nodes[0].input[:2]}  # only a float Conv runs on CONVOLUTION
    if not dts <= {np.dtype(np.float32), np.dtype(np.float16), None}:
        return f"Conv of {sorted(map(str, dts))}"
    fed = [n for n in nodes[1].input[1:] if n and (n not in rep.constants or n in rep.input_names)]
    return f"Clip's bound {fed[0]!r} is fed (the Clip runs alone, node by node)" if fed else ""


def _check_masked_softmax(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    smx, where = nodes[1], nodes[3]
    if _float_sum(rep, nodes[0]):
        return _float_sum(rep, nodes[0])
    rank = rep._declared_rank(smx.input[0])
    axis = int(_attr(smx, "axis", -1 if _opset(rep.model) >= 13 else 1))
    if axis != -1 and (rank is None or axis != rank - 1):
        return f"Softmax axis {axis} (rank {rank}) is not the last"
    return positive_zero_constant(rep, where.input[1])


PATTERNS = (
    Pattern("Add+LayerNormalization", ("Add", "LayerNormalization"), ((0, 1, 0),), "MEAN_VARIANCE_NORMALIZATION1",
            _check_add_layer_norm, _run_add_layer_norm),
    # the same where later nodes read the sum (a residual stream): written by the same dispatch
    Pattern("Add+LayerNormalization", ("Add", "LayerNormalization"), ((0, 1, 0),), "MEAN_VARIANCE_NORMALIZATION1",
            _check_add_layer_norm, functools.partial(_run_add_layer_norm, keep_sum=True), shared=(0,)),
    Pattern("Add+Softmax+IsNaN+Where", ("Add", "Softmax", "IsNaN", "Where"),
            ((0, 1, 0), (1, 2, 0), (2, 3, 0), (1, 3, 2)), "ACTIVATION_SOFTMAX1",
            _check_masked_softmax, _run_masked_softmax),
    *(Pattern(f"Conv+{t}", ("Conv", t), ((0, 1, 0),), "CONVOLUTION", _check_conv_act, run_conv_activation)
      for t in FUSED_TYPES),
    Pattern("MatMulInteger+Cast+Mul", ("MatMulInteger", "Cast", "Mul"), ((0, 1, 0), (1, 2, 0)),
            "MATRIX_MULTIPLY_INTEGER_TO_FLOAT", check_integer_product, run_integer_product),
    Pattern("BatchNormalization+Relu", ("BatchNormalization", "Relu"), ((0, 1, 0),), "BATCH_NORMALIZATION",
            lambda rep, nodes: "", _run_batch_norm_relu),
    Pattern("Add+Relu", ("Add", "Relu"), ((0, 1, 0),), "ELEMENT_WISE_ADD1", lambda rep, nodes: _float_sum(rep, nodes[0]),
            _run_add_relu),
    Pattern("DequantizeLinear+Conv+QuantizeLinear", ("DequantizeLinear", "Conv", "QuantizeLinear"), ((0, 1, 0), (1, 2, 0)),
            "QUANTIZED_LINEAR_CONVOLUTION", check_qdq_conv, run_qdq_conv),
    Pattern("DequantizeLinear+MatMul+QuantizeLinear", ("DequantizeLinear", "MatMul", "QuantizeLinear"),
            ((0, 1, 0), (1, 2, 0)), "MATRIX_MULTIPLY_INTEGER_TO_FLOAT", check_qdq_matmul, run_qdq_matmul),
    Pattern("QuantizeLinear+DequantizeLinear", ("QuantizeLinear", "DequantizeLinear"), ((0, 1, 0),),
            "ELEMENT_WISE_QUANTIZE_LINEAR", check_qdq_pair, run_qdq_pair),
    # MatMul(Q, K^T) -> [Mul | Div] -> [Add mask] -> Softmax -> [Cast]* -> MatMul(., V): fusion_attention.py
    *attention_patterns(Pattern),
    # Pow -> ReduceMean -> Add(eps) -> Sqrt -> 1 / s -> Mul(x, .) -> [Cast] -> Mul(weight, .): fusion_rmsnorm.py
    *rms_norm_patterns(Pattern),
    # Gather(experts' weights, slots' experts) -> MatMul(., slots' inputs): fusion_experts.py
    *experts_patterns(Pattern),
    # MatMul(a, w) -> Add(constant bias) -> GELU (exact or tanh chain, Gelu, BiasGelu): fusion_bias_gelu.py
    *matmul_bias_gelu_patterns(Pattern),
    # MatMul(a, w) -> Add(., constant bias along the last axis): fusion_bias.py (after the attention's MatMul+Add)
    *matmul_bias_patterns(Pattern),
    # MatMul -> Mul(., constant scalar) / Div(., power of two): fusion_scale.py (after the attention's)
    *matmul_scale_patterns(Pattern),
    # MatMul -> Transpose keeping the last axis (an unfused attention's context): fusion_transpose.py
    *matmul_transpose_patterns(Pattern),
    # Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x, .) -> Mul(0.5): fusion_gelu.py
    *gelu_patterns(Pattern),
    # GlobalAveragePool -> Conv 1x1 -> Relu | SiLU -> Conv 1x1 -> HardSigmoid | Sigmoid: fusion_se.py
    *se_patterns(Pattern),
    # [Conv ->] Sigmoid(x) -> Mul(x, .), SiLU: fusion_swish.py
    *swish_patterns(Pattern),
    # Slice(x, D/2:) -> Neg -> Concat(., Slice(x, :D/2)) -> Mul(sin) ; Mul(x, cos) -> Add: fusion_rotary.py
    *rotary_patterns(Pattern),
)


# ---- the matched chains (fusion_match.find_fusions) and their step ---------------------------
@dataclasses.dataclass(frozen=True)
class Fusions:
    """The model's fused chains: by carrier, and each absorbed node's carrier."""

    by_carrier: dict[int, Fusion] = dataclasses.field(default_factory=dict)
    absorbed: dict[int, int] = dataclasses.field(default_factory=dict)

    def placement(self, i: int, operator: str) -> tuple[str, int | None]:
        """Node i's operator as the placement reports it, and the carrier it is fused into."""
        into = self.absorbed.get(i)
        if into is not None:
            return f"fused into node {into}", into
        f = self.by_carrier.get(i)
        if f is not None:
            return f"{f.pattern.operator} (fused {f.pattern.name}: nodes {', '.join(map(str, f.nodes))})", None
        return operator, None

    def summary(self) -> list[str]:
        """The summary's lines of the fused chains, by pattern."""
        chains = collections.Counter((f.pattern.name, f.pattern.operator) for f in self.by_carrier.values())
        return [f"  vulkan  {name} x{c} -> {dml} (one dispatch per chain, at its last node)"
                for (name, dml), c in sorted(chains.items())]

    def step(self, i: int, executor: StepExecutor, ctx: NodeContext, graph: onnx.GraphProto,
             lookup: Callable[[str], Any], stats: RunStats) -> None:
        """Node i's device step, for both executors: a carrier runs its chain's one dispatch, or
        the chain's nodes one by one where this run's values do not fit it (Unfused: nothing was
        recorded; the intermediates they made are dropped); an absorbed node does nothing (its
        carrier ran it); any other node runs alone."""
        try:
            self._step(i, executor, ctx, graph, lookup, stats)
        except ValueError as e:  # a shape that breaks a rule at run time: say where
            err = at_node(e, i, graph.node[i])
            if err is e:
                raise
            raise err from e

    def _step(self, i: int, executor: StepExecutor, ctx: NodeContext, graph: onnx.GraphProto,
              lookup: Callable[[str], Any], stats: RunStats) -> None:
        fusion = self.by_carrier.get(i)
        if fusion is None:
            if i not in self.absorbed:
                executor.node(i)
        else:
            _chain(fusion, executor, ctx, graph, lookup, stats)

    def step_inputs(self, graph: onnx.GraphProto, i: int) -> list[str]:
        """The values node i's step reads: a carrier its chain's, an absorbed node none."""
        f = self.by_carrier.get(i)
        if f is not None:
            return list(f.inputs)
        return [] if i in self.absorbed else _node_inputs(graph.node[i])


def _chain(fusion: Fusion, executor: StepExecutor, ctx: NodeContext, graph: onnx.GraphProto,
           lookup: Callable[[str], Any], stats: RunStats) -> None:
    """A chain's one dispatch, or (Unfused) its shorter chains (Fusion.within) and other nodes."""
    try:
        with executor.scoped(fusion):
            outs = executor.run_chain(fusion, lambda c: fusion.run(c, graph, lookup, stats))
    except Unfused as e:
        ctx.note(f"nodes {list(fusion.nodes)} ({fusion.pattern.name}) ran unfused: {e}")
        inner = {f.carrier: f for f in fusion.within}
        absorbed = {j for f in fusion.within for j in f.nodes[:-1]}
        for j in sorted(fusion.nodes):  # graph order: a chain's positions need not be (fusion_rotary.py's)
            if j in inner:
                _chain(inner[j], executor, ctx, graph, lookup, stats)
            elif j not in absorbed:
                executor.node(j)
        for name in fusion.intermediates:
            executor.drop(name)
        return
    executor.chain_done(fusion, outs)
