"""The registry of DLQ_SCHEMAS (SPEC section 7): the current schema of each subject.

Every schema file names the subjects it covers in ``"x-subjects"`` (NATS wildcards). A broken
file is reported with its name, never raised: one bad file must not take the dashboard down.
Validation itself is the consumer library's, so the dashboard reports what services report. A
schema is read from its file alone: a ``$ref`` that does not resolve within it makes the file not
usable (nothing is ever fetched over the network for a schema).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlq_consumer.validation import (SchemaViolation, UnresolvableReference, Validator, make_validator,
                                     parse_and_validate)

from ..scopes import subject_matches
from ..surrogates import escape_lone_surrogates
from .filters import FilterError, validate_subject_pattern

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchemaFile:
    """One loaded schema: its file, the subject patterns it covers, its validator."""

    name: str
    patterns: tuple[str, ...]
    schema: dict
    validator: Validator


@dataclass(frozen=True)
class UnusableSchema:
    """A schema file that could not be loaded: its name, why, and the subject patterns it names
    (None when they could not be read: it may cover any subject)."""

    name: str
    problem: str
    patterns: tuple[str, ...] | None


@dataclass(frozen=True)
class ValidationResult:
    """The current schema's verdict on a payload (schema None: no usable schema covers the
    subject; ``unusable`` then says which file that could not be loaded covers it or may, and
    why: the payload is not judged, so it does not pass)."""

    schema: str | None
    errors: list[SchemaViolation]
    unusable: str | None = None

    @property
    def valid(self) -> bool:
        return not self.errors and not self.unusable

    @property
    def read(self) -> bool:
        """Whether the payload was read as JSON (one that is not fails without a rule tried)."""
        return not any(e.unread for e in self.errors)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "valid": self.valid, "errors": [e.to_dict() for e in self.errors]}


@dataclass
class SchemaRegistry:
    """The schemas of a folder, matched to subjects by their ``x-subjects`` patterns."""

    folder: str | None = None
    schemas: list[SchemaFile] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (file name, sentence)
    unusable: list[UnusableSchema] = field(default_factory=list)  # the same files, with their subjects

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
                registry.unusable.append(UnusableSchema(path.name, problem, getattr(exc, "patterns", None)))
                log.error("schema file %s is not usable: %s", path.name, problem)
        return registry

    def for_subject(self, subject: str | None) -> SchemaFile | None:
        """The schema covering ``subject`` (the first file by name whose pattern matches)."""
        if not subject:
            return None
        for schema in self.schemas:
            if any(subject_matches(p, subject) for p in schema.patterns):
                return schema
        return None

    @property
    def judges(self) -> bool:
        """Whether any file was given: a folder of none judges nothing, one whose files could not
        be loaded judges nothing either, but says so (``unusable_for``)."""
        return bool(self.schemas or self.unusable)

    def unusable_for(self, subject: str | None) -> str | None:
        """Why no schema judges a payload of ``subject`` although one may: each file that could not
        be loaded and covers it, or whose subjects could not be read (it may cover any), named with
        its reason; None when a usable file covers the subject or no unusable file may.

        "schema file orders.json, which covers its subject, is not usable: not valid JSON (...)"
        """
        if not subject or not self.unusable or self.for_subject(subject) is not None:
            return None
        told = [f"schema file {u.name}, which {'may cover' if u.patterns is None else 'covers'} its subject, is not "
                f"usable: {u.problem}" for u in self.unusable
                if u.patterns is None or any(subject_matches(p, subject) for p in u.patterns)]
        return "; ".join(told) or None

    def validate(self, subject: str | None, payload: bytes) -> ValidationResult:
        """Validate a payload against the schema of its subject."""
        schema = self.for_subject(subject)
        if schema is None:
            return ValidationResult(None, [], self.unusable_for(subject))
        _, errors = parse_and_validate(payload, schema.validator)
        # A message or path quoting half a UTF-16 pair (a payload's "\ud800") quotes its escape:
        # the page, the database and the audit hold UTF-8 text only.
        return ValidationResult(schema.name, [
            replace(e, path=escape_lone_surrogates(e.path), message=escape_lone_surrogates(e.message)) for e in errors])


class _Unusable(ValueError):
    """A file whose subjects were read but whose schema is not usable: ``patterns`` are its subjects."""

    def __init__(self, message: str, patterns: tuple[str, ...]):
        super().__init__(message)
        self.patterns = patterns


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
    except UnresolvableReference as exc:  # what a reference names is in the file or nowhere
        raise _Unusable(str(exc), tuple(patterns)) from None
    except Exception as exc:  # jsonschema's SchemaError and friends
        raise _Unusable(f"not a valid JSON Schema: {getattr(exc, 'message', exc)}", tuple(patterns)) from None
    return SchemaFile(name=path.name, patterns=tuple(patterns), schema=schema, validator=validator)
