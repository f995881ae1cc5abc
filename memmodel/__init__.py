"""memmodel: analytical GPU memory-traffic model of attention (standard vs FlashAttention).

The library is plain Python + numpy; ``import memmodel`` pulls in no CLI or GPU stack.

>>> from memmodel import Workload, load_profile, compare
>>> c = compare(Workload(n=4096, d=768), load_profile("a100"))
>>> c.standard.traffic.hbm_bytes
318767104
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import MemmodelError, ProfileError, WorkloadError
from .hardware import Profile, load_file, load_profile
from .model import Comparison, compare
from .tracing import Trace, trace
from .workload import DTYPE_BYTES, Workload

__all__ = [
    "DTYPE_BYTES",
    "Comparison",
    "MemmodelError",
    "Profile",
    "ProfileError",
    "Trace",
    "Workload",
    "WorkloadError",
    "__version__",
    "compare",
    "load_file",
    "load_profile",
    "trace",
]
