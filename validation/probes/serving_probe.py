"""Probe of the serving kernels on the lent H200 (issue #29 items 3-5): which kernels FlashInfer,
FlexAttention and SDPA launch for paged decode, paged chunked prefill, MLA and FP8, and their times.

Reference shapes only (none of them is a check case). Run on the GPU machine with FlashInfer on
PYTHONPATH (see /work/shared/tools/pack-flashinfer):

    python validation/probes/serving_probe.py OUT.jsonl [--only SECTION,...]

Sections: sdpa, flex, decode, mla, prefill, fp8; mla_chunks and prefill_pages (later runs, not in the
first record: FlashInfer's MLA decode at small batches over lengths no check case holds; its paged
prefill by page size, 1 to 64 tokens).

One JSON line per case: its section and shape, the kernels the profiler saw (name, grid, CUDA time
in us) and the median of 20 CUDA-event timings of the whole call; a case that fails writes its error.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback

import torch

DEV = "cuda"
BF16 = torch.bfloat16


def median_us(fn, reps: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2]


def kernels(fn) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = []
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        name = ev.name
        if name.startswith("Memcpy") or name.startswith("Memset"):
            kind = name
        else:
            kind = "kernel"
        out.append({"name": name[:300], "kind": kind, "us": round(ev.device_time, 3)})
    return out


def page_table(batch: int, n_kv: int, page: int, gen: torch.Generator):
    pages_per = [math.ceil(n_kv / page)] * batch
    total = sum(pages_per)
    pool = int(total * 1.25) + 8  # a pool larger than needed, pages scattered in it
    perm = torch.randperm(pool, generator=gen)[:total].to(torch.int32)
    indptr = torch.tensor([0] + list(torch.cumsum(torch.tensor(pages_per), 0)), dtype=torch.int32)
    last = torch.full((batch,), n_kv - (pages_per[0] - 1) * page, dtype=torch.int32)
    return pool, perm.to(DEV), indptr.to(DEV), last.to(DEV)


def emit(fh, rec: dict) -> None:
    fh.write(json.dumps(rec) + "\n")
    fh.flush()
    print(json.dumps({k: rec[k] for k in rec if k != "kernels"})[:400], flush=True)


def run_case(fh, section: str, shape: dict, build) -> None:
    rec = {"section": section, **shape}
    t0 = time.time()
    try:
        fn = build()
        fn()  # compile / first use
        torch.cuda.synchronize()
        rec["first_s"] = round(time.time() - t0, 2)
        rec["time_us"] = round(median_us(fn), 3)
        rec["kernels"] = kernels(fn)
    except Exception as exc:  # noqa: BLE001 - a probe records what failed and goes on
        rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        rec["traceback"] = traceback.format_exc()[-3000:]
    emit(fh, rec)
    torch.cuda.empty_cache()


def decode_cases(fh, fi, ws):
    gen = torch.Generator().manual_seed(0)
    grid = []
    for d, hq, hkv in ((128, 32, 8), (64, 16, 16)):
        for batch, n_kv in ((1, 8192), (16, 4096), (16, 16384), (96, 2048)):
            for page in (1, 16, 64):
                grid.append((d, hq, hkv, batch, n_kv, page, "bf16", False))
    for page in (16, 64):
        grid.append((128, 32, 8, 16, 16384, page, "fp8", False))
        grid.append((128, 32, 8, 16, 16384, page, "bf16", True))
    grid.append((128, 32, 8, 16, 16384, 16, "fp8", True))
    for d, hq, hkv, batch, n_kv, page, kvd, tc in grid:
        shape = dict(
            impl="flashinfer-decode",
            d=d,
            heads=hq,
            kv_heads=hkv,
            batch=batch,
            n_kv=n_kv,
            page_size=page,
            kv_dtype=kvd,
            tensor_cores=tc,
        )

        def build(d=d, hq=hq, hkv=hkv, batch=batch, n_kv=n_kv, page=page, kvd=kvd, tc=tc):
            pool, idx, indptr, last = page_table(batch, n_kv, page, gen)
            kv_t = torch.float8_e4m3fn if kvd == "fp8" else BF16
            k = torch.randn(pool, page, hkv, d, device=DEV, dtype=BF16).to(kv_t)
            v = torch.randn(pool, page, hkv, d, device=DEV, dtype=BF16).to(kv_t)
            q = torch.randn(batch, hq, d, device=DEV, dtype=BF16)
            w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
            w.plan(indptr, idx, last, hq, hkv, d, page, q_data_type=BF16, kv_data_type=kv_t)
            return lambda: w.run(q, (k, v))

        run_case(fh, "decode", shape, build)


def prefill_cases(fh, fi, ws):
    gen = torch.Generator().manual_seed(1)
    for backend in ("auto", "fa2", "fa3"):
        for batch, new, cached, page in ((1, 2048, 6144, 16), (4, 512, 8192, 16), (2, 1024, 3072, 64)):
            hq, hkv, d = 32, 8, 128
            shape = dict(
                impl="flashinfer-prefill",
                backend=backend,
                d=d,
                heads=hq,
                kv_heads=hkv,
                batch=batch,
                n=new,
                n_kv=new + cached,
                page_size=page,
                causal=True,
            )

            def build(batch=batch, new=new, cached=cached, page=page, backend=backend, hq=hq, hkv=hkv, d=d):
                n_kv = new + cached
                pool, idx, indptr, last = page_table(batch, n_kv, page, gen)
                k = torch.randn(pool, page, hkv, d, device=DEV, dtype=BF16)
                v = torch.randn(pool, page, hkv, d, device=DEV, dtype=BF16)
                q = torch.randn(batch * new, hq, d, device=DEV, dtype=BF16)
                qo = torch.arange(0, batch + 1, dtype=torch.int32, device=DEV) * new
                w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
                w.plan(qo, indptr, idx, last, hq, hkv, d, page, causal=True, q_data_type=BF16, kv_data_type=BF16)
                return lambda: w.run(q, (k, v))

            run_case(fh, "prefill", shape, build)


def mla_cases(fh, fi, ws):
    gen = torch.Generator().manual_seed(2)
    for backend in ("auto", "fa3", "fa2"):
        for heads, batch, n_kv in ((16, 64, 4096), (128, 8, 8192), (128, 1, 2048), (16, 128, 16384)):
            page = 64
            shape = dict(
                impl="flashinfer-mla",
                backend=backend,
                heads=heads,
                batch=batch,
                n_kv=n_kv,
                page_size=page,
                d=576,
                d_v=512,
            )

            def build(heads=heads, batch=batch, n_kv=n_kv, page=page, backend=backend):
                return mla_call(fi, ws, gen, heads, batch, n_kv, page, backend)

            run_case(fh, "mla", shape, build)


def mla_call(fi, ws, gen, heads: int, batch: int, n_kv: int, page: int, backend: str):
    """One planned absorbed MLA decode (latent 512 + rotary 64, pages scattered): its call."""
    pool, idx, indptr, last = page_table(batch, n_kv, page, gen)
    ckv = torch.randn(pool, page, 512, device=DEV, dtype=BF16)
    kpe = torch.randn(pool, page, 64, device=DEV, dtype=BF16)
    qn = torch.randn(batch, heads, 512, device=DEV, dtype=BF16)
    qp = torch.randn(batch, heads, 64, device=DEV, dtype=BF16)
    qo = torch.arange(0, batch + 1, dtype=torch.int32, device=DEV)
    kv_len = torch.full((batch,), n_kv, dtype=torch.int32, device=DEV)
    w = fi.mla.BatchMLAPagedAttentionWrapper(ws, backend=backend)
    w.plan(qo, indptr, idx, kv_len, heads, 512, 64, page, False, 1 / math.sqrt(192), BF16, BF16)
    return lambda: w.run(q_nope=qn, q_pe=qp, ckv_cache=ckv, kpe_cache=kpe)


#: the chunk probe's shapes (issue #29): FlashInfer's MLA decode at small batches, where its plan
#: splits each request's keys into many chunks; lengths and head counts no check case holds
MLA_CHUNK_HEADS = (16, 64, 128)
MLA_CHUNK_BATCHES = (1, 2)
MLA_CHUNK_LENGTHS = (1536, 3072, 6144, 12288, 24576, 49152)


def mla_chunk_cases(fh, fi, ws):
    """FlashInfer's Hopper MLA decode (backend fa3, what auto picks on sm90) where its plan splits
    a request's keys into many chunks: the merge after the grid barrier walks them. Each case also
    records five profiled calls' kernel times (``kernel_us``), not one."""
    gen = torch.Generator().manual_seed(3)
    for heads in MLA_CHUNK_HEADS:
        for batch in MLA_CHUNK_BATCHES:
            for n_kv in MLA_CHUNK_LENGTHS:
                page = 64
                shape = dict(impl="flashinfer-mla", backend="fa3", heads=heads, batch=batch, n_kv=n_kv,
                             page_size=page, d=576, d_v=512)  # fmt: skip

                rec = {"section": "mla_chunks", **shape}
                try:
                    fn = mla_call(fi, ws, gen, heads, batch, n_kv, page, "fa3")
                    fn()
                    torch.cuda.synchronize()
                    samples = sorted(sum(k["us"] for k in kernels(fn) if "MLA" in k["name"]) for _ in range(5))
                    rec["kernel_us"] = samples[2]
                    rec["time_us"] = round(median_us(fn), 3)
                    rec["kernels"] = kernels(fn)
                except Exception as exc:  # noqa: BLE001 - a probe records what failed and goes on
                    rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                emit(fh, rec)
                torch.cuda.empty_cache()


