"""Failure groups: which entries failed for the same cause, as a key computed once per entry
when the mirror writes it.

An error text keeps what names the cause (words, exception types, quoted field and constraint
names, HTTP statuses and reason phrases, host names) and loses what differs from message to
message (numbers, ids, UUIDs, hex and base-62 tokens, addresses, emails, times, durations, tenant
ids, quoted values), each replaced by a readable placeholder: ``<n>``, ``<id>``, ``<uuid>``,
``<ip>``, ``<email>``, ``<time>``, ``<duration>``, ``'…'``. So "KeyError: 'vat_rate' for tenant
t3" and "... tenant acme-corp" are one group, and "KeyError: 'currency' ..." is another. A schema
failure groups by its rule and path with array indexes folded (``/items/*/price``), a missing
property appended to the path. An entry belongs to the failure group of its subject, reason and
key (db/counts.py keeps each group's counts); docs/grouping.md tells the rules and their measure.

The keys are stored: a change of these rules is a new :data:`GROUPING_VERSION` and a migration
that regroups the stored entries (revision 0004 did it for version 2, 0011 for version 3, 0025 for
version 4).
"""

from __future__ import annotations

import ipaddress
import json
import re
from functools import lru_cache

from dlq_consumer.validation import NOT_JSON, TOO_DEEP_TO_PARSE

#: The rules' version: raised, with a migration regrouping the entries, whenever a key changes.
GROUPING_VERSION = 4
NO_ERROR = "(no error text)"
MAX_KEY = 300
#: A label's length on the pages.
MAX_LABEL = 120
# Beyond this an error text is a stack trace or a dump; its head names the cause.
_MAX_TEXT = 4096

_SPACES = re.compile(r"\s+")
_ODD_SPACE = re.compile(r"\s\s|[^\S ]")
_URL = re.compile(r"\b(https?|wss?|grpcs?)://([^/\s'\"<>()?#]+)([^\s'\"<>()?#]*)((?:[?#][^\s'\"<>()]*)?)")
_EMAIL = re.compile(r"[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.%\w]+\](?::\d{1,5})?|(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f.]{0,15}"
                   r"(?![\w:])")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HTTP_DATE = re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d? (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                        r"\d{4} \d\d:\d\d:\d\d(?: (?:GMT|UTC|[+-]\d{4}))?")
# A hex id: 8 or more hex digits, a digit and a letter among them, in one case (575142eb, DEADBEEF01).
_HEX_ID = r"(?=[a-f]*\d)(?=\d*[a-f])[0-9a-f]{8,}|(?=[A-F]*\d)(?=\d*[A-F])[0-9A-F]{8,}"
# One pass for the rest: what starts with a digit not inside a word (times, addresses, durations,
# hex, numbers with a fraction or a unit), else a word worth a look (a digit or a case change
# inside, or a pod's suffix). The digit branches are written without their first digit, and whole
# numbers are left to the words (an HTTP status is kept). A hex id is left to the words whole,
# whatever its last letter: the digit branches would read the ids made of digits then d, b or B
# as a duration or a size ("6705176d", 6,705,176 days), a group apart from the other ids' <id>.
_TOKEN = re.compile(
    r"(?<![\w-])(?:(?<!\.)(?!(?:" + _HEX_ID + r")(?!\w))\d(?:"
    r"(?P<time>\d{3}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?"
    r"|\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)(?!\w)"
    r"|(?P<ip>\d{0,2}(?:\.\d{1,3}){3}(?::\d{1,5})?)(?![\w.])"
    r"|(?P<duration>\d*(?:\.\d+)?(?:ns|us|µs|ms|s|m|h)(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+"
    r"|\d*(?:\.\d+)?(?:ns|us|µs|ms|s|m|h|d)|\d*(?:\.\d+)? ?(?:ms|secs?|seconds?|mins?|minutes?|hours?|days?"
    r"|millis(?:econds)?))(?!\w)"
    r"|(?<=0)(?P<hex>x[0-9a-fA-F]+)(?!\w)"
    r"|(?P<n>\d*(?:\.\d+)+(?![\w.])|\d*(?=(?:[kKMGTP]i?[Bb]?|[KMGT]iB|B|b|bytes|x|px|%|rps|qps|ops)(?!\w))))"
    r"|(?P<word>(?=[\w-]*?(?:\d|[a-z][A-Z]|-[b-df-hj-np-tv-xz2-9]{5}(?![\w-])))[\w-]+))")
