"""A faithful in-memory emulator of the video generation service, for tests, demos and benchmarks.

:class:`SandboxServer` serves the whole service (tasks, projects, credits, the spec's
validation and error codes) over real HTTP on loopback, with a clock tests can drive and
fault injection. See ``docs/sandbox.md``::

    from videogen_async.testing import SandboxServer

    async with SandboxServer(manual_clock=True, seed=1) as server:
        async with server.client() as client:
            created = await client.tasks.create("a paper boat on a lake")
            server.clock.advance(60)
            task = await client.tasks.get(created.task_id)
            assert task.status == "succeeded"

Serve it on a port with ``python -m videogen_async.testing`` (``videogen sandbox``), in a
child process with :class:`SandboxProcess`, or in pytest with the ``videogen_sandbox`` fixture.
"""

from .._contract._service import Pricing
from ._cli import add_sandbox_arguments, main, sandbox_options_from_args, serve
from ._clock import SandboxClock
from ._config import DEFAULT_API_KEY, Duration, ProjectTiming
from ._faults import FAULT_KINDS, FaultDecision, FaultInjector, FaultRule
from ._media import sample_mp4
from ._openapi import build_openapi, openapi_json, write_openapi
from ._process import SandboxProcess
from ._server import SandboxServer
from ._stats import RequestRecord, SandboxStats

__all__ = [
    "DEFAULT_API_KEY",
    "FAULT_KINDS",
    "Duration",
    "FaultDecision",
    "FaultInjector",
    "FaultRule",
    "Pricing",
    "ProjectTiming",
    "RequestRecord",
    "SandboxClock",
    "SandboxProcess",
    "SandboxServer",
    "SandboxStats",
    "add_sandbox_arguments",
    "build_openapi",
    "main",
    "openapi_json",
    "sample_mp4",
    "sandbox_options_from_args",
    "serve",
    "write_openapi",
]
