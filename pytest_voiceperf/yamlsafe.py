"""Load untrusted YAML claim files into plain Python data, with line numbers.

Claim files arrive in pull requests. This loader only ever *composes* the YAML
node tree with PyYAML's safe composer and converts it itself, so:

- no tag can construct an object (``!!python/...`` and every non-core tag is refused),
- anchors and aliases are refused outright (no "billion laughs" expansion),
- size, depth, scalar length and integer digits are bounded,
- every mapping key's line is kept, so errors can point at ``file:line``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

# The pure-Python composer: claim files are small, and libyaml's CParser objects were seen to
# crash the interpreter's garbage collector (a segfault in "Garbage-collecting") after many loads.
from yaml import SafeLoader as _Loader

MAX_FILE_BYTES = 256 * 1024
MAX_DEPTH = 12
MAX_SCALAR_CHARS = 4096
MAX_NODES = 20000
MAX_INT_DIGITS = 30

_CORE_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:seq",
    "tag:yaml.org,2002:map",
}


class YamlError(Exception):
    """A claim file that cannot be read; carries the line (1-based) when known."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass
class Loaded:
    data: Any
    lines: dict[tuple, int] = field(default_factory=dict)

    def line_of(self, path: tuple) -> int | None:
        """Line of the deepest known key on ``path`` (pydantic ``loc`` tuples work)."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)


_FLOAT12_RE = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+\.[0-9]*|[0-9]+)[eE][-+]?[0-9]{1,3}$")
_INT_RE = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")


def _scalar(node: yaml.ScalarNode) -> Any:
    value = node.value
    line = node.start_mark.line + 1
    if len(value) > MAX_SCALAR_CHARS:
        raise YamlError(
            f"a value of {len(value)} characters is longer than the {MAX_SCALAR_CHARS} allowed; shorten it",
            line,
        )
    tag = node.tag
    if tag == "tag:yaml.org,2002:str":
        if not node.style and _FLOAT12_RE.match(value):
            return float(value)  # YAML 1.2 reads 1.0e15 as a number; PyYAML (1.1) would keep a string
        return value
    if tag == "tag:yaml.org,2002:null":
        return None
    if tag == "tag:yaml.org,2002:bool":
        return value.lower() in ("true", "yes", "on")
    if tag == "tag:yaml.org,2002:int":
        digits = value.lstrip("+-").replace("_", "")
        if len(digits) > MAX_INT_DIGITS:
            raise YamlError(f"integer with {len(digits)} digits is too large; use a float such as 1.5e12", line)
        try:
            return int(value.replace("_", ""), 0) if not _INT_RE.match(value) else int(value.replace("_", ""))
        except ValueError:
            raise YamlError(f"cannot read {value!r} as an integer", line) from None
    if tag == "tag:yaml.org,2002:float":
        try:
            out = float(value.replace("_", ""))
        except ValueError:
            low = value.lower()
            if low in (".nan",):
                out = math.nan
            elif low in (".inf", "+.inf"):
                out = math.inf
            elif low == "-.inf":
                out = -math.inf
            else:
                raise YamlError(f"cannot read {value!r} as a number", line) from None
        return out
    raise YamlError(f"the tag {tag!r} is not allowed in claim files; remove it", line)


def load(text: str | bytes) -> Loaded:
    """Parse one YAML document of a claim file. Raises :class:`YamlError`."""
    if isinstance(text, bytes):
        if len(text) > MAX_FILE_BYTES:
            raise YamlError(f"file is {len(text)} bytes, more than the {MAX_FILE_BYTES} allowed for a claim file", 1)
        if b"\x00" in text:
            raise YamlError("this is a binary file, not YAML text; a claim file must be UTF-8 YAML", 1)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YamlError(f"not UTF-8 text ({exc.reason} at byte {exc.start}); save the file as UTF-8", 1) from None
    if len(text) > MAX_FILE_BYTES:
        raise YamlError(f"file is longer than the {MAX_FILE_BYTES} characters allowed for a claim file", 1)
    if not text.strip():
        raise YamlError("the file is empty; write a claim (see docs/claims.md) or delete the file", 1)
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or str(exc)
        raise YamlError(f"malformed YAML: {problem}" + (f" ({exc.context})" if exc.context else ""), line) from None
    except yaml.YAMLError as exc:
        raise YamlError(f"malformed YAML: {exc}", 1) from None
    except RecursionError:
        raise YamlError(f"structure nested too deeply (more than {MAX_DEPTH} levels)", 1) from None
    if node is None:
        raise YamlError("the file holds no YAML document; write a claim or delete the file", 1)

    loaded = Loaded(data=None)
    count = [0]
    anchors_seen: set[int] = set()

    def convert(n: yaml.Node, path: tuple, depth: int) -> Any:
        count[0] += 1
        line = n.start_mark.line + 1
        if count[0] > MAX_NODES:
            raise YamlError(f"more than {MAX_NODES} values in one claim file", line)
        if depth > MAX_DEPTH:
            raise YamlError(f"structure nested more than {MAX_DEPTH} levels deep; flatten it", line)
        if id(n) in anchors_seen:
            raise YamlError("anchors and aliases (&name / *name) are not allowed in claim files; write the value out", line)
        anchors_seen.add(id(n))
        if n.tag not in _CORE_TAGS:
            raise YamlError(f"the tag {n.tag!r} is not allowed in claim files; remove it", line)
        if isinstance(n, yaml.ScalarNode):
            return _scalar(n)
        if isinstance(n, yaml.SequenceNode):
            return [convert(child, path + (i,), depth + 1) for i, child in enumerate(n.value)]
        if isinstance(n, yaml.MappingNode):
            out: dict = {}
            for knode, vnode in n.value:
                if knode.tag == "tag:yaml.org,2002:merge":
                    raise YamlError("merge keys (<<) are not allowed in claim files; write the keys out", knode.start_mark.line + 1)
                if not isinstance(knode, yaml.ScalarNode):
                    raise YamlError("a mapping key must be a plain name", knode.start_mark.line + 1)
                key = _scalar(knode)
                if not isinstance(key, str):
                    key = str(key)
                kline = knode.start_mark.line + 1
                if key in out:
                    raise YamlError(f"the key {key!r} appears twice in the same mapping", kline)
                loaded.lines[path + (key,)] = kline
                out[key] = convert(vnode, path + (key,), depth + 1)
            return out
        raise YamlError("unsupported YAML node", line)  # pragma: no cover

    loaded.lines[()] = node.start_mark.line + 1
    try:
        loaded.data = convert(node, (), 0)
    except RecursionError:
        raise YamlError(f"structure nested too deeply (more than {MAX_DEPTH} levels)", 1) from None
    return loaded
