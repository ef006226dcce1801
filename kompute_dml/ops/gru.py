"""DirectML's GRU (DML_GRU_OPERATOR_DESC), per direction (backward: t = seq_length - 1 .. 0, the B weights):

    z_t = f(X_t W_z^T + H_{t-1} R_z^T + W_bz + R_bz)
    r_t = f(X_t W_r^T + H_{t-1} R_r^T + W_br + R_br)
    h_t = g(X_t W_h^T + (r_t (.) H_{t-1}) R_h^T + R_bh + W_bh)        LinearBeforeReset FALSE
    h_t = g(X_t W_h^T + r_t (.) (H_{t-1} R_h^T + R_bh) + W_bh)        LinearBeforeReset TRUE
    H_t = (1 - z_t) (.) h_t + z_t (.) H_{t-1}

Gates in the page's order [z, r, h] in WeightTensor / RecurrenceTensor / BiasTensor; f(), g()
ActivationDescs[2 direction], [2 direction + 1]. The page gives these equations as images only (the
ONNX GRU's, whose weight layout and LinearBeforeReset it shares). Plans, sequence lengths, activations,
error: ops/recurrent.py, docs/recurrent.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.tensor_desc import TensorDesc
from .base import CompiledOperator
from .elementwise_unary import ActivationSigmoidDesc, ActivationTanhDesc
from .recurrent import RecurrentNetworkDirection, as_bool, check_common, example_sizes, page_sizes, recurrent_families, recurrent_support
from .rnn import Recurrence, Step
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

GRU = recurrent_support("GRU", 78, ("input_tensor", "weight_tensor", "recurrence_tensor", "bias_tensor", "hidden_init_tensor",
                                    "sequence_lengths_tensor"), ("output_sequence_tensor", "output_single_tensor"))
Z_, R_, H_ = range(3)


@dataclass(frozen=True)
class GruDesc:
    """DML_GRU_OPERATOR_DESC { InputTensor {1, T, B, I}, WeightTensor {1, D, 3H, I}, RecurrenceTensor {1, D, 3H, H},
    BiasTensor {1, 1, D, 6H}, HiddenInitTensor {1, D, B, H}, SequenceLengthsTensor {1, 1, 1, B} (UINT32),
    OutputSequenceTensor {T, D, B, H}, OutputSingleTensor {1, D, B, H}, ActivationDescCount, ActivationDescs,
    Direction, LinearBeforeReset }: activation_descs holds 2 D activation descriptors (tensors None)."""

    input_tensor: TensorDesc
    weight_tensor: TensorDesc
    recurrence_tensor: TensorDesc
    bias_tensor: TensorDesc | None
    hidden_init_tensor: TensorDesc | None
    sequence_lengths_tensor: TensorDesc | None
    output_sequence_tensor: TensorDesc | None
    output_single_tensor: TensorDesc | None
    activation_descs: tuple[Any, ...]
    direction: RecurrentNetworkDirection = RecurrentNetworkDirection.FORWARD
    linear_before_reset: bool = False


def compile_gru(device: Device, desc: GruDesc) -> CompiledOperator:
    shape = check_common(device, GRU, desc, 3, 2, page_sizes(3))
    lbr = as_bool(desc.linear_before_reset, "linear_before_reset")
    rec = Recurrence(device, GRU, desc, shape, 3)
    ch = rec.ch
    gz, gr, gh, ta, tb = (rec.temp() for _ in range(5))

    def cell(st: Step) -> None:
        f, g = desc.activation_descs[2 * st.d:2 * st.d + 2]
        for k, v in ((Z_, gz), (R_, gr)):
            ch.gemm(st.h_prev, rec.weight("recurrence_tensor", st.d, k), st.rows[k], v)
            ch.act(f, v)
        r_h = rec.weight("recurrence_tensor", st.d, H_)
        if lbr:  # r (.) (H R_h^T + R_bh), then + (X W_h^T + W_bh)
            ch.gemm(st.h_prev, r_h, rec.vector("bias_tensor", st.d, 3 + H_), ta)
            ch.mul(gr, ta, ta)
            ch.add(ta, st.rows[H_], gh)
        else:  # (r (.) H) R_h^T + (X W_h^T + W_bh + R_bh)
            ch.mul(gr, st.h_prev, ta)
            ch.gemm(ta, r_h, st.rows[H_], gh)
        ch.act(g, gh)
        ch.sub(rec.one, gz, ta)  # (1 - z) (.) h + z (.) H_{t-1}
        ch.mul(ta, gh, ta)
        ch.mul(gz, st.h_prev, tb)
        ch.add(ta, tb, st.h_out)

    return rec.build(cell, own_rb=frozenset({H_}) if lbr else frozenset())


def _example() -> GruDesc:
    t = example_sizes(3)
    acts = (ActivationSigmoidDesc(None, None), ActivationTanhDesc(None, None)) * 2  # type: ignore[arg-type]
    return GruDesc(*(t[f] for f in GRU.fields), acts, RecurrentNetworkDirection.BIDIRECTIONAL, True)  # type: ignore[arg-type]


SPECS = (OperatorSpec(GruDesc, GRU, compile_gru, recurrent_families(), example=_example),)
