"""The README's "From Python" example runs as written against a real dendrod."""
from __future__ import annotations

import re
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    """The first ```python block of the README's "From Python" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## From Python\n", 1)
    assert len(section) == 2, 'README.md has no "## From Python" section'
    body = section[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", body, re.S)
    assert block, 'the "From Python" section has no ```python block'
    return block.group(1)


def test_readme_python_example(server, monkeypatch, capsys):
    code = readme_example()
    assert "dendrogram(" in code and ".linkage" in code
    try:
        import matplotlib
        matplotlib.use("Agg")
    except ImportError:
        # Only the drawing line needs matplotlib: everything else still runs.
        lines = []
        for line in code.splitlines():
            if re.match(r"\s*dendrogram\(", line):
                print("README example: matplotlib is not installed; not running: " +
                      line.strip(), file=sys.__stderr__)
                line = "pass"
            lines.append(line)
        code = "\n".join(lines) + "\n"
    monkeypatch.setenv("DENDRO_SERVER", server.target)
    monkeypatch.delenv("DENDRO_API_KEY", raising=False)
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, "README.md (From Python)", "exec"), namespace)
    model, tree = namespace["model"], namespace["tree"]
    assert (model.name, model.method, tree.num_leaves) == ("example", "l2h", 20)
    assert tree.linkage.shape == (19, 4)
    assert capsys.readouterr().out.strip().endswith(";")
