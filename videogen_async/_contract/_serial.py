"""The one converter between the SDK's attrs classes and JSON-ready data, and its mixin.

:class:`Serializable` gives ``to_dict()``, ``to_json()`` and ``from_dict()`` (round trips equal,
through a broker, a workflow or a file): ISO 8601 dates with offset, enums as strings (unknown
ones stay strings), nested classes as dicts, tuples as lists.
"""

from __future__ import annotations

import enum
import functools
import json
import math
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, NoReturn, Optional, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn

from ._dates import format_datetime, parse_datetime
from ._enums import FunctionMode, Model, ProjectMode, ProjectStatus, ProjectStep, TaskStatus

_S = TypeVar("_S", bound="Serializable")


def _enum_or_str(enum_cls: type[enum.Enum], optional: bool) -> Any:
    def structure(value: Any, _type: Any) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            _wrong(value, f"a string for {enum_cls.__name__}")
        return enum_cls(value)  # open: a value this SDK does not know is a member of its own

    return structure


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _wrong(value: Any, expected: str) -> NoReturn:
    raise ValueError(
        f"expected {expected}, got"
        f" {'null' if value is None else f'{type(value).__name__} {value!r:.40}'}"
    )


def _number(value: Any, _type: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _wrong(value, "a number")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the largest float
        number = math.inf
    return number if math.isfinite(number) else _wrong(value, "a finite number")


def _text(value: Any, _type: Any) -> str:
    if isinstance(value, str):
        return value
    _wrong(value, "a string")  # never str(): a null id would read "None"


def _make_converter() -> cattrs.Converter:
    made = cattrs.Converter(forbid_extra_keys=False)

    def object_of(cls: Any) -> Any:
        """An attrs class from a JSON object only (cattrs reads ``""`` as one of defaults)."""
        fields = make_dict_structure_fn(cls, made)
        return lambda v, t: fields(v, t) if isinstance(v, Mapping) else _wrong(v, "an object")

    made.register_structure_hook(str, _text)
    made.register_structure_hook(datetime, lambda v, _t: parse_datetime(v))
    made.register_unstructure_hook(datetime, format_datetime)
    made.register_structure_hook(float, _number)
    made.register_structure_hook_factory(attrs.has, object_of)
    # ``tuple[X, ...]`` from a JSON list only (cattrs reads any iterable: "ab" as a, b).
    made.register_structure_hook_func(
        lambda t: getattr(t, "__origin__", None) is tuple,
        lambda v, t: (
            made._structure_tuple(v, t) if isinstance(v, list | tuple) else _wrong(v, "a list")
        ),
    )
    for enum_cls in (TaskStatus, ProjectStatus, ProjectStep, ProjectMode, Model, FunctionMode):
        for union, optional in ((enum_cls, False), (Optional[enum_cls], True)):  # noqa: UP045
            made.register_structure_hook(union, _enum_or_str(enum_cls, optional))
            made.register_unstructure_hook(union, _plain)
    return made


#: The converter of every attrs class of the SDK (the models parse the service's answers by it).
converter = _make_converter()


class NotFinite(ValueError):
    """A number JSON cannot hold (NaN, Infinity), at ``path``."""

    rule = "must be a finite number (JSON has no NaN or Infinity)"

    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: {self.rule}")
        self.path = path


@functools.cache
def _encoder(options: frozenset[tuple[str, Any]]) -> Callable[[Any], str]:
    # Made once per set of options: ``json.dumps`` with any option makes a new
    # ``JSONEncoder`` per call (a ledger's create writes its request with two).
    return json.JSONEncoder(allow_nan=False, **dict(options)).encode


def finite_json(value: Any, path: str, **options: Any) -> str:
    """``json.dumps(value, **options)`` refusing NaN and Infinity: ``NotFinite``, its path."""
    try:
        return _encoder(frozenset(options.items()))(value)
    except ValueError:
        stack = [(path, value)]
        while stack:
            at, item = stack.pop()
            if isinstance(item, float) and not math.isfinite(item):
                raise NotFinite(at or "value") from None
            if isinstance(item, Mapping):
                stack += [(f"{at}.{k}" if at else str(k), v) for k, v in item.items()]
            elif isinstance(item, (list, tuple)):
                stack += [(f"{at}[{i}]", v) for i, v in enumerate(item)]
        raise


class Serializable:
    """``to_dict()``, ``to_json()`` and ``from_dict()`` for an attrs class, by one converter."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready data.

        Returns:
            A dict of the fields: dates as ISO 8601 text with their offset, enums as their
            strings, nested objects as dicts, tuples as lists.
        """
        data: dict[str, Any] = converter.unstructure(self)
        return data

    def to_json(self, **dumps: Any) -> str:
        """The fields as JSON text.

        Args:
            **dumps: Options of ``json.dumps`` (``indent``, ``sort_keys``...).

        Returns:
            ``json.dumps(self.to_dict())``.

        Raises:
            ValueError: A number that is not finite (JSON has none), named by its path.
        """
        return finite_json(self.to_dict(), type(self).__name__, **dumps)

    @classmethod
    def from_dict(cls: type[_S], data: Mapping[str, Any]) -> _S:
        """Rebuild an object from ``to_dict()`` data (or from the service's JSON).

        Fields this version does not know are ignored; an enum value it does not know is
        kept as its string.

        Args:
            data: The data.

        Returns:
            The object, equal to the one ``data`` was made from.

        Raises:
            ValueError: ``data`` is not a mapping, or a field is missing or of the wrong type
                (the message names each field and what was wrong).
        """
        if not isinstance(data, Mapping):
            raise ValueError(  # noqa: TRY004  # bad data, as json.loads says it
                f"{cls.__name__}.from_dict: expected a mapping, got {type(data).__name__}"
            )
        try:
            return converter.structure(data, cls)
        except cattrs.BaseValidationError as exc:
            raise ValueError(
                f"{cls.__name__}.from_dict:"
                f" {'; '.join(cattrs.transform_error(exc, path=cls.__name__))}"
            ) from None
