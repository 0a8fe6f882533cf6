"""The options of a voiceperf session (command line and ini) and the device it runs on."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import provenance


@dataclass
class Options:
    device: str = "auto"
    profile: str | None = None
    strict: bool = False
    json_path: str | None = None
    model_overrides: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)
    bins: dict[str, str] = field(default_factory=dict)  # native engines by name: library or build folder
    spec_overrides: dict[str, float] = field(default_factory=dict)
    timeout: float = 900.0
    timeout_cap: float | None = None  # --voiceperf-timeout or the ini, when the operator set one
    start_timeout: float = 600.0
    ceiling_slack: float = 0.03
    max_live_engines: int = 1
    min_rounds: int = 3
    max_rounds: int = 6
    round_seconds: float = 60.0
    noise_floor: float = 0.01  # the interval is never narrower than ±1% of the figure (run-to-run drift)
    disturbed_cpu: float = 0.25  # other processes' CPU cores above which a round is disturbed
    gate_max_rounds: int = 10  # with a baseline: rounds a case may take until the gate decides its figures
    disturbed_drops: int = 3  # rounds of a probe call dropped in a row as disturbed: the machine is disturbed now
    quiet_wait: float = 120.0  # after disturbed_drops rounds dropped in a row: seconds to wait for a quiet machine
    gate_round_seconds: float = 180.0  # with a baseline: seconds the rounds added for the gate may take per case
    save_min_rounds: int = 0  # a run saved as a baseline (--voiceperf-save): rounds per timed case at least
    llm_engine: str | None = None  # the family llm.* calls with engine "auto" run on (None: vllm, else transformers)
    engine_args: dict[str, dict] = field(default_factory=dict)  # engine family -> options (ini, command line)


# what a machine that can run CUDA has: the NVIDIA driver's device nodes (Linux, containers given a
# GPU) or WSL2's GPU paravirtualization device
_CUDA_DRIVER = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")


def _no_cuda_driver() -> bool:
    return os.name == "posix" and not any(os.path.exists(p) for p in _CUDA_DRIVER)


def resolve_device(requested: str) -> str:
    if requested == "cpu":
        return "cpu"
    if _no_cuda_driver():
        # no driver, no CUDA: known without importing torch (2.5 s of every session's start on the 2-core VM)
        return "cuda-missing" if requested == "cuda" else "cpu"
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if requested == "cuda":
        return "cuda" if has_cuda else "cuda-missing"
    return "cuda" if has_cuda else "cpu"


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return provenance.cpu_model()