def prefill_page_cases(fh, fi, ws):
    """FlashInfer's paged prefill (backend auto: its sm90 kernel) by page size, 1 token (SGLang's
    token-level pool) to 64, at d 64 and 128: what the page lookups cost a prefill."""
    gen = torch.Generator().manual_seed(4)
    for d in (64, 128):
        for batch, new, cached in ((1, 1024, 5120), (2, 512, 2560)):
            for page in (1, 16, 64):
                hq, hkv = 32, 8
                shape = dict(impl="flashinfer-prefill", backend="auto", d=d, heads=hq, kv_heads=hkv, batch=batch,
                             n=new, n_kv=new + cached, page_size=page, causal=True)  # fmt: skip

                def build(batch=batch, new=new, cached=cached, page=page, hq=hq, hkv=hkv, d=d):
                    n_kv = new + cached
                    pool, idx, indptr, last = page_table(batch, n_kv, page, gen)
                    k = torch.randn(pool, page, hkv, d, device=DEV, dtype=BF16)
                    v = torch.randn(pool, page, hkv, d, device=DEV, dtype=BF16)
                    q = torch.randn(batch * new, hq, d, device=DEV, dtype=BF16)
                    qo = (torch.arange(batch + 1, dtype=torch.int32) * new).to(DEV)
                    w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="auto")
                    w.plan(qo, indptr, idx, last, hq, hkv, d, page, causal=True, q_data_type=BF16, kv_data_type=BF16)
                    return lambda: w.run(q, (k, v))

                run_case(fh, "prefill_pages", shape, build)


