"""The sandbox console (``/_sandbox/console``), in a real headless browser and over plain HTTP.

The browser tests drive Debian's Chromium (or any Chromium named by ``VIDEOGEN_CHROMIUM``)
with Playwright. Where either is missing they are skipped on a developer's machine, and fail
in CI (``CI`` set), where ``.ci/run`` installs both.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator

import aiohttp
import pytest

from videogen_async.testing import FaultRule, SandboxServer

try:
    from playwright.async_api import Page, async_playwright, expect
except ImportError:  # pragma: no cover - depends on the machine
    async_playwright = None

#: How to get what is missing: the test extra installs playwright, never a browser (these
#: tests drive the machine's Chromium), so each names its own command.
HINTS = {
    "playwright": 'python -m pip install -e ".[test]"',
    "chromium": "apt-get install chromium (or VIDEOGEN_CHROMIUM=/path/to/chromium)",
}
HOSTILE = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'> a cat"
CONSOLE = "/_sandbox/console"


def _chromium() -> str | None:
    named = os.environ.get("VIDEOGEN_CHROMIUM")
    if named:
        return named
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def missing_message(what: str) -> str:
    """Why the browser tests cannot run, and the command that installs what is missing."""
    return f"{what} is missing: install it with {HINTS[what]}"


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"in CI: {missing_message(what)}")
    pytest.skip(missing_message(what))


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(manual_clock=True, seed=5) as server:
        yield server


@pytest.fixture
async def page(sandbox: SandboxServer) -> AsyncIterator[Page]:
    """A page of a headless Chromium; a script error or a failed load on it fails the test.

    It depends on ``sandbox`` so that the browser is closed before the sandbox is: a page
    still refreshing from a closed sandbox would log failed loads.
    """
    if async_playwright is None:
        _missing("playwright")
    executable = _chromium()
    if executable is None:
        _missing("chromium")
    errors: list[str] = []
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=executable)
        try:
            context = await browser.new_context(viewport={"width": 1100, "height": 760})
            tab = await context.new_page()
            tab.set_default_timeout(15_000)
            tab.on("pageerror", lambda exc: errors.append(str(exc)))
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            yield tab
        finally:
            await browser.close()
    assert not errors, errors


async def _finished_task(server: SandboxServer, prompt: str = "a lighthouse at dawn") -> str:
    async with server.client() as client:
        task = await client.tasks.create(prompt=prompt, duration=5)
        server.clock.advance(3600)
        await client.tasks.wait(task.task_id)
    return task.task_id


# --------------------------------------------------------------------------------------------
# In the browser
# --------------------------------------------------------------------------------------------


async def test_shows_balance_task_state_cost_and_request(
    page: Page, sandbox: SandboxServer
) -> None:
    async with sandbox.client() as client:
        task = await client.tasks.create(prompt="a red kite", duration=10)
        project = await client.projects.create(
            "https://cdn.example.com/ad.mp4", ["https://cdn.example.com/p.png"], mode="manual"
        )
    created = sandbox.request_log[0]
    assert created.trace_id

    await page.goto(sandbox.url(CONSOLE))

    balance = sandbox.credits()["api_available_credits"]
    await expect(page.locator("#balance")).to_contain_text(f"{balance:g} available")
    row = page.locator("#tasks tbody tr", has_text=task.task_id)
    await expect(row).to_have_count(1)
    await expect(row.locator(".state")).to_have_text(task.status.value)
    await expect(row.locator("td").nth(2)).to_have_text(f"{task.credits_cost:g}")
    await expect(row.locator(".prompt")).to_have_text("a red kite")
    project_row = page.locator("#projects tbody tr", has_text=project.project_id)
    await expect(project_row.locator("td")).to_have_text(
        [
            project.project_id,
            "manual",
            project.status.value,
            project.current_step.value,
            f"{project.credits_cost:g}",
            "0",
        ]
    )
    request = page.locator("#requests tbody tr", has_text=created.trace_id)
    await expect(request.locator("td")).to_have_text(
        [
            re.compile(r"\d\d:\d\d:\d\d"),
            "POST",
            "/v1/video/videomodel-2",
            "200",
            "200",
            created.trace_id,
            "",
            re.compile(r"[\d.]+"),
        ]
    )


async def test_shows_the_faults_that_fired(page: Page, sandbox: SandboxServer) -> None:
    sandbox.faults.add(
        FaultRule(route="GET /v1/credits", error_rate=1.0, error_statuses=(503,), times=1)
    )
    headers = {"Authorization": f"Bearer {sandbox.api_key}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.get(sandbox.url("/v1/credits")) as failed:
            assert failed.status == 503
    (record,) = sandbox.request_log

    await page.goto(sandbox.url(CONSOLE))

    await expect(page.locator("#faults tbody tr")).to_have_text([re.compile(r"^error\s*1$")])
    row = page.locator("#requests tbody tr", has_text=str(record.trace_id))
    await expect(row.locator("td").nth(3)).to_have_text("503")
    await expect(row.locator("td").nth(4)).to_have_text("503")
    await expect(row.locator(".fault")).to_have_text("error")


async def test_plays_a_finished_video(page: Page, sandbox: SandboxServer) -> None:
    task_id = await _finished_task(sandbox)

    await page.goto(sandbox.url(CONSOLE))

    video = page.locator("video#video")
    await expect(video).to_have_attribute("src", f"/media/{task_id}.mp4")
    # HAVE_CURRENT_DATA or better: the browser fetched, parsed and decoded the sandbox's MP4.
    await page.wait_for_function(
        "() => { const v = document.getElementById('video');"
        " return v.readyState >= 2 && v.duration > 0 && !v.error; }"
    )
    await page.evaluate("() => document.getElementById('video').play()")
    await page.wait_for_function("() => document.getElementById('video').currentTime > 0")
    assert await page.evaluate("() => document.getElementById('video').duration") == 2


async def test_a_hostile_prompt_is_shown_as_text(page: Page, sandbox: SandboxServer) -> None:
    task_id = await _finished_task(sandbox, prompt=HOSTILE)
    async with aiohttp.ClientSession() as http:
        async with http.get(sandbox.url("/v1/<b>bold</b>")) as unknown:
            assert unknown.status in (401, 404)

    await page.goto(sandbox.url(CONSOLE))

    row = page.locator("#tasks tbody tr", has_text=task_id)
    await expect(row.locator(".prompt")).to_have_text(HOSTILE)
    await expect(page.locator("#requests code", has_text="/v1/<b>bold</b>")).to_have_count(1)
    # Only the page's own script; no injected element and nothing ran.
    assert await page.locator("script").count() == 1
    assert await page.locator("#live img, #live b").count() == 0
    assert await page.evaluate("() => window.__pwned") is None


async def test_refreshes_itself(page: Page, sandbox: SandboxServer) -> None:
    await page.goto(sandbox.url(CONSOLE))
    await expect(page.locator("#live")).to_contain_text("No task yet.")
    await page.evaluate("() => { window.__same_document = true; }")

    async with sandbox.client() as client:
        task = await client.tasks.create(prompt="a slow boat", duration=5)
    row = page.locator("#tasks tbody tr", has_text=task.task_id)
    await expect(row.locator(".state")).to_have_text(task.status.value)

    sandbox.clock.advance(3600)  # the task finishes: the page shows it without a reload
    await expect(row.locator(".state")).to_have_text("succeeded")
    await expect(page.locator("video#video")).to_have_attribute("src", f"/media/{task.task_id}.mp4")
    assert await page.evaluate("() => window.__same_document") is True


async def test_screenshot_for_the_docs(
    page: Page, sandbox: SandboxServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The page renders (the docs' picture is taken this way: see docs/sandbox.md)."""
    await _finished_task(sandbox)
    await page.goto(sandbox.url(CONSOLE))
    await page.wait_for_function("() => document.getElementById('video').readyState >= 2")
    shot = await page.screenshot(path=tmp_path_factory.mktemp("shot") / "console.png")
    assert shot.startswith(b"\x89PNG")