_PLACEHOLDERS = {"time": "<time>", "ip": "<ip>", "duration": "<duration>", "hex": "<id>",
                 "n": "<n>"}
# PostgreSQL's DETAIL lines hold the values: "Key (id)=(42) already exists", "Failing row contains (...)".
_DETAIL_VALUES = re.compile(r"\)=\((?:[^()]|\([^()]*\))*\)")
_FAILING_ROW = re.compile(r"(?i)(failing row contains )\((?:[^()]|\([^()]*\))*\)")
# The value after a name that identifies a tenant, a customer, an order...: "tenant t3",
# "tenant=acme-corp", "order_id: 42". With '=' or ':' it is a value whatever it looks like;
# after a space only when it is not a plain word ("user not found" keeps "not").
_NOUNS = ("tenant", "customer", "user", "account", "org", "organization", "merchant", "shop", "workspace", "order",
          "job", "device", "request", "trace", "span", "correlation", "session", "transaction", "txn")
_SEPARATOR_VALUE = r"(\s*[=:#]\s*|\s+)(?!<)([^\s'\",;:()\[\]{}<>]+(?::[^\s'\",;:()\[\]{}<>]+)*)"
# Searched in the lowercased text, the names as a tree of their letters (quicker than a list of
# them), \b checked by hand.
_NOUN_TREE = (r"(?:t(?:enant|race|ransaction|xn)|c(?:ustomer|orrelation)|user|account|or(?:g(?:anization)?|der)"
              r"|merchant|s(?:hop|pan|ession)|workspace|job|device|request)")
_NOUN_VALUE = re.compile(_NOUN_TREE + r"s?" + _SEPARATOR_VALUE)
_ID_NAME_VALUE = re.compile(r"(?:_id|Id|ID|-id)\b" + _SEPARATOR_VALUE)
# A code of capitals and digits right after a noun is a value: "coupon SAVE11 expired", "sku
# AB1234", "promo code XMAS24". The same code after a word that is not a noun ("encoded as UTF16",
# "invalid UTF8") or after a name whose value is the cause ("protocol HTTP2", "error code 42P01")
# names the cause, and is kept.
_CODE_HINT = re.compile(r"[A-Z]\d|\d[A-Z]")
_CODE_AFTER_WORD = re.compile(r"(?<![\w.'\"<-])([A-Za-z][a-z]+) ((?=[A-Z\d]*\d)(?=[A-Z\d]*[A-Z])[A-Z\d]{2,})"
                              r"(?![\w'\"-]|\.\w)")
_NOT_NOUNS = frozenset("""
    a an the this that these those each every any all no not nor and or but if then else than as so
    to from in into on onto at by for of off with without via over under per between within through
    after before since until about against like versus vs plus
    is are was were be been being has have had do does did can could will would should must may
    use uses used using expect expects expected expecting require requires required need needs
    support supports supported unsupported allow allows allowed disallowed accept accepts accepted
    reject rejects rejected got received given valid invalid unknown unexpected bad malformed missing wrong
    correct incorrect proper legacy empty
    only new old same other enabled disabled
    status error errno sqlstate reason type kind class state version protocol algorithm alg method
    format encoding charset cipher scheme mode level
""".split())
# "code" is a noun ("promo code XMAS24") except after these: "error code 42P01".
_CAUSE_CODE_OWNERS = frozenset("error status exit response return result reason fault failure sql http grpc".split())
_VALUE_WORDS = frozenset(["value", "values", "literal", "got", "received", "input", "given"]
                         + list(_NOUNS) + [noun + "s" for noun in _NOUNS])
_PLAIN_WORD = re.compile(r"[A-Za-z]+\.?")
# Bounded, so that a text of unclosed quotes costs no more than a few passes over it.
_QUOTED = re.compile(r"(?<!\w)'(?:[^'\\]|\\.){0,256}'(?!\w)|\"(?:[^\"\\]|\\.){0,256}\"")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w.\-$]{0,63}(?:\(\))?")
# What makes a quoted word a value, not a name: the words before it ("invalid literal for int()
# with base 10: 'abc'", "got 'x'", "tenant 'acme'": _value_before) or after it ("'abc' is not a
# valid Currency", jsonschema's format failure "'user36@example' is not a 'email'").
_VALUE_AFTER = re.compile(
    r"\s+(?:(?:is not (?:a valid|of type|one of|valid)|is too (?:long|short)|is (?:less|greater) than"
    r"|does not match)\b|is not an? ['\"])")
