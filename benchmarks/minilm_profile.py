"""Where the ONNX backend's host time goes for MiniLM (benchmarks/minilm.py's fused model):
cProfile of a few runs after two warm-ups, the functions with the most own time, and the
run's vulkan / cpu seconds. `KDML_MINILM_DIR` names the bundle (benchmarks/minilm.py --bundle).

    python benchmarks/minilm_profile.py [--batch 8] [--runs 3] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import minilm

from kompute_dml.onnx_backend import Backend


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    bundle = os.environ[minilm.BUNDLE_ENV]
    tok = AutoTokenizer.from_pretrained(bundle, local_files_only=True)
    sentences = (minilm.SENTENCES * (1 + args.batch // len(minilm.SENTENCES)))[: args.batch]
    enc = tok(sentences, padding=True, return_tensors="np")
    model = onnx.load(str(Path(bundle) / minilm.FUSED_NAME))
    rep = Backend.prepare(model, "CPU")
    feeds = {i.name: enc[i.name].astype(np.int64) for i in model.graph.input if i.name in enc}
    rep.run(feeds)
    rep.run(feeds)
    st = rep.last_run
    print(f"tokens {enc['input_ids'].shape}: vulkan {st.vulkan_seconds * 1e3:.2f} ms, cpu {st.cpu_seconds * 1e3:.2f} ms, "
          f"total {st.total_seconds * 1e3:.2f} ms, {st.uploads} uploads, {st.downloads} downloads")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.runs):
        rep.run(feeds)
    prof.disable()
    pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
