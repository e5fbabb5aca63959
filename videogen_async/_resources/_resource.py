"""What every resource namespace shares: the transport it sends through and response parsing.

A resource depends on the transport and its poll policy only, never on the client.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

import cattrs
from cattrs.v import format_exception

from .._contract._exceptions import APIResponseError
from .._contract._meta import RESPONSE_SLOT
from .._contract._models import Task, readable_fields, structure, structure_task
from .._contract._redact import scrub_exception
from .._http._envelope import Response
from .._http._jsonbody import clip, short_repr
from .._http._options import NO_OPTIONS, CallOptions
from .._http._transport import Transport
from .._waiting._policy import PollPolicy

_T = TypeVar("_T")
_set_slot = object.__setattr__  # the response slot of a frozen result, set once at parse time
logger = logging.getLogger("videogen_async")
# A field's failure in the converter's own words ("expected a number, got str 'x'").
_why = lambda e, t: str(e) if isinstance(e, ValueError) and str(e) else format_exception(e, t)  # noqa: E731


class Resource:
    """Base of the namespaces ``client.tasks``, ``client.projects`` and ``client.credits``."""

    def __init__(self, transport: Transport, poll_policy: PollPolicy) -> None:
        self._transport = transport
        self._poll_policy = poll_policy

    async def _get(
        self,
        path: str,
        cls: type[_T],
        *,
        params: Mapping[str, str] | None = None,
        retries: int | None = None,
        options: CallOptions = NO_OPTIONS,
    ) -> _T:
        """``GET path``, its answer parsed into ``cls`` (``retries``: see ``Transport.request``)."""
        return self._parse(
            await self._transport.request(
                "GET", path, params=params, retries=retries, options=options
            ),
            cls,
        )

    async def _create(
        self, path: str, body: dict[str, Any], cls: type[_T], options: CallOptions = NO_OPTIONS
    ) -> _T:
        """Send a creating call so that a charged identifier is never dropped.

        The request runs in its own task: a cancelled caller returns at once, but the request
        runs to its answer (within the timeouts; ``aclose()`` waits for it) and the created id
        is logged at WARNING.
        """

        async def send() -> tuple[_T, Response]:
            response = await self._transport.request("POST", path, json_body=body, options=options)
            return self._parse(response, cls, created=True), response

        job = asyncio.ensure_future(send())
        self._transport.owner.track(job, self._transport.call_bound(options.timeout))
        try:
            created, _ = await asyncio.shield(job)
        except asyncio.CancelledError:
            job.add_done_callback(functools.partial(_report_orphan, path))
            raise
        return created

    def _parse(self, response: Response, cls: type[_T], *, created: bool = False) -> _T:
        """Parse ``response.data`` into ``cls``: exactly, or an ``APIResponseError``.

        The error names each field that does not parse, and carries those that do
        (``readable``, ``task_id``, ``project_id``); for a creating call it says that the
        request took effect.
        """
        # No local holds the data: a traceback printed with its locals shows only the
        # response, whose repr is bounded and redacted.
        try:
            if cls is Task:
                value: _T = structure_task(response.data)  # type: ignore[assignment]
            else:
                value = structure(response.data, cls)
        except Exception as exc:  # whatever the data does, it is the answer's fault
            reason = _reason(exc, cls.__name__)
            excerpt = short_repr(response.data)
            scrub_exception(exc)
            raise APIResponseError(
                f"the service's answer is not a valid {cls.__name__}: {reason}; data={excerpt}",
                status_code=response.status_code,
                body_excerpt=excerpt,
                trace_id=response.trace_id,
                request_may_have_taken_effect=created,
                readable=readable_fields(response.data, cls),
            ) from exc
        info = response.info
        if info is not None:
            _set_slot(value, RESPONSE_SLOT, info)
        return value


def _reason(exc: Exception, name: str) -> str:
    """Why the data did not parse, in words, bounded and redacted."""
    try:
        if isinstance(exc, cattrs.BaseValidationError):
            found = cattrs.transform_error(exc, path=name, format_exception=_why)  # "why @ at"
            text = "; ".join(f"{at}: {why}" for why, _, at in (e.rpartition(" @ ") for e in found))
        else:
            text = str(exc) or type(exc).__name__
    except Exception:  # describing a hostile value must not fail in turn
        text = type(exc).__name__
    return clip(text, 500)


def _report_orphan(path: str, job: asyncio.Future[tuple[Any, Response]]) -> None:
    """Log the outcome of a create whose caller was cancelled while it was in flight."""
    if job.cancelled():
        logger.warning(
            "POST %s was cancelled in flight; it may have taken effect on the service", path
        )
        return
    exc = job.exception()
    if exc is not None:
        logger.warning("POST %s (its caller was cancelled) failed: %s", path, exc)
        return
    created, response = job.result()
    logger.warning(
        "cancelled while POST %s was in flight; the service created %r (trace_id=%s)",
        path,
        created,
        response.trace_id,
    )
