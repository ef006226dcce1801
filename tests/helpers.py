"""Shared test utilities: random layouts, poisoned outputs with guard bytes, byte checks."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

import kompute_dml as kdml
from kompute_dml.core.layout import element_offsets
from kompute_dml.core.tensor_desc import packed_strides

ALL_TYPES = list(kdml.DataType)


def random_values(rng: np.random.Generator, dt: kdml.DataType, shape: Sequence[int]) -> np.ndarray:
    """Random elements covering the type's range, with edge values mixed in."""
    npd = dt.numpy_dtype
    n = math.prod(shape)
    if dt.is_float:
        vals = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
        edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(npd).max, np.finfo(npd).tiny], npd)
        out = vals.astype(npd)
    else:
        info = np.iinfo(npd)
        out = rng.integers(info.min, info.max, size=n, dtype=npd, endpoint=True)
        edges = np.array([info.min, info.max, 0, 1], npd)
    k = min(n, len(edges))
    if k:
        pos = rng.choice(n, size=k, replace=False)
        out[pos] = edges[:k]
    return out.reshape(shape)


def random_strides(
    rng: np.random.Generator, sizes: Sequence[int], *, allow_broadcast: bool, max_gap: int = 3
) -> tuple[int, ...]:
    """Non-overlapping strides in a random dimension order with random gaps; optionally
    some broadcast (stride 0) dimensions (inputs only)."""
    order = rng.permutation(len(sizes))
    strides = [0] * len(sizes)
    acc = 1
    for d in order[::-1]:  # innermost first
        if allow_broadcast and rng.random() < 0.2:
            strides[d] = 0
            continue
        strides[d] = acc * int(rng.integers(1, max_gap + 1)) if rng.random() < 0.5 else acc
        acc = strides[d] * sizes[d]
    return tuple(strides)


def place(
    dev: kdml.Device,
    rng: np.random.Generator,
    desc: kdml.TensorDesc,
    values: np.ndarray | None = None,
    *,
    guard: int | None = None,
) -> tuple[kdml.Tensor, bytes]:
    """A tensor of `desc` at a random 16-byte-aligned offset in a buffer of random bytes,
    with guard bytes after it; the elements are set to `values` if given.
    Returns the tensor and the buffer's bytes before any operator ran."""
    align = max(16, desc.guaranteed_base_offset_alignment or 0)
    offset = int(rng.integers(0, 8)) * align
    guard = int(rng.integers(1, 64)) if guard is None else guard
    nbytes = offset + desc.byte_size + guard
    init = rng.integers(0, 256, nbytes, dtype=np.uint8)
    if values is not None:
        init = write_elements(init, offset, desc, values)
    buf = dev.buffer(init.tobytes())
    return kdml.Tensor(buf, desc, offset), init.tobytes()


def element_byte_positions(offset: int, desc: kdml.TensorDesc) -> np.ndarray:
    size = desc.data_type.size
    offs = element_offsets(desc.sizes, desc.effective_strides) * size + offset
    return (offs[:, None] + np.arange(size)[None, :]).reshape(-1)


def write_elements(raw: np.ndarray, offset: int, desc: kdml.TensorDesc, values: np.ndarray) -> np.ndarray:
    raw = raw.copy()
    vals = np.ascontiguousarray(np.broadcast_to(values, desc.sizes), dtype=desc.data_type.numpy_dtype)
    pos = element_byte_positions(offset, desc)
    raw[pos] = np.frombuffer(vals.tobytes(), dtype=np.uint8)  # broadcast strides: last write wins, same values
    return raw


def poison_against(t: kdml.Tensor, expected: np.ndarray, rng: np.random.Generator) -> bytes:
    """Set every output element to bytes that differ from the expected ones (so an element
    the operator forgets to write is always caught); returns the buffer's new bytes."""
    raw = np.frombuffer(t.buffer.read(), dtype=np.uint8).copy()
    pos = element_byte_positions(t.offset, t.desc)
    exp = np.frombuffer(np.ascontiguousarray(expected, dtype=t.desc.data_type.numpy_dtype).tobytes(), np.uint8)
    raw[pos] = exp ^ rng.integers(1, 256, exp.size, dtype=np.uint8)
    t.buffer.write(raw.tobytes())
    return raw.tobytes()


