"""Profiler sessions that leave the host as they found it.

torch.profiler's CUDA activity attaches CUPTI, and Kineto leaves it attached when the session ends
unless ``TEARDOWN_CUPTI=1`` is set (pytorch/pytorch#144455): every CUDA API call after it pays
CUPTI's callbacks. Validate profiles each case's kernels before it times the case's calls, so a
call measured after that paid host time a user without a profiler does not
(``validation/probes/cupti_linger.py`` measured it). Every session here sets ``TEARDOWN_CUPTI=1``
first, unless the environment already says otherwise.
"""

from __future__ import annotations

import os
from typing import Any

#: Kineto's switch: "1" finalizes CUPTI when a profiler session ends
TEARDOWN = "TEARDOWN_CUPTI"


def kernel_profile(activity: Any) -> Any:
    """``torch.profiler.profile`` of ``activity`` alone, CUPTI finalized when it ends (the
    environment's ``TEARDOWN_CUPTI``, where set, is kept)."""
    from torch.profiler import profile

    os.environ.setdefault(TEARDOWN, "1")
    return profile(activities=[activity])


def teardown_setting() -> str:
    """What :func:`kernel_profile`'s sessions run with (a record's environment row): the
    environment's ``TEARDOWN_CUPTI``, else "1"."""
    return os.environ.get(TEARDOWN, "1")


def lingering_note(measured: str = "the call, queued and graph times measured after the first case") -> str | None:
    """One line where the environment keeps CUPTI attached after a session (``TEARDOWN_CUPTI`` set
    to anything but 1): what is ``measured`` after the first profiler session then includes its
    callbacks. None otherwise."""
    value = os.environ.get(TEARDOWN)
    if value is None or value.strip() == "1":
        return None
    return (
        f"{TEARDOWN}={value} in the environment: CUPTI stays attached after each profiler session, so {measured} "
        "include its callbacks (unset it, or set it to 1)"
    )
