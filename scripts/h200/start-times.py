"""On the device: how long the plugin's vLLM engine takes to start, cold and warm caches.

usage: python3 scripts/h200/start-times.py OUT MODEL[:QUANT] ...  (after scripts/h200/install.sh)
Each MODEL starts three times in fresh worker processes, exactly as a claim starts it (the plugin's
EngineProcess with the spec llm probes build): first with an empty VOICEPERF_CACHE (the engines'
compile and JIT caches), then twice with what the first start left. Caches elsewhere on the machine
are not emptied: the first start of a fresh machine is the fully cold one.
Writes OUT/start-times.json and keeps every engine log in OUT/logs/.
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
        spec = {"model": model, "config": models.get(model).config, "weights": None, "device": "cuda",
                "dtype": "bfloat16", "quantization": quant or None, "prefix_caching": True}
        spec["device"] = os.environ.get("VP_DEVICE", "cuda")  # cpu: a smoke test here
        for attempt in ("cold", "warm", "warm")[: int(os.environ.get("VP_STARTS", "3"))]:
            t0 = time.perf_counter()
            eng = EngineProcess("vllm", spec, log_dir=out / "logs", start_timeout=900, env=env,
                                progress=lambda m: print("  ", m, flush=True))
            wall = time.perf_counter() - t0
            info = dict(eng.info)
            eng.close()
            row = {"model": model, "quantization": quant or None, "caches": attempt, "wall_s": round(wall, 2),
                   "vllm_start_s": info.get("start_s"), "warmup_s": info.get("start_warmup_s"),
                   "log": eng.log_path.name}
            print(json.dumps(row), flush=True)
            rows.append(row)
            (out / "start-times.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
