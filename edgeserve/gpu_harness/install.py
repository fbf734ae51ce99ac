"""On the host: check the staged chunks against the manifest, join split wheels, install.

    python3 -m edgeserve.gpu_harness.install STAGED_DIR TARGET_DIR

``STAGED_DIR`` holds ``manifest.json`` and every chunk's files (copied there run by run); each
file's sha256 is checked, parts are joined in order and the joined wheel checked against its
own sha256, then ``pip install --no-index --no-deps --target TARGET_DIR`` installs them all
(the host's own packages stay as they are; put ``TARGET_DIR`` first on ``PYTHONPATH``). Exit 2
with the missing chunks named when some were not staged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from edgeserve.gpu_harness.pack import sha256


class StagingError(RuntimeError):
    """A chunk missing or a file whose hash does not match."""


def assemble(staged: Path) -> list[Path]:
    """The manifest's wheels, whole and checked, in ``staged/wheels``."""
    manifest = json.loads((staged / "manifest.json").read_text())
    missing = sorted({c["name"] for c in manifest["chunks"] for f in c["files"]
                      if not (staged / f["name"]).exists()})
    if missing:
        raise StagingError(f"chunks not staged yet: {', '.join(missing)}")
    for c in manifest["chunks"]:
        for f in c["files"]:
            if sha256(staged / f["name"]) != f["sha256"]:
                raise StagingError(f"{f['name']} (chunk {c['name']}) does not match its sha256")
    out = staged / "wheels"
    out.mkdir(exist_ok=True)
    parts: dict[str, list[dict[str, object]]] = {}
    for c in manifest["chunks"]:
        for f in c["files"]:
            parts.setdefault(str(f["wheel"]), []).append(f)
    wheels = []
    for name, files in parts.items():
        target = out / name
        with open(target, "wb") as w:
            for f in sorted(files, key=lambda f: int(str(f.get("part", 0)))):
                w.write((staged / str(f["name"])).read_bytes())
        if sha256(target) != manifest["wheels"][name]["sha256"]:
            raise StagingError(f"{name} joined from its parts does not match its sha256")
        wheels.append(target)
    return wheels


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    staged, target = Path(args[0]), Path(args[1])
    try:
        wheels = assemble(staged)
    except (StagingError, OSError) as e:
        print(f"edgeserve gpu install: {e}", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
           "--no-compile", "--upgrade", "--target", str(target), *map(str, wheels)]
    subprocess.run(cmd, check=True)
    print(f"installed {len(wheels)} wheels into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
