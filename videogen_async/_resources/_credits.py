"""``client.credits``: the API credit balance."""

from __future__ import annotations

from .._contract._models import CreditBalance
from ._resource import Resource

__all__ = ["Credits"]


class Credits(Resource):
    """The credit balance of the authenticated user."""

    async def get(self) -> CreditBalance:
        """Read the API credit balance (``GET /v1/credits``).

        Returns:
            The available and total API credits.

        Raises:
            APIStatusError: The service answered with a failure.
            APIConnectionError: The service could not be reached.
        """
        return await self._get("/v1/credits", CreditBalance)
