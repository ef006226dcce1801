"""Every node of an encoder run through the backend (whole-graph plan, one submission) recomputed
by the exact reference from the backend's own inputs to it (tests/onnx_reference.py), at random
token ids of a given shape: where the end-to-end output differs from onnxruntime's, this says
whether any node is wrong or the difference is a quantization tie carried through the layers.

    python -m benchmarks.encoder_nodes [--model minilm|bert256] [--shape 8x128]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx

from kompute_dml.bench import encoder_speed, minilm
from kompute_dml.onnx_backend import Backend


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", choices=encoder_speed.MODELS)
    ap.add_argument("--shape", type=encoder_speed.parse_shapes, default=encoder_speed.parse_shapes("2x40"))
    args = ap.parse_args()
    (batch, seq), = args.shape
    m = encoder_speed.load_model(args.model)
    model = onnx.load(str(m.path))
    feeds = encoder_speed.bert_models.random_feeds(batch, seq, m.vocab, np.random.default_rng(0))
    rep = Backend.prepare(minilm.with_every_value_as_output(model), "CPU")
    outs = rep.run(feeds)
    st = rep.last_run
    values = dict(feeds)
    values.update(zip(rep.output_names, outs))
    checks = minilm.onnx_reference().compare_nodes(model, values)
    print(f"{args.model} {batch}x{seq}: {st.submissions} submission(s), {st.vulkan_nodes} device nodes, "
          f"{st.cpu_segments} CPU sub-graphs; {len(checks)} nodes recomputed")
    print("\n".join(minilm.node_summary(checks)))
    bad = [c for c in checks if not c.ok]
    for c in bad:
        print(f"node {c.index} {c.op_type} {c.name!r}: {c.message}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
