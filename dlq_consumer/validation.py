"""Payload validation with JSON Pointer paths: a JSON Schema (jsonschema) or a pydantic model.

The lifecycle validates with it before a handler runs; the dashboard validates with the same
code when it shows or republishes a payload, so both sides report the same errors.

A schema is what its document says: a ``$ref`` resolves within the document (or to a draft's
metaschema, which jsonschema carries), never by fetching a URI over the network. A schema with a
reference that does not resolve so is refused when its validator is made (UnresolvableReference).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import jsonschema.validators
import referencing
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as METASCHEMAS
from referencing.exceptions import NoSuchResource, Unresolvable


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
#: How the violation begins when the schema itself cannot be applied (a reference it cannot resolve).
SCHEMA_NOT_APPLIED = "the schema could not be applied"


class UnresolvableReference(ValueError):
    """A schema whose ``$ref`` does not resolve within it: it would have to be fetched."""


def _never_fetch(uri: str) -> Any:
    raise NoSuchResource(ref=uri)


#: The registry every schema's references resolve in: its own document (and the drafts'
#: metaschemas, which jsonschema adds); any other URI is unresolvable, never retrieved.
LOCAL_REFERENCES = referencing.Registry(retrieve=_never_fetch)  # type: ignore[call-arg]


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
        return _jsonschema_validator(jsonschema_validator(schema))
    raise TypeError(f"unsupported schema {schema!r}: a JSON Schema dict or a pydantic model")


def jsonschema_validator(schema: Mapping, *, check: bool = True) -> Any:
    """The jsonschema validator of a schema dict (Draft 2020-12 unless it says otherwise), its
    references resolved within it. ``check``: refuse a schema that is not valid for its draft
    (SchemaError) or holds a reference that does not resolve so (UnresolvableReference)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.validators.Draft202012Validator)
    if check:
        cls.check_schema(schema)
        specification = referencing.jsonschema.specification_with(
            cls.ID_OF(cls.META_SCHEMA) or "urn:unknown-dialect", default=referencing.jsonschema.DRAFT202012)
        root = specification.create_resource(schema)
        resolver = METASCHEMAS.combine(LOCAL_REFERENCES).resolver_with_root(root)
        for ref in _unresolved(root, resolver, specification):
            raise UnresolvableReference(
                f"its reference {ref!r} does not resolve within the schema (a schema is never "
                "fetched over the network: put what it refers to in its \"$defs\")")
    return cls(schema, registry=LOCAL_REFERENCES)


def _unresolved(resource: Any, resolver: Any, specification: Any, seen: set[int] | None = None) -> Iterable[str]:
    """The ``$ref`` (and ``$dynamicRef``) values of a schema, its subschemas and what they refer
    to (a part of the document no keyword makes a subschema, say) that do not resolve."""
    seen = set() if seen is None else seen
    if id(resource.contents) in seen:
        return
    seen.add(id(resource.contents))
    contents = resource.contents
    if isinstance(contents, Mapping):
        for keyword in ("$ref", "$dynamicRef"):
            ref = contents.get(keyword)
            if isinstance(ref, str):
                try:
                    resolved = resolver.lookup(ref)
                except Unresolvable:
                    yield ref
                    continue
                target = referencing.Resource.from_contents(
                    resolved.contents, default_specification=specification)
                yield from _unresolved(target, resolved.resolver, specification, seen)
    for sub in resource.subresources():
        yield from _unresolved(sub, resolver.in_subresource(sub), specification, seen)


def _jsonschema_validator(validator: Any) -> Validator:
    def validate(data: Any) -> tuple[Any, list[SchemaViolation]]:
        try:
            errors = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
        except Unresolvable as exc:  # a reference nothing resolves (a validator made elsewhere)
            return None, [SchemaViolation("", f"{SCHEMA_NOT_APPLIED}: {_unresolvable_words(exc)}")]
        return data, [SchemaViolation(json_pointer(e.absolute_path), e.message) for e in errors]

    return validate


def _unresolvable_words(exc: Exception) -> str:
    ref = getattr(exc, "ref", None) or getattr(getattr(exc, "_wrapped", None), "ref", None)
    return f"its reference {ref!r} does not resolve" if ref else "one of its references does not resolve"


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


class NotJSON(ValueError):
    """Bytes or text that are not JSON as RFC 8259 writes it; the message says why in a sentence."""


def json_text(data: bytes) -> str:
    """``data`` decoded as UTF-8, strictly (JSON exchanged between systems is UTF-8: no other
    encoding is guessed, and no surrogate is let through); NotJSON if it is not UTF-8."""
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotJSON(f"it is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None


def loads_json(text: str, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """``text`` read as JSON, strictly: NaN, Infinity and a number beyond a double's range (1e400,
    which Python would read as inf) are not JSON numbers (NotJSON), nor is a byte order mark
    JSON; any other syntax error is json's ValueError, RecursionError past Python's depth."""
    if text.startswith("\ufeff"):
        raise NotJSON("it begins with a byte order mark, which JSON text does not have")
    return json.loads(text, parse_constant=_no_such_number, parse_float=_finite_float, parse_int=_int_in_range,
                      object_pairs_hook=object_pairs_hook)


def one_value_a_key(refusal: Callable[[str], Exception]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """An ``object_pairs_hook`` for a reader that must not pick one of a repeated key's values
    (JSON leaves which one counts to the reader): each object as a dict, or ``refusal(key)``
    raised, naming the first key the object gives twice."""
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if len(value) != len(pairs):
            seen: set[str] = set()
            raise refusal(next(key for key, _ in pairs if key in seen or seen.add(key)))
        return value

    return hook


def read_json(data: bytes, **hooks: Any) -> Any:
    """``data`` read as JSON, strictly (json_text, then loads_json): the one reader of a payload
    for the consumer's validation and every verdict of the dashboard."""
    return loads_json(json_text(data), **hooks)


def _no_such_number(name: str) -> Any:
    raise NotJSON(f"{name} is not a JSON number")


def _finite_float(digits: str) -> float:
    value = float(digits)
    if math.isinf(value):
        raise NotJSON(f"{_cut(digits)} is beyond the range of a double")
    return value


def _int_in_range(digits: str) -> int:
    value = int(digits)
    if len(digits) > 308:  # only then can an integer be beyond a double's range
        try:
            float(value)
        except OverflowError:
            raise NotJSON(f"{_cut(digits)} is beyond the range of a double") from None
    return value


def _cut(digits: str) -> str:
    return digits if len(digits) <= 24 else f"{digits[:20]}... ({len(digits)} characters)"


def parse_and_validate(data: bytes, validator: Validator) -> tuple[Any, list[SchemaViolation]]:
    """Parse ``data`` as JSON (read_json) and validate it; a payload that is not JSON is one
    violation at ''."""
    try:
        parsed = read_json(data)
    except ValueError as exc:
        return None, [SchemaViolation("", f"{NOT_JSON}: {exc}", unread=True)]
    except RecursionError:
        return None, [SchemaViolation("", TOO_DEEP_TO_PARSE, unread=True)]
    try:
        return validator(parsed)
    except RecursionError:
        # A hostile payload must not take the page (or the consumer) down with it.
        return None, [SchemaViolation("", "payload nests too deeply to be validated")]
