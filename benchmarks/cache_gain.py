"""What each cache keyed by object or buffer identity saves: the same calls with the cache in
place and with it bypassed, interleaved in rounds (kompute_dml.bench.timing.interleaved), host
and device time together, on whatever device `Device()` opens.

    .venv/bin/python -m benchmarks.cache_gain [--rounds 15] [--only NAME,...]

Each row is a call a user or the ONNX backend makes again and again, and the cache it meets:

  replays           runtime/engine._replays: encoded submissions by (operator, buffer serials,
                    offsets). Bypassed: capacity 0, every execution is encoded and recorded anew.
                    Timed: op.execute on the same tensors.
  bind_checks       ops/base.CompiledOperator._recent: checked bindings by the tensors' buffer,
                    offset and descriptor. Bypassed: every execution checks every binding rule.
                    Timed: op.execute on new Tensor objects over the same buffers.
  helper_calls      recent_calls.RecentCalls of kdml.identity / kdml.matmul_integer_to_float:
                    the bound operator by the argument objects' ids. Bypassed: no entry is found.
                    Timed: kdml.matmul_integer_to_float (64^3 int8) and kdml.identity (64x64) on
                    the same Tensors.
  last_submission   ops/base.CompiledOperator._last: an operator's last submission, by its
                    binding key's identity. Bypassed: the engine's cache answers instead.
                    Timed: op.execute on the same tensors.
  compiled_helpers  functional.compile_cached and functional/gemm's cache (Device.caches): helpers' compiled
                    operators by (id(device), descriptors). Bypassed: every call compiles.
                    Timed: kdml.cast on a new Tensor object, kdml.gemm (64x64 float16).
  onnx_arena        onnx_backend RunState.arena (rep.state): node-by-node runs' device buffers by (node,
                    role, slot, layout). Bypassed: capacity 0, every output is a new buffer.
                    Timed: a run of a 40-node model with a CPU node (so it runs node by node),
                    on 8 x 64 and 65536 x 64 float32 values.

Prints, per row, the median microseconds per call with the cache and without it, and the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import interleaved
from kompute_dml.functional.recent_calls import RecentCalls
from kompute_dml.ops import base as ops_base
from kompute_dml.runtime import engine as engine_mod


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextlib.contextmanager
def swapped(d: dict[str, Any], key: str, value: Any) -> Iterator[None]:
    """d[key] = value for the block (a device's cache: Device.caches)."""
    old = d.get(key)
    d[key] = value
    try:
        yield
    finally:
        if old is None:
            d.pop(key, None)
        else:
            d[key] = old


def with_and_without(fn: Callable[[], Any], bypass: Callable[[], contextlib.AbstractContextManager[Any]]
                     ) -> dict[str, Callable[[], Any]]:
    """The call as is, and inside `bypass()` (entered per call: the same few attribute sets are
    paid on both sides through a no-op context)."""
    def on() -> None:
        with contextlib.nullcontext():
            fn()

    def off() -> None:
        with bypass():
            fn()
    return {"cached": on, "bypassed": off}


def _elementwise_model(nodes: int, cpu_node: bool = False) -> Any:
    from onnx import TensorProto, helper

    ops = ["Add", "Mul", "Sub"]
    made, prev = [], "x"
    for i in range(nodes):
        made.append(helper.make_node(ops[i % 3], [prev, "x"], [f"v{i}"]))
        prev = f"v{i}"
    if cpu_node:
        made.append(helper.make_node("Abs", [prev], ["y"]))  # no device operator: node by node
    else:
        made.append(helper.make_node("Identity", [prev], ["y"]))
    graph = helper.make_graph(made, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def case_replays(dev: kdml.Device) -> dict[str, Callable[[], Any]]:
    d = kdml.TensorDesc(kdml.DataType.FLOAT32, (64, 64))
    op = dev.compile(kdml.ElementWiseAddDesc(d, d, d))
    a, b, y = (dev.tensor(np.ones((64, 64), np.float32)) for _ in range(3))

    def call() -> None:
        op._last = None  # not the operator's own shortcut to its last submission: the engine's cache
        op.execute([a, b], [y])
    return with_and_without(call, lambda: patched(engine_mod, "REPLAY_CAPACITY", 0))


def case_bind_checks(dev: kdml.Device) -> dict[str, Callable[[], Any]]:
    d = kdml.TensorDesc(kdml.DataType.FLOAT32, (64, 64))
    op = dev.compile(kdml.ElementWiseAddDesc(d, d, d))
    a, b, y = (dev.tensor(np.ones((64, 64), np.float32)) for _ in range(3))

    def call() -> None:  # new Tensor objects over the same bindings, as a helper's pooled output
        op.execute([kdml.Tensor(a.buffer, d), kdml.Tensor(b.buffer, d)], [kdml.Tensor(y.buffer, d)])

    def bypass() -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(patched(op, "_recent", {}))
        stack.enter_context(patched(ops_base.CompiledOperator, "_remember", lambda *a: None))
        return stack
    return with_and_without(call, bypass)


def case_helper_calls(dev: kdml.Device) -> dict[str, Callable[[], Any]]:
    rng = np.random.default_rng(0)
    a = dev.tensor(rng.integers(-128, 128, (64, 64), dtype=np.int8))
    b = dev.tensor(rng.integers(-128, 128, (64, 64), dtype=np.int8))
    s = dev.tensor(np.array([0.5], np.float32))
    z = dev.tensor(np.array([0], np.int8))
    x = dev.tensor(np.ones((64, 64), np.float32))

    def mm() -> None:
        kdml.matmul_integer_to_float(a, b, s, s, z, z, device=dev)

    def ident() -> None:
        kdml.identity(x)

    def bypass() -> contextlib.AbstractContextManager[Any]:
        return patched(RecentCalls, "get", lambda self, key: None)
    out = {f"matmul_integer_to_float/{k}": f for k, f in with_and_without(mm, bypass).items()}
    out.update({f"identity/{k}": f for k, f in with_and_without(ident, bypass).items()})
    return out


def case_last_submission(dev: kdml.Device) -> dict[str, Callable[[], Any]]:
    d = kdml.TensorDesc(kdml.DataType.FLOAT32, (64, 64))
    op = dev.compile(kdml.ElementWiseAddDesc(d, d, d))
    a, b, y = (dev.tensor(np.ones((64, 64), np.float32)) for _ in range(3))

    def call() -> None:
        op.execute([a, b], [y])

    def bypass() -> contextlib.AbstractContextManager[Any]:
        op._last = None  # the engine's cached submission is found instead
        return contextlib.nullcontext()
    return with_and_without(call, bypass)


def case_compiled_helpers(dev: kdml.Device) -> dict[str, Callable[[], Any]]:
    x = dev.tensor(np.ones((64, 64), np.float32))
    a = dev.tensor(np.ones((64, 64), np.float16))

    def cast() -> None:  # a new Tensor object each call: RecentCalls cannot answer it
        kdml.cast(kdml.Tensor(x.buffer, x.desc), kdml.DataType.FLOAT16)

    def mm() -> None:
        kdml.gemm(a, a)

    def bypass() -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(swapped(dev.caches, "compiled", {}))
        stack.enter_context(swapped(dev.caches, "gemm", {}))
        return stack
    out = {f"cast/{k}": f for k, f in with_and_without(cast, bypass).items()}
    out.update({f"gemm/{k}": f for k, f in with_and_without(mm, bypass).items()})
    return out


def case_onnx_arena(dev: kdml.Device) -> dict[str, Callable[[], Any]]:
    from kompute_dml.onnx_backend import Backend

    rep = Backend.prepare(_elementwise_model(40, cpu_node=True), kdml_device=dev)
    out: dict[str, Callable[[], Any]] = {}
    for rows in (8, 65536):  # 2 KiB and 16 MiB values
        feeds = {"x": np.ones((rows, 64), np.float32)}
        fns = with_and_without(lambda feeds=feeds: rep.run(feeds), lambda: patched(rep.state, "arena_capacity", 0))
        out.update({f"{rows}x64/{k}": f for k, f in fns.items()})
    return out


CASES = {"replays": case_replays, "bind_checks": case_bind_checks,
         "helper_calls": case_helper_calls, "last_submission": case_last_submission,
         "compiled_helpers": case_compiled_helpers, "onnx_arena": case_onnx_arena}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CASES)
    with kdml.Device() as dev:
        print(f"device: {dev.name}")
        print(f"{'cache':16} {'call':28} {'cached us':>10} {'bypassed us':>12} {'bypassed / cached':>18}")
        for name in names:
            fns = CASES[name](dev)
            samples = interleaved(fns, args.rounds, target=2e-3)
            med = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
            for call in dict.fromkeys(k.rpartition("/")[0] for k in fns):
                pre = f"{call}/" if call else ""
                on, off = med[f"{pre}cached"], med[f"{pre}bypassed"]
                print(f"{name:16} {call or '-':28} {on:10.1f} {off:12.1f} {off / on:18.2f}")


if __name__ == "__main__":
    main()
