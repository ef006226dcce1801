"""Per-execution latency of small operators: what the Python path costs on top of Vulkan.

    python -m benchmarks.latency [--device N] [--shader-only] [--repeats R]
        [--ops] [--sequences] [--after-recording] [--sizes] [--memory-kernel gpu|cpu]

Prints, for a 64x64 FLOAT32 ACTIVATION_IDENTITY compiled once and bound to the same
tensors every time (so every call after the first replays a cached kp sequence):

- eager: one `op.execute(...)` per call, timed one by one; the median of R calls (us).
- recorded: `with dev.record() as rec:` around 100 `rec.execute(...)`, total time / 100;
  the median of R/100 recordings (us per op).
- floor: one bare kp sequence evaluated R times through kp directly: a single memory
  barrier (the submission + wait no Python layer can remove), and a single 16 KiB
  vkCmdCopyBuffer (the same bytes the identity moves) (us). Floor sequences complete the
  way the device's policy completes executions (a completion word or the fence:
  DevicePolicy.completion, KDML_COMPLETION).
- python: eager - copy floor, the cost of kompute_dml's own path (binding checks,
  replay-cache lookup, submission bookkeeping); on the shader path it also holds the
  difference between a compute dispatch and a transfer command.
- breakdown: the binding checks alone (`op.bind`), the operator's own cached kp sequence
  evaluated directly (what the eager call submits: its GPU work plus kp's submission and
  wait), and eager - that sequence: the Python path exactly.

--ops: eager latency of other small operators (64x64 DIAGONAL_MATRIX, 64x64 DIAGONAL_MATRIX1
with input (triu), 16x64x64 int8 MATRIX_MULTIPLY_INTEGER_TO_FLOAT), each compiled once, with
op.bind alone, the op's cached kp sequence evaluated directly, and the device time of its
commands (kp timestamps around them, x the device's timestampPeriod). The identity's
breakdown line gives the same device time. --memory-kernel gpu|cpu forces the memory-bound
operators' kernel family (DevicePolicy.memory_kernel); --constant-below BYTES the size up to which
descriptor-only diagonal outputs are copied from a constant (DevicePolicy.constant_below).

--after-recording: the eager identity right after a recording of 100 executions (to distinct
outputs) and the second eager call after it, 25 times each (what `kompute-dml bench`'s
interleaved latency samples see); the same after a busy wait and a sleep as long as the
recording, and after an eager execution of another sequence.

--torch-peer: PyTorch CUDA's 64x64 copy_ + synchronize back to back (the bench's latency peer),
while this Device is still open and again after closing it.

--cuda-context: the same with a PyTorch CUDA context open on the GPU (kompute-dml bench's
peers open one in the bench's process).

--sizes: eager latency of packed FLOAT32 identities from 16 KiB to 16 MiB, through shaders
and through transfer commands (two Devices, alternating), to place the policy's size below
which a GPU copies by transfer commands (DevicePolicy.transfer_below).

Numbers come from this machine only; nothing here asserts a target (H100 targets for the
lead: eager <= 20 us, recorded <= 8 us per op).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import time
from collections.abc import Callable

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import interleaved, percentile, series

ACCESS_ALL = 0x20 | 0x40 | 0x800 | 0x1000  # shader read/write, transfer read/write
STAGES_ALL = 0x800 | 0x1000  # compute shader, transfer


def _times(call: Callable[[], object], repeats: int) -> list[float]:
    """us of each of `repeats` back-to-back calls, after 50 untimed ones."""
    return [t * 1e6 for t in series(call, repeats, warmup=50)]


def eager(op: object, x: object, y: object, repeats: int) -> list[float]:
    """Median-ready us of `repeats` eager executions; x, y: a tensor each, or the lists."""
    run = op.execute  # type: ignore[attr-defined]
    ins = x if isinstance(x, list) else [x]
    outs = y if isinstance(y, list) else [y]
    return _times(lambda: run(ins, outs), repeats)


def _torch_copy_sync(repeats: int) -> list[float]:
    """us of PyTorch CUDA `dst.copy_(src); torch.cuda.synchronize()` on 64x64 float32, back to back."""
    import torch

    src = torch.ones((64, 64), dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)

    def step() -> None:
        dst.copy_(src)
        torch.cuda.synchronize()

    return _times(step, repeats)


def _functional(x: kdml.Tensor, repeats: int) -> list[float]:
    """us of `kdml.identity(x)` calls (a pooled output each time, dropped at once)."""
    return _times(lambda: kdml.identity(x), repeats)


def _recorded(dev: kdml.Device, op: object, x: kdml.Tensor, y: kdml.Tensor, recordings: int, per: int = 100) -> list[float]:
    ins, outs = [x], [y]

    def rec() -> None:
        with dev.record() as r:
            for _ in range(per):
                r.execute(op, ins, outs)

    # the first recordings build and cache the sequence
    return [t * 1e6 / per for t in series(rec, recordings, warmup=3)]


def _breakdown(op: object, ins: list, outs: list, repeats: int) -> tuple[float, float]:
    """Median us of op.bind alone and of evaluating the op's cached kp sequence directly.
    Reaches into the engine's replay cache on purpose: this is a measurement of it."""
    bind = op.bind  # type: ignore[attr-defined]
    bind_us = series(lambda: bind(ins, outs), 1, per=repeats)[0] * 1e6
    _bound, key = bind(ins, outs)
    run = op.engine._replays[(key,)].run  # type: ignore[attr-defined]
    return bind_us, statistics.median(_times(run, repeats))


