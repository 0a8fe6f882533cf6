#!/usr/bin/env python3
"""One vLLM CPU engine (qwen3-0.6b, dummy bf16 weights, prefix caching on), then a sequence of steps, each
printed with its prefill tok/s: N = prefill of N tokens with a full warm-up, Nw0 = no warm-up, Nr = one
repeated prompt (cached), bN = a decode batch of N requests x 16 tokens, NxK = K repetitions.
The engine runs in this process (not a plugin worker): set the allocator variables yourself to compare.
usage: VOICEPERF_CACHE=DIR .venv/bin/python scripts/experiments/prefill-order.py 2048 b16 2048w0 ..."""
import sys
import time

from pytest_voiceperf import models
from pytest_voiceperf.engines.vllm_engine import Engine


def main():
    spec = models.get("qwen3-0.6b")
    e = Engine("qwen3-0.6b", config=spec.config, device="cpu", dtype="bfloat16", prefix_caching=True)
    print("start", e.start_s, flush=True)
    def p(n, **kw):
        r = e.prefill(n, **kw)
        return [round(x) for x in r["tok_s"]], r["cached_tokens"]
    seq = sys.argv[1:] or ["2048", "1024", "2048", "b64", "2048", "1024r", "2048", "1024", "2048", "b64", "2048x3"]
    for s in seq:
        t = time.perf_counter()
        if s.startswith("b"):
            e.batch(int(s[1:]), tokens=16, reps=1)
            out = "batch"
        elif s.endswith("r"):
            out = p(int(s[:-1]), reps=1, repeat_prompt=True)
        elif s.endswith("w0"):
            out = p(int(s[:-2]), reps=1, warmup=0)
        elif "x" in s:
            n, k = s.split("x")
            out = p(int(n), reps=int(k))
        else:
            out = p(int(s), reps=1)
        print(f"{s:8s} {time.perf_counter()-t:6.1f}s {out}", flush=True)

if __name__ == '__main__':
    main()
