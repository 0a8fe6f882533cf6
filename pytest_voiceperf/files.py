"""Reading a file nobody here wrote (a claim file from a pull request, a results file from a CI cache, an
audio path a claim names): stat first, a regular file of bounded size only, so that a link to /dev/zero,
a FIFO or a 10 GB file cannot hang a run or fill its memory."""
from __future__ import annotations

import os
import stat


class Refused(ValueError):
    """The file was not read; the message says why (without the path). ``kind``: missing, unreadable,
    irregular or oversize."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def check_regular(path, limit: int, what: str = "a file of this kind") -> int:
    """The size of a regular file of at most ``limit`` bytes; Refused otherwise."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise Refused(f"cannot be read ({exc.strerror})",
                      "missing" if isinstance(exc, FileNotFoundError) else "unreadable") from None
    if not stat.S_ISREG(st.st_mode):
        raise Refused("not a regular file (a device, FIFO or folder); give the path of a file", "irregular")
    if st.st_size > limit:
        raise Refused(f"file is {st.st_size} bytes, more than the {limit} allowed for {what}", "oversize")
    return st.st_size


def read_regular(path, limit: int, what: str = "a file of this kind") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (read with one byte more: a file that grew
    after the check is refused too); Refused otherwise."""
    check_regular(path, limit, what)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise Refused(f"cannot be read ({exc.strerror})", "unreadable") from None
    if len(data) > limit:
        raise Refused(f"file is more than the {limit} bytes allowed for {what}", "oversize")
    return data
