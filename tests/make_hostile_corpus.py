"""Write tests/hostile/*.yaml: hostile and malformed claim files (run to regenerate).

Every file must come out as one clean `error` verdict naming the file (and line), with no
traceback, no side effect (each payload would create a file named `pwned*` or reach the
network if it ever ran) and without stopping a valid claim beside it.
"""
from pathlib import Path

HERE = Path(__file__).parent / "hostile"

VALID_HEAD = """id: {id}
title: hostile
statement: hostile
measure:
  m: {{probe: hw.read_bandwidth, mib: 8}}
"""


def claim(id, metric="m.read_bw", expect="{min: 1}", extra="", measure=None):
    head = VALID_HEAD.format(id=id)
    if measure is not None:
        head = head.replace("  m: {probe: hw.read_bandwidth, mib: 8}\n", measure)
    return head + f"metric: {metric}\nunit: B/s\nexpect: {expect}\n" + extra


def corpus() -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {}
    # 1. code execution through YAML tags
    tags = [
        "!!python/object/apply:os.system ['touch pwned-tag1']",
        "!!python/object/apply:subprocess.check_output [['touch', 'pwned-tag2']]",
        "!!python/name:os.system",
        "!!python/module:os",
        "!!python/object/new:os.system ['touch pwned-tag3']",
        "!!python/tuple [1, 2]",
        "!!binary aGVsbG8=",
        "!!set {a, b}",
        "!!omap [a: 1]",
        "!!timestamp 2001-12-14",
        "!custom thing",
        "!<tag:yaml.org,2002:python/object/apply:os.system> ['touch pwned-tag4']",
    ]
    for i, t in enumerate(tags):
        files[f"tag-{i:02d}.yaml"] = f"id: {t}\ntitle: t\n"
        files[f"tag-deep-{i:02d}.yaml"] = claim(f"tag-deep-{i}", extra=f"reference: {{value: {t}}}\n")
    # 2. anchors, aliases, billion laughs, merge keys
    laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    prev = "a"
    for k in "bcdefghi":
        laughs += f"{k}: &{k} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
        prev = k
    files["billion-laughs.yaml"] = laughs
    files["alias-simple.yaml"] = claim("alias-simple", extra="title2: &t x\nnote: *t\n")
    files["alias-in-params.yaml"] = claim("alias-params", extra="params:\n  m: &m [1, 2]\n  n: *m\n")
    files["merge-key.yaml"] = "base: &b {id: x}\nclaim:\n  <<: *b\n"
    files["recursive-alias.yaml"] = "a: &a [*a]\n"
    # 3. expression attacks (metric, when, profiles)
    exprs = [
        "__import__('os').system('touch pwned-e1')",
        "open('pwned-e2', 'w')",
        "m.read_bw.__class__.__mro__",
        "().__class__.__bases__[0].__subclasses__()",
        "[c for c in ().__class__.__base__.__subclasses__()]",
        "eval('1')",
        "exec('import os')",
        "getattr(m, 'read_bw')",
        "globals()",
        "locals()",
        "lambda: 1",
        "(lambda: __import__('os'))()",
        "m.__dict__",
        "m._values",
        "m['read_bw']",
        "{'a': 1}",
        "[1, 2, 3]",
        "f'{m}'",
        "m.read_bw if True else __import__('os')",
        "print('hi')",
        "compile('1', 'x', 'eval')",
        "vars()",
        "dir()",
        "type(1)",
        "max.__self__",
        "9 ** 9 ** 9 ** 9",
        "'a' * 10 ** 12",
        "1 +",
        "m.read_bw; import os",
        "import os",
        "m.nonexistent_output",
        "undefined_name * 2",
        "x := 3",
        "await m",
        "yield 1",
        "*m",
        "m.read_bw @ m.read_bw",
        "m.read_bw << 100000000",
        "(" * 250 + "1" + ")" * 250,
        "1" + " + 1" * 400,
    ]
    for i, e in enumerate(exprs):
        q = e.replace("'", "''")
        files[f"metric-{i:02d}.yaml"] = claim(f"metric-{i}", metric=f"'{q}'")
    for i, e in enumerate(exprs[:12]):
        q = e.replace("'", "''")
        files[f"when-{i:02d}.yaml"] = claim(f"when-{i}", extra=f"xfail: {{reason: r, when: '{q}'}}\n")
        files[f"profile-{i:02d}.yaml"] = claim(f"profile-{i}", extra=f"profiles: {{cpu: '{q}'}}\n")
    # 4. params substitution attacks
    subs = ["{0.__class__}", "{m.__class__}", "{model.__init__.__globals__}", "{model!r}", "{model:>99999999}",
            "{model[0]}", "{", "}", "{{model}", "{__import__}"]
    for i, s in enumerate(subs):
        files[f"subst-{i:02d}.yaml"] = claim(
            f"subst-{i}", extra="params:\n  model: [a]\n",
            measure=f"  m: {{probe: hw.read_bandwidth, dtype: '{s}'}}\n")
    # 5. sizes: huge numbers, long strings, deep nesting, many params
    files["huge-int.yaml"] = claim("huge-int", expect="{min: " + "9" * 5000 + "}")
    files["huge-int-param.yaml"] = claim("huge-int-param", extra="params:\n  n: [" + "1" * 100 + "]\n")
    files["huge-float.yaml"] = claim("huge-float", expect="{min: 1e999999}")
    files["nan-bound.yaml"] = claim("nan-bound", expect="{between: [.nan, 1]}")
    files["long-string.yaml"] = claim("long-string", extra="reference: {value: '" + "x" * 100000 + "'}\n")
    files["long-id.yaml"] = claim("a" * 5000)
    files["deep-nesting.yaml"] = "id: deep\nreference: " + "[" * 5000 + "]" * 5000 + "\n"
    files["deep-mapping.yaml"] = "id: deep2\nreference:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(60)) + "  " * 61 + "v\n"
    files["many-params.yaml"] = claim("many-params", extra="params:\n" + "".join(
        f"  p{i}: [1, 2, 3, 4, 5, 6, 7, 8]\n" for i in range(12)))
    files["wide-param.yaml"] = claim("wide-param", extra="params:\n  p: [" + ", ".join(map(str, range(5000))) + "]\n")
    files["huge-file.yaml"] = "id: big\n" + "# padding\n" * 60000
    files["many-keys.yaml"] = "id: many\n" + "".join(f"k{i}: {i}\n" for i in range(30000))
    # 6. encodings and binary
    files["binary.yaml"] = bytes(range(256)) * 4
    files["utf16.yaml"] = "id: utf16\ntitle: t\n".encode("utf-16")
    files["latin1.yaml"] = "id: caf\xe9\n".encode("latin-1")
    files["nul-byte.yaml"] = b"id: a\x00b\n"
    files["bom-only.yaml"] = b"\xef\xbb\xbf"
    files["empty.yaml"] = ""
    files["whitespace.yaml"] = "   \n\n\t\n"
    files["comment-only.yaml"] = "# nothing here\n"
    files["null-doc.yaml"] = "~\n"
    files["multi-doc.yaml"] = claim("multi-a") + "---\n" + claim("multi-b")
    # 7. wrong shapes and types
    files["list-top.yaml"] = "- id: a\n- id: b\n"
    files["scalar-top.yaml"] = "just a string\n"
    files["int-top.yaml"] = "42\n"
    files["measure-list.yaml"] = claim("measure-list", measure="  - hw.read_bandwidth\n").replace("measure:\n  - ", "measure:\n  - ")
    files["measure-empty.yaml"] = claim("measure-empty", measure="").replace("measure:\n", "measure: {}\n")
    files["expect-empty.yaml"] = claim("expect-empty", expect="{}")
    files["expect-two.yaml"] = claim("expect-two", expect="{between: [0, 1], approx: 0.5}")
    files["expect-string.yaml"] = claim("expect-string", expect="big")
    files["between-one.yaml"] = claim("between-one", expect="{between: [1]}")
    files["between-strings.yaml"] = claim("between-strings", expect="{between: [a, b]}")
    files["lo-gt-hi.yaml"] = claim("lo-gt-hi", expect="{between: [2, 1]}")
    files["bad-id.yaml"] = claim("Bad_ID with spaces")
    files["id-int.yaml"] = claim("12345").replace("id: 12345", "id: [12345]")
    files["params-dict.yaml"] = claim("params-dict", extra="params:\n  model: {a: 1}\n")
    files["params-empty.yaml"] = claim("params-empty", extra="params:\n  model: []\n")
    files["params-nested.yaml"] = claim("params-nested", extra="params:\n  model: [[1, 2]]\n")
    files["param-bad-name.yaml"] = claim("param-bad-name", extra="params:\n  '__class__.x': [1]\n")
    files["requires-bad.yaml"] = claim("requires-bad", extra="requires: [rm -rf /]\n")
    files["requires-str.yaml"] = claim("requires-str", extra="requires: cuda\n")
    files["xfail-no-reason.yaml"] = claim("xfail-no-reason", extra="xfail: {when: 'True'}\n")
    files["unknown-key.yaml"] = claim("unknown-key", extra="exec: touch pwned-k\n")
    files["unknown-probe.yaml"] = claim("unknown-probe", measure="  m: {probe: os.system}\n")
    files["probe-arg-dict.yaml"] = claim("probe-arg-dict", measure="  m: {probe: hw.read_bandwidth, mib: {a: 1}}\n")
    files["probe-unknown-arg.yaml"] = claim("probe-unknown-arg", measure="  m: {probe: hw.read_bandwidth, cmd: ls}\n")
    files["alias-bad.yaml"] = claim("alias-bad", measure="  'm.x': hw.read_bandwidth\n")
    files["duplicate-key.yaml"] = claim("duplicate-key") + "metric: m.read_bw\n"
    files["tabs.yaml"] = "id: tabs\n\ttitle: t\n"
    files["unclosed.yaml"] = "id: [unclosed\n"
    files["bad-indent.yaml"] = "id: a\n  title: b\n c: d\n"
    files["network-url.yaml"] = claim("network-url", extra="reference: {value: 1}\n",
                                      measure="  m: {probe: hw.read_bandwidth, dtype: 'http://127.0.0.1:9/x'}\n")
    files["path-traversal.yaml"] = claim("path-traversal", measure="  m: {probe: hw.read_bandwidth, dtype: '../../etc/passwd'}\n")
    files["timeout-negative.yaml"] = claim("timeout-negative", extra="timeout: -5\n")
    files["noise-zero.yaml"] = claim("noise-zero", extra="noise: {max_rel_spread: 0}\n")
    return files


def main() -> None:
    HERE.mkdir(exist_ok=True)
    for old in HERE.glob("*.yaml"):
        old.unlink()
    for name, content in corpus().items():
        p = HERE / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    print(f"wrote {len(corpus())} files to {HERE}")


if __name__ == "__main__":
    main()
