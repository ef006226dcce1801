"""`kompute-dml bench`: every operator against its peers, in one run.

Usage: kompute-dml bench [--quick] [--json FILE] [--plot FILE.png] [--markdown FILE.md]
       [--only SUBSTR] [--rounds N] [--gpu {auto,on,off}] [--no-ort] [--no-torch] [--no-cupy]
       [--latency-here] [--device N|VULKAN:N]

--device takes an index or VULKAN:<index> (as `info` and `run` do); a device this machine lacks
prints one line and exits with status 2, and so does an --only that matches no row (the line
lists the rows). Piped output prints tables at their natural width (no name cut).

Method. Each row times several callables *interleaved*: one sample of ours, one of each
peer (and, on a CPU device, one of the machine's copy ceiling) per round, so that the noise
of a shared machine hits all of them alike; each figure is the median over the rounds,
after a warm-up. A sample repeats its callable enough times to last ~0.3 ms (so that the
timer's resolution does not matter for microsecond calls) and is divided by that count.
A callable shorter than 5 ms gets one untimed call right before each of its samples, so that
`us/op` and `eager us` are back-to-back (steady-state) figures, the same thing the latency
line's eager `op.execute` measures. Without it a sample started right after the other
contenders' (on a CPU device the 64 MiB ceiling copy), with lavapipe's worker threads asleep,
and the 64x64 identity row read 60-180 us/op against 8-11 us in the latency line: the table
measured the first execution after an idle device, the latency line executions in a row.

- CPU device (lavapipe; the device policy "cpu"): ours is the re-evaluation of an already
  compiled operator with already bound tensors (`op.execute(...)`, which replays the cached
  kp sequence, and waits); the ceiling is numpy.copyto of 64 MiB, sampled in every
  memory-bound row's rounds.
- GPU device (any other policy, or --gpu on): ours is N executions of the compiled operator
  in one `dev.record()` (one submission, then the wait), time per execution; PyTorch CUDA
  (and CuPy where installed) join as peers with N launches and then one synchronize, the
  same N as ours (chosen per row so that a batch lasts ~20 ms); rows from 64 MiB to 1 GiB
  and large matrix products are added (GPU peers only: the CPU peers would take seconds a
  call there). The ceiling is measured once per run: the best sample of a 1 GiB
  device-to-device copy by torch (`copy_`), else by ours (identity, recorded).
- `eager`: the full functional call (`kdml.identity(x)` ...: compile-cache lookup, pooled
  output allocation, execute, wait).
- latency (a 64x64 identity: eager, right after a recording, functional, recorded; torch's
  copy_ + synchronize): each side in a Python process of its own (kompute_dml/bench/
  latency_proc.py says why); --latency-here times them in the bench's process.
- numpy: copyto into an existing array / zero + fill_diagonal into an existing array /
  np.triu, np.tril / float32 matmul.
- ort: onnxruntime's CPU provider through IOBinding with pre-allocated outputs (Identity,
  EyeLike, Trilu, com.microsoft MatMulIntegerToFloat), models built with onnx.helper,
  ir_version 10.
- torch / cupy: see kompute_dml/bench/gpu_peers.py (copy_, eye(out=), triu/tril(out=),
  _int_mm with and without the dequantization).

Bytes moved count bytes read plus bytes written (identity/copy: 2 x size; diagonal
matrix: the output written; triu/tril with input: 2 x size); GOPS = 2*M*N*K / time.
Every row's output is checked against an independent numpy reference after its timing.
"""
