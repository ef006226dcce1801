"""DirectML's LSTM (DML_LSTM_OPERATOR_DESC), per direction (backward: t = seq_length - 1 .. 0, the B weights):

    i_t = f(clip(X_t W_i^T + H_{t-1} R_i^T + P_i (.) C_{t-1} + W_bi + R_bi))
    f_t = f(clip(X_t W_f^T + H_{t-1} R_f^T + P_f (.) C_{t-1} + W_bf + R_bf))   (CoupleInputForget: 1 - i_t)
    c_t = g(clip(X_t W_c^T + H_{t-1} R_c^T + W_bc + R_bc))
    C_t = f_t (.) C_{t-1} + i_t (.) c_t
    o_t = f(clip(X_t W_o^T + H_{t-1} R_o^T + P_o (.) C_{t-1} + W_bo + R_bo))
    H_t = o_t (.) h(C_t)

Gates in the page's order [i, o, f, c] in WeightTensor / RecurrenceTensor / BiasTensor, peepholes [i, o, f];
f(), g(), h() ActivationDescs[3 direction .. 3 direction + 2]; clip(x) = min(max(x, -ClipThreshold),
ClipThreshold) where UseClipThreshold (ELEMENT_WISE_CLIP; ClipThreshold must then be a number >= 0).
Where the page is unclear: its H_t reads "o_t (.) h(ct)", which kompute_dml takes as h(C_t) (the cell,
as ONNX and every LSTM); its o_t's peephole term is P_o (.) C_{t-1}, as written, where ONNX's LSTM has
P_o (.) C_t (the ONNX handler never sends peepholes here). Plans, sequence lengths, activations, error:
ops/recurrent.py, docs/recurrent.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import invalid
from ..core.tensor_desc import TensorDesc
from .activation_params import ElementWiseClipDesc
from .base import CompiledOperator
from .elementwise_unary import ActivationSigmoidDesc, ActivationTanhDesc
from .gemm import as_float32
from .recurrent import RecurrentNetworkDirection, as_bool, check_common, example_sizes, page_sizes, recurrent_families, recurrent_support
from .rnn import Recurrence, Step
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

LSTM = recurrent_support("LSTM", 77, ("input_tensor", "weight_tensor", "recurrence_tensor", "bias_tensor", "hidden_init_tensor",
                                      "cell_mem_init_tensor", "sequence_lengths_tensor", "peephole_tensor"),
                         ("output_sequence_tensor", "output_single_tensor", "output_cell_single_tensor"))
I_, O_, F_, C_ = range(4)  # the gates' order in the weights and biases
PEEPHOLE = {I_: 0, O_: 1, F_: 2}  # [i, o, f] in PeepholeTensor


@dataclass(frozen=True)
class LstmDesc:
    """DML_LSTM_OPERATOR_DESC { InputTensor {1, T, B, I}, WeightTensor {1, D, 4H, I}, RecurrenceTensor {1, D, 4H, H},
    BiasTensor {1, 1, D, 8H}, HiddenInitTensor, CellMemInitTensor {1, D, B, H}, SequenceLengthsTensor {1, 1, 1, B}
    (UINT32), PeepholeTensor {1, 1, D, 3H}, OutputSequenceTensor {T, D, B, H}, OutputSingleTensor,
    OutputCellSingleTensor {1, D, B, H}, ActivationDescCount, ActivationDescs, Direction, ClipThreshold,
    UseClipThreshold, CoupleInputForget }: activation_descs holds 3 D activation descriptors (tensors None)."""

    input_tensor: TensorDesc
    weight_tensor: TensorDesc
    recurrence_tensor: TensorDesc
    bias_tensor: TensorDesc | None
    hidden_init_tensor: TensorDesc | None
    cell_mem_init_tensor: TensorDesc | None
    sequence_lengths_tensor: TensorDesc | None
    peephole_tensor: TensorDesc | None
    output_sequence_tensor: TensorDesc | None
    output_single_tensor: TensorDesc | None
    output_cell_single_tensor: TensorDesc | None
    activation_descs: tuple[Any, ...]
    direction: RecurrentNetworkDirection = RecurrentNetworkDirection.FORWARD
    clip_threshold: float = 0.0
    use_clip_threshold: bool = False
    couple_input_forget: bool = False


def compile_lstm(device: Device, desc: LstmDesc) -> CompiledOperator:
    shape = check_common(device, LSTM, desc, 4, 3, page_sizes(4, peephole=True))
    use_clip = as_bool(desc.use_clip_threshold, "use_clip_threshold")
    coupled = as_bool(desc.couple_input_forget, "couple_input_forget")
    threshold = as_float32(desc.clip_threshold, "clip_threshold")
    if use_clip and not (threshold >= 0 and not math.isinf(threshold)):
        raise invalid("clip_threshold", f"must be a finite number >= 0 where use_clip_threshold is TRUE, got {desc.clip_threshold!r}")
    rec = Recurrence(device, LSTM, desc, shape, 4)
    ch = rec.ch
    gi, go, gf, gc, ta, tb = (rec.temp() for _ in range(6))
    gate_views = {I_: gi, O_: go, F_: gf, C_: gc}
    used = [g for g in (I_, O_, F_, C_) if not (coupled and g == F_)]

    def cell(st: Step) -> None:
        assert st.c_prev is not None and st.c_out is not None
        f, g, h = desc.activation_descs[3 * st.d:3 * st.d + 3]
        for k in used:
            ch.gemm(st.h_prev, rec.weight("recurrence_tensor", st.d, k), st.rows[k], gate_views[k])
            p = rec.vector("peephole_tensor", st.d, PEEPHOLE[k]) if k in PEEPHOLE else None
            if p is not None:  # P (.) C_{t-1}, as the page writes it for i, f and o
                ch.mul(p, st.c_prev, ta)
                ch.add(gate_views[k], ta, gate_views[k])
            if use_clip:
                v = gate_views[k]
                ch.op(ElementWiseClipDesc(v.desc, v.desc, None, -threshold, threshold), (v, v))
            ch.act(g if k == C_ else f, gate_views[k])
        if coupled:
            ch.sub(rec.one, gi, gf)
        ch.mul(gf, st.c_prev, ta)
        ch.mul(gi, gc, tb)
        ch.add(ta, tb, st.c_out)
        ch.act(h, st.c_out, ta)
        ch.mul(go, ta, st.h_out)

    return rec.build(cell, cell_state=True)


def _example() -> LstmDesc:
    t = example_sizes(4)
    acts = (ActivationSigmoidDesc(None, None), ActivationTanhDesc(None, None), ActivationTanhDesc(None, None)) * 2  # type: ignore[arg-type]
    return LstmDesc(*(t[f] for f in LSTM.fields), acts, RecurrentNetworkDirection.BIDIRECTIONAL, 3.0, True)  # type: ignore[arg-type]


SPECS = (OperatorSpec(LstmDesc, LSTM, compile_lstm, recurrent_families(), example=_example),)
