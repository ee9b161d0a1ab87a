"""Payload validation with JSON Pointer paths: a JSON Schema (jsonschema) or a pydantic model.

The lifecycle validates with it before a handler runs; the dashboard validates with the same
code when it shows or republishes a payload, so both sides report the same errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import jsonschema.validators


@dataclass(frozen=True)
class SchemaViolation:
    """One validation error: where (a JSON Pointer into the payload) and what. ``unread``: the
    payload could not be read as JSON at all (so no schema rule was tried)."""

    path: str
    message: str
    unread: bool = False

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


def json_pointer(parts: Iterable[Any]) -> str:
    """RFC 6901 pointer for a sequence of keys and indexes ('' is the whole document)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


Validator = Callable[[Any], tuple[Any, list[SchemaViolation]]]

#: How a violation of a payload not read as JSON begins (``unread``): the dashboard's groups of
#: such failures are told by it, as no rule of the schema was tried on them.
NOT_JSON, TOO_DEEP_TO_PARSE = "payload is not valid JSON", "payload nests too deeply to be parsed"


def make_validator(schema: Any = None) -> Validator:
    """A validator from a JSON Schema dict (Draft 2020-12 unless it says otherwise), a
    ``jsonschema`` validator instance, a pydantic model class, or None (any JSON).

    It takes the parsed JSON and returns ``(value for the handler, violations)``.
    """
    if schema is None:
        return lambda data: (data, [])
    if isinstance(schema, type):
        model = _pydantic_model(schema)
        if model is not None:
            return _pydantic_validator(model)
    if hasattr(schema, "iter_errors"):
        return _jsonschema_validator(schema)
    if isinstance(schema, Mapping):
        cls = jsonschema.validators.validator_for(
            schema, default=jsonschema.validators.Draft202012Validator
        )
        cls.check_schema(schema)
        return _jsonschema_validator(cls(schema))
    raise TypeError(f"unsupported schema {schema!r}: a JSON Schema dict or a pydantic model")


def _jsonschema_validator(validator: Any) -> Validator:
    def validate(data: Any) -> tuple[Any, list[SchemaViolation]]:
        errors = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
        return data, [SchemaViolation(json_pointer(e.absolute_path), e.message) for e in errors]

    return validate


def _pydantic_model(schema: Any) -> Any:
    try:
        from pydantic import BaseModel  # optional dependency
    except ImportError:
        return None
    return schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None


def _pydantic_validator(model: Any) -> Validator:
    from pydantic import ValidationError

    def validate(data: Any) -> tuple[Any, list[SchemaViolation]]:
        try:
            return model.model_validate(data), []
        except ValidationError as exc:
            return None, [SchemaViolation(json_pointer(e["loc"]), e["msg"]) for e in exc.errors()]

    return validate


def parse_and_validate(data: bytes, validator: Validator) -> tuple[Any, list[SchemaViolation]]:
    """Parse ``data`` as JSON and validate it; a payload that is not JSON is one violation at ''."""
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, [SchemaViolation("", f"{NOT_JSON}: {exc}", unread=True)]
    except RecursionError:
        return None, [SchemaViolation("", TOO_DEEP_TO_PARSE, unread=True)]
    try:
        return validator(parsed)
    except RecursionError:
        # A hostile payload must not take the page (or the consumer) down with it.
        return None, [SchemaViolation("", "payload nests too deeply to be validated")]