_STRUCTURED = re.compile(r"[\s/:@<]")
_ALNUM = re.compile(r"[^\W_]")
_WORD = re.compile(r"[A-Za-z0-9_](?<![\w<].)[A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*(?![\w>])")
# A word that reads as one, digits and all: Http2Exception, sha256, address_line2, JSONDecodeError.
_WORDLIKE = re.compile(r"[a-z]?(?:[A-Z]+(?![a-z])|[A-Z]?[a-z]{2,}|\d{1,3}(?!\d))+")
_HEX_TOKEN = re.compile(_HEX_ID)
# Stripe-style ids: a short lowercase prefix, '_', a base-62 tail (ch_3c425c8d99d19b, cus_9f8A7b6C5d).
_PREFIXED_ID = re.compile(r"([a-z]{1,8})_([A-Za-z0-9]{8,})")
# A Kubernetes pod's name: its workload, then a hash and a suffix in Kubernetes' own alphabet
# (no vowels, so a word never passes for one).
_POD = re.compile(r"(.+?)-[bcdfghjklmnpqrstvwxz2456789]{6,10}-[bcdfghjklmnpqrstvwxz2456789]{5}")
_MIXED = re.compile(r"\d|[a-z][A-Z]")
# A number that names the cause, not an instance: an HTTP status, a gRPC or errno code, an SQLSTATE.
_CODE_BEFORE = re.compile(r"(?i)(?:\b(?:status|code|errno|sqlstate|http/?[\d.]*|returned|response)\s*[:=]?\s*"
                          r"|\[errno )$")
_PHRASE_AFTER = re.compile(r" [A-Z][a-z]")
# jsonschema's messages start with the failing value ("'abc' is not of type 'number'", "-1 is less
# than the minimum of 0"), which differs per message; the rule after it does not.
_LEADING_VALUE = re.compile(
    r"^(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|True|False|None|"
    r"true|false|null|\{.*\}|\[.*\])\s+(?=(?:is|are|does|should|has|was|must|cannot)\b)", re.DOTALL)
_REQUIRED = re.compile(r"^'((?:[^'\\]|\\.)*)' is a required property$|^\"((?:[^\"\\]|\\.)*)\" is a required property$")


def _part(part: str) -> str:
    """One piece of a word (between '-' and '_'): kept, or its placeholder."""
    if part.isdigit():
        return "<n>"
    if not any(c.isdigit() for c in part):
        # Letters only, whatever their case, read as a word: NoSuchKey, JSONDecodeError. (A
        # base-62 id without a digit is rare enough, and is caught by its prefix: cus_AbCdEfGhIj.)
        return part
    if len(part) >= 2 and part[0].isalpha() and part[1:].isdigit():
        # t3, u42: a tenant or user id; v1, v2: a version, kept.
        return part if part[0] in "vV" and len(part) <= 3 else "<id>"
    if _HEX_TOKEN.fullmatch(part) or not _WORDLIKE.fullmatch(part):
        return "<id>"
    return part


@lru_cache(maxsize=16384)
def _word(word: str) -> str:
    """A word of an error text with its variable pieces replaced."""
    prefixed = _PREFIXED_ID.fullmatch(word)
    if prefixed and re.search(r"[\dA-Z]", prefixed.group(2)):
        return prefixed.group(1) + "_<id>"
    if "-" not in word and "_" not in word:
        return _part(word)
    pod = _POD.fullmatch(word)
    if pod:
        return _word(pod.group(1)) + "-<id>-<id>"
    if _HEX_TOKEN.fullmatch(word.replace("-", "")):
        return "<id>"
    return "".join(_part(p) if p not in "-_" else p for p in re.split(r"([-_])", word))


def _word_in_text(match: re.Match) -> str:
    word = match.group(0)
    if word.isdigit():
        before = match.string[max(0, match.start() - 24):match.start()]
        if _CODE_BEFORE.search(before) or (len(word) == 3 and word[0] in "12345"
                                           and _PHRASE_AFTER.match(match.string, match.end())):
            return word
        return "<n>"
    return _word(word)


def _odd_word(match: re.Match) -> str:
    chunk = match.group(0)
    if chunk[0] == "-" or chunk[-1] == "-":
        return _WORD.sub(_word_in_text, chunk)
    return _word_in_text(match)


