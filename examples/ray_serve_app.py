"""Ray Serve with kompute_dml: one replica per GPU, each preparing the model on its own Vulkan
device, requests batched by Serve's `@serve.batch` (docs/serving.md).

    serve run examples.ray_serve_app:app model=model.onnx           # from the repository root
    # or from Python: serve.run(build_app({"model": "model.onnx", "replicas": 2}))

A replica's device: KDML_DEVICE where the replica's environment sets it (runtime_env), else the
GPU Ray assigned to the replica (Ray sets CUDA_VISIBLE_DEVICES to its GPU ids; nvidia-smi gives
their UUIDs, which are the Vulkan devices' UUIDs on NVIDIA), else the default device. Requests are
dicts of input name -> nested lists or arrays with a batch axis of 1 (or more); the response is
a dict of output name -> array (through a handle) or nested lists (over HTTP).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
from typing import Any

import numpy as np
from ray import serve

MAX_BATCH = 8  # rows per batch (set_max_batch_size changes it per replica)
WAIT_S = 0.002  # how long the first request of a batch waits for others


def replica_device() -> str:
    """The ONNX backend's device string for this replica (module docstring)."""
    if os.environ.get("KDML_DEVICE", "").strip():
        return "CPU"  # the default device, which KDML_DEVICE picks
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.upper().startswith("GPU-"):
        return visible  # already a UUID
    if visible.isdigit():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", visible],
                                 capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out.upper().startswith("GPU-"):
            return out.splitlines()[0].strip()
    return "CPU"


@serve.deployment(ray_actor_options={"num_gpus": 1})
class EncoderReplica:
    """One prepared model on this replica's device; `__call__` takes one request."""

    def __init__(self, model: str, warmup: dict[str, list[int]] | None = None) -> None:
        from kompute_dml.onnx_backend import Backend

        self.rep = Backend.prepare(model, replica_device(), warmup=warmup)
        self.names = list(self.rep.output_names)
        self.batch_sizes: list[int] = []  # requests per run_batch call, in order

    def device(self) -> dict[str, Any]:
        """Which device this replica runs on, in which process, and the request count of each batch
        it has run."""
        return {"uuid": self.rep.device.uuid, "name": self.rep.device.name, "pid": os.getpid(),
                "batch_sizes": list(self.batch_sizes)}

    @serve.batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=WAIT_S)
    async def run_batch(self, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        self.batch_sizes.append(len(requests))
        rows = [len(next(iter(r.values()))) for r in requests]
        feeds = {n: np.concatenate([r[n] for r in requests]) for n in requests[0]}
        # rep.run waits for the device with the GIL released; a thread keeps the event loop free
        outs = await asyncio.to_thread(self.rep.run, feeds)
        bounds = np.cumsum([0, *rows])
        return [{n: np.asarray(v)[a:b] for n, v in zip(self.names, outs)} for a, b in itertools.pairwise(bounds)]

    async def __call__(self, request: Any) -> dict[str, Any]:
        http = hasattr(request, "json")  # a starlette Request; a handle passes the dict itself
        body = await request.json() if http else request
        types = self.rep.declared_types
        feeds = {}
        for name, value in body.items():
            elem = types[name].tensor_type.elem_type if name in types else 0
            feeds[name] = np.asarray(value, dtype=_NUMPY.get(elem))
        out = await self.run_batch(feeds)
        return {n: v.tolist() for n, v in out.items()} if http else out


_NUMPY = {1: np.float32, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64, 2: np.uint8, 3: np.int8}


def build_app(args: dict[str, Any]) -> Any:
    """`serve run examples.ray_serve_app:app model=PATH [replicas=N] [gpus=1]`: N replicas (default:
    one per GPU of the cluster) of `gpus` GPUs each (0: the default device of each replica's host)."""
    import ray

    gpus = float(args.get("gpus", 1))
    cluster_gpus = int(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0
    replicas = int(args.get("replicas", 0)) or max(1, cluster_gpus)
    return EncoderReplica.options(num_replicas=replicas, ray_actor_options={"num_gpus": gpus}).bind(
        args["model"], args.get("warmup"))


app = build_app
