"""The rows of `kompute-dml bench`: one factory per operator, and the lists of rows.

A factory builds one row's tensors, ours (compiled once, bound tensors), its peers and its
checks; rows are built one at a time, so that only one row's buffers exist at once.
`suite` is the CPU-sized list (the same rows on every device); `gpu_rows` adds 64 MiB to
1 GiB memory-bound rows and large matrix products for GPU devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cpu_peers import ort_mmitf, ort_node
from .gpu_peers import GpuPeer, mm_close, once
from .harness import Case
from .timing import Make

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Larger arrays repeat a random block: drawing 1 GiB of normals takes seconds per row. The
# block's element count is prime, so that its repeats do not line up with rows.
TILE_ABOVE = 1 << 24
_BLOCK = 4_194_301
CHECK_ROWS = 64  # matrix products are checked on this many random rows (a float64 reference)


@dataclass
class Env:
    """What every factory needs: the package, the device, random numbers, which peers run."""

    kdml: Any
    dev: Any
    rng: np.random.Generator
    ort: bool = False  # onnxruntime peers
    cpu_peers: bool = True  # numpy and onnxruntime peers (not on the GPU-sized rows)
    gpu: list[GpuPeer] = field(default_factory=list)


@dataclass
class RowSpec:
    label: str
    op: str
    dtype: str
    shape: tuple[int, ...]
    metric: str
    make: Callable[[], Case]


def fmt_shape(shape: tuple[int, ...] | list[int]) -> str:
    return "x".join(str(s) for s in shape)


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    if int(np.prod(shape)) > TILE_ABOVE:
        return np.resize(rand(rng, (_BLOCK,), dt), shape)
    if dt.kind == "f":
        return rng.standard_normal(shape, dtype=np.float32).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def recorded(dev: Any, op: Any, ins: list[Any], outs: list[Any]) -> Make:
    """Ours as N executions in one `dev.record()` (the recording's kp sequence is cached,
    so a repeated call replays it)."""
    def make(n: int) -> Callable[[], None]:
        def run() -> None:
            with dev.record() as r:
                for _ in range(n):
                    r.execute(op, ins, outs)
        return run
    return make


def executions(dev: Any, op: Any, ins: list[Any], outs: list[Any]) -> Callable[[int], None]:
    """run(n): n executions of `op` in one `dev.record()`, execution i writing outs[i % len(outs)]
    (a tensor, or a list: every output binding of an operator with several) (timing.slopes' form
    of a contender)."""
    def run(n: int) -> None:
        with dev.record() as rec:
            for i in range(n):
                o = outs[i % len(outs)]
                rec.execute(op, ins, o if isinstance(o, list) else [o])
    return run


POISON = 99  # outputs that an operator writes only in part start as this, so that a missed write shows


def poisoned(dev: Any, shape: tuple[int, ...], dt: np.dtype) -> Any:
    return dev.tensor(np.full(shape, POISON, dt))


def _bytes_equal(y: Any, ref: np.ndarray) -> bool:
    return bool(np.array_equal(y.numpy().view(np.uint8), np.ascontiguousarray(ref).view(np.uint8)))


def _add_gpu(env: Env, case: Case, build: Callable[[GpuPeer], tuple[Make, Callable[[], bool]]]) -> None:
    """Each GPU peer builds its half of the row; one that has no equivalent (or fails to
    build it) is reported in the row, not fatal."""
    for g in env.gpu:
        try:
            make, chk = build(g)
        except Exception as e:
            case.peer_errors[g.name] = f"{type(e).__name__}: {e}"
            continue
        case.gpu_peers[g.name] = make
        case.peer_checks[g.name] = chk


# ---- memory-bound rows ---------------------------------------------------------------
def identity_case(env: Env, dtname: str, shape: tuple[int, ...]) -> Case:
    kdml, dev = env.kdml, env.dev
    dt = np.dtype(dtname)
    a = rand(env.rng, shape, dt)
    x = dev.tensor(a)
    y = dev.empty(x.desc)
    op = dev.compile(kdml.ActivationIdentityDesc(x.desc, y.desc))
    case = Case("ACTIVATION_IDENTITY", dt.name, shape, "GB/s", 2 * a.nbytes,
                ours=lambda: op.execute([x], [y]), eager=lambda: kdml.identity(x),
                check=lambda: _bytes_equal(y, a), ours_batch=recorded(dev, op, [x], [y]))
    if env.cpu_peers:
        b = np.empty_like(a)
        case.peers["numpy"] = lambda: np.copyto(b, a)
        if env.ort:
            case.peers["ort"] = ort_node("Identity", {"x": a}, shape, dt)
    _add_gpu(env, case, lambda g: g.copy(a, "packed", shape, lambda: a))
    return case


COPY_SUFFIX = {"packed": "", "transpose": " (transpose)", "strided": " (strided)", "broadcast": " (broadcast)"}
STRIDE_PAD = 64  # elements added to each source row of the strided copy


def copy_case(env: Env, dtname: str, shape: tuple[int, int], kind: str = "packed") -> Case:
    """COPY into a packed `shape` output from a source that is packed, the transpose of a
    packed (cols, rows) array, the first cols of rows STRIDE_PAD wider, or one row repeated
    (stride 0)."""
    kdml, dev = env.kdml, env.dev
    dt = np.dtype(dtname)
    rows, cols = shape
    storage = {"packed": shape, "transpose": (cols, rows), "strided": (rows, cols + STRIDE_PAD), "broadcast": (1, cols)}[kind]
    a = rand(env.rng, storage, dt)
    t = dev.tensor(a)
    strides = {"packed": None, "transpose": (1, rows), "strided": (cols + STRIDE_PAD, 1), "broadcast": (0, 1)}[kind]
    x = t if strides is None else kdml.Tensor(t.buffer, kdml.TensorDesc(t.desc.data_type, shape, strides))
    views: dict[str, Callable[[], np.ndarray]] = {"packed": lambda: a, "transpose": lambda: a.T,
                                                  "strided": lambda: a[:, :cols], "broadcast": lambda: np.broadcast_to(a, shape)}
    ref = views[kind]()
    y = dev.empty(kdml.TensorDesc(t.desc.data_type, shape))
    op = dev.compile(kdml.CopyDesc(x.desc, y.desc))
    out_bytes = rows * cols * dt.itemsize
    case = Case("COPY" + COPY_SUFFIX[kind], dt.name, shape, "GB/s", out_bytes + min(out_bytes, a.nbytes),
                ours=lambda: op.execute([x], [y]), eager=lambda: kdml.copy(x),
                check=lambda: _bytes_equal(y, ref), ours_batch=recorded(dev, op, [x], [y]),
                note="bytes = source elements read + output written")
    if env.cpu_peers:
        b = np.empty(shape, dt)
        case.peers["numpy"] = lambda: np.copyto(b, ref)
    _add_gpu(env, case, lambda g: g.copy(a, kind, shape, lambda: ref))
    return case


def eye_ref(shape: tuple[int, int], dt: np.dtype, offset: int, value: float) -> np.ndarray:
    r = np.zeros(shape, dt)
    i = np.arange(max(0, -offset), min(shape[0], shape[1] - offset))
    r[i, i + offset] = value
    return r


def diag_name(offset: int, value: float) -> str:
    return "DIAGONAL_MATRIX" + ("" if offset == 0 and value == 1.0 else f" (offset {offset}, value {value:g})")


def trilu_name(upper: bool, with_input: bool, value: Any) -> str:
    return f"DIAGONAL_MATRIX1 ({'triu' if upper else 'tril'}{'' if with_input else f', no input, value {value}'})"


def diagonal_case(env: Env, dtname: str, shape: tuple[int, int], offset: int = 0, value: float = 1.0) -> Case:
    kdml, dev = env.kdml, env.dev
    dt = np.dtype(dtname)
    ddt = kdml.DataType.from_numpy(dt)
    desc = kdml.TensorDesc(ddt, shape)
    y = poisoned(dev, shape, dt)
    op = dev.compile(kdml.DiagonalMatrixDesc(desc, offset, value))
    plain = offset == 0 and value == 1.0
    if plain:
        eager = lambda: kdml.eye_like(shape, data_type=ddt)  # noqa: E731
    else:
        eager = lambda: kdml.diagonal_matrix(shape, offset=offset, value=value, data_type=ddt)  # noqa: E731
    ref = once(lambda: eye_ref(shape, dt, offset, value))
    case = Case(diag_name(offset, value), dt.name, shape, "GB/s",
                shape[0] * shape[1] * dt.itemsize, ours=lambda: op.execute([], [y]), eager=eager,
                check=lambda: bool(np.array_equal(y.numpy(), ref())), ours_batch=recorded(dev, op, [], [y]),
                note="bytes = output written")
    if env.cpu_peers and plain:
        b = np.empty(shape, dt)

        def np_eye() -> None:
            b.fill(0)
            np.fill_diagonal(b, 1)
        case.peers["numpy"] = np_eye
        if env.ort:
            case.peers["ort"] = ort_node("EyeLike", {"x": np.zeros(shape, dt)}, shape, dt)
    _add_gpu(env, case, lambda g: g.eye(shape, dt, offset, value, ref))
    return case


def trilu_case(env: Env, dtname: str, shape: tuple[int, int], upper: bool, with_input: bool = True, value: Any = 0) -> Case:
    """DIAGONAL_MATRIX1 as triu / tril (k = 0) of an input; without an input, `value` on and
    above (triu) or on and below (tril) the diagonal and zeros elsewhere (a mask)."""
    kdml, dev = env.kdml, env.dev
    dt = np.dtype(dtname)
    npf = np.triu if upper else np.tril
    if with_input:
        src = rand(env.rng, shape, dt)
        a: np.ndarray | None = src
        x = dev.tensor(src)
        begin, end = (INT32_MIN, 0) if upper else (1, INT32_MAX)  # value (0) outside the kept triangle
        ref = once(lambda: npf(src))
    else:
        a, x = None, None
        begin, end = (0, INT32_MAX) if upper else (INT32_MIN, 1)  # value inside the triangle
        ref = once(lambda: npf(np.full(shape, value, dt)))
    y = poisoned(dev, shape, dt)
    op = dev.compile(kdml.DiagonalMatrix1Desc(x.desc if x is not None else None, y.desc, y.desc.data_type, value, begin, end))
    if x is not None:
        fn = kdml.triu if upper else kdml.tril
        eager = lambda: fn(x)  # noqa: E731
    else:
        eager = lambda: kdml.diagonal_matrix1(sizes=shape, data_type=y.desc.data_type, value=value,  # noqa: E731
                                              diagonal_fill_begin=begin, diagonal_fill_end=end)
    nbytes = shape[0] * shape[1] * dt.itemsize
    case = Case(trilu_name(upper, with_input, value), dt.name, shape, "GB/s",
                nbytes * (2 if with_input else 1), ours=lambda: op.execute([x], [y]), eager=eager,
                check=lambda: bool(np.array_equal(y.numpy(), ref())), ours_batch=recorded(dev, op, [x], [y]),
                note="numpy allocates its output" if with_input else "bytes = output written")
    if env.cpu_peers and a is not None:
        case.peers["numpy"] = lambda: npf(a)
        if env.ort:
            case.peers["ort"] = ort_node("Trilu", {"x": a}, shape, dt, upper=int(upper))
    _add_gpu(env, case, lambda g: g.trilu(a, shape, dt, upper, 0, value, ref))
    return case


# ---- MATRIX_MULTIPLY_INTEGER_TO_FLOAT ------------------------------------------------------
def matmul_case(env: Env, a_dtname: str, mkn: tuple[int, int, int], full: bool = False) -> Case:
    """int8 / uint8 A (M, K) x int8 B (K, N) -> float32 with per-tensor scales; `full` adds
    per-tensor zero points and an ONNX (N,) bias (a stride-0 view over N values)."""
    kdml, dev = env.kdml, env.dev
    D = kdml.DataType
    m, k, n = mkn
    a_dt = np.dtype(a_dtname)
    a, b = rand(env.rng, (m, k), a_dt), rand(env.rng, (k, n), np.int8)
    sa, sb = 0.02, 0.03
    za, zb = ((128 if a_dt == np.uint8 else 3), -2) if full else (0, 0)
    bias = env.rng.standard_normal(n).astype(np.float32) if full else None
    rows = np.sort(env.rng.choice(m, size=min(m, CHECK_ROWS), replace=False))
    s = float(np.float32(sa)) * float(np.float32(sb))

    def ref_rows() -> np.ndarray:
        r = (a[rows].astype(np.float64) - za) @ (b.astype(np.float64) - zb) * s
        return r + bias if bias is not None else r
    ref = once(ref_rows)
    case = Case("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", f"{a_dt.name}x int8" + (", zp, bias" if full else ""), mkn, "GOPS",
                2.0 * m * n * k, ours=None, memory_bound=False,
                note="numpy peer: float32 matmul" if env.cpu_peers else "")
    try:
        A, B = dev.tensor(a), dev.tensor(b)
        ins = [A, dev.tensor(np.array([[sa]], np.float32)), dev.tensor(np.array([[za]], a_dt)) if full else None,
               B, dev.tensor(np.array([[sb]], np.float32)), dev.tensor(np.array([[zb]], np.int8)) if full else None,
               None]
        bias_desc = None
        if bias is not None:
            bias_desc = kdml.TensorDesc(D.FLOAT32, (m, n), (0, 1))
            ins[6] = kdml.Tensor(dev.tensor(bias).buffer, bias_desc)
        out = dev.empty(kdml.TensorDesc(D.FLOAT32, (m, n)))
        desc = kdml.MatrixMultiplyIntegerToFloatDesc(*(t.desc if t is not None else None for t in ins), out.desc)
        op = dev.compile(desc)
        case.ours = lambda: op.execute(ins, [out])
        case.ours_batch = recorded(dev, op, ins, [out])
        case.check = lambda: mm_close(out.numpy()[rows].astype(np.float64), ref(), s, k)
    except Exception as e:  # ours unavailable for this row: the peers' figures still stand
        case.ours, case.ours_batch = None, None
        case.error = f"{type(e).__name__}: {e}"
    if case.ours is not None:
        zp = {"a_zero_point": np.array(za, a_dt), "b_zero_point": np.array(zb, np.int8)} if full else {}
        try:
            kdml.matmul_integer_to_float(A, B, a_scale=sa, b_scale=sb, bias=bias, **zp)
            case.eager = lambda: kdml.matmul_integer_to_float(A, B, a_scale=sa, b_scale=sb, bias=bias, **zp)
        except Exception:  # the functional helper's own limits: the row keeps ours without eager
            case.eager = None
    if env.cpu_peers:
        af, bf = a.astype(np.float32), b.astype(np.float32)
        cf = np.empty((m, n), np.float32)
        case.peers["numpy"] = lambda: np.matmul(af, bf, out=cf)
        if env.ort and not full:
            case.peers["ort"] = ort_mmitf(a, b, sa, sb)
    for g in env.gpu:
        try:
            makes, chk = g.mmitf(a, b, sa, sb, za, zb, bias, rows, ref)
        except Exception as e:
            case.peer_errors[g.name] = f"{type(e).__name__}: {e}"
            continue
        case.gpu_peers.update(makes)
        case.peer_checks[g.name] = chk
    return case


# ---- lists of rows --------------------------------------------------------------------
def _spec(env: Env, op: str, dtname: str, shape: tuple[int, ...], fn: Callable[..., Case], *args: Any, **kw: Any) -> RowSpec:
    metric = "GOPS" if op.startswith("MATRIX_MULTIPLY") else "GB/s"
    return RowSpec(f"{op} {dtname} {fmt_shape(shape)}", op, dtname, shape, metric, lambda: fn(env, *args, **kw))


def suite(env: Env, quick: bool) -> list[RowSpec]:
    """The rows every device runs (sized for a CPU device's memory and time)."""
    mib64 = (4096, 4096)
    out: list[RowSpec] = []
    ident = [("float32", (64, 64)), ("float32", (512, 512))] if quick else [
        ("float32", (64, 64)), ("float32", (1024, 1024)), ("float32", mib64), ("float16", (1024, 1024)), ("float16", mib64)]
    out += [_spec(env, "ACTIVATION_IDENTITY", d, s, identity_case, d, s) for d, s in ident]
    cp = [("int8", (512, 512), "packed"), ("float32", (256, 256), "transpose")] if quick else [
        ("float32", mib64, "packed"), ("uint8", (8192, 8192), "packed"), ("int8", (1024, 1024), "packed"),
        ("float32", (2048, 2048), "transpose")]
    out += [_spec(env, "COPY" + COPY_SUFFIX[kind], d, s, copy_case, d, s, kind) for d, s, kind in cp]
    sz = [(64, 64), (512, 512)] if quick else [(64, 64), (1024, 1024), mib64]
    diag = [("float32", s) for s in sz] + ([] if quick else [("float16", mib64)])
    out += [_spec(env, "DIAGONAL_MATRIX", d, s, diagonal_case, d, s) for d, s in diag]
    tri = [("float32", s, True) for s in sz] + ([] if quick else [("float32", mib64, False)])
    out += [_spec(env, trilu_name(u, True, 0), d, s, trilu_case, d, s, u) for d, s, u in tri]
    for n in [128] if quick else [256, 1024]:
        for a_dt in ("int8", "uint8"):
            out.append(_spec(env, "MATRIX_MULTIPLY_INTEGER_TO_FLOAT", a_dt, (n, n, n), matmul_case, a_dt, (n, n, n)))
    return out


def gpu_rows(env: Env, quick: bool) -> list[RowSpec]:
    """64 MiB to 1 GiB memory-bound rows and the matrix products of a GPU (issue 14's list),
    with the GPU peers only (the CPU peers would take seconds per call at these sizes)."""
    g = dataclasses.replace(env, cpu_peers=False)
    k4, k8, k16 = (4096, 4096), (8192, 8192), (16384, 16384)
    out: list[RowSpec] = []
    ident = [("float32", k4)] if quick else [("float32", k4), ("float32", k8), ("float32", k16), ("float16", (16384, 32768))]
    out += [_spec(g, "ACTIVATION_IDENTITY", d, s, identity_case, d, s) for d, s in ident]
    cp = [("int8", k8, "packed"), ("float32", k4, "transpose"), ("float32", (4096, 4000), "strided"),
          ("float32", k4, "broadcast")]
    if not quick:
        cp += [("int8", (32768, 32768), "packed"), ("float32", k8, "transpose"), ("float32", (8192, 8128), "strided"),
               ("float32", k16, "broadcast")]
    out += [_spec(g, "COPY" + COPY_SUFFIX[kind], d, s, copy_case, d, s, kind) for d, s, kind in cp]
    diag = [("float32", k4, 0, 1.0), ("float32", k4, 7, 2.5)]
    if not quick:
        diag += [("float32", k16, 0, 1.0), ("int8", k16, 0, 1.0), ("float32", k8, 7, 2.5)]
    out += [_spec(g, diag_name(o, v), d, s, diagonal_case, d, s, o, v) for d, s, o, v in diag]
    tri = [("float32", k4, True, True), ("float32", k4, True, False)]
    if not quick:
        tri += [("float32", k16, True, True), ("float32", k8, False, True), ("int8", k16, True, True),
                ("int64", k8, True, True), ("float32", k8, True, False)]
    out += [_spec(g, trilu_name(u, w, 0 if w else 1), d, s, trilu_case, d, s, u, w, 0 if w else 1) for d, s, u, w in tri]
    mm = [(1024, 1024, 1024), (16, 4096, 4096)] if quick else [
        (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
        (512, 384, 1536), (128, 384, 1536), (16, 4096, 4096)]
    out += [_spec(g, "MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "int8", s, matmul_case, "int8", s, True) for s in mm]
    return out
