"""The device a session runs on."""
from pytest_voiceperf import options


def test_without_an_nvidia_driver_the_device_is_the_cpu_without_asking_torch(monkeypatch):
    monkeypatch.setattr(options, "_CUDA_DRIVER", ("/nonexistent/nvidiactl",))
    monkeypatch.setattr(options.os, "name", "posix")
    assert options._no_cuda_driver()
    assert options.resolve_device("auto") == "cpu"
    assert options.resolve_device("cuda") == "cuda-missing"  # asked for: the run says it has none
    assert options.resolve_device("cpu") == "cpu"


def test_with_a_driver_torch_decides(monkeypatch, tmp_path):
    import torch

    (tmp_path / "nvidiactl").write_text("")
    monkeypatch.setattr(options, "_CUDA_DRIVER", (str(tmp_path / "nvidiactl"),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not options._no_cuda_driver()
    assert options.resolve_device("auto") == "cpu" and options.resolve_device("cuda") == "cuda-missing"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert options.resolve_device("auto") == "cuda"
