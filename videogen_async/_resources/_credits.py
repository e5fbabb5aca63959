"""``client.credits``: the API credit balance."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._contract._models import CreditBalance
from .._http._options import RequestOptions, call_options
from ._raw import raw_call
from ._resource import Resource

if TYPE_CHECKING:
    from typing_extensions import Unpack


class Credits(Resource):
    """The credit balance of the authenticated user."""

    @property
    def with_raw_response(self) -> RawCredits:
        """The calls that send one request, each returning a :class:`RawResponse`."""
        return RawCredits(self)  # made anew: kept here, it would hold this object in a cycle

    async def get(self, **options: Unpack[RequestOptions]) -> CreditBalance:
        """Read the API credit balance (``GET /v1/credits``).

        Args:
            **options: The per-call options (:class:`RequestOptions`).

        Returns:
            The available and total API credits.

        Raises:
            APIStatusError: The service answered with a failure.
            APIConnectionError: The service could not be reached.
        """
        return await self._get("/v1/credits", CreditBalance, options=call_options(options))


class RawCredits:
    """``client.credits.with_raw_response``: ``get``."""

    def __init__(self, credits: Credits) -> None:
        self.get = raw_call(credits.get)
