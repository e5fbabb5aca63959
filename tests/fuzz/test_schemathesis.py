"""Fuzzing the sandbox from its OpenAPI document (``docs/openapi.json``) with schemathesis.

Collected only where schemathesis is installed (``nox -s fuzz``). The sandbox runs in its own
process (``python -m videogen_async.testing --port 0``), as a user would serve it; schemathesis
generates requests for every operation of the document, valid ones and invalid ones (every
field drawn from wrong types, out-of-range and boundary values, unknown fields, broken JSON,
missing or wrong keys), and checks each answer:

* no 5xx, ever (no fault injection is configured);
* the answer conforms to the document: a documented status, content type, headers and a body
  that fits the schema of that status;
* a request whose body or query breaks the document is refused with **400** (an invalid path
  parameter with 400 or 404, a broken ``Authorization`` header with 401), and a refused
  creating call created nothing and charged nothing (the sandbox's own counters say so);
* a request that fits the document is accepted (200), or refused only for a reason of state
  the document names (404 unknown id, 409 script not ready / media not storable).

The number of examples per operation is bounded (``VIDEOGEN_FUZZ_EXAMPLES``, 250 by default)
so that the whole run stays well under two minutes on two cores.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
requests = pytest.importorskip("requests")

from schemathesis.config import SchemathesisConfig  # noqa: E402
from schemathesis.core.parameters import ParameterLocation  # noqa: E402
from schemathesis.generation.meta import CONTENT_TYPE_PROBES  # noqa: E402

from videogen_async.testing import SandboxProcess  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "openapi.json"
KEY = "sandbox-key"
EXAMPLES = int(os.environ.get("VIDEOGEN_FUZZ_EXAMPLES", "250"))
CREATES = {
    "POST /v1/video/videomodel-2",
    "POST /v1/video/viral-ads-clone",
    "POST /v1/video/viral-ads-clone/{project_id}/videos",
}

CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 20261121,
        "headers": {"Authorization": f"Bearer {KEY}"},
        "generation": {"mode": "all", "max-examples": EXAMPLES},
        "checks": {
            # The sandbox never answers 5xx without injected faults: any 5xx is a bug.
            "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx"]},
            # Data that fits the document is accepted, or refused only for a reason of
            # state that the document names.
            "positive_data_acceptance": {"expected-statuses": ["200", "404", "409"]},
            "negative_data_rejection": {"expected-statuses": ["400", "401", "404", "405"]},
        },
    }
)
schema = schemathesis.openapi.from_path(str(DOCUMENT), config=CONFIG)
OPERATIONS = {
    f"{method.upper()} {path}"
    for path, item in json.loads(DOCUMENT.read_text(encoding="utf-8"))["paths"].items()
    for method in item
    if method in ("get", "post", "put", "patch", "delete")
}

if os.environ.get("PYTEST_XDIST_WORKER"):  # pragma: no cover - a wrong invocation
    # Schemathesis gives every operation's case the same node id; xdist keeps one of them and
    # drops the rest without a word, so the run would pass having fuzzed one operation.
    pytest.fail("run tests/fuzz without xdist: nox -s fuzz (or pytest tests/fuzz -n 0)")

#: (operation, phase, mode, status) -> count, written to .fuzz/figures.json at the end.
FIGURES: collections.Counter[tuple[str, str, str, int]] = collections.Counter()


def _start_sandbox() -> SandboxProcess:
    # A paused clock: nothing changes by itself (no automatic batch appears while a case is
    # checked), so the sandbox's counters move only with the requests sent.
    return SandboxProcess("--seed", "1", "--credits", "1e15", "--manual-clock").start()


class Sandbox:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {KEY}"
        self.task_ids: list[str] = []
        self.project_ids: list[str] = []
        self._turn = itertools.count()

    def call(self, method: str, path: str, body: Any = None) -> Any:
        reply = self.http.request(method, self.base_url + path, json=body, timeout=10)
        reply.raise_for_status()
        return reply.json()["data"]

    def seed(self) -> None:
        """Real tasks and projects in every state, for the positive cases to read and use."""
        for outcome in ("succeeded", "failed", "error", None):
            task = self.call("POST", "/v1/video/videomodel-2", {"prompt": "a fox"})
            if outcome is not None:
                self.control(
                    "POST",
                    f"/tasks/{task['task_id']}/schedule",
                    {"finish_in": 0, "outcome": outcome},
                )
            self.task_ids.append(task["task_id"])
        reference = "https://cdn.example.com/ad.mp4"
        images = ["https://cdn.example.com/p.png"]
        for mode, outcome in (
            ("manual", "succeeded"),
            ("auto", "succeeded"),
            ("manual", None),
            ("auto", "failed"),
        ):
            project = self.call(
                "POST",
                "/v1/video/viral-ads-clone",
                {"reference_video_url": reference, "product_image_urls": images, "mode": mode},
            )
            if outcome is not None:
                self.control(
                    "POST",
                    f"/projects/{project['project_id']}/schedule",
                    {"script_ready_in": 0, "outcome": outcome},
                )
            self.project_ids.append(project["project_id"])

    def pick(self, ids: list[str]) -> str | None:
        """Every other call, one of ``ids`` in turn; else ``None`` (keep the generated id)."""
        turn = next(self._turn)
        return None if turn % 2 else ids[(turn // 2) % len(ids)]

    def control(self, method: str, path: str, body: Any = None) -> Any:
        reply = self.http.request(method, f"{self.base_url}/_sandbox{path}", json=body, timeout=10)
        reply.raise_for_status()
        return reply.json()["data"]

    def counters(self) -> tuple[int, int, float]:
        stats = self.control("GET", "/stats")
        balance = self.control("GET", "/credits")
        return stats["tasks_created"], stats["projects_created"], balance["api_available_credits"]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    child = _start_sandbox()
    box = Sandbox(child.base_url)
    try:
        box.seed()
        box.control("POST", "/reset-stats")
        yield box
        # Everything that reached the sandbox was answered; nothing ended in a 5xx.
        stats = box.control("GET", "/stats")
        _write_figures(stats)
        assert not [s for s in stats["by_status"] if s.startswith("5")], stats["by_status"]
        # Every operation of the document was fuzzed (schemathesis also tries undocumented
        # methods on each path: those count as extra).
        for phase_mode in ("positive", "negative"):
            fuzzed = {op for (op, _, mode, _) in FIGURES if mode == phase_mode}
            assert fuzzed >= OPERATIONS, (phase_mode, sorted(OPERATIONS - fuzzed))
    finally:
        box.http.close()
        child.close()


def _write_figures(stats: dict[str, Any]) -> None:
    per_operation: dict[str, dict[str, int]] = collections.defaultdict(collections.Counter)
    for (operation, phase, mode, status), count in FIGURES.items():
        per_operation[operation][f"{phase}/{mode}/{status}"] += count
    out = ROOT / ".fuzz"
    out.mkdir(exist_ok=True)
    figures = {
        "examples_per_operation": EXAMPLES,
        "cases": sum(FIGURES.values()),
        "by_operation": {k: dict(sorted(v.items())) for k, v in sorted(per_operation.items())},
        "sandbox_by_status": stats["by_status"],
        "sandbox_requests": stats["requests"],
    }
    (out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


def _content_type_probe(case: Any) -> bool:
    """A request sent with a wrong ``Content-Type`` on purpose (its body is still JSON).

    The sandbox reads a body as JSON whatever its declared type (a lenient reading the
    service's own clients never test, since they always send ``application/json``), so such a
    request is answered as its body deserves; only a 5xx would be a finding.
    """
    data = case.meta.phase.data if case.meta is not None else None
    return getattr(data, "scenario", None) in CONTENT_TYPE_PROBES


def _bad_task_id(case: Any, negative: set[ParameterLocation]) -> bool:
    """Whether the ``task_id`` query parameter is missing or blank.

    Schemathesis also counts an *unknown* query parameter as negative data; the sandbox ignores
    those (as most services do), so only the documented parameter decides.
    """
    if ParameterLocation.QUERY not in negative:
        return False
    query = case.query if isinstance(case.query, dict) else {}
    value = query.get("task_id")
    if isinstance(value, list):
        value = value[0] if value else None
    return not isinstance(value, str) or not value.strip()


def _negative_in(case: Any) -> set[ParameterLocation]:
    return {loc for loc, info in case.meta.components.items() if info.mode.is_negative}


@schema.parametrize()
def test_sandbox_answers_every_request_as_documented(case: Any, sandbox: Sandbox) -> None:
    operation = f"{case.method.upper()} {case.path}"
    creating = operation in CREATES
    negative = _negative_in(case)
    if not negative:
        # Half of the valid cases name a real task or project instead of a random id, so
        # that the answers for real objects (every state) are checked against the schema too.
        if operation == "GET /v1/tasks" and isinstance(case.query, dict):
            real = sandbox.pick(sandbox.task_ids)
            if real is not None:
                case.query["task_id"] = real
        elif "{project_id}" in case.path:
            real = sandbox.pick(sandbox.project_ids)
            if real is not None:
                case.path_parameters["project_id"] = real
    before = sandbox.counters() if creating else None
    response = case.call(base_url=sandbox.base_url)
    # Read before the checks run: some of them send the request again (without the key...).
    after = sandbox.counters() if creating else None
    phase = case.meta.phase.name.value if case.meta is not None else "explicit"
    mode = "negative" if negative else "positive"
    FIGURES[operation, phase, mode, response.status_code] += 1
    # Every schemathesis check: no 5xx, documented status / content type / headers, a body
    # that fits the schema, bad data refused, good data accepted, auth not ignored.
    case.validate_response(response)
    status = response.status_code
    if ParameterLocation.BODY in negative or _bad_task_id(case, negative):
        assert status == 400, (operation, case.body, case.query, status, response.text[:300])
    elif ParameterLocation.PATH in negative:
        assert status in (400, 404), (operation, case.path_parameters, status)
    elif ParameterLocation.HEADER in negative and not _content_type_probe(case):
        assert status == 401, (operation, case.headers, status)
    if creating and status != 200:
        # A refused creating call created nothing and charged nothing.
        assert after == before, (operation, status, response.text[:300])
