"""DirectML's RNN (DML_RNN_OPERATOR_DESC): a one-layer simple recurrent network, per direction

    forward:  for t = 0 .. seq_length - 1:  H_t = f(X_t W_i^T + H_{t-1} R_i^T + W_bi + R_bi)
    backward: for t = seq_length - 1 .. 0, with W_Bi, R_Bi, W_Bbi, R_Bbi

H_{t-1} of the first step is HiddenInitTensor's (0 where absent), f() ActivationDescs[direction]. The
plans, the sequence lengths, the activations and the error: ops/recurrent.py; docs/recurrent.md. This
module also holds the step loop LSTM (ops/lstm.py) and GRU (ops/gru.py) share (`Recurrence`, `Step`).
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the table, the direction, one DataType (sequence
lengths aside), the pages' Sizes, non-overlapping outputs, the activations (count 1 per direction).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.ints import as_int, cdiv
from ..core.registry import OperatorSupport
from ..core.tensor_desc import TensorDesc
from . import contract
from .activation_relu import ActivationReluDesc
from .base import CompiledOperator
from .elementwise_unary import ActivationTanhDesc
from .gemm import GemmDesc, MatrixTransform
from .recurrent import (
    Chain,
    RecurrentNetworkDirection,
    View,
    check_common,
    example_sizes,
    mat,
    page_sizes,
    recurrent_families,
    recurrent_support,
)
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

@dataclass(frozen=True)
class Step:
    """What a cell reads and writes at step t of direction d: the previous state(s), per gate the step's rows
    X_t W_g^T + biases, where the new H_t (and C_t) go. Every view is {1, 1, batch_size, hidden_size}."""

    d: int
    t: int
    h_prev: View
    c_prev: View | None
    rows: tuple[View, ...]
    h_out: View
    c_out: View | None


class Recurrence:
    """The plans around a cell (module docstring): the input projections, the sequence-length mask, the
    step loop over each direction, the outputs."""

    def __init__(self, device: Device, support: OperatorSupport, desc: Any, shape: tuple[int, int, int, int, int],
                 gates: int) -> None:
        self.desc, self.support, self.gates = desc, support, gates
        self.steps, self.batch, self.inp, self.hid, self.dirs = shape
        self.dt = dt = desc.input_tensor.data_type
        self.ch = Chain(device, support.fields, dt)
        self.hp = self.ch.pad(self.hid)
        self.row = self.batch * self.hp  # a padded state's elements
        self.index = {f: i for i, f in enumerate(support.fields)}
        self.zero = View(self.ch.const(np.zeros(4, dt.numpy_dtype)), TensorDesc(dt, (1, 1, self.batch, self.hid), (0, 0, 0, 0)))
        self.one = View(self.ch.const(np.ones(4, dt.numpy_dtype)), self.zero.desc)

    def state(self, index: int, delta: int = 0) -> View:
        return View(index, mat(self.dt, self.batch, self.hid, self.hp), delta)

    def temp(self) -> View:
        return self.state(self.ch.scratch(self.row))

    def weight(self, field: str, d: int, g: int) -> View:
        """W_g / R_g of direction d: {1, 1, hidden_size, K} read transposed by GEMM."""
        t = getattr(self.desc, field)
        s = t.effective_strides
        return View(self.index[field], mat(self.dt, self.hid, t.sizes[3], s[2], s[3]), d * s[1] + g * self.hid * s[2])

    def vector(self, field: str, d: int, k: int) -> View | None:
        """Part k (hidden_size values) of direction d's row of a {1, 1, D, n * hidden_size} tensor, repeated over
        the batch; None where the tensor is absent."""
        t = getattr(self.desc, field)
        if t is None:
            return None
        s = t.effective_strides
        desc = TensorDesc(self.dt, (1, 1, self.batch, self.hid), (0, 0, 0, s[3] if self.hid > 1 else 0))
        return View(self.index[field], desc, d * s[2] + k * self.hid * s[3])

    def initial(self, field: str, d: int) -> View:
        t = getattr(self.desc, field, None)
        if t is None:
            return self.zero
        s = t.effective_strides
        return View(self.index[field], mat(self.dt, self.batch, self.hid, s[2], s[3]), d * s[1])

    def _projections(self, own_rb: frozenset[int]) -> list[list[int]]:
        """Per direction and gate: a scratch of every step's X_t W_g^T + W_bg + R_bg (gates in `own_rb`: + W_bg
        only), rows padded."""
        ch, dt, steps, hid = self.ch, self.dt, self.steps, self.hid
        x = View(self.index["input_tensor"], self.desc.input_tensor)
        out_desc = TensorDesc(dt, (1, steps, self.batch, hid), (0, self.row, self.hp, 1))
        ws = self.desc.weight_tensor.effective_strides
        xw: list[list[int]] = []
        for d in range(self.dirs):
            xw.append([])
            for g in range(self.gates):
                c = None
                wb = self.vector("bias_tensor", d, g)
                if wb is not None:
                    rb = self.vector("bias_tensor", d, self.gates + g)
                    assert rb is not None
                    if g in own_rb:
                        c = View(wb.index, TensorDesc(dt, out_desc.sizes, (0, 0, 0, wb.desc.strides[3])), wb.delta)
                    else:
                        s = ch.scratch(self.hp)
                        ch.add(wb, rb, View(s, mat(dt, self.batch, hid, 0)))
                        c = View(s, TensorDesc(dt, out_desc.sizes, (0, 0, 0, 1)))
                w = View(self.index["weight_tensor"], TensorDesc(dt, (1, steps, hid, self.inp), (0, 0, ws[2], ws[3])),
                         d * ws[1] + g * hid * ws[2])
                out = View(ch.scratch(steps * self.row), out_desc)
                ch.op(GemmDesc(x.desc, w.desc, c.desc if c else None, out_desc, trans_b=MatrixTransform.TRANSPOSE),
                      (x, w, c, out))
                xw[d].append(out.index)
        return xw

    def _mask(self) -> tuple[int, int] | None:
        """mask[t, b] = (sequence_lengths[b] > t) as UINT8, rows of `bp` bytes; None without lengths."""
        lens = self.desc.sequence_lengths_tensor
        if lens is None:
            return None
        ch, steps, batch = self.ch, self.steps, self.batch
        bp = cdiv(batch, 16) * 16
        mask = ch.scratch(steps * bp, DataType.UINT8)
        iota = ch.const(np.arange(steps, dtype=np.uint32))
        sizes = (1, 1, steps, batch)
        a = View(self.index["sequence_lengths_tensor"], TensorDesc(DataType.UINT32, sizes, (0, 0, 0, lens.effective_strides[3])))
        b = View(iota, TensorDesc(DataType.UINT32, sizes, (0, 0, 1, 0)))
        ch.ew(contract.EW_GT, (a, b, View(mask, TensorDesc(DataType.UINT8, sizes, (0, 0, bp, 1)))), t="u32", ob=8)
        return mask, bp

    def build(self, cell: Any, cell_state: bool = False, own_rb: frozenset[int] = frozenset()) -> CompiledOperator:
        """Every plan, `cell(step)` making each step's; `cell_state`: LSTM's C; `own_rb`: gates whose R_b the cell adds."""
        ch, desc, row, dirs = self.ch, self.desc, self.row, self.dirs
        xw = self._projections(own_rb)
        mask = self._mask()
        hs = ch.scratch(self.steps * dirs * row)  # every step's H_t (0 past a sequence's length), padded rows
        hstate = ch.scratch(dirs * row) if mask else None
        cstate = ch.scratch(dirs * row) if cell_state else None
        hcand = self.temp() if mask else None
        ccand = self.temp() if mask and cell_state else None
        lasts: list[tuple[View, View | None]] = []
        backward = as_int(desc.direction, "direction") == RecurrentNetworkDirection.BACKWARD
        for d in range(dirs):
            h_prev = self.initial("hidden_init_tensor", d)
            c_prev = self.initial("cell_mem_init_tensor", d) if cell_state else None
            order = range(self.steps - 1, -1, -1) if backward or d == 1 else range(self.steps)
            for t in order:
                y = self.state(hs, (t * dirs + d) * row)
                c_new = self.state(cstate, d * row) if cstate is not None else None
                rows = tuple(self.state(xw[d][g], t * row) for g in range(self.gates))
                cell(Step(d, t, h_prev, c_prev, rows, hcand or y, ccand or c_new))
                if mask is None:
                    h_prev, c_prev = y, c_new
                    continue
                assert hcand is not None and hstate is not None
                cond = View(mask[0], TensorDesc(DataType.UINT8, (1, 1, self.batch, self.hid), (0, 0, 1, 0)), t * mask[1])
                ch.select(cond, hcand, self.zero, y)
                h_keep = self.state(hstate, d * row)
                ch.select(cond, hcand, h_prev, h_keep)
                h_prev = h_keep
                if c_new is not None and ccand is not None and c_prev is not None:
                    ch.select(cond, ccand, c_prev, c_new)
                    c_prev = c_new
            lasts.append((h_prev, c_prev))
        self._outputs(hs, lasts)
        return CompiledOperator(ch.device, desc, self.support, self.support.inputs, self.support.outputs, ch.plans,
                                constants=ch.constants)  # type: ignore[arg-type]

    def _outputs(self, hs: int, lasts: list[tuple[View, View | None]]) -> None:
        ch, dt, desc = self.ch, self.dt, self.desc
        seq = desc.output_sequence_tensor
        if seq is not None:
            src = TensorDesc(dt, seq.sizes, (self.dirs * self.row, self.row, self.hp, 1))
            ch.copy(View(hs, src), View(self.index["output_sequence_tensor"], seq))
        part = TensorDesc(dt, (1, 1, self.batch, self.hid), (0, 0, self.hp, 1))
        for k, f in enumerate(("output_single_tensor", "output_cell_single_tensor")):
            out = getattr(desc, f, None)
            if out is not None:
                views = [v[k] for v in lasts]
                ch.join([View(v.index, part, v.delta) for v in views if v is not None], View(self.index[f], out))



RNN = recurrent_support("RNN", 76, ("input_tensor", "weight_tensor", "recurrence_tensor", "bias_tensor", "hidden_init_tensor",
                                    "sequence_lengths_tensor"), ("output_sequence_tensor", "output_single_tensor"))


@dataclass(frozen=True)
class RnnDesc:
    """DML_RNN_OPERATOR_DESC { InputTensor {1, T, B, I}, WeightTensor {1, D, H, I}, RecurrenceTensor {1, D, H, H},
    BiasTensor {1, 1, D, 2H}, HiddenInitTensor {1, D, B, H}, SequenceLengthsTensor {1, 1, 1, B} (UINT32),
    OutputSequenceTensor {T, D, B, H}, OutputSingleTensor {1, D, B, H}, ActivationDescCount, ActivationDescs,
    Direction }: activation_descs holds D activation descriptors (tensors None); ActivationDescCount is its length."""

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


def compile_rnn(device: Device, desc: RnnDesc) -> CompiledOperator:
    shape = check_common(device, RNN, desc, 1, 1, page_sizes(1))
    rec = Recurrence(device, RNN, desc, shape, 1)
    ch = rec.ch

    def cell(st: Step) -> None:
        ch.gemm(st.h_prev, rec.weight("recurrence_tensor", st.d, 0), st.rows[0], st.h_out)
        ch.act(desc.activation_descs[st.d], st.h_out)

    return rec.build(cell)


def _example() -> RnnDesc:
    t = example_sizes(1)
    return RnnDesc(*(t[f] for f in RNN.fields), (ActivationTanhDesc(None, None), ActivationReluDesc(None, None)),  # type: ignore[arg-type]
                   RecurrentNetworkDirection.BIDIRECTIONAL)


SPECS = (OperatorSpec(RnnDesc, RNN, compile_rnn, recurrent_families(), example=_example),)
EXPORTS = {"RecurrentNetworkDirection": RecurrentNetworkDirection}