def _sequences(op: object, x: kdml.Tensor, y: kdml.Tensor, repeats: int) -> None:
    """What each part of the op's kp sequence costs: the same dispatch with and without the
    leading global barrier, beside barrier-only and copy sequences (kp directly, on the
    engine's own kp objects: a measurement of the runtime, not a use of it)."""
    import kp

    from kompute_dml.runtime.encode import encode, global_barrier

    eng = op.engine  # type: ignore[attr-defined]
    bound = [x, y]
    disp = encode(op.plans[0], bound, eng.programs, eng.dummy).op  # type: ignore[attr-defined]
    xs, ys = x.buffer.memory.tensor, y.buffer.memory.tensor

    barrier = global_barrier
    variants = {
        "barrier": [barrier()],
        "barrier+barrier": [barrier(), barrier()],
        "dispatch": [disp],
        "barrier+dispatch": [barrier(), disp],
        "copy": [kp.OpCopyRegions(xs, ys, [0, 0, 16384])],
        "barrier+copy": [barrier(), kp.OpCopyRegions(xs, ys, [0, 0, 16384])],
        "barrier+dispatch+dispatch": [barrier(), disp, barrier(), disp],
    }
    seqs = {}
    for name, ops in variants.items():
        seq = eng.manager.kdml_word_sequence() if eng.completion_word else eng.manager.sequence()
        for o in ops:
            seq.record(o)
        seqs[name] = seq
    times = interleaved({k: seq.eval for k, seq in seqs.items()}, max(100, repeats // 5), warmup=50, target=0)
    print("kp sequences, median us:", "  ".join(f"{k} {statistics.median(v) * 1e6:.2f}" for k, v in times.items()))


def _floors(device_index: int, repeats: int, nbytes: int, word: bool) -> tuple[list[float], list[float]]:
    import kp  # outside kompute_dml: only to measure what kp itself costs

    mgr = kp.Manager(device_index)
    try:
        src = mgr.tensor_t(np.zeros(nbytes // 4, dtype=np.uint32), kp.TensorTypes.device)
        dst = mgr.tensor_t(np.zeros(nbytes // 4, dtype=np.uint32), kp.TensorTypes.device)
        sequence = mgr.kdml_word_sequence if word else mgr.sequence
        barrier = sequence()
        barrier.record(kp.OpMemoryBarrier([src], ACCESS_ALL, ACCESS_ALL, STAGES_ALL, STAGES_ALL, True))
        copy = sequence()
        copy.record(kp.OpCopyRegions(src, dst, [0, 0, nbytes]))
        return _times(barrier.eval, repeats), _times(copy.eval, repeats)
    finally:
        mgr.destroy()


def _device_us(dev: kdml.Device, op: object, ins: list, outs: list, repeats: int = 200) -> float:
    """Median device time of the op's commands (us): kp timestamps around them, in a kp
    sequence of their own after one global barrier (a measurement of the runtime)."""
    from kompute_dml.runtime.encode import encode, global_barrier

    eng = dev.engine
    bound, _key = op.bind(ins, outs)  # type: ignore[attr-defined]
    ops = [encode(plan, bound, eng.programs, eng.dummy).op for plan in op.plans]  # type: ignore[attr-defined]
    seq = eng.manager.sequence(0, len(ops) + 1)
    seq.record(global_barrier())
    for o in ops:
        seq.record(o)
    period_us = float(dev.limits.get("timestamp_period_ns") or 1.0) / 1000
    times = []
    for _ in range(repeats):
        seq.eval()
        ts = seq.get_timestamps()
        times.append((ts[-1] - ts[1]) * period_us)
    return statistics.median(times)


def _small_ops(dev: kdml.Device, repeats: int) -> None:
    td, dt = kdml.TensorDesc, kdml.DataType
    f32 = td(dt.FLOAT32, (64, 64))
    rng = np.random.default_rng(1)
    x = dev.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    y = dev.empty(f32)
    cases = {
        "DIAGONAL_MATRIX 64x64": (kdml.DiagonalMatrixDesc(f32, 1, 2.0), [], [y]),
        "DIAGONAL_MATRIX1 64x64 triu": (kdml.DiagonalMatrix1Desc(f32, f32, dt.FLOAT32, 0.0, -(1 << 31), 0), [x], [y]),
    }
    a8, b8, q = td(dt.INT8, (16, 64)), td(dt.INT8, (64, 64)), td(dt.FLOAT32, (1,))
    a = dev.tensor(rng.integers(-128, 128, (16, 64), dtype=np.int8))
    b = dev.tensor(rng.integers(-128, 128, (64, 64), dtype=np.int8))
    s = dev.tensor(np.ones(1, np.float32))
    cases["MATMUL_INTEGER_TO_FLOAT 16x64x64 int8"] = (
        kdml.MatrixMultiplyIntegerToFloatDesc(a8, q, None, b8, q, None, None, td(dt.FLOAT32, (16, 64))),
        [a, s, None, b, s, None, None], [dev.empty(td(dt.FLOAT32, (16, 64)))])
    for name, (desc, ins, outs) in cases.items():
        op = dev.compile(desc)
        times = eager(op, ins, outs, repeats)  # type: ignore[arg-type]
        bind_us, seq_us = _breakdown(op, ins, outs, repeats)
        print(f"eager {name}: median {statistics.median(times):.2f} us ({', '.join(op.variants)}); "
              f"op.bind {bind_us:.2f} us, its kp sequence {seq_us:.2f} us, "
              f"its commands on the device {_device_us(dev, op, ins, outs):.2f} us")


def _after_recording(dev: kdml.Device, op: object, x: kdml.Tensor, y: kdml.Tensor) -> None:
    """The eager identity right after something else, and the call after it: a 100-op
    recording, and three controls that each keep one part of it (the time it takes, as a
    busy wait with no GPU work, and as a sleep; another sequence's submission: one eager
    execution to another output; a recording without GPU work is not possible)."""
    outs = [dev.empty(x.desc) for _ in range(100)]
    run = op.execute  # type: ignore[attr-defined]

    def rec() -> None:
        with dev.record() as r:
            for o in outs:
                r.execute(op, [x], [o])

    span = statistics.median(series(rec, 10, warmup=1))

    def busy() -> None:
        end = time.perf_counter() + span
        while time.perf_counter() < end:
            pass

    befores = {"a 100-op recording": rec, f"a {span * 1e6:.0f} us busy wait": busy,
               f"a {span * 1e6:.0f} us sleep": lambda: time.sleep(span),
               "an eager execution of another sequence": lambda: run([x], [outs[0]])}
    for name, before in befores.items():
        pairs = [(before(), series(lambda: run([x], [y]), 2))[1] for _ in range(25)]
        print(f"eager right after {name}: median {statistics.median(p[0] for p in pairs) * 1e6:.2f} us; "
              f"the call after it {statistics.median(p[1] for p in pairs) * 1e6:.2f} us")


def _sizes(device_index: int, repeats: int) -> None:
    devs = {"shaders": kdml.Device(device_index, transfer_commands=False),
            "transfer": kdml.Device(device_index, transfer_commands=True)}
    try:
        print("eager identity, median us:   bytes   shaders  transfer  (policy default picks)")
        default = kdml.Device(device_index)
        for kib in (16, 64, 256, 1024, 4096, 16384):
            n = kib * 256
            desc = kdml.TensorDesc(kdml.DataType.FLOAT32, (n,))
            ops = {}
            for name, dev in devs.items():
                x = dev.tensor(np.arange(n, dtype=np.float32))
                ops[name] = (dev.compile(kdml.ActivationIdentityDesc(desc, desc)), x, dev.empty(desc))
            picked = default.compile(kdml.ActivationIdentityDesc(desc, desc)).variants
            medians = {k: [] for k in ops}
            for _ in range(5):  # alternate the paths in rounds
                for name, (op, x, y) in ops.items():
                    medians[name].append(statistics.median(eager(op, x, y, max(50, repeats // 10))))
            row = "  ".join(f"{statistics.median(v):8.2f}" for v in medians.values())
            print(f"{'':28}{kib * 1024:8d}  {row}  ({','.join(picked) or 'none'})")
        default.close()
    finally:
        for dev in devs.values():
            dev.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--shader-only", action="store_true", help="Device(transfer_commands=False)")
    p.add_argument("--memory-kernel", choices=("gpu", "cpu"), help="force DevicePolicy.memory_kernel")
    p.add_argument("--constant-below", type=int, metavar="BYTES", help="force DevicePolicy.constant_below")
    p.add_argument("--repeats", type=int, default=5000)
    p.add_argument("--sizes", action="store_true", help="shaders vs transfer commands by size")
    p.add_argument("--ops", action="store_true", help="also other small operators, eager")
    p.add_argument("--after-recording", action="store_true", help="eager calls right after a 100-op recording")
    p.add_argument("--sequences", action="store_true", help="the op's kp sequence taken apart (barrier, dispatch, copy)")
    p.add_argument("--torch-peer", action="store_true",
                   help="then PyTorch's 64x64 copy_ + synchronize, with this Device open and after closing it")
    p.add_argument("--cuda-context", action="store_true",
                   help="open a PyTorch CUDA context on the GPU first (as kompute-dml bench's peers do)")
    args = p.parse_args(argv)
    if args.cuda_context:
        import torch

        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    if args.sizes:
        _sizes(args.device, args.repeats)
        return 0
    dev = kdml.Device(args.device, transfer_commands=False if args.shader_only else None)
    if args.memory_kernel:
        dev.policy = dataclasses.replace(dev.policy, memory_kernel=args.memory_kernel)
    if args.constant_below is not None:
        dev.policy = dataclasses.replace(dev.policy, constant_below=args.constant_below)
    try:
        desc = kdml.TensorDesc(kdml.DataType.FLOAT32, (64, 64))
        x = dev.tensor(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32))
        y = dev.empty(desc)
        op = dev.compile(kdml.ActivationIdentityDesc(desc, desc))
        gc.disable()  # a collection inside a timed call is noise, not the path's cost
        try:
            eager_us = eager(op, x, y, args.repeats)
            functional = _functional(x, args.repeats)
            recorded = _recorded(dev, op, x, y, max(5, args.repeats // 100))
            bind_us, seq_us = _breakdown(op, [x], [y], args.repeats)
            device_us = _device_us(dev, op, [x], [y])
            if args.sequences:
                _sequences(op, x, y, args.repeats)
            if args.ops:
                _small_ops(dev, args.repeats)
            if args.after_recording:
                _after_recording(dev, op, x, y)
        finally:
            gc.enable()
        assert np.array_equal(y.numpy(), x.numpy())
        path = "shaders" if not dev.transfer_commands else "transfer commands"
        print(f"device: {dev.name} ({dev.device_type}), policy {dev.policy.name}, copies as {path}, "
              f"completion by {dev.policy.completion}")
        word = dev.engine.completion_word
        torch_open = _torch_copy_sync(args.repeats) if args.torch_peer else None
    finally:
        dev.close()
    if torch_open is not None:
        print(f"torch 64x64 copy_ + synchronize: median {statistics.median(torch_open):8.2f} us with this Device open, "
              f"{statistics.median(_torch_copy_sync(args.repeats)):8.2f} us after closing it")
    barrier, copy = _floors(args.device, args.repeats, 64 * 64 * 4, word)
    e, r = statistics.median(eager_us), statistics.median(recorded)
    fb, fc = statistics.median(barrier), statistics.median(copy)
    print(f"eager    64x64 identity: median {e:8.2f} us  (p10 {percentile(eager_us, 10):.2f}, p90 {percentile(eager_us, 90):.2f})")
    print(f"recorded 64x64 identity: median {r:8.2f} us per op (100 ops per recording)")
    print(f"functional kdml.identity(x), back to back: median {statistics.median(functional):8.2f} us")
    print(f"floor, bare kp sequence: median {fb:8.2f} us (one barrier), {fc:8.2f} us (one 16 KiB copy)")
    print(f"python path (eager - copy floor): {e - fc:8.2f} us")
    print(f"breakdown: op.bind {bind_us:.2f} us; the op's own kp sequence {seq_us:.2f} us; "
          f"eager - that sequence {e - seq_us:.2f} us; its commands on the device {device_us:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
