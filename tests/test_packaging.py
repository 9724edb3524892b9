"""The wheel holds every package of the suite: a folder of suite/ that pyproject.toml's package
list leaves out is missing from every install but an editable one (the reusable workflow
installs the suite, and its plan job then failed on `import suite.untrusted`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_suite_package_is_in_the_wheel() -> None:
    # Read with a pattern, not tomllib: the suite supports Python 3.10, which has none.
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^\[tool\.setuptools\]\npackages = \[(.*?)\]", text, re.M | re.S)
    assert block is not None, "pyproject.toml has no [tool.setuptools] packages list"
    listed = set(re.findall(r'"([\w.]+)"', block[1]))
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "suite").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), f"pyproject.toml's packages lacks {sorted(found - listed)}"
