"""parakeet.cpp engine: a C++/ggml port of NVIDIA's FastConformer ASR models, through its C API.

No package registry has parakeet.cpp: the user builds it (``-DPARAKEET_SHARED=ON``) and names the
library with ``--voiceperf-bin parakeet=PATH`` (``libparakeet.so`` or the build folder). The model
is the one the NeMo engine times, written by that engine as a GGUF per look-ahead
(:mod:`.fastconformer_gguf`), so both engines run the same network and weights on the same samples.

Timing: the clip is fed through the streaming C API (``parakeet_capi_stream_feed``) one chunk of
samples per call, as a live client would; the figure is the sum of the feed and finalize times
over the audio seconds. Each feed also computes that chunk's log-mel features, which NeMo's
figure leaves out (its features are computed up front): the port is timed doing slightly more.
"""
from __future__ import annotations

import ctypes
import os
import statistics
import time
from pathlib import Path

from ..exceptions import Unmeasured
from ..stats import nearest_rank
from .worker import progress, warming

WARM_FEEDS = 4  # a later round's warm-up, as NeMo's (engines/nemo_engine.WARM_STEPS)
THREADS_SYMBOL = "_ZN2pk15set_num_threadsEi"  # pk::set_num_threads(int): not in the C API


def find_library(path: str) -> str:
    p = Path(path)
    if p.is_file():
        return str(p)
    for cand in sorted(p.rglob("libparakeet.so*")) if p.is_dir() else []:
        if cand.is_file():
            return str(cand)
    raise Unmeasured(f"no libparakeet.so at {path} (build parakeet.cpp with -DPARAKEET_SHARED=ON)")


