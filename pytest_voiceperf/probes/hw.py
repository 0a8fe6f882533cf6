"""Hardware ceilings, measured with torch on the session's device.

Random data (never zeros), warm-up, repeated runs, medians; on CUDA every run is
timed with CUDA events, on CPU with ``perf_counter`` around a finished call.
Buffers are far larger than the last-level cache.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable

from . import Measurement, Unmeasured, probe, summarize

# datasheet figures of common devices (bytes/s, FLOP/s dense), for the ratio claims
DATASHEET = {
    "NVIDIA H200": {"mem_bw": 4.8e12, "bf16_flops": 989e12, "fp16_flops": 989e12},
    "NVIDIA H100 80GB HBM3": {"mem_bw": 3.35e12, "bf16_flops": 989e12, "fp16_flops": 989e12},
    "NVIDIA A100-SXM4-80GB": {"mem_bw": 2.039e12, "bf16_flops": 312e12, "fp16_flops": 312e12},
    "NVIDIA GeForce RTX 4090": {"mem_bw": 1.008e12, "bf16_flops": 165e12, "fp16_flops": 165e12},
    "NVIDIA GeForce RTX 3090": {"mem_bw": 0.936e12, "bf16_flops": 71e12, "fp16_flops": 71e12},
    "NVIDIA L4": {"mem_bw": 0.3e12, "bf16_flops": 121e12, "fp16_flops": 121e12},
}

DTYPES = ("float32", "float16", "bfloat16", "float8")


def _torch():
    try:
        import torch
    except ImportError:
        raise Unmeasured("torch is not installed; pip install torch to measure hardware ceilings") from None
    return torch


def _timer(ctx, fn, warmup: int, reps: int) -> list[float]:
    """Seconds per call of ``fn`` (one sample per call)."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    out = []
    if ctx.device == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def _size_bytes(ctx, mib: int | None) -> int:
    if mib:
        return int(mib) * 2**20
    return (4096 if ctx.device == "cuda" else 512) * 2**20


