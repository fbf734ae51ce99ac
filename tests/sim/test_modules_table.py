"""docs/sim.md's module table is the one the tree gives (``python -m sim.modules_table``)."""

from __future__ import annotations

from pathlib import Path

from sim import modules_table


def test_the_committed_table_is_the_trees():
    text = modules_table.DOC.read_text()
    assert modules_table.replaced(text, modules_table.table()) == text, (
        "docs/sim.md's module table is stale: run python -m sim.modules_table")
    assert modules_table.main(["--check"]) == 0


def test_a_module_appears_with_its_docstrings_first_line(tmp_path: Path):
    for layer in ("", *modules_table.LAYERS):
        folder = tmp_path / "sim" / layer
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text(f'"""Layer {layer or "root"}.\n\nMore."""\n')
    (tmp_path / "sim" / "core" / "heat.py").write_text('"""Heat: a | b.\n\nDetails."""\nx = 1\n')
    table = modules_table.table(tmp_path)
    assert "| `sim/core/heat.py` | Heat: a \\| b. |" in table.splitlines()
    rows = [line.split(" | ")[0] for line in table.splitlines()[2:]]
    assert rows == ["| `sim/`", "| `sim/scenario/`", "| `sim/core/`", "| `sim/core/heat.py`",
                    "| `sim/fit/`", "| `sim/experiments/`"]
    doc = "a\n<!-- modules -->\nold\n<!-- /modules -->\nb\n"
    assert modules_table.replaced(doc, "new\n") == "a\n<!-- modules -->\nnew\n<!-- /modules -->\nb\n"
