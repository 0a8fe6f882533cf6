"""How much of llama.cpp's decode speed belongs to the engine process: N fresh engine processes in a
row, each measuring one round (3 decodes of 64 tokens, qwen3-0.6b q4_0, random weights) on this CPU.

    .venv/bin/python scripts/experiments/llamacpp-fresh-processes.py 6

Prints each process's decodes in tok/s. On the 2-core dev VM (2026-12-06), six processes gave means
12.14-13.00 tok/s, with 1-2% within each. That is why the llama.cpp family says fresh_rounds.
"""
import sys
import time
from pathlib import Path

from pytest_voiceperf.probes import load_registry
from pytest_voiceperf.context import ProbeContext
from pytest_voiceperf.options import Options
from pytest_voiceperf.session import VoiceperfSession

ARGS = {"batch": 1, "dtype": "bfloat16", "engine": "llamacpp", "model": "qwen3-0.6b", "prompt_len": 32,
        "quantization": "q4_0", "reps": 3, "tokens": 64}


def main(n: int) -> None:
    reg = load_registry()
    decode = reg.get("llm.decode")
    root = Path(__file__).resolve().parents[2]  # the repository
    for i in range(n):
        s = VoiceperfSession(Options(device="cpu"), reg, root)  # a new session: a new engine process
        try:
            m = decode(ProbeContext(s, time.monotonic() + 300), **ARGS)
            print(i, [round(x, 2) for x in m.repetitions["tok_s"]], flush=True)
        finally:
            s.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