def fp8_prefill_cases(fh, fi):
    for n, causal in ((4096, True), (8192, False)):
        hq, hkv, d = 32, 8, 128
        for backend in ("fa3", "auto"):
            shape = dict(
                impl="flashinfer-single-prefill-fp8",
                backend=backend,
                d=d,
                heads=hq,
                kv_heads=hkv,
                n=n,
                causal=causal,
                dtype="fp8",
            )

            def build(n=n, causal=causal, backend=backend, hq=hq, hkv=hkv, d=d):
                f8 = torch.float8_e4m3fn
                q = torch.randn(n, hq, d, device=DEV, dtype=BF16).to(f8)
                k = torch.randn(n, hkv, d, device=DEV, dtype=BF16).to(f8)
                v = torch.randn(n, hkv, d, device=DEV, dtype=BF16).to(f8)
                one = torch.ones(1, device=DEV, dtype=torch.float32)
                return lambda: fi.single_prefill_with_kv_cache(
                    q, k, v, causal=causal, backend=backend, scale_q=one, scale_k=one, scale_v=one, o_dtype=BF16
                )

            run_case(fh, "fp8-prefill", shape, build)
        shape = dict(
            impl="flashinfer-single-prefill",
            backend="fa3",
            d=d,
            heads=hq,
            kv_heads=hkv,
            n=n,
            causal=causal,
            dtype="bf16",
        )

        def build_bf16(n=n, causal=causal, hq=hq, hkv=hkv, d=d):
            q = torch.randn(n, hq, d, device=DEV, dtype=BF16)
            k = torch.randn(n, hkv, d, device=DEV, dtype=BF16)
            v = torch.randn(n, hkv, d, device=DEV, dtype=BF16)
            return lambda: fi.single_prefill_with_kv_cache(q, k, v, causal=causal, backend="fa3")

        run_case(fh, "fp8-prefill", shape, build_bf16)


