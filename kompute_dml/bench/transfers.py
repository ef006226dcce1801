"""`kompute-dml bench` sections for what surrounds the kernels (issue 22): host <-> device
transfers beside PyTorch's pageable and pinned copies, and first calls (new buffers, a new
shape, a functional helper call) beside the same call repeated.

Each figure is the median of `rounds` samples; peers run in the same rounds, interleaved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .timing import median, once, series

MiB = 1 << 20


STEADY_CALLS = 301  # samples of the helper rows (first_calls)


def _median_seconds(fn: Callable[[], object], rounds: int, warm: int = 1) -> float:
    return median(series(fn, rounds, warmup=warm))


def _torch_copies(nbytes: int, device: str) -> dict[str, Callable[[], object]] | None:
    try:
        import torch
    except ImportError:
        return None
    if device.startswith("cuda") and not torch.cuda.is_available():
        return None
    dev = torch.device(device)
    host = torch.from_numpy(np.ones(nbytes, np.uint8))
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    back = torch.empty(nbytes, dtype=torch.uint8)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out: dict[str, Callable[[], object]] = {
        "upload": lambda: (gpu.copy_(host), sync()),
        "download": lambda: (back.copy_(gpu), sync()),
    }
    if dev.type == "cuda":
        pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        out["upload pinned"] = lambda: (gpu.copy_(pinned, non_blocking=True), sync())
        out["download pinned"] = lambda: (pinned.copy_(gpu, non_blocking=True), sync())
    return out


def _copies(dev: Any, rounds: int, nbytes: int, torch_device: str | None) -> list[dict[str, Any]]:
    data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    buf = dev.buffer(nbytes)
    back = np.empty_like(data)
    pinned = dev.host_array(nbytes)
    pinned[:] = data
    ours: dict[str, Callable[[], object]] = {
        "upload": lambda: buf.write(data),
        "download": lambda: buf.read_into(back),
        "upload pinned": lambda: buf.write(pinned),
        "download pinned": lambda: buf.read_into(pinned),
    }
    peer = _torch_copies(nbytes, torch_device) if torch_device else None
    rows = []
    for name, fn in ours.items():
        row: dict[str, Any] = {"what": f"{name} {nbytes >> 20} MiB", "ours_gbps": nbytes / _median_seconds(fn, rounds) / 1e9}
        if peer and name in peer:
            row["torch_gbps"] = nbytes / _median_seconds(peer[name], rounds) / 1e9
            row["ratio"] = row["ours_gbps"] / row["torch_gbps"]
        rows.append(row)
    if not (np.array_equal(back, data) and np.array_equal(pinned, data)):
        raise AssertionError("a download returned other bytes than were uploaded")
    return rows


def transfers(kdml: Any, dev: Any, rounds: int, nbytes: int = 64 * MiB, torch_device: str | None = None) -> list[dict[str, Any]]:
    """Upload / download of `nbytes` (numpy, and Device.host_array for the pinned rows) and a
    4 KiB write into a 256 MiB buffer (also after an operator wrote it), beside torch."""
    nbytes = min(nbytes, dev.limits["max_storage_buffer_range"] >> 20 << 20)
    rows = _copies(dev, rounds, nbytes, torch_device)
    big_n = min(256 * MiB, dev.limits["max_storage_buffer_range"] >> 20 << 20)
    big = dev.buffer(big_n)
    small = np.ones(4096, np.uint8)
    rows.append({"what": f"4 KiB write into {big_n >> 20} MiB", "ours_us": 1e6 * _median_seconds(lambda: big.write(small, 8192), rounds)})
    desc = kdml.TensorDesc(kdml.DataType.FLOAT32, (big_n // 4,))
    op = dev.compile(kdml.ActivationIdentityDesc(desc, desc))
    src = kdml.Tensor(dev.buffer(big_n), desc)

    def after_op() -> float:
        op.execute([src], [kdml.Tensor(big, desc)])
        return once(lambda: big.write(small, 8192))

    rows.append({"what": f"4 KiB write into {big_n >> 20} MiB after an operator wrote it",
                 "ours_us": 1e6 * median(after_op() for _ in range(rounds))})
    return rows


def _mm_desc(kdml: Any, m: int, k: int, n: int) -> Any:
    dt = kdml.DataType
    f32 = kdml.TensorDesc(dt.FLOAT32, (1, 1, 1, 1))
    return kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(dt.INT8, (1, 1, m, k)), f32, None, kdml.TensorDesc(dt.INT8, (1, 1, k, n)), f32, None, None,
        kdml.TensorDesc(dt.FLOAT32, (1, 1, m, n)),
    )


def first_calls(kdml: Any, dev: Any, rounds: int) -> list[dict[str, Any]]:
    """Microseconds of a first call against the same call repeated (steady)."""
    rng = np.random.default_rng(1)
    k, n = 384, 1536

    def bound(m: int) -> tuple[list[Any], list[Any]]:
        a = dev.tensor(rng.integers(-128, 128, (1, 1, m, k), dtype=np.int8))
        b = dev.tensor(rng.integers(-128, 128, (1, 1, k, n), dtype=np.int8))
        s = dev.tensor(np.array([[[[0.5]]]], np.float32))
        out = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, m, n)))
        return [a, s, None, b, s, None, None], [out]

    rows = []
    op = dev.compile(_mm_desc(kdml, 512, k, n))
    ins, outs = bound(512)
    steady = _median_seconds(lambda: op.execute(ins, outs), rounds)
    fresh = [bound(512) for _ in range(rounds)]
    it = iter(fresh)
    first = _median_seconds(lambda: op.execute(*next(it)), rounds, warm=0)
    rows.append({"what": f"matmul 512x{k}x{n}: first execute on new buffers", "first_us": first * 1e6, "steady_us": steady * 1e6})
    ms = iter(range(520, 520 + 8 * rounds, 8))

    def new_shape() -> float:
        m = next(ms)
        i, o = bound(m)
        return once(lambda: dev.compile(_mm_desc(kdml, m, k, n)).execute(i, o))

    rows.append({"what": f"matmul new M x{k}x{n}: compile + first execute",
                 "first_us": median(new_shape() for _ in range(rounds)) * 1e6, "steady_us": steady * 1e6})
    a = dev.tensor(rng.integers(-128, 128, (64, 64), dtype=np.int8))
    b = dev.tensor(rng.integers(-128, 128, (64, 64), dtype=np.int8))
    s1, s2 = dev.tensor(np.array([0.5], np.float32)), dev.tensor(np.array([0.25], np.float32))
    # the floor under the helper: its operator (2-D int8, one-element scales as {1,1} views)
    # compiled and executed directly on the same tensors
    dt, i8 = kdml.DataType, kdml.TensorDesc(kdml.DataType.INT8, (64, 64))
    one = kdml.TensorDesc(dt.FLOAT32, (1, 1), (0, 0))
    op64 = dev.compile(kdml.MatrixMultiplyIntegerToFloatDesc(i8, one, None, i8, one, None, None,
                                                             kdml.TensorDesc(dt.FLOAT32, (64, 64))))
    ins64 = [a, kdml.Tensor(s1.buffer, one), None, b, kdml.Tensor(s2.buffer, one), None, None]
    outs64 = [dev.empty(kdml.TensorDesc(dt.FLOAT32, (64, 64)))]
    # calls of about 30 us: medians of many (a median of 9 moved by +-4 us between runs on the H100)
    many = max(rounds, STEADY_CALLS)
    rows.append({"what": "matmul 64^3 op.execute (the helper's operator), device scales",
                 "steady_us": 1e6 * _median_seconds(lambda: op64.execute(ins64, outs64), many, warm=3)})
    rows.append({"what": "kdml.matmul_integer_to_float 64^3, device scales",
                 "steady_us": 1e6 * _median_seconds(lambda: kdml.matmul_integer_to_float(a, b, s1, s2), many, warm=3)})
    rows.append({"what": "kdml.matmul_integer_to_float 64^3, Python-float scales",
                 "steady_us": 1e6 * _median_seconds(lambda: kdml.matmul_integer_to_float(a, b, 0.5, 0.25), many, warm=3)})
    return rows


def render(console: Any, title: str, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    cols = [c for c in ("ours_gbps", "torch_gbps", "ratio", "ours_us", "first_us", "steady_us") if any(c in r for r in rows)]
    table = Table(title=title)
    table.add_column("what", no_wrap=True)
    for c in cols:
        table.add_column(c.replace("_gbps", " GB/s").replace("_us", " us"), justify="right")
    for r in rows:
        table.add_row(r["what"], *(f"{r[c]:.2f}" if c in r else "" for c in cols))
    console.print(table)
