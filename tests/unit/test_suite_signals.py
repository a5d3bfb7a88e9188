"""The suite's own children take Ctrl-C, however the suite itself was started.

Started in the background by a shell without job control (`.ci/run &`, nohup), pytest inherits
SIGINT ignored, and an ignored signal survives exec: the `awa` processes the tests interrupt
would ignore it too. tests/conftest.py handles SIGINT so exec resets it for every child.
"""

from __future__ import annotations

import signal
import subprocess
import sys


def test_the_suite_does_not_ignore_sigint() -> None:
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN


def test_a_child_python_gets_its_usual_ctrl_c_handler() -> None:
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "True"
