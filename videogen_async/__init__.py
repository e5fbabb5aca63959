"""videogen_async: the asyncio-first SDK for the video generation service.

Start with :class:`AsyncVideoGen` (or :class:`VideoGen`, its blocking form); try everything
offline against :class:`videogen_async.testing.SandboxServer`.
"""

from ._blocking import VideoGen
from ._client import AsyncVideoGen
from ._contract._enums import (
    AspectRatio,
    FunctionMode,
    Model,
    ProjectMode,
    ProjectStatus,
    ProjectStep,
    Ratio,
    SpeechLanguage,
    TaskStatus,
)
from ._contract._exceptions import (
    AmbiguousCreateError,
    APIConnectionError,
    APIResponseError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    BudgetExceededError,
    ConfigurationError,
    ConflictError,
    DownloadError,
    InsufficientCreditsError,
    InvalidRequestError,
    LedgerError,
    MediaStorageError,
    NotFoundError,
    PermissionDeniedError,
    ProjectFailedError,
    RateLimitError,
    ServerError,
    TaskFailedError,
    TaskPollError,
    VideoGenError,
    WaitTimeoutError,
    WebhookDeliveryError,
    WebhookVerificationError,
)
from ._contract._meta import ResponseInfo
from ._contract._models import (
    Billing,
    CreatedProject,
    CreatedTask,
    CreditBalance,
    Project,
    ProjectTask,
    Task,
    TaskResult,
    VideoBatch,
)
from ._download._many import DownloadResult
from ._http._retry import BackoffPolicy
from ._http._session import Timeout
from ._http._webhooks import Webhook, verify_webhook, webhook
from ._ledger import Ledger, LedgerEntry
from ._observe._hooks import EventHook, PollEvent, RequestEvent, ResponseEvent, RetryEvent
from ._resources._raw import HTTPRequestInfo, RawResponse
from ._version import __version__
from ._waiting._gather import GatherResults, gather_until_done
from ._waiting._policy import PollPolicy
from ._waiting._progress import GatherProgress
from ._waiting._schedule import FinishTimeMemory, FinishTimeStats, InMemoryFinishTimes

__all__ = [
    "APIConnectionError",
    "APIResponseError",
    "APIStatusError",
    "APITimeoutError",
    "AmbiguousCreateError",
    "AspectRatio",
    "AsyncVideoGen",
    "AuthenticationError",
    "BackoffPolicy",
    "BadRequestError",
    "Billing",
    "BudgetExceededError",
    "ConfigurationError",
    "ConflictError",
    "CreatedProject",
    "CreatedTask",
    "CreditBalance",
    "DownloadError",
    "DownloadResult",
    "EventHook",
    "FinishTimeMemory",
    "FinishTimeStats",
    "FunctionMode",
    "GatherProgress",
    "GatherResults",
    "HTTPRequestInfo",
    "InMemoryFinishTimes",
    "InsufficientCreditsError",
    "InvalidRequestError",
    "Ledger",
    "LedgerEntry",
    "LedgerError",
    "MediaStorageError",
    "Model",
    "NotFoundError",
    "PermissionDeniedError",
    "PollEvent",
    "PollPolicy",
    "Project",
    "ProjectFailedError",
    "ProjectMode",
    "ProjectStatus",
    "ProjectStep",
    "ProjectTask",
    "RateLimitError",
    "Ratio",
    "RawResponse",
    "RequestEvent",
    "ResponseEvent",
    "ResponseInfo",
    "RetryEvent",
    "ServerError",
    "SpeechLanguage",
    "Task",
    "TaskFailedError",
    "TaskPollError",
    "TaskResult",
    "TaskStatus",
    "Timeout",
    "VideoBatch",
    "VideoGen",
    "VideoGenError",
    "WaitTimeoutError",
    "Webhook",
    "WebhookDeliveryError",
    "WebhookVerificationError",
    "__version__",
    "gather_until_done",
    "verify_webhook",
    "webhook",
]
