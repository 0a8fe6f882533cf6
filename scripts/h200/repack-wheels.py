"""On the device: zip each carried wheel tree (/tmp/wtree/NAME.whl/) back into /tmp/wheels/NAME.whl.

The files are the wheel's own (prepare-wheel-parts.sh unpacked them); pip checks each against the
wheel's RECORD when it installs, so a damaged part fails the install instead of installing."""
import os
import sys
import zipfile
from pathlib import Path

src, dst = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/wtree"), Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/wheels")
dst.mkdir(parents=True, exist_ok=True)
for tree in sorted(src.iterdir()):
    out = dst / tree.name
    if out.exists():
        continue
    with zipfile.ZipFile(str(out) + ".part", "w", zipfile.ZIP_STORED) as z:
        for root, dirs, files in os.walk(tree):
            dirs.sort()
            for f in sorted(files):
                p = Path(root) / f
                z.write(p, p.relative_to(tree).as_posix())
    os.replace(str(out) + ".part", out)
print(f"{len(list(dst.glob('*.whl')))} wheels in {dst}")
