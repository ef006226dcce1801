"""A prepared model's constants share a few device buffers (onnx_backend/constant_arena.py): each
at an ALIGN-aligned offset, zero-padded to whole 16-byte units, the bytes the model holds; a chunk
is made for the rest of the model's constants, a large constant keeps a buffer of its own; runs
give the results numpy gives, in whole-graph plans and node by node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend, constant_arena

SHAPES = [(3,), (5, 7), (1,), (33,), (2, 3, 4), (129,)]
TYPES = [np.float16, np.float32, np.int32]
ELEM = {np.float16: T.FLOAT16, np.float32: T.FLOAT, np.int32: T.INT32}


def _model(rng):
    """y_k = x_k + c_k for constants of odd sizes and three types (Add's second operand: a device
    constant of the backend)."""
    inits, nodes, ins, outs, feeds, want = [], [], [], [], {}, {}
    for k, shape in enumerate(SHAPES):
        dt = TYPES[k % len(TYPES)]
        c = (rng.standard_normal(shape) * 100).astype(dt)
        x = (rng.standard_normal(shape) * 100).astype(dt)
        inits.append(numpy_helper.from_array(c, f"c{k}"))
        nodes.append(helper.make_node("Add", [f"x{k}", f"c{k}"], [f"y{k}"]))
        ins.append(helper.make_tensor_value_info(f"x{k}", ELEM[dt], list(shape)))
        outs.append(helper.make_tensor_value_info(f"y{k}", ELEM[dt], list(shape)))
        feeds[f"x{k}"], want[f"y{k}"] = x, x + c
    graph = helper.make_graph(nodes, "consts", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), feeds, want


CHUNK_BYTES = constant_arena.CHUNK_BYTES


@pytest.mark.parametrize("chunk", [CHUNK_BYTES, 1024])
def test_constants_share_aligned_padded_ranges_and_runs_are_right(rng, monkeypatch, chunk):
    monkeypatch.setattr(constant_arena, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(constant_arena, "MIN_CHUNK_BYTES", min(chunk, constant_arena.MIN_CHUNK_BYTES))
    made = kdml.Buffer

    def dirty(device, nbytes, **kw):  # a chunk's bytes are undefined until written: make them not zero
        buf = made(device, nbytes, **kw)
        buf.write(np.full(nbytes, 0xAB, np.uint8))
        return buf

    monkeypatch.setattr(constant_arena.kdml, "Buffer", dirty)
    model, feeds, want = _model(rng)
    rep = Backend.prepare(model, "CPU")
    for node_by_node in (False, True):
        rep.state.node_by_node = node_by_node
        got = rep.run(feeds)
        for k, g in enumerate(got):
            np.testing.assert_array_equal(g, want[f"y{k}"])
    consts = rep.state.device_constants
    assert {f"c{k}" for k in range(len(SHAPES))} <= set(consts)
    arena = rep.state.constant_arena
    buffers = {dv.tensor.buffer.serial for dv in consts.values()}
    # (a quarter of a chunk at most shares one: the 1 KiB chunks give the 516-byte constant its own)
    shared = [dv for dv in consts.values() if -(-dv.tensor.nbytes // 16) * 16 * 4 <= arena.largest]
    assert arena.chunks == len({dv.tensor.buffer.serial for dv in shared}) <= len(buffers)
    if chunk == CHUNK_BYTES:  # every constant in one
        assert len(buffers) == 1
    else:  # two chunks, and the 516-byte constant alone
        assert arena.chunks == 2 and len(buffers) == 3
    for name, dv in consts.items():
        t = dv.tensor
        assert t.offset % constant_arena.ALIGN == 0
        host = rep.constant_host(name)
        assert t.numpy().tobytes() == np.ascontiguousarray(host).tobytes()
        # in a chunk, the zero padding to whole 16-byte units that a buffer of its own would hold
        end = t.offset + host.nbytes
        pad = -(-end // 16) * 16 - end
        if pad and t.buffer.nbytes > end:
            assert t.buffer.read(end, pad) == bytes(pad)


def test_a_released_model_makes_a_new_arena(rng):
    model, feeds, want = _model(rng)
    rep = Backend.prepare(model, "CPU")
    rep.run(feeds)
    first = rep.state.constant_arena
    rep.release()
    assert rep.state.constant_arena is None
    got = rep.run(feeds)
    assert rep.state.constant_arena is not first
    for k, g in enumerate(got):
        np.testing.assert_array_equal(g, want[f"y{k}"])
