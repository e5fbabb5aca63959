"""Every error the SDK raises.

The tree::

    VideoGenError
    ├── ConfigurationError            bad or missing client configuration (key, base URL)
    ├── InvalidRequestError           a rule of the service broken, raised before any request
    │                                 (also a ValueError)
    ├── APIConnectionError            the service could not be reached or the connection broke
    │   └── APITimeoutError           no answer in time (also a TimeoutError)
    ├── APIStatusError                the service answered with a failure (HTTP status or
    │                                 envelope code)
    │   ├── BadRequestError           400
    │   ├── AuthenticationError       401
    │   ├── PermissionDeniedError     403
    │   ├── NotFoundError             404
    │   ├── ConflictError             409
    │   │   ├── InsufficientCreditsError   code 300111
    │   │   └── MediaStorageError          code 100099
    │   ├── RateLimitError            429
    │   └── ServerError               5xx
    ├── APIResponseError              a body that is not the documented envelope
    ├── TaskFailedError               a task ended failed/error, where a caller asked for it
    ├── ProjectFailedError            a project failed while a caller waited on it
    ├── WaitTimeoutError              a wait or gather ran out of time (also a TimeoutError)
    ├── TaskPollError                 one id of a gather could not be polled
    ├── DownloadError                 a video could not be downloaded (nothing partial is left)
    ├── LedgerError                   a ledger that cannot be opened or used (bad URL, unreachable
    │                                 database, newer schema, a file that is not a ledger)
    ├── AmbiguousCreateError          a ledger key whose earlier create may have taken effect,
    │                                 its id unknown (nothing was sent)
    ├── BudgetExceededError           a ledger create refused, before sending, because it could
    │                                 pass ``max_credits``
    ├── WebhookDeliveryError          a webhook receiver did not answer 2xx (retried later)
    └── WebhookVerificationError      a webhook whose signature does not check (also a ValueError)

Every error carries ``status_code``, ``code``, ``message`` and ``trace_id`` = ``request_id``
(``None`` where they do not apply); ``request_may_have_taken_effect`` is ``True`` on a failed
create (POST) that may have reached the service (never retried automatically). No error text
has the key. Every error pickles to one of the same class and attributes (not through
``__init__``); a cause that is one of these errors travels as ``__cause__``, a foreign one only
in the message. See docs/errors.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._redact import redact_text, redact_value

if TYPE_CHECKING:
    from ._models import Project, Task

_MAY_HAVE_TAKEN_EFFECT = (
    " The request may have taken effect (a task or project may have been created and"
    " charged); it was not retried automatically."
)


class VideoGenError(Exception):
    """Base class of every error raised by the SDK.

    Attributes:
        message: A human-readable description.
        status_code: The HTTP status of the response, when there was one.
        code: The envelope ``code`` of the response, when there was one.
        trace_id: The envelope ``trace_id`` of the response, when there was one.
        method: The HTTP method of the failed request, when there was one.
        path: The path of the failed request, when there was one.
        request_may_have_taken_effect: ``True`` when a creating call failed in a way that
            leaves open whether the service acted on it.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        code: int | None = None,
        trace_id: str | None = None,
        method: str | None = None,
        path: str | None = None,
        request_may_have_taken_effect: bool = False,
    ) -> None:
        message = redact_text(message)
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.trace_id = redact_text(trace_id) if trace_id else trace_id
        self.method = method
        self.path = path
        self.request_may_have_taken_effect = request_may_have_taken_effect

    @property
    def request_id(self) -> str | None:
        """The answer's ``trace_id``, by the name the openai SDK gives it."""
        return self.trace_id

    def __reduce__(self) -> tuple[Any, ...]:
        # One rule for the whole tree: the class, its args and its state, never its __init__
        # (whose signature differs by class), every text redacted as it is when shown.
        state = {name: redact_value(value) for name, value in vars(self).items()}
        if isinstance(self.__cause__, VideoGenError):
            state["__cause__"] = self.__cause__
        return (_rebuild, (type(self), self.args), state)

    def __str__(self) -> str:
        text = self.message
        if self.request_may_have_taken_effect and _MAY_HAVE_TAKEN_EFFECT.strip() not in text:
            text += _MAY_HAVE_TAKEN_EFFECT
        if self.trace_id:
            text += f" (trace_id={self.trace_id})"
        return redact_text(text)


def _rebuild(cls: type[VideoGenError], args: tuple[Any, ...]) -> VideoGenError:
    """An error of ``cls`` with ``args``, its ``__init__`` not called (pickle sets its state)."""
    error = cls.__new__(cls)
    error.args = args  # OSError's __new__ (under TimeoutError) leaves them out
    return error


class ConfigurationError(VideoGenError):
    """The client is missing its API key or base URL, or was given invalid options."""


