"""GPU peers for `kompute-dml bench`: PyTorch (CUDA) and CuPy, imported only when asked for.

Each peer builds a row's work on its own device and returns a `Make` (N -> a callable that
issues N launches, then synchronizes; see timing.py) and a check against the same numpy
reference as ours. What each row runs:

- identity / copy (packed, strided, transposed, broadcast source): torch `dst.copy_(view)`,
  CuPy `cupy.copyto(dst, view)`, into an existing array;
- DIAGONAL_MATRIX: offset 0 and value 1 `torch.eye(rows, cols, out=dst)`; otherwise
  `dst.zero_()` then `dst.diagonal(offset).fill_(value)` (two kernels; torch has no one-call
  equivalent); CuPy `dst.fill(0)` + `cupy.fill_diagonal` (offset 0 only);
- DIAGONAL_MATRIX1 with an input: `torch.triu/tril(x, k, out=dst)`; CuPy `cupy.triu/tril`
  (allocates its output); without an input (value above / below a diagonal, zeros
  elsewhere): torch `dst.fill_(value)` then `dst.triu_(k)` / `tril_(k)` (two kernels);
- MATRIX_MULTIPLY_INTEGER_TO_FLOAT (torch only): `torch._int_mm` (int8 x int8 -> int32, B
  column-major, cuBLASLt's fast layout; M padded to 32 when M <= 16, which _int_mm
  requires) as peer `torch_int_mm`; peer `torch` adds the dequantization ours does:
  out = s * (acc - zb * rowsum(A) - za * colsum(B) + K * za * zb) + bias with s = sa * sb,
  where colsum(B) is precomputed with B's layout (B is a weight, as onnxruntime pre-packs
  it), rowsum(A) is computed per call, and a uint8 A is flipped to int8 (x ^ 0x80) per call
  with its zero point moved by 128.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .harness import EAGER_RUN
from .timing import Make, interleaved, median, repeat, repeater

Ref = Callable[[], np.ndarray]  # the numpy reference of a row's output (computed once)


def cuda_torch() -> Any:
    """The torch module where it is installed and sees a CUDA device, else None (benchmarks' peer)."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


class GpuPeer:
    """Common shape of a GPU peer: where arrays live, how to wait, how a row's source view is
    taken. Subclasses add the operations they have an equivalent for."""

    name = "gpu"

    def put(self, a: np.ndarray) -> Any:
        raise NotImplementedError

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        raise NotImplementedError

    def to_numpy(self, x: Any) -> np.ndarray:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def broadcast(self, x: Any, shape: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def copy_step(self, src: Any, dst: Any) -> Callable[[], Any]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {}

    def release(self) -> None:
        """Give cached device memory back between rows (ours allocates from the same GPU)."""

    # -- the rows' work: a peer without an equivalent raises NotImplementedError (reported
    # in the row as that peer's error)
    def eye(self, shape: tuple[int, int], dtype: Any, offset: int, value: float, ref: Ref) -> tuple[Make, Callable[[], bool]]:
        raise NotImplementedError("no equivalent")

    def trilu(self, a: np.ndarray | None, shape: tuple[int, int], dtype: Any, upper: bool, k: int, value: Any,
              ref: Ref) -> tuple[Make, Callable[[], bool]]:
        raise NotImplementedError("no equivalent")

    def mmitf(self, a: np.ndarray, b: np.ndarray, sa: float, sb: float, za: int, zb: int, bias: np.ndarray | None,
              check_rows: np.ndarray, ref_rows: Ref) -> tuple[dict[str, Make], Callable[[], bool]]:
        raise NotImplementedError("no int8 matrix product with int32 accumulation")

    # -- shared ---------------------------------------------------------------------
    def batch(self, step: Callable[[], Any]) -> Make:
        return repeater(step, self.sync)

    def poisoned(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """An output that the work writes only in part starts as POISON (see cases.py)."""
        return self.put(np.full(shape, 99, dtype))

    def check(self, out: Any, ref: Ref) -> Callable[[], bool]:
        return lambda: bool(np.array_equal(self.to_numpy(out), ref()))

    def view(self, x: Any, kind: str, shape: tuple[int, ...]) -> Any:
        """The row's source: "packed" (x), "transpose" (x.T), "strided" (the first shape[1]
        columns of wider rows) or "broadcast" (a (1, cols) row repeated to shape)."""
        if kind == "transpose":
            return x.T
        if kind == "strided":
            return x[:, : shape[1]]
        if kind == "broadcast":
            return self.broadcast(x, shape)
        return x

    def copy(self, a: np.ndarray, kind: str, shape: tuple[int, ...], ref: Ref) -> tuple[Make, Callable[[], bool]]:
        src = self.view(self.put(a), kind, shape)
        dst = self.empty(shape, a.dtype)
        return self.batch(self.copy_step(src, dst)), self.check(dst, ref)

    def ceiling(self, nbytes: int, rounds: int) -> float:
        """GB/s (read + written) of the best of `rounds` samples of an nbytes copy."""
        src = self.put(np.ones(nbytes // 4, np.float32))
        dst = self.empty((nbytes // 4,), np.float32)
        fn = self.batch(self.copy_step(src, dst))(10)
        best = min(interleaved({"c": fn}, rounds)["c"])
        return 2 * nbytes / best / 1e9


class TorchPeer(GpuPeer):
    name = "torch"

    def __init__(self, device: str = "cuda") -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
            torch.zeros(1, device=self.device).add_(1)  # create the context now, not in a timed call
            self.sync()

    def put(self, a: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.torch.empty(shape, dtype=self.torch.from_numpy(np.empty(0, dtype)).dtype, device=self.device)

    def to_numpy(self, x: Any) -> np.ndarray:
        return x.cpu().numpy()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def broadcast(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.expand(*shape)

    def copy_step(self, src: Any, dst: Any) -> Callable[[], Any]:
        return lambda: dst.copy_(src)

    def release(self) -> None:
        if self.cuda:
            self.torch.cuda.empty_cache()

    def describe(self) -> dict[str, Any]:
        t = self.torch
        return {"torch": t.__version__, "torch_cuda": t.version.cuda, "torch_device": str(self.device),
                "torch_device_name": t.cuda.get_device_name(self.device) if self.cuda else "cpu"}

    def eye(self, shape: tuple[int, int], dtype: Any, offset: int, value: float, ref: Ref) -> tuple[Make, Callable[[], bool]]:
        dst = self.poisoned(shape, dtype)
        rows, cols = shape
        if offset == 0 and value == 1:
            step: Callable[[], Any] = lambda: self.torch.eye(rows, cols, out=dst)  # noqa: E731
        else:
            diag = dst.diagonal(offset)

            def step() -> None:
                dst.zero_()
                diag.fill_(value)
        return self.batch(step), self.check(dst, ref)

    def trilu(self, a: np.ndarray | None, shape: tuple[int, int], dtype: Any, upper: bool, k: int, value: Any,
              ref: Ref) -> tuple[Make, Callable[[], bool]]:
        dst = self.poisoned(shape, dtype)
        if a is not None:
            src = self.put(a)
            fn = self.torch.triu if upper else self.torch.tril
            step: Callable[[], Any] = lambda: fn(src, k, out=dst)  # noqa: E731
        else:
            def step() -> None:
                dst.fill_(value)
                if upper:
                    dst.triu_(k)
                else:
                    dst.tril_(k)
        return self.batch(step), self.check(dst, ref)

    def mmitf(self, a: np.ndarray, b: np.ndarray, sa: float, sb: float, za: int, zb: int, bias: np.ndarray | None,
              check_rows: np.ndarray, ref_rows: Ref) -> tuple[dict[str, Make], Callable[[], bool]]:
        """Peers `torch` (GEMM + dequantization, float32 out) and `torch_int_mm` (the GEMM)."""
        torch = self.torch
        m, k = a.shape
        n = b.shape[1]
        mp = m if m > 16 else 32
        flip = a.dtype == np.uint8
        a_pad = np.zeros((mp, k), a.dtype)
        a_pad[:m] = a
        a_dev = self.put(a_pad)
        a8 = self.empty((mp, k), np.int8) if flip else a_dev  # the flipped copy of a uint8 A
        b_cm = self.put(np.ascontiguousarray(b.T)).t()  # (K, N) with column-major strides
        zq = za - (128 if flip else 0)  # a - za == (a ^ 0x80 as int8) - (za - 128) for uint8 a
        s = float(np.float32(sa) * np.float32(sb))
        colsum = b.astype(np.int64).sum(0)
        col_term = s * (k * zq * zb - zq * colsum.astype(np.float64)) + (0.0 if bias is None else bias.astype(np.float64))
        col_dev = self.put(col_term.astype(np.float32))
        acc = self.empty((mp, n), np.int32)
        out = self.empty((m, n), np.float32)
        acc_m, a8_m, a8_u = acc[:m], a8[:m], a8.view(torch.uint8)
        row_scale = s * zb

        def gemm() -> None:
            torch._int_mm(a8, b_cm, out=acc)

        def full() -> None:
            if flip:
                torch.bitwise_xor(a_dev, 128, out=a8_u)
            gemm()
            torch.mul(acc_m, s, out=out)
            out.add_(col_dev)
            if zb:
                out.sub_(a8_m.sum(1, dtype=torch.int32).unsqueeze(1) * row_scale)

        rows_t = torch.from_numpy(check_rows).to(self.device)

        def check() -> bool:
            got = out.index_select(0, rows_t).cpu().numpy().astype(np.float64)
            return mm_close(got, ref_rows(), s, k)

        return {"torch": self.batch(full), "torch_int_mm": self.batch(gemm)}, check

    def latency(self, reps: int) -> dict[str, float]:
        """The GPU latency peers, medians like ours (harness.latency): a 64x64 float32 copy_ +
        synchronize, per call of EAGER_RUN back to back; 100 launches + one synchronize, per
        launch."""
        src = self.put(np.ones((64, 64), np.float32))
        dst = self.empty((64, 64), np.float32)
        step = self.copy_step(src, dst)
        s = interleaved({"eager": repeat(self.batch(step)(1), EAGER_RUN), "launch": self.batch(step)(100)}, reps, target=0)
        return {"torch_copy_synchronize_us": median(s["eager"]) * 1e6, "torch_per_launch_us": median(s["launch"]) * 1e6}


class ArrayModulePeer(GpuPeer):
    """A numpy-like array module as a peer: CuPy on a GPU (numpy itself runs the same code
    on the host, which the unit tests use)."""

    def __init__(self, xp: Any, name: str, sync: Callable[[], Any]) -> None:
        self.xp = xp
        self.name = name
        self._sync = sync

    @classmethod
    def cupy(cls) -> ArrayModulePeer:
        import cupy

        cupy.zeros(1).sum()  # create the context now
        return cls(cupy, "cupy", cupy.cuda.runtime.deviceSynchronize)

    def put(self, a: np.ndarray) -> Any:
        return self.xp.asarray(np.ascontiguousarray(a)).copy()

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.xp.empty(shape, dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return x.get() if hasattr(x, "get") else np.asarray(x)

    def sync(self) -> None:
        self._sync()

    def broadcast(self, x: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.broadcast_to(x, shape)

    def copy_step(self, src: Any, dst: Any) -> Callable[[], Any]:
        return lambda: self.xp.copyto(dst, src)

    def describe(self) -> dict[str, Any]:
        return {self.name: getattr(self.xp, "__version__", None)}

    def release(self) -> None:
        pool = getattr(self.xp, "get_default_memory_pool", None)
        if pool is not None:
            pool().free_all_blocks()

    def eye(self, shape: tuple[int, int], dtype: Any, offset: int, value: float, ref: Ref) -> tuple[Make, Callable[[], bool]]:
        if offset != 0:
            raise NotImplementedError("fill_diagonal writes the main diagonal only")
        dst = self.poisoned(shape, dtype)

        def step() -> None:
            dst.fill(0)
            self.xp.fill_diagonal(dst, value)
        return self.batch(step), self.check(dst, ref)

    def trilu(self, a: np.ndarray | None, shape: tuple[int, int], dtype: Any, upper: bool, k: int, value: Any,
              ref: Ref) -> tuple[Make, Callable[[], bool]]:
        if a is None:
            raise NotImplementedError("no one-call equivalent without an input")
        src = self.put(a)
        fn = self.xp.triu if upper else self.xp.tril
        last: list[Any] = [None]

        def step() -> None:
            last[0] = fn(src, k)
        step()
        return self.batch(step), lambda: bool(np.array_equal(self.to_numpy(last[0]), ref()))


def mm_close(got: np.ndarray, ref: np.ndarray, s: float, k: int) -> bool:
    """float32 results of int8 products against a float64 reference: within 1e-5 relative
    plus 1e-6 of the largest term a product can reach (s * K * 128 * 128), which leaves
    room for float32 rounding and catches any wrong element or layout."""
    atol = 1e-6 * abs(s) * k * 128 * 128 + 1e-5
    return bool(np.all(np.abs(got - ref) <= 1e-5 * np.abs(ref) + atol))


def once(fn: Callable[[], np.ndarray]) -> Ref:
    """A reference computed on first use and kept (ours and each peer compare with it)."""
    return functools.cache(fn)


def load_peers(names: list[str], torch_device: str) -> tuple[list[GpuPeer], dict[str, str]]:
    """The requested peers that can run here, and why the others cannot."""
    peers: list[GpuPeer] = []
    skipped: dict[str, str] = {}
    for name in names:
        try:
            peers.append(TorchPeer(torch_device) if name == "torch" else ArrayModulePeer.cupy())
        except Exception as e:  # ImportError, no CUDA device, a broken driver: skip, say why
            skipped[name] = f"{type(e).__name__}: {e}"
    return peers, skipped

