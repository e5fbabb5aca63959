"""A Celery task's error, stored in a real Redis result backend and read back, is itself.

A worker (in this process, on a thread, as ``celery.contrib.testing`` runs one) executes a
task that raises each error class of the tree; the error is pickled into Redis by the worker
and unpickled by the caller's ``AsyncResult.get()``. Celery keeps an error's class and fields
only with the pickle result serializer (with JSON it keeps the class name and the args), so
that is what the app uses, as ``docs/errors.md`` advises.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests._services import require

from .test_serialization import CLASSES, assert_same, build, raise_sample

#: redis-py deprecates a call Celery's Redis backend makes (not ours to change).
pytestmark = pytest.mark.filterwarnings("ignore:Call to deprecated:DeprecationWarning")

HINT = "pip install -e '.[test]' (celery[redis]) to run the Celery tests"


@pytest.fixture(scope="module")
def celery_app(redis_url: str) -> Iterator[Any]:
    celery = require("celery", HINT)
    require("redis", HINT)
    worker = require("celery.contrib.testing.worker", HINT)
    app = celery.Celery(
        "videogen_travel", broker=redis_url, backend=redis_url, set_as_current=False
    )
    app.conf.update(
        task_serializer="json",
        result_serializer="pickle",
        accept_content=["json", "pickle"],
        result_accept_content=["json", "pickle"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    app.task(name="videogen.raise_sample")(raise_sample)
    with worker.start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        yield app


def test_each_error_class_comes_back_from_the_result_backend_with_its_fields(
    celery_app: Any,
) -> None:
    task = celery_app.tasks["videogen.raise_sample"]
    sent = {cls: task.delay(cls.__name__) for cls in CLASSES}
    for cls, result in sent.items():
        with pytest.raises(cls) as info:
            result.get(timeout=60)
        assert_same(info.value, build(cls))
        # Read again by id, as another process holding only the id would.
        again = celery_app.AsyncResult(result.id)
        assert type(again.result) is cls
        assert vars(again.result) == vars(info.value)
