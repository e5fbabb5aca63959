"""The sandbox clock, driven by a fake monotonic timer."""

from __future__ import annotations

import pytest

from videogen_async.testing import SandboxClock


class FakeTimer:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_runs_at_its_time_scale() -> None:
    timer = FakeTimer()
    clock = SandboxClock(time_scale=0.01, timer=timer)
    assert clock.now() == 0
    timer.now += 0.5
    assert clock.now() == pytest.approx(50)
    assert clock.time_scale == 0.01
    assert not clock.paused


def test_advance_adds_simulated_seconds() -> None:
    timer = FakeTimer()
    clock = SandboxClock(time_scale=2.0, timer=timer)
    timer.now += 2
    assert clock.advance(10) == pytest.approx(11)
    timer.now += 2
    assert clock.now() == pytest.approx(12)
    with pytest.raises(ValueError, match=">= 0"):
        clock.advance(-1)
    with pytest.raises(ValueError, match=">= 0"):
        clock.advance(True)


def test_paused_clock_moves_only_when_advanced() -> None:
    timer = FakeTimer()
    clock = SandboxClock(paused=True, timer=timer)
    timer.now += 1000
    assert clock.now() == 0
    clock.advance(5)
    assert clock.now() == 5
    clock.resume()
    timer.now += 3
    assert clock.now() == pytest.approx(8)
    clock.pause()
    timer.now += 3
    assert clock.now() == pytest.approx(8)
    assert clock.paused


def test_wall_now_follows_the_timer() -> None:
    timer = FakeTimer()
    clock = SandboxClock(time_scale=0.1, timer=timer)
    start = clock.wall_now()
    assert start == pytest.approx(clock.epoch)
    timer.now += 2.5
    assert clock.wall_now() == pytest.approx(start + 2.5)


def test_wall_time_of_past_future_and_jumped_instants() -> None:
    timer = FakeTimer()
    clock = SandboxClock(time_scale=0.5, timer=timer)
    epoch = clock.epoch
    # future instant, running clock: forecast at the time scale
    assert clock.wall_time_of(10) == pytest.approx(epoch + 5)
    timer.now += 1  # sim 2
    clock.advance(100)  # jumps 2 -> 102 at real +1
    assert clock.wall_time_of(1) == pytest.approx(epoch + 0.5)  # passed while running
    assert clock.wall_time_of(50) == pytest.approx(epoch + 1)  # jumped over at real +1
    assert clock.wall_time_of(104) == pytest.approx(epoch + 2)  # forecast
    clock.pause()
    assert clock.wall_time_of(103) is None  # paused: not reached until someone moves it
    assert clock.wall_time_of(102) == pytest.approx(epoch + 1)


@pytest.mark.parametrize("scale", [0, -1, "fast"])
def test_time_scale_must_be_positive(scale: object) -> None:
    with pytest.raises(ValueError, match="time_scale"):
        SandboxClock(time_scale=scale)  # type: ignore[arg-type]
