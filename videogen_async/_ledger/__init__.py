"""The ledger: charged task ids that survive crashes, shared by processes and machines.

See ``docs/ledger.md``. Engines: SQLite (``_sqlite``, embedded) and PostgreSQL (``_postgres``,
through asyncpg, the ``videogen-async[postgres]`` extra).
"""

from ._api import Ledger, LedgerOpener
from ._entry import LedgerEntry
from ._watch import Watch

__all__ = ["Ledger", "LedgerEntry", "LedgerOpener", "Watch"]