def sdpa_cases(fh):
    import torch.nn.functional as F

    for heads, n, batch in ((128, 2048, 1), (16, 4096, 2)):
        for bwd in (False, True):
            shape = dict(
                impl="sdpa-auto", heads=heads, n=n, batch=batch, d=192, d_v=128, causal=True, backward=bwd, dtype="bf16"
            )

            def build(heads=heads, n=n, batch=batch, bwd=bwd):
                q = torch.randn(batch, heads, n, 192, device=DEV, dtype=BF16, requires_grad=bwd)
                k = torch.randn(batch, heads, n, 192, device=DEV, dtype=BF16, requires_grad=bwd)
                v = torch.randn(batch, heads, n, 128, device=DEV, dtype=BF16, requires_grad=bwd)
                if not bwd:
                    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                do = torch.randn(batch, heads, n, 128, device=DEV, dtype=BF16)

                def step():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    torch.autograd.grad(o, (q, k, v), do)

                return step

            run_case(fh, "sdpa-mla-prefill", shape, build)
    for batch, heads, n_kv in ((64, 16, 4096), (8, 128, 2048)):
        shape = dict(
            impl="sdpa-auto", heads=heads, kv_heads=1, n=1, n_kv=n_kv, batch=batch, d=576, d_v=512, dtype="bf16"
        )

        def build_dec(batch=batch, heads=heads, n_kv=n_kv):
            q = torch.randn(batch, heads, 1, 576, device=DEV, dtype=BF16)
            kv = torch.randn(batch, 1, n_kv, 576, device=DEV, dtype=BF16)
            v = kv[..., :512]
            return lambda: F.scaled_dot_product_attention(q, kv, v, enable_gqa=True)

        run_case(fh, "sdpa-mla-decode", shape, build_dec)


def flex_cases(fh):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention, dynamic=False)
    for batch, hq, hkv, n_kv in ((16, 32, 8, 8192), (1, 32, 8, 32768)):
        shape = dict(impl="flex-decode", batch=batch, heads=hq, kv_heads=hkv, n=1, n_kv=n_kv, d=128, dtype="bf16")

        def build(batch=batch, hq=hq, hkv=hkv, n_kv=n_kv):
            q = torch.randn(batch, hq, 1, 128, device=DEV, dtype=BF16)
            k = torch.randn(batch, hkv, n_kv, 128, device=DEV, dtype=BF16)
            v = torch.randn(batch, hkv, n_kv, 128, device=DEV, dtype=BF16)
            return lambda: flex(q, k, v, enable_gqa=True)

        run_case(fh, "flex", shape, build)
    for window in (None, 1024):
        n = 8192
        shape = dict(
            impl="flex-prefill", batch=1, heads=32, kv_heads=8, n=n, d=128, causal=True, window=window, dtype="bf16"
        )

        def build_p(n=n, window=window):
            def causal(b, h, q_idx, kv_idx):
                keep = q_idx >= kv_idx
                if window is not None:
                    keep = keep & (q_idx - kv_idx < window)
                return keep

            mask = create_block_mask(causal, 1, 1, n, n, device=DEV)
            q = torch.randn(1, 32, n, 128, device=DEV, dtype=BF16)
            k = torch.randn(1, 8, n, 128, device=DEV, dtype=BF16)
            v = torch.randn(1, 8, n, 128, device=DEV, dtype=BF16)
            return lambda: flex(q, k, v, block_mask=mask, enable_gqa=True)

        run_case(fh, "flex", shape, build_p)


def main() -> None:
    out = sys.argv[1]
    only = set(sys.argv[3].split(",")) if len(sys.argv) > 3 and sys.argv[2] == "--only" else None
    with open(out, "a") as fh:
        emit(
            fh,
            {
                "section": "env",
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(),
                "cudnn": torch.backends.cudnn.version(),
            },
        )

        def want(name: str) -> bool:
            return only is None or name in only

        if want("sdpa"):
            sdpa_cases(fh)
        if want("flex"):
            flex_cases(fh)
        try:
            import flashinfer as fi
        except Exception as exc:  # noqa: BLE001
            emit(fh, {"section": "flashinfer-import", "error": f"{type(exc).__name__}: {exc}"})
            return
        emit(fh, {"section": "env", "flashinfer": getattr(fi, "__version__", "?")})
        ws = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=DEV)
        for name, fn in (
            ("decode", lambda: decode_cases(fh, fi, ws)),
            ("mla", lambda: mla_cases(fh, fi, ws)),
            ("mla_chunks", lambda: mla_chunk_cases(fh, fi, ws)),
            ("prefill_pages", lambda: prefill_page_cases(fh, fi, ws)),
            ("prefill", lambda: prefill_cases(fh, fi, ws)),
            ("fp8", lambda: fp8_prefill_cases(fh, fi)),
        ):
            if want(name):
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001
                    emit(
                        fh,
                        {
                            "section": name,
                            "error": f"{type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc()[-3000:],
                        },
                    )


if __name__ == "__main__":
    main()
