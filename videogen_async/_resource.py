"""What every resource namespace shares: the client it belongs to and response parsing."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

import cattrs

from ._exceptions import APIResponseError
from ._models import structure_lenient
from ._transport import Response

if TYPE_CHECKING:
    from ._client import AsyncVideoGen
    from ._transport import Transport

__all__ = ["Resource"]

_T = TypeVar("_T")
logger = logging.getLogger("videogen_async")


class Resource:
    """Base of the namespaces ``client.tasks``, ``client.projects`` and ``client.credits``."""

    def __init__(self, client: AsyncVideoGen) -> None:
        self._client = client

    @property
    def _transport(self) -> Transport:
        return self._client._transport

    def _parse(self, response: Response, cls: type[_T], *, created: bool = False) -> _T:
        """Parse ``response.data`` into ``cls``, never losing an identifier.

        A field that does not parse is logged and left at its default; a missing identifier
        is an ``APIResponseError`` (which, for a creating call, says the request took effect).
        """
        data: Any = response.data
        try:
            value, dropped = structure_lenient(data, cls)
        except (TypeError, ValueError, cattrs.BaseValidationError) as exc:
            reason = (
                "; ".join(cattrs.transform_error(exc, path=cls.__name__))
                if isinstance(exc, cattrs.BaseValidationError)
                else str(exc)
            )
            excerpt = repr(data)
            if len(excerpt) > 200:
                excerpt = excerpt[:197] + "..."
            raise APIResponseError(
                f"the service's answer is not a valid {cls.__name__}: {reason}; data={excerpt}",
                status_code=response.status_code,
                body_excerpt=excerpt,
                trace_id=response.trace_id,
                request_may_have_taken_effect=created,
            ) from exc
        if dropped:
            logger.warning(
                "ignored unreadable fields of %s: %s (trace_id=%s)",
                cls.__name__,
                ", ".join(dropped),
                response.trace_id,
            )
        return value
