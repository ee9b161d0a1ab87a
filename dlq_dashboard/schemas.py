"""JSON Schema validation with JSON Pointer paths, and the registry of DLQ_SCHEMAS (SPEC section 7).

Every schema file names the subjects it covers in ``"x-subjects"`` (NATS wildcards). A
broken file is reported with its name, never raised: one bad file must not take the
dashboard down.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .filters import FilterError, subject_pattern_regex, validate_subject_pattern

log = logging.getLogger(__name__)

# --- validation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaViolation:
    """One validation error: where (a JSON Pointer into the payload) and what."""

    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


def json_pointer(parts: Iterable[Any]) -> str:
    """RFC 6901 pointer for a sequence of keys and indexes ('' is the whole document)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


Validator = Callable[[Any], tuple[Any, list[SchemaViolation]]]


def make_validator(schema: Any = None) -> Validator:
    """A validator from a JSON Schema dict (Draft 2020-12 unless it says otherwise), a
    ``jsonschema`` validator instance, a pydantic model class, or None (any JSON).

    It takes the parsed JSON and returns ``(value for the handler, violations)``.
    """
    if schema is None:
        return lambda data: (data, [])
    model = _pydantic_model(schema)
    if model is not None:
        return _pydantic_validator(model)
    if hasattr(schema, "iter_errors"):
        return _jsonschema_validator(schema)
    if isinstance(schema, Mapping):
        import jsonschema.validators

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
        return None, [SchemaViolation("", f"payload is not valid JSON: {exc}")]
    except RecursionError:
        return None, [SchemaViolation("", "payload nests too deeply to be parsed")]
    try:
        return validator(parsed)
    except RecursionError:
        # A hostile payload must not take the page (or the consumer) down with it.
        return None, [SchemaViolation("", "payload nests too deeply to be validated")]


# --- the registry ------------------------------------------------------------------------------

@dataclass(frozen=True)
class SchemaFile:
    """One loaded schema: its file, the subject patterns it covers, its validator."""

    name: str
    patterns: tuple[str, ...]
    schema: dict
    validator: Validator


@dataclass(frozen=True)
class ValidationResult:
    """The current schema's verdict on a payload (schema None: no schema covers the subject)."""

    schema: str | None
    errors: list[SchemaViolation]

    @property
    def valid(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "valid": self.valid, "errors": [e.to_dict() for e in self.errors]}


@dataclass
class SchemaRegistry:
    """The schemas of a folder, matched to subjects by their ``x-subjects`` patterns."""

    folder: str | None = None
    schemas: list[SchemaFile] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (file name, sentence)

    @classmethod
    def load(cls, folder: str | None) -> "SchemaRegistry":
        """Load every ``*.json`` file of ``folder``; broken files become ``problems``."""
        registry = cls(folder=folder)
        if not folder:
            return registry
        for path in sorted(Path(folder).glob("*.json")):
            try:
                registry.schemas.append(_load_schema_file(path))
            except (OSError, ValueError, TypeError) as exc:
                problem = f"{exc}"
                registry.problems.append((path.name, problem))
                log.error("schema file %s is not usable: %s", path.name, problem)
        return registry

    def for_subject(self, subject: str | None) -> SchemaFile | None:
        """The schema covering ``subject`` (the first file by name whose pattern matches)."""
        if not subject:
            return None
        import re

        for schema in self.schemas:
            if any(re.match(subject_pattern_regex(p), subject) for p in schema.patterns):
                return schema
        return None

    def validate(self, subject: str | None, payload: bytes) -> ValidationResult:
        """Validate a payload against the schema of its subject."""
        schema = self.for_subject(subject)
        if schema is None:
            return ValidationResult(None, [])
        _, errors = parse_and_validate(payload, schema.validator)
        return ValidationResult(schema.name, errors)


def _load_schema_file(path: Path) -> SchemaFile:
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(schema, dict):
        raise ValueError("a schema must be a JSON object")
    patterns = schema.get("x-subjects")
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
        raise ValueError('"x-subjects" must be a non-empty list of subjects, e.g. ["orders.*"]')
    for pattern in patterns:
        try:
            validate_subject_pattern(pattern)
        except FilterError as exc:
            raise ValueError(f'"x-subjects": {exc}') from None
    try:
        validator = make_validator(schema)
    except Exception as exc:  # jsonschema's SchemaError and friends
        raise ValueError(f"not a valid JSON Schema: {getattr(exc, 'message', exc)}") from None
    return SchemaFile(name=path.name, patterns=tuple(patterns), schema=schema, validator=validator)
