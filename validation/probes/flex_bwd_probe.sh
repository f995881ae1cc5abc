#!/usr/bin/env bash
# FlexAttention's backward: what its HBM bytes are made of (issue #29). Run on the GPU machine
# (device tool), from the repository root:
#   bash validation/probes/flex_bwd_probe.sh [CASES]
# Writes under $OUT: env.txt; ncu.csv (one ncu pass over the cases with the usual byte metrics plus
# local-memory (register spill) traffic at L1, L2 sector reads and writes with their lookups, and the
# kernels' registers a thread, where this ncu has them; KERNELS: the kernels' name regex, flex's by default); res-usage.txt (cuobjdump -res-usage of every
# kernel the compile cached: registers, stack, spill stores and loads); ncu.log.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
CASES=/tmp/flexbwd-cases.txt  # the case lines alone (the runner reads no comments)
grep -v '^\s*#' "${1:-validation/cases/h200-flex-bwd-probe.txt}" | grep . > "$CASES"
export PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/flexbwd-inductor TRITON_CACHE_DIR=/tmp/flexbwd-triton
rm -rf "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR"
{ nvidia-smi; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'; ncu --version; } > "$OUT/env.txt" 2>&1
# keep the metrics this ncu knows (an unknown name fails the whole run)
ncu --devices 0 --query-metrics > "$OUT/ncu-query.txt" 2>&1
metrics="dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_registers,launch__waves_per_multiprocessor"
for base in l1tex__t_bytes_pipe_lsu_mem_local_op_ld l1tex__t_bytes_pipe_lsu_mem_local_op_st \
            l1tex__t_bytes_pipe_lsu_mem_local_op_ld_lookup_miss l1tex__t_bytes_pipe_lsu_mem_local_op_st_lookup_miss \
            lts__t_sectors_op_read lts__t_sectors_op_write lts__t_sectors_op_read_lookup_hit \
            lts__t_sectors_op_read_lookup_miss lts__t_sectors_op_write_lookup_miss \
            lts__t_sectors_srcunit_tex_aperture_device_op_read_lookup_miss \
            lts__t_sectors_srcunit_tex_aperture_local_op_read_lookup_miss \
            smsp__inst_executed sm__cycles_active smsp__warps_launched smsp__warps_issue_stalled_no_instruction \
            smsp__warps_issue_stalled_barrier smsp__warps_issue_stalled_long_scoreboard smsp__warps_issue_stalled_short_scoreboard \
            smsp__warps_issue_stalled_math_pipe_throttle smsp__warps_issue_stalled_wait smsp__warps_issue_stalled_mio_throttle \
            smsp__warps_issue_stalled_lg_throttle smsp__warps_issue_stalled_branch_resolving smsp__warps_issue_stalled_dispatch_stall; do
  grep -q "^$base " "$OUT/ncu-query.txt" && metrics="$metrics,$base.sum"
done
echo "$metrics" > "$OUT/metrics.txt"
MEMMODEL_CASES_FILE=$CASES timeout ${NCU_LIMIT:-420} ncu --kernel-name "regex:memmodel_begin|memmodel_end|${KERNELS:-triton_tem|triton_per}" \
  --csv --print-units base --clock-control none --cache-control all --metrics "$metrics" \
  python3 -m memmodel.gpu.run ncu "$OUT/ncu.jsonl" > "$OUT/ncu.csv" 2> "$OUT/ncu.log"
echo "ncu rc=$?"
# in compile order (the cases' order): modification time, then the kernel's registers and stack
find "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR" ~/.triton -name '*.cubin' -printf '%T@ %p\n' 2>/dev/null | sort -n | \
  while read -r t f; do echo "$t $f"; cuobjdump -res-usage "$f" 2>&1 | grep -A1 "Function triton_tem"; done > "$OUT/res-usage.txt"
echo "cubins: $(grep -c Function "$OUT/res-usage.txt")"
tail -n 3 "$OUT/ncu.log"; head -c 600 "$OUT/res-usage.txt"
