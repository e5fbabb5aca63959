"""A small JSON Schema (2020-12) validator: the subset the sandbox's OpenAPI document uses.

The repository has no jsonschema dependency; this covers $ref, type, enum, const, required,
properties, additionalProperties (false), items, min/maxItems, minimum/maximum, minLength,
pattern, allOf/anyOf/oneOf/not and if/then. Unknown keywords fail loudly so that the
document cannot grow a keyword this checker silently ignores.
"""

from __future__ import annotations

import re
from typing import Any

_IGNORED = {"description", "format", "title", "examples"}
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class SchemaError(AssertionError):
    pass


def _equal(a: Any, b: Any) -> bool:
    if type(a) is type(b):
        return bool(a == b)
    return bool(_TYPES["number"](a) and _TYPES["number"](b) and a == b)


def errors(value: Any, schema: Any, root: dict[str, Any], path: str = "$") -> list[str]:
    """Return the ways ``value`` breaks ``schema`` (empty when it is valid)."""
    if schema is True:
        return []
    if schema is False:
        return [f"{path}: no value is allowed"]
    found: list[str] = []
    for key, rule in schema.items():
        if key in _IGNORED:
            continue
        if key == "$ref":
            target: Any = root
            for part in rule.removeprefix("#/").split("/"):
                target = target[part]
            found += errors(value, target, root, path)
        elif key == "type":
            kinds = rule if isinstance(rule, list) else [rule]
            if not any(_TYPES[k](value) for k in kinds):
                found.append(f"{path}: {value!r} is not of type {kinds}")
        elif key == "enum":
            if not any(_equal(value, v) for v in rule):
                found.append(f"{path}: {value!r} not in {rule}")
        elif key == "const":
            if not _equal(value, rule):
                found.append(f"{path}: {value!r} != {rule!r}")
        elif key == "required":
            if isinstance(value, dict):
                found += [f"{path}: missing {name}" for name in rule if name not in value]
        elif key == "properties":
            if isinstance(value, dict):
                for name, sub in rule.items():
                    if name in value:
                        found += errors(value[name], sub, root, f"{path}.{name}")
        elif key == "additionalProperties":
            if isinstance(value, dict):
                extra = set(value) - set(schema.get("properties", {}))
                if rule is False and extra:
                    found.append(f"{path}: unexpected {sorted(extra)}")
                elif isinstance(rule, dict):
                    for name in extra:
                        found += errors(value[name], rule, root, f"{path}.{name}")
        elif key == "items":
            if isinstance(value, list):
                for i, item in enumerate(value):
                    found += errors(item, rule, root, f"{path}[{i}]")
        elif key == "minItems":
            if isinstance(value, list) and len(value) < rule:
                found.append(f"{path}: fewer than {rule} items")
        elif key == "maxItems":
            if isinstance(value, list) and len(value) > rule:
                found.append(f"{path}: more than {rule} items")
        elif key == "minimum":
            if _TYPES["number"](value) and value < rule:
                found.append(f"{path}: {value} < {rule}")
        elif key == "maximum":
            if _TYPES["number"](value) and value > rule:
                found.append(f"{path}: {value} > {rule}")
        elif key == "minLength":
            if isinstance(value, str) and len(value) < rule:
                found.append(f"{path}: shorter than {rule}")
        elif key == "pattern":
            if isinstance(value, str) and not re.search(rule, value):
                found.append(f"{path}: {value!r} does not match {rule}")
        elif key == "allOf":
            for sub in rule:
                found += errors(value, sub, root, path)
        elif key == "anyOf":
            if all(errors(value, sub, root, path) for sub in rule):
                found.append(f"{path}: matches none of anyOf")
        elif key == "oneOf":
            matches = sum(not errors(value, sub, root, path) for sub in rule)
            if matches != 1:
                found.append(f"{path}: matches {matches} of oneOf")
        elif key == "not":
            if not errors(value, rule, root, path):
                found.append(f"{path}: matches a 'not' schema")
        elif key == "if":
            if not errors(value, rule, root, path) and "then" in schema:
                found += errors(value, schema["then"], root, path)
        elif key == "then":
            continue
        else:
            raise SchemaError(f"keyword {key!r} is not supported by this checker")
    return found


def check(value: Any, schema: Any, root: dict[str, Any]) -> None:
    problems = errors(value, schema, root)
    if problems:
        raise SchemaError("; ".join(problems[:5]))
