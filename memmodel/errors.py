"""Errors the library raises for bad input. The CLI turns each into one line on stderr."""

from __future__ import annotations


class MemmodelError(Exception):
    """Base of every user-facing error. ``exit_code`` 2 = bad input/usage, 1 = runtime failure."""

    exit_code = 2


class ProfileError(MemmodelError):
    """A hardware profile that cannot be found, read or validated."""


class WorkloadError(MemmodelError):
    """A workload or algorithm parameter outside what the model accepts."""


class RuntimeFailure(MemmodelError):
    """Something failed while running (GPU, files, external tools)."""

    exit_code = 1


class MissingDependency(MemmodelError):
    """An optional extra (matplotlib, torch) that a requested feature needs is not installed:
    a fault of the environment, not of the command line (exit 1)."""

    exit_code = 1


class TraceError(MemmodelError):
    """A function ``memmodel trace`` cannot load or run on fake tensors (bad input: exit 2)."""


class TimingError(MemmodelError):
    """A timing mode (``--timing``) that is unknown, that the profile has no figures for, or
    that the command does not model (bad input: exit 2)."""
