"""FlashAttention-3's Hopper kernels as the ``flash-attn-4`` package runs them
(``flash_attn.cute.flash_attn_func``: its SM90 forward and backward are FA3's design, written in
the CuTe DSL and compiled at first use).

The package takes tensors laid out batch × sequence × heads × d. memmodel's cases hold Q, K, V
as batch × heads × sequence × d: :func:`make_qkv` allocates them in the package's layout and
hands out the transposed views, so a call passes contiguous tensors and times no copy. Imported
only on the GPU machine (by :mod:`memmodel.gpu.run` and the calibration).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: what ``memmodel validate`` and ``calibrate --impl fa3`` say where the package is missing
INSTALL_HINT = "pip install flash-attn-4 (FlashAttention's CuTe-DSL kernels; FA3's run on Hopper)"


def missing() -> str | None:
    """Why FlashAttention-3 cannot run here, in one line; None where it can (the package
    imports and the GPU is a Hopper one, compute capability 9.x)."""
    try:
        from flash_attn.cute import flash_attn_func  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install failing at import
        text = str(exc).strip().splitlines()
        return f"flash_attn.cute does not import ({exc.__class__.__name__}: {text[0] if text else ''}): {INSTALL_HINT}"
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] != 9:
            major, minor = torch.cuda.get_device_capability()
            return (
                f"FlashAttention-3's kernels run on Hopper GPUs (compute capability 9.x; this one is {major}.{minor})"
            )
    except Exception as exc:  # no usable CUDA: the caller's own check says so
        return f"no CUDA device for FlashAttention-3 ({exc.__class__.__name__})"
    return None


def make_qkv(
    torch: Any,
    shapes: list[tuple[int, int, int, int]],
    *,
    dtype: Any,
    device: str,
    generator: Any,
    requires_grad: bool = False,
) -> list[Any]:
    """Standard normal tensors of the given batch × heads × sequence × d shapes, each stored as
    batch × sequence × heads × d (the package's layout) and returned as the transposed view: a
    leaf of autograd with the shape the checks index."""
    out = []
    for b, h, n, d in shapes:
        base = torch.randn(b, n, h, d, device=device, dtype=dtype, generator=generator)
        view = base.transpose(1, 2).detach()
        out.append(view.requires_grad_(True) if requires_grad else view)
    return out


def forward(q: Any, k: Any, v: Any, *, causal: bool = False) -> Callable[[], Any]:
    """A call of FlashAttention-3's forward on batch × heads × sequence × d views (GQA where
    K/V have fewer heads: the package packs the group's query heads itself), returning O as
    the same kind of view; differentiable (its backward runs under autograd)."""
    from flash_attn.cute import flash_attn_func

    def run() -> Any:
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)

    return run
