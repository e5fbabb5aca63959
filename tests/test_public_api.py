"""The public surface: sorted ``__all__``, the error tree, the fixed names."""

from __future__ import annotations

import types

import videogen_async as vg

FIXED_NAMES = {
    "AsyncVideoGen", "CreditBalance", "CreatedTask", "Task", "TaskResult", "CreatedProject",
    "Project", "Billing", "VideoBatch", "TaskStatus", "ProjectStatus", "ProjectStep",
    "ProjectMode", "Model", "FunctionMode", "Ratio", "AspectRatio", "SpeechLanguage",
    "VideoGenError", "ConfigurationError", "InvalidRequestError", "APIConnectionError",
    "APITimeoutError", "APIStatusError", "BadRequestError", "AuthenticationError",
    "PermissionDeniedError", "NotFoundError", "ConflictError", "InsufficientCreditsError",
    "MediaStorageError", "RateLimitError", "ServerError", "APIResponseError",
    "TaskFailedError", "WaitTimeoutError", "TaskPollError", "gather_until_done", "PollPolicy",
}  # fmt: skip


def test_all_is_sorted_and_complete() -> None:
    assert vg.__all__ == sorted(vg.__all__)
    assert len(set(vg.__all__)) == len(vg.__all__)
    for name in vg.__all__:
        assert hasattr(vg, name), name
    assert set(vg.__all__) >= FIXED_NAMES


def test_public_objects_live_in_private_modules() -> None:
    for name in vg.__all__:
        obj = getattr(vg, name)
        module = getattr(obj, "__module__", "videogen_async._x")
        # Classes only: a type alias such as ``Callable[...]`` passes for a type on 3.10.
        if isinstance(obj, type) and not isinstance(obj, types.GenericAlias):
            assert module.startswith("videogen_async._"), (name, module)


def test_error_tree() -> None:
    tree = {
        vg.ConfigurationError: vg.VideoGenError,
        vg.InvalidRequestError: vg.VideoGenError,
        vg.APIConnectionError: vg.VideoGenError,
        vg.APITimeoutError: vg.APIConnectionError,
        vg.APIStatusError: vg.VideoGenError,
        vg.BadRequestError: vg.APIStatusError,
        vg.AuthenticationError: vg.APIStatusError,
        vg.PermissionDeniedError: vg.APIStatusError,
        vg.NotFoundError: vg.APIStatusError,
        vg.ConflictError: vg.APIStatusError,
        vg.InsufficientCreditsError: vg.ConflictError,
        vg.MediaStorageError: vg.ConflictError,
        vg.RateLimitError: vg.APIStatusError,
        vg.ServerError: vg.APIStatusError,
        vg.APIResponseError: vg.VideoGenError,
        vg.TaskFailedError: vg.VideoGenError,
        vg.WaitTimeoutError: vg.VideoGenError,
        vg.TaskPollError: vg.VideoGenError,
    }
    for child, parent in tree.items():
        assert issubclass(child, parent), (child, parent)
    assert issubclass(vg.InvalidRequestError, ValueError)
    assert issubclass(vg.APITimeoutError, TimeoutError)
    assert issubclass(vg.WaitTimeoutError, TimeoutError)
    doc = vg._contract._exceptions.__doc__ or ""
    for cls in tree:
        assert cls.__name__ in doc, cls


def test_every_error_carries_the_four_fields() -> None:
    for err in (
        vg.ConfigurationError("x"),
        vg.APIConnectionError("x"),
        vg.APIResponseError("x"),
        vg.WaitTimeoutError("x"),
        vg.ServerError("x", status_code=500, code=500, trace_id="t"),
    ):
        for attr in ("status_code", "code", "message", "trace_id"):
            assert hasattr(err, attr)


def test_task_poll_error_keeps_cause() -> None:
    cause = vg.NotFoundError("gone", status_code=404, code=404, trace_id="tr")
    err = vg.TaskPollError("t-1", cause)
    assert err.task_id == "t-1"
    assert err.__cause__ is cause
    assert err.status_code == 404
    assert str(err).count("trace_id=tr") == 1


def test_py_typed_is_shipped() -> None:
    from importlib.resources import files

    assert files("videogen_async").joinpath("py.typed").is_file()
