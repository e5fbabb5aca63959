"""Fault injection: make the sandbox misbehave like a real network and a real service.

A :class:`FaultRule` gives each fault kind on a route a probability: ``error`` (5xx envelope),
``html`` (a proxy's page), ``rate_limit`` (429), ``drop_before``/``drop_after`` (connection
dropped before/after the request takes effect). One seeded draw picks at most one kind;
``latency`` adds to any. Set per route via :class:`FaultInjector` (``server.faults``) or
``POST /_sandbox/faults``.
"""

from __future__ import annotations

import fnmatch
import itertools
import random
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._contract import _checks as checks
from ._config import Duration, check_duration, rate_field, sample_duration

FAULT_KINDS = ("drop_before", "rate_limit", "error", "html", "drop_after")
"""The exclusive fault kinds, in the order in which one draw assigns them."""


def _statuses(value: Iterable[int]) -> tuple[int, ...]:
    statuses = tuple(int(v) for v in value)
    if not statuses or any(not 500 <= s <= 599 for s in statuses):
        raise ValueError(f"error_statuses must be 5xx statuses, got {statuses!r}")
    return statuses


def _optional_duration(value: Any) -> Duration | None:
    return None if value is None else check_duration(value, "latency")


def _route(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"route must be a non-empty string, got {value!r}")
    parts = value.split()
    if len(parts) == 2:
        return f"{parts[0].upper()} {parts[1]}"
    return value.strip()


@attrs.frozen
class FaultRule:
    """What can go wrong on one route (or on every route).

    Args:
        route: ``"*"`` (every service route and media), ``"METHOD /path"`` or ``"/path"``;
            a spec pattern (``.../{project_id}``) or concrete path, wildcards allowed.
        error_rate: Probability of a 5xx answer with an error envelope.
        error_statuses: The statuses drawn from for ``error`` (uniformly).
        html_rate: Probability of an HTML error page instead of the envelope.
        html_status: The status of the HTML page.
        rate_limit_rate: Probability of a 429 answer.
        retry_after: Seconds sent in the 429's ``Retry-After`` header (``None``: no header).
        drop_before_rate: Probability of closing the connection before the request acts.
        drop_after_rate: Probability of closing it after the request took effect.
        latency: Real seconds added: a number, ``(low, high)`` or callable(rng) (``None``).
        times: Matching requests the rule applies to, then dropped (``None``: until cleared).

    Raises:
        ValueError: A rate outside 0..1, rates adding up to more than 1, a non-5xx error
            status, a bad latency or a ``times`` below 1.
    """

    route: str = attrs.field(default="*", converter=_route)
    error_rate: float = rate_field("error_rate")
    error_statuses: tuple[int, ...] = attrs.field(default=(500, 502, 503), converter=_statuses)
    html_rate: float = rate_field("html_rate")
    html_status: int = attrs.field(
        default=502, validator=checks.validator(checks.whole, minimum=400, maximum=599)
    )
    rate_limit_rate: float = rate_field("rate_limit_rate")
    retry_after: float | None = attrs.field(
        default=1.0, validator=checks.validator(checks.number, optional=True)
    )
    drop_before_rate: float = rate_field("drop_before_rate")
    drop_after_rate: float = rate_field("drop_after_rate")
    latency: Duration | None = attrs.field(default=None, converter=_optional_duration)
    times: int | None = attrs.field(
        default=None, validator=checks.validator(checks.whole, optional=True)
    )

    def __attrs_post_init__(self) -> None:
        total = sum(self.rates())
        if total > 1.0 + 1e-9:
            raise ValueError(f"the fault rates of a rule add up to {total:g}, more than 1")

    def rates(self) -> tuple[float, ...]:
        """The probabilities of the exclusive kinds, in :data:`FAULT_KINDS` order."""
        return tuple(getattr(self, f"{kind}_rate") for kind in FAULT_KINDS)

    def to_dict(self) -> dict[str, Any]:
        """The rule as JSON-ready data (a callable latency is shown as ``"callable"``).

        ``attrs.asdict`` writes the tuples (statuses, a latency range) as lists.
        """
        data = attrs.asdict(self)
        if callable(self.latency):
            data["latency"] = "callable"
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultRule:
        """Build a rule from JSON data (as ``POST /_sandbox/faults`` receives it).

        Raises:
            ValueError: An unknown field or a bad value.
        """
        try:
            return cls(**data)  # a latency range as a JSON list: check_duration takes it
        except TypeError as exc:  # an unknown field: "unexpected keyword argument 'name'"
            raise ValueError(str(exc)) from None


@attrs.frozen
class FaultDecision:
    """What happens to one request.

    Attributes:
        kind: One of :data:`FAULT_KINDS`, or ``None`` for no exclusive fault.
        latency: Real seconds to wait first.
        status: The status of an ``error``, ``html`` or ``rate_limit`` answer.
        retry_after: The ``Retry-After`` value of a ``rate_limit`` answer.
    """

    kind: str | None
    latency: float = 0.0
    status: int = 0
    retry_after: float | None = None