class InvalidRequestError(VideoGenError, ValueError):
    """An argument breaks a rule of the service; raised before any request is sent.

    Attributes:
        field: The name of the offending field (as the service names it).
        rule: The rule that was broken, in words.
    """

    def __init__(self, field: str, rule: str, *, value: Any = None, has_value: bool = False):
        self.field = field
        self.rule = rule
        text = f"{field}: {rule}"
        if has_value:
            shown = repr(value)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            text += f" (got {shown})"
        super().__init__(text)


class APIConnectionError(VideoGenError):
    """The service could not be reached, or the connection broke before a full answer."""


class APITimeoutError(APIConnectionError, TimeoutError):
    """No answer arrived within the request timeout."""


class APIStatusError(VideoGenError):
    """The service answered with a failure: an HTTP error status or an envelope code != 200.

    Attributes:
        status_code: The HTTP status.
        code: The envelope ``code`` (``None`` when the body was not an envelope).
        trace_id: The envelope ``trace_id``.
        body: The decoded body (``None`` when it was not JSON).
        headers: The response headers.

    ``code``, ``trace_id``, ``method``, ``path`` and ``request_may_have_taken_effect`` are
    taken as keywords, as :class:`VideoGenError` takes them.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        **context: Any,
    ) -> None:
        super().__init__(message, status_code=status_code, **context)
        self.body = redact_value(body)
        self.headers = redact_value(headers) if headers else {}


class BadRequestError(APIStatusError):
    """The service rejected the request (HTTP or envelope code 400)."""


class AuthenticationError(APIStatusError):
    """The API key is missing or invalid (401)."""


class PermissionDeniedError(APIStatusError):
    """The API key may not do this (403)."""


class NotFoundError(APIStatusError):
    """No such task or project (404)."""


class ConflictError(APIStatusError):
    """The request conflicts with the account's or resource's state (409)."""


class InsufficientCreditsError(ConflictError):
    """Not enough API credits (409, code 300111). Nothing was created or charged."""


class MediaStorageError(ConflictError):
    """A media URL could not be stored (409, code 100099). Nothing was charged."""


class RateLimitError(APIStatusError):
    """Too many requests (429).

    Attributes:
        retry_after: Seconds the service asked us to wait, when it said so.
    """

    retry_after: float | None = None


class ServerError(APIStatusError):
    """The service failed (5xx)."""


class APIResponseError(VideoGenError):
    """The body of a response is not the documented envelope (e.g. an HTML page from a proxy).

    Also a ``data`` field of the wrong type or a non-finite number (named in the message).

    Attributes:
        status_code: The HTTP status.
        body_excerpt: The first characters of the body.
        readable: The fields of the answer that could be read, as the model holds them.
        task_id: ``readable["task_id"]``: the task a create made, or a poll asked for.
        project_id: ``readable["project_id"]``.

    The other keywords are those of :class:`VideoGenError`.
    """

    def __init__(
        self, message: str, *, body_excerpt: str = "", readable: Any = None, **context: Any
    ) -> None:
        super().__init__(message, **context)
        self.body_excerpt = redact_text(body_excerpt)
        self.readable: dict[str, Any] = dict(readable or {})
        self.task_id: str | None = self.readable.get("task_id")
        self.project_id: str | None = self.readable.get("project_id")


class TaskFailedError(VideoGenError):
    """A task ended ``failed`` or ``error``; raised only where a caller asked for it.

    Attributes:
        task: The task in its terminal state.
    """

    def __init__(self, task: Task) -> None:
        super().__init__(
            f"task {task.task_id} ended {task.status}: {task.error_message or 'no reason given'}"
        )
        self.task = task


class ProjectFailedError(VideoGenError):
    """A project failed while a caller waited on it.

    Attributes:
        project: The project as last seen.
    """

    def __init__(self, project: Project) -> None:
        super().__init__(
            f"project {project.project_id} failed at step {project.current_step}:"
            f" {project.error_message or 'no reason given'}"
        )
        self.project = project


class WaitTimeoutError(VideoGenError, TimeoutError):
    """A wait or a gather ran out of time.

    Attributes:
        last: The last state seen of the awaited object (a ``Task`` or ``Project``), if any.
        pending: The ids still not terminal when time ran out.
        timeout: The deadline in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        last: Any = None,
        pending: Sequence[str] = (),
        timeout: float | None = None,
    ) -> None:
        super().__init__(message)
        self.last = last
        self.pending = tuple(pending)
        self.timeout = timeout


class TaskPollError(VideoGenError):
    """One id of a gather could not be polled; the cause is in ``__cause__``.

    Attributes:
        task_id: The id that could not be polled.
    """

    def __init__(self, task_id: str, cause: BaseException) -> None:
        super().__init__(f"task {task_id} could not be polled: {type(cause).__name__}: {cause}")
        self.task_id = task_id
        self.__cause__ = cause
        for name in ("status_code", "code", "trace_id"):  # the cause's, where it has them
            setattr(self, name, getattr(cause, name, None))

    def __str__(self) -> str:
        return self.message  # the cause's text already names its trace id


