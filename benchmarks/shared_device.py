"""Overlay of kompute_dml.bench.shared_device: `--locked` waits for every replayed run under the engine's
lock, as the runtime did before (runtime/inflight.py); the threads' host work then queues behind each
other's waits. Without it, the module as it is.

    python -m benchmarks.shared_device [--locked] [kompute_dml.bench.shared_device's options]
"""

from __future__ import annotations

import sys

from kompute_dml.bench import shared_device


def lock_the_waits() -> None:
    """Engine._launch never hands a replayed run's wait to its caller."""
    from kompute_dml.runtime import engine

    launch = engine.Engine._launch

    def locked(self, replay, wait, copies=None, owned=False):  # type: ignore[no-untyped-def]
        return launch(self, replay, wait, copies, False)

    engine.Engine._launch = locked  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--locked" in args:
        args.remove("--locked")
        lock_the_waits()
        print("overlay: every wait under the engine's lock")
    return shared_device.main(args)


if __name__ == "__main__":
    raise SystemExit(main())
