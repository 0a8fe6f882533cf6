"""On the device: how long the plugin's vLLM engine takes to start, cold and warm caches.

usage: python3 scripts/h200/start-times.py OUT MODEL[:QUANT] ...  (after scripts/h200/install.sh)
Each MODEL starts three times in fresh worker processes, exactly as a claim starts it (the plugin's
EngineProcess with the spec llm probes build): first with empty cache folders (VOICEPERF_CACHE,
VLLM_CACHE_ROOT and the JIT caches under a fresh HOME), then twice with what the first start left.
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
    from pytest_voiceperf.engines import EngineProcess

    rows = []
    for arg in sys.argv[2:]:
        model, _, quant = arg.partition(":")
        cache = Path(tempfile.mkdtemp(prefix="vp-cold-"))
        env = {"VOICEPERF_CACHE": str(cache / "vp"), "VLLM_CACHE_ROOT": str(cache / "vllm"),
               "HOME": str(cache / "home"), "VLLM_LOGGING_LEVEL": "INFO"}
        (cache / "home").mkdir()
        os.environ["VOICEPERF_CACHE"] = env["VOICEPERF_CACHE"]  # model_dir is written in this process
        spec = {"model": model, "config": models.get(model).config, "weights": None, "device": "cuda",
                "dtype": "bfloat16", "quantization": quant or None, "prefix_caching": True}
        for attempt in ("cold", "warm", "warm"):
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
