"""What the parts of the ledger promise each other, in one place.

``LedgerClient``: what the ledger needs of a client (a narrow protocol: the ledger sits below
the client). ``Engine``: how a plan reaches a database (``_sqlite``, ``_postgres``), and
``Listening``: how an engine wakes the change listener (``_listen``). A silent database is
:class:`DatabaseUnavailable`, any other failure ``LedgerError``: never a driver's error.
``Signal`` is the event the parts fire at each other (a commit, a settled create). A creator's
id names the liveness lock its engine holds for it (:func:`new_creator`).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

import anyio

from .._contract._exceptions import LedgerError
from ._schema import Dialect, Plan

_T = TypeVar("_T")
_CREATOR = re.compile(r"creator:\d+:([0-9a-f]{15})")
"""A creator holding a liveness lock (earlier versions held none: their ids have 12 digits)."""


def new_creator() -> str:
    """A fresh creator id, ``creator:PID:TOKEN``: the token names its liveness lock."""
    return f"creator:{os.getpid()}:{secrets.token_hex(8)[:15]}"


def creator_token(owner: str) -> str | None:
    """The token of a creator's liveness lock (``None``: a creator that holds none)."""
    found = _CREATOR.fullmatch(owner)
    return None if found is None else found[1]


# The calls are read as callables (any keyword arguments), so that a namespace whose calls
# spell out their keyword arguments, as the client's do, has this shape.
_Call = Callable[..., Awaitable[Any]]


class _Tasks(Protocol):
    @property
    def create(self) -> _Call: ...

    @property
    def get(self) -> _Call: ...


class _Projects(Protocol):
    @property
    def create(self) -> _Call: ...

    @property
    def create_videos(self) -> _Call: ...

    @property
    def get(self) -> _Call: ...


class LedgerClient(Protocol):
    """The client surface the ledger uses (``AsyncVideoGen`` has it)."""

    @property
    def tasks(self) -> _Tasks:
        """The tasks namespace."""
        ...

    @property
    def projects(self) -> _Projects:
        """The projects namespace."""
        ...


class DatabaseUnavailable(LedgerError):
    """The database did not answer; the transaction did not take effect (or may have)."""


class Signal:
    """An event fired again and again: each :meth:`fire` wakes whoever waits on :attr:`event`.

    The event is made when first asked for: most fires (a commit, a create answered) have no
    one waiting, and cost nothing then.
    """

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    @property
    def event(self) -> anyio.Event:
        """The event the next :meth:`fire` sets."""
        if self._event is None:
            self._event = anyio.Event()
        return self._event

    def fire(self) -> None:
        """Wake the waiters of the current event; the next are woken by the next fire."""
        event, self._event = self._event, None
        if event is not None:
            event.set()


async def first_of(events: Iterable[anyio.Event], seconds: float) -> None:
    """Wait until one of ``events`` is set, or ``seconds`` passed."""
    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tg:

            async def one(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            for event in events:
                tg.start_soon(one, event)


class Listening:
    """How an engine wakes a change listener (``_listen``); ``lost``: its connection was."""

    lost = False

    async def open(self) -> None:
        """Start listening."""

    async def wait(self, event: anyio.Event, seconds: float) -> None:
        """Until ``event`` is set, another process may have committed, or ``seconds`` passed."""

    async def close(self) -> None:
        """Stop listening."""


class Engine(Protocol):
    """A connection to one kind of database (``_sqlite``, ``_postgres``)."""

    dialect: Dialect
    where: str

    async def open(self) -> None:
        """Connect."""

    async def prepare(self) -> None:
        """Set the connection up, once the database is known to be a ledger (or empty)."""

    async def run(self, plan: Plan[_T], *, write: bool) -> _T:
        """Run a plan in one transaction (a write transaction when ``write``)."""

    async def live(self, owner: str) -> None:
        """Hold the lock that tells others the creator ``owner`` lives."""

    async def dead(self, owners: Sequence[str]) -> set[str]:
        """The creators among ``owners`` known to have died."""

    async def forget(self, owners: Sequence[str]) -> None:
        """Drop what told that ``owners`` died, once their creates are settled.

        Never before: a process that found a creator dead and then failed (or was killed)
        before settling its creates would leave no sign of the death, and the creates would
        wait out their lease of ten minutes.
        """

    def listen(self, changed: Signal) -> Listening:
        """What wakes a change listener (``changed`` may be fired by it)."""

    async def close(self) -> None:
        """Disconnect, and release the creator's lock."""
