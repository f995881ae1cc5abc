"""What one call of FlashInfer's wrappers costs the host (issue 30): the planned wrapper's ``run``
as validate and a serving loop call it, for the MLA decode (``impl=flashmla``) and the paged decode
and prefill (``impl=flashinfer``). Run on the GPU machine with FlashInfer on PYTHONPATH:

    python validation/probes/flashinfer_host_probe.py OUT.jsonl

One line per call: ``impl``, ``shape`` (the profile's reference shapes: ``decode`` for the MLA
decode, batch 8 × DeepSeek-V3's 128 heads over 4096 keys; ``decode`` for the paged decode, batch 8
× 32 heads on 8, 4096 keys, d 128, pages of 16: the ``split_call_host`` shape; ``prefill`` for the
paged prefill, batch 1 × 8 heads, 128 tokens over 128 keys, d 64, pages of 16: the ``call_host``
shape), ``host_s`` (the median host seconds a call, issued behind a sleeping kernel:
``memmodel.gpu.calibrate_host.host_seconds``), ``call_s`` (one synchronised call between CUDA
events) and ``queued_s`` (calls back to back). A probe of the library's host path, not a check.
"""

from __future__ import annotations

import json
import sys

import torch

from memmodel.cases import parse_case
from memmodel.gpu.calibrate_host import call_seconds, host_seconds, queued_seconds

CASES = (
    ("flashmla", "decode", "impl=flashmla,model=deepseek-v3,batch=8,n=1,n_kv=4096,dtype=bf16"),
    ("flashinfer", "decode", "impl=flashinfer,heads=32,kv_heads=8,d=128,batch=8,n=1,n_kv=4096,dtype=bf16,page_size=16"),
    ("flashinfer", "prefill", "impl=flashinfer,heads=8,d=64,batch=1,n=128,n_kv=128,dtype=bf16,page_size=16,causal=1"),
)


def calls(out) -> None:
    from memmodel.gpu.mla import FlashInferMLA
    from memmodel.gpu.paged_run import PagedRun
    from memmodel.gpu.run import make_inputs

    for impl, shape, spec in CASES:
        case = parse_case(spec)
        line = {"section": "host", "impl": impl, "shape": shape, "case": spec}
        try:
            if impl == "flashmla":
                run = FlashInferMLA(case, torch, "cuda").run
            else:
                q, k, v = make_inputs(case, 0, 0)  # as validate makes them
                run = PagedRun(case, q, k, v).step
            run()
            torch.cuda.synchronize()
            line |= {"host_s": host_seconds(run), "call_s": call_seconds(run), "queued_s": queued_seconds(run)}
        except Exception as exc:  # one wrapper's failure keeps the others
            line["error"] = f"{type(exc).__name__}: {exc}"[:300]
        out.write(json.dumps(line) + "\n")
        out.flush()
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        f.write(json.dumps({"section": "env", "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}) + "\n")
        calls(f)
