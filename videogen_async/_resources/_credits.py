"""``client.credits``: the API credit balance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._contract._models import CreditBalance
from .._http._options import CallOptions, Headers, Query
from .._http._session import Timeout
from ._resource import Resource

__all__ = ["Credits"]


class Credits(Resource):
    """The credit balance of the authenticated user."""

    async def get(
        self,
        *,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: Timeout | float | None = None,
    ) -> CreditBalance:
        """Read the API credit balance (``GET /v1/credits``).

        Args:
            extra_headers: Headers sent as given (a ``None`` value removes the client's).
            extra_query: Query parameters sent as given.
            extra_body: A JSON body sent as given.
            timeout: This call's per-attempt timeouts (seconds or a :class:`Timeout`).

        Returns:
            The available and total API credits.

        Raises:
            APIStatusError: The service answered with a failure.
            APIConnectionError: The service could not be reached.
        """
        options = CallOptions.of(extra_headers, extra_query, extra_body, timeout)
        return await self._get("/v1/credits", CreditBalance, options=options)