# --------------------------------------------------------------------------------------------
# Over plain HTTP (no browser needed)
# --------------------------------------------------------------------------------------------


async def test_the_html_escapes_user_values_and_allows_only_its_own_script(
    sandbox: SandboxServer,
) -> None:
    await _finished_task(sandbox, prompt=HOSTILE)
    before = len(sandbox.request_log)
    async with aiohttp.ClientSession() as http:
        async with http.get(sandbox.url(CONSOLE)) as response:
            assert response.status == 200
            assert response.content_type == "text/html"
            text = await response.text()
            policy = response.headers["Content-Security-Policy"]
        async with http.get(sandbox.url(CONSOLE + "?part=live")) as live:
            fragment = await live.text()

    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;&lt;img" in text
    assert "<img" not in text
    assert text.count("<script") == 1
    (nonce,) = re.findall(r"<script nonce='([^']+)'>", text)
    assert f"script-src 'nonce-{nonce}'" in policy
    assert "default-src 'none'" in policy
    assert sandbox.api_key not in text
    assert "http://" not in text
    assert "https://" not in text
    assert fragment.startswith("<div id='live'>")
    assert "<script" not in fragment
    assert len(sandbox.request_log) == before  # the console is not part of the request log


async def test_the_page_changes_nothing(sandbox: SandboxServer) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(sandbox.url(CONSOLE)) as response:
            assert response.status == 405
    assert sandbox.task_ids == ()


def test_a_missing_browser_names_the_command_that_installs_it() -> None:
    # The test extra installs playwright: a missing Chromium is the machine's, not pip's.
    assert missing_message("chromium") == (
        "chromium is missing: install it with apt-get install chromium"
        " (or VIDEOGEN_CHROMIUM=/path/to/chromium)"
    )
    assert "pip" not in missing_message("chromium")
    assert '".[test]"' in missing_message("playwright")