@probe("hw.read_bandwidth", outputs={"read_bw": "B/s", "bytes": "B"}, choices={"dtype": DTYPES[:3]})
def read_bandwidth(ctx, mib: int = 0, dtype: str = "float32", reps: int = 0):
    """Read-only bandwidth: the best of read-only kernels over a large random buffer.

    CUDA: the sum of the tensor in its own dtype. CPU: a plain sum is compute-bound on many
    CPUs (10.7 GB/s here while a bf16 matrix-vector product read 24 GB/s), so the sum and the
    fp32 and bf16 matrix-vector products (the kernel decoding runs) are all timed and the best
    median is the ceiling: each one is a lower bound of what the memory can deliver.
    """
    torch = _torch()
    nbytes_total = _size_bytes(ctx, mib)
    reps = reps or (20 if ctx.device == "cuda" else 9)
    dt = getattr(torch, dtype)
    n = nbytes_total // torch.tensor([], dtype=dt).element_size()
    x = torch.rand(n, device=ctx.device, dtype=torch.float32).to(dt)
    methods: dict[str, tuple[Callable, int]] = {f"sum-{dtype}": (lambda: x.sum(), x.numel() * x.element_size())}
    if ctx.device == "cpu":
        cols = 4096
        for mdt in ("float32", "bfloat16"):
            t = getattr(torch, mdt)
            A = x.to(t) if x.dtype != t else x
            A = A[: (A.numel() // cols) * cols].view(-1, cols)
            v = torch.rand(cols, dtype=torch.float32).to(t)
            methods[f"mv-{mdt}"] = (functools.partial(torch.mv, A, v), A.numel() * A.element_size())
    results = {}
    for name, (fn, nbytes) in methods.items():
        times = _timer(ctx, fn, warmup=3, reps=reps)
        results[name] = [nbytes / t for t in times]
    best = max(results, key=lambda k: summarize(results[k]))
    bws = results[best]
    return Measurement({"read_bw": summarize(bws), "bytes": float(nbytes_total)}, {"read_bw": bws},
                       info={"dtype": dtype, "method": best,
                             "medians": {k: summarize(v) for k, v in results.items()}})


@probe("hw.copy_bandwidth", outputs={"copy_bw": "B/s", "bytes": "B"})
def copy_bandwidth(ctx, mib: int = 0, reps: int = 0):
    """Copy bandwidth, bytes read plus bytes written."""
    torch = _torch()
    n = _size_bytes(ctx, mib) // 4
    src = torch.rand(n, device=ctx.device)
    dst = torch.empty_like(src)
    nbytes = 2 * src.numel() * 4
    times = _timer(ctx, lambda: dst.copy_(src), warmup=3, reps=reps or (20 if ctx.device == "cuda" else 9))
    bws = [nbytes / t for t in times]
    return Measurement({"copy_bw": summarize(bws), "bytes": float(nbytes)}, {"copy_bw": bws},
                       info={"method": "tensor.copy_ (read+write counted)"})


@probe("hw.matmul", outputs={"flops": "FLOP/s", "n": ""}, choices={"dtype": DTYPES})
def matmul(ctx, dtype: str = "bfloat16", n: int = 0, reps: int = 0):
    """Dense n x n x n matmul throughput on random data (2 n^3 FLOP per product)."""
    torch = _torch()
    if dtype not in DTYPES:
        raise Unmeasured(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    n = int(n) or (8192 if ctx.device == "cuda" else 1024)
    if dtype == "float8":
        if ctx.device != "cuda":
            raise Unmeasured("float8 matmul needs a CUDA GPU (torch._scaled_mm)")
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) < (8, 9):
            raise Unmeasured(f"float8 matmul needs compute capability 8.9+, this GPU has {major}.{minor}")
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")

        def fn():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        dt = getattr(torch, dtype)
        a = torch.randn(n, n, device=ctx.device, dtype=torch.float32).to(dt)
        b = torch.randn(n, n, device=ctx.device, dtype=torch.float32).to(dt)
        if ctx.device == "cpu" and dtype in ("float16", "bfloat16"):
            # half-precision GEMM is emulated on many CPUs (here fp16 at 4096^3: 517 s a product):
            # time a small product and refuse sizes that would take more than 2 s each
            s = a[:256, :256].contiguous()
            torch.matmul(s, s)
            t0 = time.perf_counter()
            torch.matmul(s, s)
            rate = 2 * 256**3 / max(time.perf_counter() - t0, 1e-9)
            if 2 * n**3 / rate > 2.0:
                raise Unmeasured(f"{dtype} matmul runs at {rate / 1e9:.3g} GFLOP/s on this CPU (emulated, no native "
                                 f"{dtype} GEMM): one {n}^3 product would take {2 * n**3 / rate:.0f} s")

        def fn():
            return torch.matmul(a, b)
    reps = reps or (20 if ctx.device == "cuda" else 7)
    times = _timer(ctx, fn, warmup=3, reps=reps)
    flops = [2 * n**3 / t for t in times]
    return Measurement({"flops": summarize(flops), "n": float(n)}, {"flops": flops},
                       info={"dtype": dtype, "method": "torch._scaled_mm" if dtype == "float8" else "torch.matmul"})


@probe("hw.datasheet", outputs={"mem_bw": "B/s", "bf16_flops": "FLOP/s", "fp16_flops": "FLOP/s"},
       exact=("mem_bw", "bf16_flops", "fp16_flops"))
def datasheet(ctx):
    """The device's datasheet figures (from the built-in table or --voiceperf-spec KEY=VALUE)."""
    name = ctx.device_name
    values = dict(DATASHEET.get(name, {}))
    values.update(ctx.spec_overrides)
    if not values:
        raise Unmeasured(f"no datasheet figures for {name!r}; give them with --voiceperf-spec mem_bw=BYTES_PER_S "
                         "(and bf16_flops=, fp16_flops=)")
    return Measurement(values, info={"device_name": name})
