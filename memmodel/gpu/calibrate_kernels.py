"""Triton kernels for ``memmodel calibrate``; imported only when measuring (needs triton).

Every kernel counts what it moves or computes exactly, so the caller can turn a time into a
rate: the streaming kernels touch each element of their range once per pass, the exp kernel
does ``4 × iters`` exp2 per element in registers, the chase does ``steps`` dependent loads.
"""

from __future__ import annotations

import triton
import triton.language as tl

try:  # Gluon (explicit shared memory) is experimental; the shared-memory step needs it
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
except ImportError:  # pragma: no cover - depends on the triton version
    gluon = None
    gl = None


@triton.jit
def read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Grid-stride read of ``n`` float32 (a multiple of BLOCK); one partial sum per program."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(pid * BLOCK, n, step):
        start = tl.multiple_of(start, BLOCK)  # lets the loads be 16 bytes wide
        acc += tl.load(x_ptr + start + offs)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def write_kernel(y_ptr, n, value, BLOCK: tl.constexpr):
    """Grid-stride write of ``value`` to ``n`` float32 (a multiple of BLOCK)."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    offs = tl.arange(0, BLOCK)
    v = tl.full([BLOCK], value, tl.float32)
    for start in range(pid * BLOCK, n, step):
        start = tl.multiple_of(start, BLOCK)
        tl.store(y_ptr + start + offs, v)


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """Grid-stride copy of ``n`` float32 (a multiple of BLOCK)."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    offs = tl.arange(0, BLOCK)
    for start in range(pid * BLOCK, n, step):
        start = tl.multiple_of(start, BLOCK)
        tl.store(y_ptr + start + offs, tl.load(x_ptr + start + offs))


@triton.jit
def cached_read_kernel(x_ptr, out_ptr, n_blocks, passes, shift, BLOCK: tl.constexpr, CG: tl.constexpr = True):
    """Read a buffer of ``n_blocks`` blocks ``passes`` times, all programs together.

    With ``CG`` the loads are ``.cg`` (cached in L2, not in L1), so a buffer that fits in L2 is
    served from L2 and not from each SM's L1. In pass p, program i reads blocks i + s, i + s + grid,
    … (mod n_blocks) with s = p·shift mod n_blocks: each block is read once per pass, by a program
    that changes from pass to pass (``shift`` 7: a near neighbour; a large prime: all over the chip).
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for p in range(passes):
        s = (p * shift) % n_blocks
        for b in range(pid, n_blocks, nprog):
            blk = b + s
            blk = tl.where(blk >= n_blocks, blk - n_blocks, blk)
            start = tl.multiple_of(blk * BLOCK, BLOCK)
            if CG:
                acc += tl.load(x_ptr + start + offs, cache_modifier=".cg")
            else:
                acc += tl.load(x_ptr + start + offs)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def sm_id_kernel(out_ptr, FAKE: tl.constexpr = False):
    """Each program writes the id of the SM it runs on (``%smid``; ``FAKE``: pid % 132, for the CPU)."""
    pid = tl.program_id(0)
    if FAKE:
        sm = pid % 132
    else:
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(out_ptr + pid, sm)


@triton.jit
def split_read_kernel(
    x_ptr,
    out_ptr,
    count_ptr,
    rank_ptr,
    group_ptr,
    n_half,
    passes,
    n0,
    n1,
    BLOCK: tl.constexpr,
    FAKE: tl.constexpr = False,
):
    """Two groups of SMs read the two halves of a buffer and swap halves every pass.

    ``group_ptr[smid]`` (0 or 1) puts each SM in a group; ``n0``/``n1`` are the programs in each
    group (every SM holds the same number), ``rank_ptr[g]`` must be zero at launch (it hands out
    ranks within the group). In pass p group g reads half (g + p) mod 2, each block once, so every
    block is read by the two groups in turn. ``count_ptr[pid]``: blocks this program read.
    """
    pid = tl.program_id(0)
    if FAKE:
        sm = pid % 132
    else:
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=tl.int32, is_pure=True, pack=1)
    g = tl.load(group_ptr + sm)
    rank = tl.atomic_add(rank_ptr + g, 1)
    size = tl.where(g == 0, n0, n1)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    count = 0
    for p in range(passes):
        base = ((g + p) % 2) * n_half
        for b in range(rank, n_half, size):
            start = tl.multiple_of((base + b) * BLOCK, BLOCK)
            acc += tl.load(x_ptr + start + offs, cache_modifier=".cg")
            count += 1
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))
    tl.store(count_ptr + pid, count)


@triton.jit
def exp_kernel(x_ptr, y_ptr, iters, BLOCK: tl.constexpr):
    """``4 × iters`` exp2 per element, in registers: x <- 2^-x stays in (0.5, 1] for x in [0, 1)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    for _ in range(iters):
        x = tl.exp2(-x)
        x = tl.exp2(-x)
        x = tl.exp2(-x)
        x = tl.exp2(-x)
    tl.store(y_ptr + offs, x)


@triton.jit
def chase_kernel(buf_ptr, state_ptr, steps):
    """``steps`` dependent loads: idx <- buf[idx] (``.cg``: from L2 or DRAM, never L1).

    The start index is read from ``state_ptr`` and the last one written back, so successive
    launches walk on along the cycle instead of revisiting (and caching) the same entries.
    """
    idx = tl.load(state_ptr)
    for _ in range(steps):
        idx = tl.load(buf_ptr + idx, cache_modifier=".cg")
    tl.store(state_ptr, idx)


@triton.jit
def empty_kernel(ptr):
    """Does nothing: for launch overhead and the shortest kernel time."""
    pass


if gluon is not None:

    @gluon.jit
    def smem_read_kernel(out_ptr, iters, ROWS: gl.constexpr, WARPS: gl.constexpr):
        """Fill ROWS rows of shared memory, then read one whole row per iteration, ``iters`` times.

        Launch with ``num_warps=WARPS``. Each thread reads 16 contiguous bytes of a row per
        iteration (one ``ld.shared.v4``, no bank conflicts); the row changes every iteration so
        the loads cannot be hoisted out of the loop (checked in the SASS: four LDS.128 per
        four iterations). Bytes read from shared memory: ``iters × 4 × 32 × WARPS × 4`` per program.
        """
        COLS: gl.constexpr = 4 * 32 * WARPS
        layout: gl.constexpr = gl.BlockedLayout([4], [32], [WARPS], [0])
        smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        smem = gl.allocate_shared_memory(gl.float32, [ROWS, COLS], smem_layout)
        offs = gl.arange(0, COLS, layout=layout)
        for r in gl.static_range(ROWS):
            smem.index(r).store(offs.to(gl.float32) + r)
        gl.thread_barrier()
        acc = gl.zeros([COLS], gl.float32, layout)
        for i in range(iters):
            acc += smem.index(i % ROWS).load(layout)
        gl.store(out_ptr + gl.program_id(0) * COLS + offs, acc)

else:  # pragma: no cover
    smem_read_kernel = None
