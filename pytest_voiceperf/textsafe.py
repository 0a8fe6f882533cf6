"""Text from files a user did not write (claim files, results files), made safe to print and to put
in Markdown: no control characters (an ANSI escape would drive the terminal), no bidirectional
overrides (they reorder what a reviewer reads)."""
from __future__ import annotations

import re

# C0 and C1 controls except tab and newline, DEL, and the bidirectional embeddings/overrides/isolates
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def plain(text: str) -> str:
    """``text`` without control characters (each shown as U+XXXX, so that nothing is hidden)."""
    return UNSAFE.sub(lambda m: f"<U+{ord(m.group()):04X}>", text) if UNSAFE.search(text) else text


def first_unsafe(text: str) -> str | None:
    m = UNSAFE.search(text)
    return None if m is None else f"U+{ord(m.group()):04X} at character {m.start() + 1}"
