"""Regenerate the README's dashboard screenshots: ``python -m tests.integration.serve.screenshots``.

Runs the browser tests that visit every page, select and cancel jobs in bulk and open a queue's
page, at 1,440 and 375 px with ``SCREENSHOTS_DIR`` set, so the pictures show the seeded data of
tests/integration/serve/browser.py through the real ``awa serve`` and Chromium; writes
docs/screenshots/{overview,job,jobs-bulk,confirm,queue}[-mobile].png.
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
    tests = [
        "tests/integration/serve/test_browser.py::test_no_page_scrolls_sideways",
        "tests/integration/serve/test_browser_bulk.py::"
        "test_an_operator_cancels_selected_jobs_then_retries_all_matching",
        "tests/integration/serve/test_browser_bulk.py::test_the_queue_page_has_its_chart_and_its_workers",
    ]
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", *tests]
    status = subprocess.call(command, cwd=ROOT, env=env)
    for png in sorted(OUT.glob("*.png")):
        print(f"{png.relative_to(ROOT)}: {png.stat().st_size // 1024} KiB")
    return status


if __name__ == "__main__":
    sys.exit(main())
