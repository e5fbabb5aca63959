"""``client.with_raw_response``: the same calls, returning the HTTP answer beside the result.

As in openai-python: ``await client.with_raw_response.tasks.get(task_id)`` (or
``client.tasks.with_raw_response.get``) gives a :class:`RawResponse`: the answer's
:class:`ResponseInfo`, the ``http_request``, and ``parse()`` for the plain call's result.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, TypeVar

import attrs

from .._contract._meta import HasResponse, ResponseInfo

_P = ParamSpec("_P")
_T = TypeVar("_T", bound=HasResponse)


@attrs.frozen
class HTTPRequestInfo:
    """The request an answer was for.

    Attributes:
        method: ``GET`` or ``POST``.
        url: The URL (the API key is never in it: it travels in a header).
    """

    method: str
    url: str


class RawResponse(ResponseInfo, Generic[_T]):
    """An HTTP answer of the service (its :class:`ResponseInfo`) and the result parsed from it."""

    __slots__ = ("_parsed",)

    def __init__(self, parsed: _T, info: ResponseInfo) -> None:
        # The answer's fields as it pickles them (headers and trace id already redacted).
        super().__init__(*info.__reduce__()[1])
        self._parsed = parsed

    @property
    def http_request(self) -> HTTPRequestInfo:
        """The request's method and URL."""
        return HTTPRequestInfo(self.method, self.url)

    def parse(self) -> _T:
        """The result, as the plain call returns it.

        Returns:
            The parsed model.
        """
        return self._parsed

    def __repr__(self) -> str:
        return (
            f"<RawResponse [{self.status_code}] {self.method} {self.url}"
            f" trace_id={self.trace_id!r}>"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        _, answer = super().__reduce__()  # the answer as it pickles: redacted
        return (RawResponse, (self._parsed, ResponseInfo(*answer)))


def raw_call(call: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[RawResponse[_T]]]:
    @functools.wraps(call)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> RawResponse[_T]:
        result = await call(*args, **kwargs)
        info = result._response
        if info is None:  # every call's result carries it; a guard, not a path
            raise RuntimeError(f"{call.__qualname__} returned a result without its answer")
        return RawResponse(result, info)

    return wrapper
