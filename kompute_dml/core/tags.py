"""`tag(obj)`: a process-unique integer naming an object, for the cache keys of hot paths where
`id(obj)` would do.

Why not id(): every call of id() raises the audit event `builtins.id`, and in a process with a
Python audit hook installed (filelock's on Python 3.12 and later, imported with transformers)
each call runs that hook: 1,107 calls in a GPT-2 decode step's plan, 3.5% of it on the H100 host
(`benchmarks/decode_plans.py` measures a step's plan). A tag is also never reused,
where an id is once its object is gone. The tag lives in the object's `__dict__` as `_tag`:
classes that pickle or copy their instances drop it there (TensorDesc.__getstate__), so that a
copy in another process cannot carry a number this process gives to another object."""

from __future__ import annotations

import itertools
from typing import Any

_next = itertools.count(1).__next__


def tag(obj: Any) -> int:
    """obj's tag, given at the first call (obj must have a `__dict__`)."""
    d = obj.__dict__
    t = d.get("_tag")
    if t is None:
        t = d["_tag"] = _next()
    return t
