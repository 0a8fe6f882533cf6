"""On the device: how long the plugin's vLLM engine takes to start, cold and warm caches.

usage: python3 scripts/h200/start-times.py OUT MODEL[:QUANT] ...  (after scripts/h200/install.sh)
Each MODEL starts three times, exactly as a claim starts it (the plugin's EngineProcess with the
spec llm probes build): in a fresh worker with an empty VOICEPERF_CACHE (the engines' compile and
JIT caches), again in the same worker (EngineProcess.restart, as the pool reuses a vLLM worker),
then in a fresh worker with the warm caches; each start is followed by one batch-1 decode
(128 tokens x 5), so a reused worker's figure can be compared with a fresh one's. Caches elsewhere on the machine
are not emptied: the first start of a fresh machine is the fully cold one.
Writes OUT/start-times.json (kept under results/ as .jsonl, one start a line) and every engine log in OUT/logs/.
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    (out / "logs").mkdir(parents=True, exist_ok=True)
    from pytest_voiceperf import models
    from pytest_voiceperf.engines import EngineProcess, caches

    rows = []
    for arg in sys.argv[2:]:
        model, _, quant = arg.partition(":")
        # an empty cache folder: the plugin puts vLLM's, inductor's, Triton's and FlashInfer's caches in it
        os.environ["VOICEPERF_CACHE"] = tempfile.mkdtemp(prefix="vp-cold-")
        for var in caches.DIRS:
            os.environ.pop(var, None)
        env = {"VLLM_LOGGING_LEVEL": "INFO"}
        spec = {"model": model, "config": models.get(model).config, "weights": None,
                "device": os.environ.get("VP_DEVICE", "cuda"),  # cpu: a smoke test here
                "dtype": "bfloat16", "quantization": quant or None, "prefix_caching": True}

        def decode(eng):
            r = eng.call("decode", timeout=600, tokens=128, reps=5, batch=1, prompt_len=32)
            return [round(x, 1) for x in r["tok_s"]]

        def row(eng, caches_state, worker, wall):
            info = dict(eng.info)
            r = {"model": eng.spec["model"], "quantization": eng.spec["quantization"], "caches": caches_state, "worker": worker,
                 "wall_s": round(wall, 2), "vllm_start_s": info.get("start_s"), "log": eng.log_path.name}
            if os.environ.get("VP_DECODE", "1") == "1":
                r["decode_tok_s"] = decode(eng)
            print(json.dumps(r), flush=True)
            rows.append(r)
            (out / "start-times.json").write_text(json.dumps(rows, indent=1))

        # a fresh worker on empty caches, the next start in the same worker (the pool's reuse of a
        # vLLM worker), a fresh worker on warm caches; each followed by one batch-1 decode
        t0 = time.perf_counter()
        eng = EngineProcess("vllm", spec, log_dir=out / "logs", start_timeout=900, env=env,
                            progress=lambda m: print("  ", m, flush=True))
        row(eng, "cold", "fresh", time.perf_counter() - t0)
        t0 = time.perf_counter()
        eng.restart(spec)
        row(eng, "warm", "reused", time.perf_counter() - t0)
        eng.close()
        t0 = time.perf_counter()
        eng = EngineProcess("vllm", spec, log_dir=out / "logs", start_timeout=900, env=env,
                            progress=lambda m: print("  ", m, flush=True))
        row(eng, "warm", "fresh", time.perf_counter() - t0)
        eng.close()


if __name__ == "__main__":
    main()
