"""The ledger: charged task ids that survive crashes, shared by processes and machines.

See ``docs/ledger.md``. One store (``_store``) whose statements are written once
(``_plans``, ``_claims``) for two engines (``_sqlite``, embedded, and ``_postgres`` through
asyncpg: the ``videogen-async[postgres]`` extra).
"""

from ._api import Ledger
from ._changes import Changes
from ._entry import LedgerEntry
from ._opener import LedgerOpener
from ._watch import Watch

__all__ = ["Changes", "Ledger", "LedgerEntry", "LedgerOpener", "Watch"]
