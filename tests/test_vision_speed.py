"""benchmarks/vision_speed.py on any device: a torchvision network exported, run on the device wholly (one
upload, one download), its output against torch's float32 run in the cosine column, the profile printed;
without a CUDA device the torch columns are dashes."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="torch (requirements-model.txt) builds the networks")
pytest.importorskip("torchvision", reason="torchvision builds the network")


def test_a_row_per_batch_and_the_profile(capsys):
    from benchmarks import vision_speed

    vision_speed.main(["--models", "tv:resnet18", "--batches", "1,2", "--size", "32", "--repeat", "1", "--profile", "2"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| tv:resnet18 |")]
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3] == "0, 1 / 1" and float(cells[8]) >= 0.99999, row
    assert "the costliest:" in out and "CONVOLUTION" in out
