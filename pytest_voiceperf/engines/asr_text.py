"""Speech inputs and the character error rate: audio files, manifests (NeMo's JSON lines) and text
normalisation, shared by the ASR engines and probes."""
from __future__ import annotations

import json
import math
import re
import statistics
import unicodedata
from pathlib import Path


def load_audio(path: str, sr: int = 16000):
    """Mono float32 samples at ``sr`` (resampled if the file has another rate)."""
    import numpy as np
    import soundfile as sf

    data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    data = data.mean(axis=1)
    if rate != sr:
        from scipy.signal import resample_poly

        g = math.gcd(int(rate), sr)
        data = resample_poly(data, sr // g, int(rate) // g).astype(np.float32)
    return np.ascontiguousarray(data, dtype=np.float32)


def read_manifest(path: str) -> list[dict]:
    """NeMo manifest: one JSON object per line with audio_filepath and text (relative paths are
    taken from the manifest's folder)."""
    base = Path(path).resolve().parent
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise ValueError(f"{path}:{n}: not a JSON line") from None
        if "audio_filepath" not in row or "text" not in row:
            raise ValueError(f"{path}:{n}: a NeMo manifest line needs audio_filepath and text")
        p = Path(row["audio_filepath"])
        row["audio_filepath"] = str(p if p.is_absolute() else base / p)
        out.append(row)
    return out


_TAG = re.compile(r"<[^<>]{1,20}>")
_PUNCT = re.compile(r"[^\w\s']|_", re.UNICODE)


def normalize_text(s: str) -> str:
    """NFC, lower case, language tags like <ko-KR> and punctuation removed, spaces collapsed."""
    s = unicodedata.normalize("NFC", s or "")
    s = _TAG.sub(" ", s).lower()
    s = _PUNCT.sub(" ", s)
    return " ".join(s.split())


def cer_scores(refs: list[str], hyps: list[str]) -> dict:
    """jiwer CER per utterance (an empty hypothesis scores 1.0), their mean, and the corpus CER."""
    import jiwer

    per, empty = [], 0
    rn = [normalize_text(r) for r in refs]
    hn = [normalize_text(h) for h in hyps]
    for r, h in zip(rn, hn):
        if not h:
            empty += 1
        if not r:
            per.append(0.0 if not h else 1.0)
            continue
        per.append(float(jiwer.cer(r, h)) if h else 1.0)
    pairs = [(r, h) for r, h in zip(rn, hn) if r]
    corpus = float(jiwer.cer([r for r, _ in pairs], [h if h else "" for _, h in pairs])) if pairs else 0.0
    return {"cer": statistics.fmean(per) if per else 0.0, "corpus_cer": corpus, "empty": empty,
            "n": len(per), "per_utterance": per}


# -- the engine -------------------------------------------------------------------------------
