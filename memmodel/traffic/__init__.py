"""Traffic models: one module per algorithm, each returning a ledger of transfer records."""

from .blocks import BlockSizes, block_sizes
from .flash import fa1_forward, fa2_forward
from .ledger import ROLES, AlgorithmTraffic, Kernel, Transfer
from .standard import standard_forward

__all__ = [
    "ROLES",
    "AlgorithmTraffic",
    "BlockSizes",
    "Kernel",
    "Transfer",
    "block_sizes",
    "fa1_forward",
    "fa2_forward",
    "standard_forward",
]
