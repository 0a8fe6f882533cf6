"""pytest-voiceperf: voice-agent inference performance claims as pytest tests."""
__version__ = "0.1.0"
