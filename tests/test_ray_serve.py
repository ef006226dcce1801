"""examples/ray_serve_app.py on a local Ray cluster: two replicas (no GPU asked: each opens the
default Vulkan device, lavapipe here), requests through a Serve handle batched by @serve.batch,
every response equal to Backend.run of the same request. Slow; skipped where ray[serve] is not
installed (it is no dependency of kompute_dml: install it in an environment of its own)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray", reason="ray[serve] is not installed (it is no dependency of kompute_dml)")
serve = pytest.importorskip("ray.serve", reason="ray is installed without ray[serve]")

import onnx  # noqa: E402
from test_serving import encoder, request  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_two_replicas_answer_as_backend_run(tmp_path):
    rng = np.random.default_rng(7)
    model, _w = encoder(rng)
    path = tmp_path / "encoder.onnx"
    onnx.save(model, str(path))
    sys.path.insert(0, str(ROOT))
    from examples.ray_serve_app import build_app

    # the replicas import this checkout's kompute_dml and examples/ (PYTHONPATH comes before site-packages)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": env})
    try:
        handle = serve.run(build_app({"model": str(path), "replicas": 2, "gpus": 0}), name="kdml", route_prefix=None)
        status = serve.status().applications["kdml"].deployments["EncoderReplica"]
        assert status.replica_states.get("RUNNING") == 2, status
        reqs = [request(rng) for _ in range(24)]
        responses = [handle.remote(r) for r in reqs]  # all in flight: Serve batches them
        rep = Backend.prepare(model, "CPU")
        for resp, feeds in zip(responses, reqs):
            np.testing.assert_array_equal(resp.result(timeout_s=300)["y"], rep.run(feeds).y)
        by_replica: dict[int, list[int]] = {}  # until both replicas answered (the router picks one per call)
        for _ in range(64):
            d = handle.device.remote().result(timeout_s=60)
            assert d["uuid"] == rep.device.uuid, d
            by_replica[d["pid"]] = d["batch_sizes"]
            if len(by_replica) == 2:
                break
        assert len(by_replica) == 2, by_replica
        # Serve batched them: 24 requests in flight at once, and some batch held more than one
        assert sum(map(sum, by_replica.values())) == len(reqs), by_replica
        assert max(max(s) for s in by_replica.values()) > 1, by_replica
    finally:
        serve.shutdown()
        ray.shutdown()