def _url(match: re.Match) -> str:
    scheme, host, path, rest = match.groups()
    bare = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if _is_ip(bare.strip("[]")):
        host = "<ip>"
    segments = []
    for segment in path.split("/"):
        if _UUID.fullmatch(segment):
            segment = "<uuid>"
        elif segment and (_MIXED.search(segment) or _PREFIXED_ID.fullmatch(segment)):
            replaced = _WORD.sub(_word_in_text, segment)
            segment = "<id>" if "<" in replaced else segment
        segments.append(segment)
    return f"{scheme}://{host}{'/'.join(segments)}{'?…' if rest else ''}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _ipv6(match: re.Match) -> str:
    text = match.group(0)
    address = text[1:text.index("]")] if text.startswith("[") else text
    return "<ip>" if ":" in address and _is_ip(address) else text


def _token(match: re.Match) -> str:
    return _odd_word(match) if match.lastgroup == "word" else _PLACEHOLDERS[match.lastgroup]


def _value_before(before: str) -> bool:
    """Whether the words before a quoted word make it a value: "got 'x'", "tenant 'acme'",
    "invalid literal for int() with base 10: 'abc'", "could not convert string to float: 'x'"."""
    words = before.rstrip(" :=").rsplit(None, 3)
    if not words:
        return False
    last = words[-1].lower()
    if last in _VALUE_WORDS or last.endswith(("_id", "-id")) or words[-1].endswith(("Id", "ID")):
        return True
    if last.startswith("instance[") and before.rstrip().endswith(":"):
        return True  # jsonschema's "On instance['customer']['email']: 'x'"
    return len(words) >= 2 and (words[-2].lower() == "base" or
                                (len(words) >= 3 and words[-3].lower() == "string" and words[-2].lower() == "to"))


def _identity_values(text: str) -> str:
    """The value after a tenant, a customer, an order... replaced (see _NOUNS)."""
    lowered = text.lower()
    # Lowercasing keeps the positions unless a character lowercases to two (rare; then only
    # the "..._id" names are looked for).
    nouns = _NOUN_VALUE.finditer(lowered) if len(lowered) == len(text) else ()
    spans = [(m.start(2), m.end(2), m.group(1)) for m in nouns
             if m.start() == 0 or not lowered[m.start() - 1].isalpha()]
    spans += [(m.start(2), m.end(2), m.group(1)) for m in _ID_NAME_VALUE.finditer(text)]
    if not spans:
        return text
    out, at = [], 0
    for value_start, value_end, separator in sorted(spans):
        if value_start < at:
            continue
        if separator.strip() or not _PLAIN_WORD.fullmatch(text, value_start, value_end):
            out.append(text[at:value_start])
            out.append("<id>")
            at = value_end
    out.append(text[at:])
    return "".join(out)


def _code_after_word(match: re.Match) -> str:
    word = match.group(1)
    lowered = word.lower()
    if lowered in _NOT_NOUNS:
        return match.group(0)
    if lowered in ("code", "codes"):
        before = match.string[max(0, match.start() - 24):match.start()].rsplit(None, 1)
        if before and before[-1].lower() in _CAUSE_CODE_OWNERS:
            return match.group(0)
    return f"{word} <id>"


def _quoted(match: re.Match) -> str:
    quoted = match.group(0)
    inner = quoted[1:-1]
    if _value_before(match.string[max(0, match.start() - 40):match.start()]) or _VALUE_AFTER.match(
            match.string, match.end()):
        return "'…'"  # an empty value too, and whichever quote its repr chose: "'' is not a 'email'"
    if not inner:
        return quoted
    if _IDENTIFIER.fullmatch(inner) or _STRUCTURED.search(inner) or (len(inner) <= 3 and not _ALNUM.search(inner)):
        return quoted  # a name, a message quoted in a message (already normalized), punctuation
    return "'…'"


def normalize_error_text(text: str) -> str:
    """An error text with its variable parts replaced by placeholders (``<n>``, ``<id>``, ...)."""
    # Cut before the cache: it keeps its keys, and a stack trace can run to megabytes. 16,384
    # keys of at most 4,096 characters hold at most ~70 MB in the writer process.
    return _normalized(text[:_MAX_TEXT])