class DownloadError(VideoGenError):
    """A video could not be downloaded; no partial file was left at the destination.

    A task not succeeded (or without ``video_url``), a host's HTTP error, a body shorter or
    longer than declared, a connection broken past the resumes, or an unwritable file; a
    network cause is in ``__cause__``. Messages show the URL without its (signed) query.

    Attributes:
        url: The video's URL, when known.
        path: The destination file, when known.
        task_id: The task the video belongs to, when known.
        status_code: The media host's HTTP status, for an HTTP error.
        bytes_received: Bytes received before the failure.
        expected_size: The size the host declared, when it did.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        path: Any = None,
        task_id: str | None = None,
        status_code: int | None = None,
        bytes_received: int = 0,
        expected_size: int | None = None,
    ) -> None:
        super().__init__(message)
        self.url = redact_text(url) if url else url
        self.path = path
        self.task_id = task_id
        self.status_code = status_code
        self.bytes_received = bytes_received
        self.expected_size = expected_size


class LedgerError(VideoGenError):
    """A ledger cannot be opened or used.

    Raised for a malformed URL, a schema of a newer version, a file that is not a ledger, a
    missing driver (``videogen-async[postgres]``), a database that did not answer within the
    ledger's ``outage_timeout``, or a read-only or full file. Nothing is sent after it; an
    answer of the service already received is kept (see ``docs/ledger.md``).

    Attributes:
        created: The task or project id the service answered (and charged) that the ledger
            could not record yet (it is in the spool, or logged at ERROR); ``None`` otherwise.
        credits_cost: What that create was charged, as answered (``None`` with no ``created``).
    """

    def __init__(
        self, message: str, *, created: str | None = None, credits_cost: float | None = None
    ) -> None:
        super().__init__(message)
        self.created = created
        self.credits_cost = credits_cost


class AmbiguousCreateError(VideoGenError):
    """A ledger key whose earlier create may have taken effect, its task id unknown.

    Nothing was sent. Check the account (or the service's dashboard) and, to accept the risk
    of paying twice, resend it explicitly with :meth:`Ledger.resend`.

    Attributes:
        key: The ledger key.
        entry: The entry as the ledger holds it (state ``unknown``).
    """

    def __init__(self, key: str, entry: Any = None, detail: str | None = None) -> None:
        text = (
            f"ledger key {key!r}: an earlier create may have taken effect and its task id is "
            "unknown; nothing was sent (resend it explicitly with Ledger.resend to accept the "
            "risk of paying twice)"
        )
        if detail:
            text += f"; the earlier attempt failed with: {detail}"
        super().__init__(text)
        self.key = key
        self.entry = entry


class BudgetExceededError(VideoGenError):
    """A ledger create refused, before anything was sent, because it could pass ``max_credits``.

    Attributes:
        key: The ledger key.
        estimate: The credits reserved for the create (its worst-case price).
        spent: Credits charged through the ledger so far (every process).
        reserved: Credits reserved by creates in flight (every process).
        max_credits: The cap.
    """

    def __init__(
        self, key: str, *, estimate: float, spent: float, reserved: float, max_credits: float
    ) -> None:
        super().__init__(
            f"ledger key {key!r}: refused before sending: reserving {estimate:g} credits on top "
            f"of {spent:g} spent and {reserved:g} reserved could pass max_credits={max_credits:g}"
        )
        self.key = key
        self.estimate = estimate
        self.spent = spent
        self.reserved = reserved
        self.max_credits = max_credits


class WebhookDeliveryError(VideoGenError):
    """A webhook receiver did not answer 2xx; a dispatch retries the delivery later.

    The cause is an error status (``status_code`` is the receiver's), a redirect (never
    followed), a timeout or no connection.
    """


class WebhookVerificationError(VideoGenError, ValueError):
    """A webhook delivery that does not check; answer it with 400 and drop it.

    The cause is a header missing, a timestamp out of tolerance, no matching signature, or a
    body that is not JSON.
    """


#: Envelope codes of the service's business failures.
CODE_INSUFFICIENT_CREDITS = 300111
CODE_MEDIA_STORAGE = 100099

#: The error class of a business code (wins over the status) and of an HTTP(-like) status.
_BY_CODE: dict[int, type[APIStatusError]] = {
    CODE_INSUFFICIENT_CREDITS: InsufficientCreditsError,
    CODE_MEDIA_STORAGE: MediaStorageError,
}
_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    429: RateLimitError,
}


def status_error_class(status: int, code: int | None) -> type[APIStatusError]:
    """The class of the error for a failed answer, as the tree above draws it.

    The business codes (300111, 100099) win; then an HTTP error status; then, under HTTP 200,
    an HTTP-like envelope code (``{"code": 404}`` is a not-found even when the status is 200).
    """
    cls = _BY_CODE.get(code) if code is not None else None
    if cls is not None:
        return cls
    effective = status if status >= 400 or code is None else code
    return _BY_STATUS.get(effective) or (ServerError if 500 <= effective <= 599 else APIStatusError)
