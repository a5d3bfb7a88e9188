"""Regenerate the README's dashboard screenshots: ``python -m tests.integration.serve.screenshots``.

Runs the browser test that visits every page at 1,440 and 375 px with ``SCREENSHOTS_DIR`` set,
so the pictures show the seeded data of tests/integration/serve/browser.py through the real ``awa serve``
and Chromium; writes docs/screenshots/{overview,job}[-mobile].png.
"""

from __future__ import annotations

import os
import subprocess
import sys
from tests.helpers import ROOT

OUT = ROOT / "docs" / "screenshots"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SCREENSHOTS_DIR": str(OUT)}
    test = "tests/integration/serve/test_browser.py::test_no_page_scrolls_sideways"
    status = subprocess.call([sys.executable, "-m", "pytest", "-q", test], cwd=ROOT, env=env)
    for png in sorted(OUT.glob("*.png")):
        print(f"{png.relative_to(ROOT)}: {png.stat().st_size // 1024} KiB")
    return status


if __name__ == "__main__":
    sys.exit(main())
