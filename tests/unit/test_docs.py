"""The documentation: the README is a front page, the guide in docs/ builds as a MkDocs site
with no warning, and every relative link in README, CONTRIBUTING and docs/ resolves."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found = [a or b for a, b in LINK.findall(text)]
    return [link for link in found if not re.match(r"^[a-z][a-z0-9+.-]*:", link)]


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 400, f"README.md has {len(lines)} lines: move the guide to docs/"
    linked = {link.split("#")[0] for link in relative_links(ROOT / "README.md")}
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md")}
    assert len(linked & pages) >= 5, "the README links fewer than five pages of docs/"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for link in relative_links(path):
        target, _, _anchor = link.partition("#")
        if target and not (path.parent / target).exists():
            broken.append(link)
    assert not broken, f"{path.relative_to(ROOT)}: broken links {broken}"


def test_every_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [page.name for page in DOCS.glob("*.md") if f": {page.name}" not in nav]
    assert not missing, f"mkdocs.yml nav lacks {missing}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    if shutil.which("mkdocs") is None and not os.environ.get("CI"):
        try:
            import mkdocs  # noqa: F401
        except ImportError:
            pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_comments_cite_the_architecture_page_not_a_missing_design_document() -> None:
    """Code and docs cite ``docs/architecture.md`` sections; no design document ships."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert not (ROOT / "DESIGN.md").exists()
    offenders = []
    for name in tracked:
        path = ROOT / name
        if path.suffix not in {".py", ".sql", ".md", ".toml", ".example", ".j2", ".html"}:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if re.search(r"\bDESIGN\s*(\.md\s*)?§", text):
            offenders.append(name)
    assert offenders == []