def assert_outside_unchanged(t: kdml.Tensor, before: bytes) -> np.ndarray:
    """Every byte of t's buffer that is not one of t's elements is as in `before`;
    returns the buffer's bytes now."""
    after = np.frombuffer(t.buffer.read(), dtype=np.uint8)
    prior = np.frombuffer(before, dtype=np.uint8)
    mask = np.ones(after.size, bool)
    mask[element_byte_positions(t.offset, t.desc)] = False
    changed = np.nonzero((after != prior) & mask)[0]
    assert changed.size == 0, f"{changed.size} bytes outside the output changed, first at {changed[:8]}"
    return after


def assert_output(t: kdml.Tensor, before: bytes, expected: np.ndarray) -> None:
    """Elements bitwise equal to `expected`; every other byte of the buffer unchanged."""
    after = assert_outside_unchanged(t, before)
    got = read_logical(after, t.offset, t.desc)
    exp = np.ascontiguousarray(np.broadcast_to(expected, t.desc.sizes), dtype=t.desc.data_type.numpy_dtype)
    gb = got.view(f"u{got.dtype.itemsize}")
    eb = exp.view(f"u{exp.dtype.itemsize}")
    bad = np.argwhere(gb != eb)
    assert bad.size == 0, f"{len(bad)} elements differ, first at {bad[:4].tolist()}: got {got[tuple(bad[0])]} want {exp[tuple(bad[0])]}"


def read_logical(raw: bytes | np.ndarray, offset: int, desc: kdml.TensorDesc) -> np.ndarray:
    """The tensor `desc` describes at byte `offset` of `raw`, read with numpy only."""
    buf = np.frombuffer(bytes(raw) if not isinstance(raw, np.ndarray) else raw.tobytes(), dtype=np.uint8)
    size = desc.data_type.size
    pos = element_offsets(desc.sizes, desc.effective_strides) * size + offset
    gathered = buf[(pos[:, None] + np.arange(size)[None, :]).reshape(-1)]
    return gathered.view(desc.data_type.numpy_dtype).reshape(desc.sizes).copy()


__all__ = [
    "ALL_TYPES",
    "assert_output",
    "assert_outside_unchanged",
    "element_byte_positions",
    "packed_strides",
    "place",
    "poison_against",
    "random_strides",
    "random_values",
    "read_logical",
    "write_elements",
]


def identity_op(dev: kdml.Device, sizes: Sequence[int] = (8, 8)) -> tuple[object, kdml.TensorDesc]:
    """A compiled packed FLOAT32 ACTIVATION_IDENTITY of `sizes` and its tensor descriptor."""
    desc = kdml.TensorDesc(kdml.DataType.FLOAT32, tuple(sizes))
    return dev.compile(kdml.ActivationIdentityDesc(desc, desc)), desc


def compile_at_level(level: kdml.FeatureLevel, desc: object) -> None:
    """Compile `desc` on a device made at feature level `level` (closed after): raises what
    the compile raises."""
    with kdml.Device(feature_level=level) as d:
        d.compile(desc)


def force_kernel(monkeypatch, dev, kernel: str) -> None:
    """Force the matrix-product family on `dev` for one test ("auto": none), as KDML_MATMUL_KERNEL
    does when a device is made (the policy reads it once: setting it later changes nothing)."""
    import dataclasses

    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, matmul_kernel=kernel))


def direct_kernel(monkeypatch, kernel: str) -> None:
    """Force CONVOLUTION's kernel for one test: "direct-rows" is the direct kernel with its row
    variants for every size (ops/conv_direct.py), "direct" with one output per invocation; any other
    name as KDML_CONV_KERNEL takes it."""
    monkeypatch.setenv("KDML_CONV_KERNEL", "direct" if kernel == "direct-rows" else kernel)
    monkeypatch.setattr("kompute_dml.ops.conv_direct.direct_rows", lambda *args: kernel == "direct-rows")


@functools.cache
def ablation_overlay():  # type: ignore[no-untyped-def]
    """benchmarks/overlay_ablation.py (the benchmark-only ablation kernels)."""
    import benchmarks.overlay_ablation

    return benchmarks.overlay_ablation


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per-row cosine similarity over the last axis, in float64 (model outputs against a reference)."""
    g, w = (np.asarray(a).reshape(-1, np.shape(a)[-1]).astype(np.float64) for a in (got, want))
    return (g * w).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1))


def compiled_variants(desc_prefix: str, device) -> set[str]:
    """The first dispatch's variant of every operator the helpers compiled on `device` (kompute_dml.functional's
    compile cache, Device.caches["compiled"]) whose descriptor class name starts with desc_prefix."""
    return {op.plans[0].variant for op in device.caches.get("compiled", {}).values()
            if type(op.desc).__name__.startswith(desc_prefix)}
