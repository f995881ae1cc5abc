"""Everything that runs on a GPU: kernels, timing, Nsight Compute, calibration.

Modules here import torch/triton lazily (inside functions) so that case planning, ncu
CSV parsing and reporting are usable and testable on a machine without either.
"""
