"""kompute_dml/bench/timing.py, the one timing harness: the shape of what it returns (samples per
round, executions per batch, the sync hook's calls), never a timing."""

from __future__ import annotations

from kompute_dml.bench import timing


def test_interleaved_takes_one_sample_per_round_of_each():
    calls = {"a": 0, "b": 0}

    def f(k: str) -> None:
        calls[k] += 1

    s = timing.interleaved({"a": lambda: f("a"), "b": lambda: f("b")}, 5, warmup=1, target=0, rotate=True)
    assert {k: len(v) for k, v in s.items()} == {"a": 5, "b": 5}
    assert calls == {"a": 1 + 1 + 5, "b": 1 + 1 + 5}  # warm-up, calibration, samples


def test_repeat_calls_sync_once_per_batch():
    log: list[str] = []
    b = timing.repeat(lambda: log.append("step"), 3, sync=lambda: log.append("sync"))
    b()
    assert b.count == 3 and log == ["step", "step", "step", "sync"]


def test_batched_and_slopes_name_every_contender():
    done: list[int] = []
    make = lambda n: timing.repeat(lambda: done.append(1), n)  # noqa: E731
    assert set(timing.batched({"x": make, "y": make}, 3, target=1e-4)) == {"x", "y"}
    assert set(timing.slopes({"x": lambda k: [done.append(1) for _ in range(k)]}, 3, 4)) == {"x"}


def test_series_and_stats():
    xs = timing.series(lambda: None, 7, warmup=2, per=3)
    assert len(xs) == 7 and all(x >= 0 for x in xs)
    st = timing.stats([1.0, 2.0, 3.0])
    assert st["median"] == 2.0 and st["min"] == 1.0 and st["max"] == 3.0