@lru_cache(maxsize=16384)
def _normalized(text: str) -> str:
    # This runs for every message the mirror stores: each pass that cannot apply is skipped by a
    # look for the character it needs.
    if _ODD_SPACE.search(text):
        text = _SPACES.sub(" ", text)
    text = text.strip()
    if "://" in text:
        text = _URL.sub(_url, text)
    if "@" in text:
        text = _EMAIL.sub("<email>", text)
    if "::" in text or "[" in text:
        text = _IPV6.sub(_ipv6, text)
    if ", " in text and ":" in text:
        text = _HTTP_DATE.sub("<time>", text)
    if "-" in text:
        text = _UUID.sub("<uuid>", text)
    if ")=(" in text:
        text = _DETAIL_VALUES.sub(")=(…)", text)
    if "ow contains (" in text:
        text = _FAILING_ROW.sub(r"\1(…)", text)
    text = _identity_values(text)
    if _CODE_HINT.search(text):
        text = _CODE_AFTER_WORD.sub(_code_after_word, text)
    text = _TOKEN.sub(_token, text)
    if "'" in text or '"' in text:
        text = _QUOTED.sub(_quoted, text)
    return text[:MAX_KEY]


@lru_cache(maxsize=4096)
def normalize_schema_message(message: str) -> str:
    """A schema error message with its failing value left out, its rule kept."""
    message = _SPACES.sub(" ", message).strip()
    if message.endswith("is a required property"):
        return message[:MAX_KEY]
    return _LEADING_VALUE.sub("… ", message)[:MAX_KEY]


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _fold(segment: str) -> str:
    """A JSON Pointer segment: an array index or an id (a map keyed by ids) is ``*``."""
    if segment.isdigit() or _UUID.fullmatch(segment):
        return "*"
    if _MIXED.search(segment) and _WORD.fullmatch(segment) and _word(segment) != segment:
        return "*"
    return segment


@lru_cache(maxsize=16384)
def schema_part(path: str, message: str) -> str:
    """One schema failure as a group names it: its path (array indexes and ids folded to ``*``)
    and its rule; for a missing property, the property appended to the path."""
    message = _SPACES.sub(" ", message).strip()
    folded = "/".join(_fold(segment) for segment in path.split("/"))
    required = _REQUIRED.match(message)
    if required:
        name = required.group(1) if required.group(1) is not None else required.group(2)
        return f"{folded.rstrip('/')}/{_escape(name)}: is a required property"[:MAX_KEY]
    return f"{folded or '(root)'}: {normalize_schema_message(message)}"[:MAX_KEY]


def error_group(error: str | None, schema_errors: str | None) -> str:
    """The group key of an entry from its stored error text and schema errors (JSON text)."""
    items = None
    if schema_errors:
        try:
            items = json.loads(schema_errors)
        except ValueError:
            items = None
    return group_key(error, items)


def schema_key(schema_errors: list | None) -> str | None:
    """The group key of parsed schema errors (each failing path and rule), None without any."""
    if schema_errors and isinstance(schema_errors, list):
        parts = {schema_part(item["path"] if isinstance(item.get("path"), str) else "", str(item.get("message", "")))
                 for item in schema_errors if isinstance(item, dict)}
        if parts:
            return "; ".join(sorted(parts))[:MAX_KEY]
    return None


def group_key(error: str | None, schema_errors: list | None) -> str:
    """The group key of an entry from its error text and its parsed schema errors.

    Schema failures group by each failing path and rule; other failures by the normalized text.
    """
    key = schema_key(schema_errors)
    if key is not None:
        return key
    if error and error.strip():
        return normalize_error_text(error)
    return NO_ERROR


#: The keys of schema failures of payloads that were not read as JSON (gzip bytes, text).
_UNREAD_KEYS = tuple(f"(root): {message}" for message in (NOT_JSON, TOO_DEEP_TO_PARSE))


#: How the validation words gzip's magic bytes read as UTF-8 (its second byte, 0x8b, starts no
#: UTF-8 character): a group of such keys is of gzip bytes, which a repair decompresses first.
_GZIP_WORDS = "can't decode byte 0x8b in position 1"


def unread_payloads(key: str) -> bool:
    """Whether a group's key is the schema failure of payloads not read as JSON (and not gzip
    bytes): no rule of the schema was tried on them, so no repair by it has anything to work on."""
    return key.startswith(_UNREAD_KEYS) and _GZIP_WORDS not in key


def group_label(key: str, limit: int = MAX_LABEL) -> str:
    """A group's key as a person reads it: placeholders (``<id>``, ``<n>``, ``'…'``) shown as
    they are, several schema failures as the first and how many more, cut at a word."""
    parts = key.split("; ") if key.startswith("/") or key.startswith("(root)") else [key]
    label = parts[0] if len(parts) == 1 else f"{parts[0]} (and {len(parts) - 1} more)"
    if len(label) <= limit:
        return label
    cut = label[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"
