"""The fuzz tests run in their own session (``nox -s fuzz``), which installs schemathesis.

Elsewhere (the README's test command) they are not collected, rather than skipped: a skip
would say on every run that something is missing when nothing is.
"""

from __future__ import annotations

import importlib.util

collect_ignore = [] if importlib.util.find_spec("schemathesis") else ["test_schemathesis.py"]
