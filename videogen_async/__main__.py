"""``python -m videogen_async``: the ``videogen`` command line."""

from ._cli import main

raise SystemExit(main())
