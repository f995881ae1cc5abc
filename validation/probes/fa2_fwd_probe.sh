#!/usr/bin/env bash
# FlashAttention-2's forward (PyTorch's flash backend): what its HBM writes are made of (issue #29).
# Run on the GPU machine (device tool), from the repository root:
#   bash validation/probes/fa2_fwd_probe.sh [CASES]
# Under $OUT: the flex backward probe's ncu pass over the flash forward kernels (bytes, local-memory
# traffic at L1, L2 sectors, registers a thread: validation/probes/flex_bwd_probe.sh), and flash-res-usage.txt:
# cuobjdump -res-usage of libtorch_cuda's flash forward kernels (registers, stack, spill stores and loads).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
KERNELS=flash_fwd NCU_LIMIT=${NCU_LIMIT:-300} bash validation/probes/flex_bwd_probe.sh "${1:-validation/cases/h200-fa2-fwd-probe.txt}"
LIB=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
timeout 200 cuobjdump -res-usage "$LIB" 2>/dev/null | grep -A1 "Function .*flash_fwd_kernel" > "$OUT/flash-res-usage.txt"
echo "flash kernels: $(grep -c Function "$OUT/flash-res-usage.txt")"
