#!/usr/bin/env bash
# Here (the GPU machine has no espeak-ng): make the ASR timing speech the probes would make, as
# .work/asr-audio/speech.wav (16 kHz, 6.6 s), to carry (carry: [".work"]) and pass with
# --voiceperf-data asr-audio=.work/asr-audio/speech.wav
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .work/asr-audio
.venv/bin/python - <<'PY'
import shutil
from pytest_voiceperf.probes.asr import SPEECH_TEXT, _espeak
made = _espeak(SPEECH_TEXT)
if made is None:
    raise SystemExit("espeak-ng not found: apt-get install espeak-ng sox")
shutil.copy(made["path"], ".work/asr-audio/speech.wav")
print(".work/asr-audio/speech.wav:", made["source"])
PY
