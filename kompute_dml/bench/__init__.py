"""`kompute-dml bench`: every operator against its peers, in one run (the method: method.py)."""

from __future__ import annotations

from .command import main

__all__ = ["main"]
