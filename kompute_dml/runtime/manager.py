"""The kp build kompute_dml needs, and the creation of its kp Managers.

kp is built with kompute_dml's patches (scripts/kp-patches/README.md); a build older
than REQUIRED_PATCH_LEVEL refuses to import, naming the command that rebuilds it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import kp

KP_PATCH_LEVEL: int = getattr(kp, "kdml_patch_level", 0)
REQUIRED_PATCH_LEVEL = 17  # a sequence waited for on one thread while another submits (16: the completion word after every write)
if KP_PATCH_LEVEL < REQUIRED_PATCH_LEVEL:
    raise ImportError(f"kp is built with kompute_dml's patch level {KP_PATCH_LEVEL}, this code needs "
                      f"{REQUIRED_PATCH_LEVEL}: run `make setup` (scripts/setup.sh rebuilds kp)")

_MANAGER_LOCK = threading.Lock()  # kp.kdml_request_features applies to the next kp.Manager


def create_manager(index: int, requested: frozenset[str] | None) -> Any:
    """A kp Manager on physical device `index` with the optional features `requested` (None:
    every one the device has) and the wait poll KDML_WAIT_SPIN_US sets."""
    spin_us = os.environ.get("KDML_WAIT_SPIN_US")
    with _MANAGER_LOCK:
        kp.kdml_request_features(None if requested is None else sorted(requested))
        if spin_us is not None:
            kp.kdml_set_wait_spin_ns(max(0, int(float(spin_us) * 1000)))
        return kp.Manager(index)
