"""A model's initializers read as views of the serialized model's own bytes.

protobuf's Python API hands out a bytes field as a new copy at each access: reading a model's
weights through `TensorProto.raw_data` copied all of them into fresh memory at its first run
(ResNet-50's 102 MB; with runtime/deferred_writes.py its warm first run on an H200 went from 0.210
to 0.112 s: benchmarks/RESULTS.md, cold_start). Where `prepare` got the model as bytes or as a
binary file (read into bytes once, as onnx.load does), those bytes are kept and each
initializer's raw_data is found in them by walking
the protobuf wire format (ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto.name = 8,
raw_data = 9); its values are then a read-only view, no copy. The onnxruntime plugin EP's graphs
keep the bytes their initializers were set from the same way (`FileWeights.of`). A model given as a
ModelProto, a reordered copy (graph.in_topological_order) or external data keep the copying path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import onnx

_TEXT_SUFFIXES = frozenset({".textproto", ".txtpb", ".pbtxt", ".prototxt", ".onnxjson", ".json", ".onnxtxt", ".onnxtext"})


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field of the message in buf[start:end]."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 0:
            pos = _varint(buf, pos)[1]
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            n, pos = _varint(buf, pos)
            yield key >> 3, pos, pos + n
            pos += n
        else:  # groups: no ONNX message has them
            raise ValueError(f"wire type {wire}")
    if pos != end:
        raise ValueError("a field runs past its message")


def raw_data_ranges(buf: bytes) -> dict[str, tuple[int, int]]:
    """Initializer name -> the byte range of its raw_data in `buf` (a serialized ModelProto); {}
    where the graph is written in more than one part (protobuf would merge them)."""
    graphs = [(s, e) for f, s, e in _fields(buf, 0, len(buf)) if f == 7]
    if len(graphs) != 1:
        return {}
    out: dict[str, tuple[int, int]] = {}
    for f, s, e in _fields(buf, *graphs[0]):
        if f != 5:
            continue
        name, raw = None, None
        for f2, s2, e2 in _fields(buf, s, e):  # the last of a repeated field wins, as in protobuf
            if f2 == 8:
                name = buf[s2:e2].decode("utf-8", "replace")
            elif f2 == 9:
                raw = (s2, e2)
        if name is not None and raw is not None:
            out[name] = raw
    return out


class FileWeights:
    """The raw_data of `proto`'s initializers as views of `data`, the bytes it was parsed from."""

    def __init__(self, data: bytes, proto: onnx.ModelProto) -> None:
        try:
            ranges = raw_data_ranges(data)
        except (ValueError, IndexError):  # (protobuf parsed it: not expected)
            ranges = {}
        view = memoryview(data)
        # each entry keeps its TensorProto: the view serves that very object alone
        self.views = {t.name: (t, view[r[0] : r[1]]) for t in proto.graph.initializer if (r := ranges.get(t.name))}

    @classmethod
    def of(cls, proto: onnx.ModelProto, raw: dict[str, bytes]) -> FileWeights:
        """Views of the bytes each initializer's raw_data was set from (`raw`, by name: the plugin
        EP's graph, kompute_dml/ort/graph.py), for `proto`'s own TensorProtos."""
        weights = cls.__new__(cls)
        weights.views = {t.name: (t, memoryview(raw[t.name])) for t in proto.graph.initializer if t.name in raw}
        return weights

    def raw(self, t: Any) -> memoryview | None:
        """`t.raw_data` without a copy, where `t` is one of the parsed model's initializers."""
        entry = self.views.get(t.name)
        return entry[1] if entry is not None and entry[0] is t else None


def load(model: Any) -> tuple[onnx.ModelProto, FileWeights | None]:
    """The ModelProto of bytes or of a binary model file, with its weights as views (as
    onnx.load / onnx.load_from_string read it, external data included); None for the weights
    where the model is text or not bytes."""
    if isinstance(model, (bytes, bytearray)):
        data = bytes(model)
        proto = onnx.load_from_string(data)
    elif os.path.splitext(str(model))[1].lower() in _TEXT_SUFFIXES:
        return onnx.load(str(model)), None
    else:
        with open(model, "rb") as f:
            data = f.read()
        proto = onnx.load_from_string(data)
        onnx.external_data_helper.load_external_data_for_model(proto, os.path.dirname(str(model)))
    weights = FileWeights(data, proto)
    return proto, weights if weights.views else None