class Engine:
    def __init__(self, library: str = "", model: str = "", device: str = "cpu", **_):
        if device == "cuda":
            os.environ.setdefault("PARAKEET_DEVICE", "cuda")
        else:
            os.environ["PARAKEET_DEVICE"] = "cpu"
        self.library = find_library(library)
        t0 = time.perf_counter()
        try:
            lib = ctypes.CDLL(self.library)
        except OSError as exc:
            raise Unmeasured(f"cannot load {self.library}: {exc}") from None
        lib.parakeet_capi_load.restype = ctypes.c_void_p
        lib.parakeet_capi_load.argtypes = [ctypes.c_char_p]
        lib.parakeet_capi_free.argtypes = [ctypes.c_void_p]
        lib.parakeet_capi_last_error.restype = ctypes.c_char_p
        lib.parakeet_capi_last_error.argtypes = [ctypes.c_void_p]
        lib.parakeet_capi_stream_begin.restype = ctypes.c_void_p
        lib.parakeet_capi_stream_begin.argtypes = [ctypes.c_void_p]
        # returned strings are freed with parakeet_capi_free_string: keep them as raw pointers
        lib.parakeet_capi_stream_feed.restype = ctypes.c_void_p
        lib.parakeet_capi_stream_feed.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int,
                                                  ctypes.POINTER(ctypes.c_int)]
        lib.parakeet_capi_stream_finalize.restype = ctypes.c_void_p
        lib.parakeet_capi_stream_finalize.argtypes = [ctypes.c_void_p]
        lib.parakeet_capi_stream_free.argtypes = [ctypes.c_void_p]
        lib.parakeet_capi_free_string.argtypes = [ctypes.c_void_p]
        self.abi = int(lib.parakeet_capi_abi_version()) if hasattr(lib, "parakeet_capi_abi_version") else None
        try:
            self._set_threads = getattr(lib, THREADS_SYMBOL)
            self._set_threads.argtypes = [ctypes.c_int]
        except AttributeError:
            raise Unmeasured(f"{self.library} exports no {THREADS_SYMBOL} (pk::set_num_threads): the thread "
                             "count could not be matched with NeMo's") from None
        self.lib = lib
        self.model = model
        self.device = device
        self.load_s = time.perf_counter() - t0
        self._ctx: dict[str, int] = {}  # loaded GGUFs
        self._first: dict[tuple, str] = {}  # (gguf, clip, piece) streamed whole once: its text

    def info(self) -> dict:
        return {"engine": "parakeet.cpp", "library": self.library, "capi_abi": self.abi, "model": self.model,
                "device": self.device, "ggufs_loaded": len(self._ctx)}

    def _load(self, gguf: str) -> int:
        if gguf not in self._ctx:
            progress(f"parakeet.cpp: loading {os.path.basename(gguf)}")
            ctx = self.lib.parakeet_capi_load(gguf.encode())
            if not ctx:
                raise RuntimeError(f"parakeet_capi_load({gguf}) failed")
            self._ctx[gguf] = ctx
        return self._ctx[gguf]

    def _text(self, ptr) -> str:
        if not ptr:
            return ""
        s = ctypes.string_at(ptr).decode("utf-8", "replace")
        self.lib.parakeet_capi_free_string(ptr)
        return s

    def _pass(self, ctx: int, pcm, piece: int, max_feeds: int = 0) -> dict:
        """One streaming pass: the clip fed ``piece`` samples per call (the first ``max_feeds`` pieces
        only, when given); per-call seconds and the text."""
        lib = self.lib
        s = lib.parakeet_capi_stream_begin(ctx)
        if not s:
            raise RuntimeError(f"parakeet_capi_stream_begin failed: {lib.parakeet_capi_last_error(ctx)!r}")
        times, text = [], []
        eou = ctypes.c_int(0)
        try:
            for k, i in enumerate(range(0, len(pcm), piece)):
                if max_feeds and k >= max_feeds:
                    break
                part = pcm[i:i + piece]
                ptr = part.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
                t0 = time.perf_counter()
                out = lib.parakeet_capi_stream_feed(s, ptr, len(part), ctypes.byref(eou))
                times.append(time.perf_counter() - t0)
                if not out:
                    raise RuntimeError(f"parakeet_capi_stream_feed failed: {lib.parakeet_capi_last_error(ctx)!r}")
                text.append(self._text(out))
            t0 = time.perf_counter()
            out = lib.parakeet_capi_stream_finalize(s)
            times.append(time.perf_counter() - t0)
            text.append(self._text(out))
        finally:
            lib.parakeet_capi_stream_free(s)
        return {"times": times, "text": "".join(text)}

    @staticmethod
    def _clip(clip: str, chunk_ms: float, sample_rate: int):
        """The samples (float32) and the piece fed per call (one chunk of audio)."""
        import numpy as np

        pcm = np.ascontiguousarray(np.load(clip), dtype=np.float32)
        return pcm, max(1, int(round(chunk_ms * sample_rate / 1000.0)))

    def stream(self, gguf: str, clip: str, chunk_ms: float, sample_rate: int = 16000, threads: int = 1,
               reps: int = 1) -> dict:
        ctx = self._load(gguf)
        nthreads = int(threads) if int(threads or 0) > 0 else (os.cpu_count() or 1)
        self._set_threads(nthreads)
        pcm, piece = self._clip(clip, chunk_ms, sample_rate)
        dur = len(pcm) / float(sample_rate)
        key = (gguf, clip, piece)
        with warming():
            if key not in self._first:  # a whole untimed pass builds every graph this clip needs
                progress(f"parakeet.cpp: streaming {chunk_ms:.0f} ms pieces (untimed pass)")
                self._first[key] = self._pass(ctx, pcm, piece)["text"]
            else:  # a later round re-primes caches with the first pieces (the first chunk's shape differs)
                progress(f"parakeet.cpp: streaming {chunk_ms:.0f} ms pieces (warm-up: {WARM_FEEDS} pieces)")
                self._pass(ctx, pcm, piece, max_feeds=WARM_FEEDS)
        rtfs: list[float] = []
        lat: list[float] = []  # per feed (the finalize call is not a chunk's latency)
        for i in range(max(1, int(reps))):
            progress(f"parakeet.cpp: streaming {chunk_ms:.0f} ms pieces, timed pass {i + 1}/{reps}")
            r = self._pass(ctx, pcm, piece)
            rtfs.append(sum(r["times"]) / dur)
            lat.extend(r["times"][:-1])
        return {"rtf": statistics.median(rtfs), "rtf_runs": rtfs, "audio_s": dur, "threads": nthreads,
                "feeds": len(lat) // max(1, int(reps)), "piece_samples": piece,
                "latency_median_s": statistics.median(lat), "latency_p95_s": nearest_rank(lat, 0.95),
                "text": self._first[key]}

    def transcript(self, gguf: str, clip: str, chunk_ms: float, sample_rate: int = 16000) -> dict:
        """The port's transcript of the clip (its first, untimed pass when ``stream`` ran it)."""
        pcm, piece = self._clip(clip, chunk_ms, sample_rate)
        key = (gguf, clip, piece)
        if key not in self._first:
            self._first[key] = self._pass(self._load(gguf), pcm, piece)["text"]
        return {"text": self._first[key]}

    def close(self):
        for ctx in self._ctx.values():
            self.lib.parakeet_capi_free(ctx)
        self._ctx = {}