class _Active:
    """A rule in use, and how many more requests it applies to."""

    __slots__ = ("remaining", "rule")

    def __init__(self, rule: FaultRule) -> None:
        self.rule, self.remaining = rule, rule.times


class FaultInjector:
    """The fault rules of one sandbox (``server.faults``), changeable at run time.

    Each request uses the one rule that fits it best: a rule naming its route exactly, else
    the most recently set wildcard rule that matches, else the ``"*"`` rule. Setting a rule
    for a route replaces that route's previous rule.

    Args:
        seed: Seed of the fault draws (``None`` for entropy).
        rules: Rules to start with (one rule, or several).
    """

    def __init__(
        self, seed: int | str | None = None, rules: FaultRule | Iterable[FaultRule] | None = ()
    ) -> None:
        self._rng = random.Random(None if seed is None else f"{seed}:faults")
        # By route, in the order set: setting a route again moves it last, so the last
        # wildcard rule that matches is the most recently set.
        self._rules: dict[str, _Active] = {}
        self.injected = dict.fromkeys((*FAULT_KINDS, "latency"), 0)
        for rule in [rules] if isinstance(rules, FaultRule) else rules or ():
            self.add(rule)

    def __repr__(self) -> str:
        return f"<FaultInjector rules={list(self._rules)!r}>"

    @property
    def rules(self) -> tuple[FaultRule, ...]:
        """The active rules, oldest first."""
        return tuple(a.rule for a in self._rules.values())

    def add(self, rule: FaultRule) -> FaultRule:
        """Activate ``rule`` (and return it), replacing any rule for the same route."""
        if not isinstance(rule, FaultRule):
            raise TypeError(f"faults must be FaultRule objects, got {rule!r}")
        self._rules.pop(rule.route, None)
        self._rules[rule.route] = _Active(rule)
        return rule

    def set(self, route: str = "*", **settings: Any) -> FaultRule:
        """Build a :class:`FaultRule` and activate it, replacing any rule for the same route.

        ``sandbox.faults.set("GET /v1/credits", error_rate=1.0, times=1)``.

        Args:
            route: ``"*"``, ``"METHOD /path"`` or ``"/path"``, wildcards allowed.
            **settings: The rule's other fields (see :class:`FaultRule`).

        Returns:
            The active rule.

        Raises:
            ValueError: A bad value.
            TypeError: A setting the rule does not have.
        """
        return self.add(FaultRule(route=route, **settings))

    def clear(self, route: str | None = None) -> None:
        """Remove the rule of ``route`` (as the rule names it), or every rule (``None``)."""
        if route is None:
            self._rules.clear()
        else:
            self._rules.pop(_route(route), None)

    def decide(self, method: str, pattern: str, path: str) -> FaultDecision | None:
        """Draw the fate of one request (``pattern``: its route's, ``path``: the concrete one).

        Returns:
            ``None`` when no rule applies, else the decision (whose ``kind`` may be ``None``
            when the draw picked no fault).
        """
        keys = (f"{method} {pattern}", f"{method} {path}", pattern, path)
        # The rule that fits best: one naming the route exactly (no wildcard: it matches only
        # its own key) first, then the latest wildcard rule, then "*" (which matches every
        # key), by how loosely a rule names its route.
        active = min(
            (
                active
                for active in reversed(self._rules.values())  # the most recently set first
                if any(fnmatch.fnmatchcase(key, active.rule.route) for key in keys)
            ),
            key=lambda a: (any(c in a.rule.route for c in "*?["), a.rule.route == "*"),
            default=None,
        )
        if active is None:
            return None
        rule = active.rule
        if active.remaining is not None:
            active.remaining -= 1
            if active.remaining <= 0:
                self._rules.pop(rule.route, None)
        rng = self._rng
        latency = 0.0 if rule.latency is None else sample_duration(rule.latency, rng)
        if latency > 0:
            self.injected["latency"] += 1
        draw, rates = rng.random(), rule.rates()
        kind = next(
            (
                name
                for name, rate, edge in zip(
                    FAULT_KINDS, rates, itertools.accumulate(rates), strict=True
                )
                if rate and draw < edge
            ),
            None,
        )
        status = (
            rng.choice(rule.error_statuses)
            if kind == "error"
            else {"html": rule.html_status, "rate_limit": 429}.get(kind or "", 0)
        )
        if kind is not None:
            self.injected[kind] += 1
        return FaultDecision(kind, latency, status, rule.retry_after)

    def reset_counts(self) -> None:
        """Set the injected-fault counters back to zero."""
        self.injected.update(dict.fromkeys(self.injected, 0))
