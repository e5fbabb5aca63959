"""The sandbox's middleware: fault injection, counting, and every failure as the envelope.

In :func:`service_middleware`, control endpoints are only guarded (a failure becomes the
envelope); service requests are counted, logged and, when a fault rule matches, delayed,
failed or dropped.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from http.client import responses

from aiohttp import web
from aiohttp.typedefs import Middleware

from .._contract._exceptions import InvalidRequestError
from ._faults import FaultDecision, FaultInjector
from ._render import envelope_response
from ._simulation import SandboxError
from ._stats import RequestRecord, RequestStats

logger = logging.getLogger("videogen_async.testing")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTML_PAGE = (
    "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n"
    "<center><h1>{status} {reason}</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)
_NGINX = {"Server": "nginx"}
_CODE = re.compile(rb'\{"code":(-?\d{1,9}),')


def error_response(
    status: int, code: int, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A failure in the service's envelope (``data`` null)."""
    return envelope_response(None, status=status, code=code, message=message, headers=headers)


async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Run a handler; every failure becomes the error envelope."""
    try:
        return await handler(request)
    except SandboxError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.headers)
    except InvalidRequestError as exc:
        return error_response(400, 400, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            text = f"No such endpoint: {request.method} {request.path}"
        elif exc.status == 405:
            text = f"Method {request.method} is not allowed on {request.path}"
        else:
            text = exc.reason
        return error_response(
            exc.status,
            exc.status,
            text,
            {k: v for k, v in exc.headers.items() if k.lower() == "allow"},
        )
    except ConnectionError:
        # The client went away mid-request (its connection reset or closed before the body
        # was read, or while an answer streamed): no answer can reach it, and nothing failed
        # here. Recorded as nginx records it, 499 (in the request log), not as the sandbox's
        # own failure with a traceback.
        return error_response(499, 499, "Client closed the request")
    except Exception:
        logger.exception("sandbox handler failed on %s %s", request.method, request.path)
        return error_response(500, 500, "Internal sandbox error")


def _fault_response(decision: FaultDecision) -> web.StreamResponse | None:
    kind, status = decision.kind, decision.status
    reason = responses.get(status, "Server Error")  # 5xx statuses without a name too
    if kind == "rate_limit":
        after = decision.retry_after
        return error_response(
            429,
            429,
            "Too many requests (sandbox fault injection)",
            {} if after is None else {"Retry-After": f"{after:g}"},
        )
    if kind == "error":
        return error_response(status, status, f"{reason} (sandbox fault injection)")
    if kind == "html":
        return web.Response(
            text=_HTML_PAGE.format(status=status, reason=reason),
            status=status,
            content_type="text/html",
            headers=_NGINX,
        )
    return None


def _envelope_code(response: web.StreamResponse) -> int | None:
    """The ``code`` of an answer in the sandbox's envelope (which it writes first)."""
    body = response.body if isinstance(response, web.Response) else None
    found = _CODE.match(body) if isinstance(body, bytes) else None
    return None if found is None else int(found[1])


def _drop(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.close()


def service_middleware(faults: FaultInjector, stats: RequestStats) -> Middleware:
    """The middleware of one sandbox: faults from ``faults``, counts into ``stats``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path.startswith("/_sandbox/"):
            return await guarded(request, handler)
        method = request.method
        resource = request.match_info.route.resource
        pattern = resource.canonical if resource is not None else "<unmatched>"
        route = f"{method} {pattern}"
        stats.enter(route)
        started = time.time()
        t0 = time.perf_counter()
        status = fault = trace_id = code = None
        try:
            decision = None if path == "/openapi.json" else faults.decide(method, pattern, path)
            response = None
            if decision is not None:
                if decision.latency > 0:
                    fault = "latency"
                    await asyncio.sleep(decision.latency)
                if decision.kind is not None:
                    fault = decision.kind
                if decision.kind == "drop_before":
                    _drop(request)
                    return web.Response(status=503)
                response = _fault_response(decision)
            if response is None:
                # Yield once, as a real service waiting on its database would: requests that
                # arrived together are then in flight together, and the peak shows a client's
                # concurrency rather than the sandbox's speed.
                await asyncio.sleep(0)
                response = await guarded(request, handler)
                if fault == "drop_after":
                    _drop(request)
                    return response
            status = response.status
            trace_id = response.headers.get("X-Trace-Id")
            code = _envelope_code(response)
            return response
        finally:
            stats.leave(
                RequestRecord(
                    method,
                    path,
                    route,
                    status,
                    started,
                    time.perf_counter() - t0,
                    fault,
                    trace_id,
                    request.query_string,
                    request.headers.get("User-Agent"),
                    code,
                )
            )

    return middleware
