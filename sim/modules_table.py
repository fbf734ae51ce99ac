"""The module table of docs/sim.md, written from the tree: each module's docstring, first line.

    python -m sim.modules_table          # rewrite the table in docs/sim.md
    python -m sim.modules_table --check  # exit 1 if the committed table is not the tree's

The table lies between the markers ``<!-- modules -->`` and ``<!-- /modules -->``; it lists the
package root, then each layer from the bottom up (``scenario``, ``core``, ``fit``,
``experiments``), a layer's own row first. It reads the sources with :mod:`ast`, not importing
them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("scenario", "core", "fit", "experiments")
START, END = "<!-- modules -->", "<!-- /modules -->"
DOC = ROOT / "docs" / "sim.md"


def first_line(path: Path) -> str:
    """The first line of the module's docstring (``""`` without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _rows(folder: Path, root: Path) -> list[tuple[str, str]]:
    rel = folder.relative_to(root).as_posix()
    rows = [(f"`{rel}/`", first_line(folder / "__init__.py"))]
    for f in sorted(folder.glob("*.py")):
        if f.name != "__init__.py":
            rows.append((f"`{rel}/{f.name}`", first_line(f)))
    return rows


def table(root: Path = ROOT) -> str:
    """The table as Markdown (no markers)."""
    rows = _rows(root / "sim", root)
    for layer in LAYERS:
        rows += _rows(root / "sim" / layer, root)
    lines = ["| module | concept |", "|---|---|"]
    lines += ["| " + m + " | " + c.replace("|", "\\|") + " |" for m, c in rows]
    return "\n".join(lines) + "\n"


def replaced(text: str, new_table: str) -> str:
    """``text`` with the part between the markers replaced by ``new_table``."""
    a, b = text.index(START) + len(START), text.index(END)
    return text[:a] + "\n" + new_table + text[b:]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = DOC.read_text()
    new = replaced(text, table())
    if args == ["--check"]:
        if new != text:
            print(f"{DOC}: the module table is not the tree's; run python -m sim.modules_table",
                  file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
