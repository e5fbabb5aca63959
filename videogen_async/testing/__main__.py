"""``python -m videogen_async.testing``: serve the sandbox until Ctrl-C."""

from ._cli import main

raise SystemExit(main())
