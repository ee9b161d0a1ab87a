"""A compressed payload: how it is compressed, and read decompressed within a bound: the entry
page shows it so, the editor holds it so (a few kilobytes of gzip can unpack to gigabytes), and
the schema judges a declared one so."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from .surrogates import loads_shown

#: How much of a compressed payload is decompressed to be shown or edited.
UNPACK_LIMIT = 256 * 1024
#: Content-Encoding values that say the payload is compressed; and gzip's first two bytes.
COMPRESSIONS = ("gzip", "x-gzip", "deflate", "br", "zstd", "compress")
GZIP_MAGIC, GZIP_BYTES = b"\x1f\x8b", "gzip bytes"


def decompress(payload: bytes, limit: int = UNPACK_LIMIT) -> tuple[bytes, str] | None:
    """A gzip or zlib payload decompressed, at most ``limit`` bytes and one more, and how it
    ends: "whole", "more" (past the limit) or "cut" (the compressed data stops short); None when
    it does not decompress (or is compressed otherwise: deflate without zlib's header, br, zstd).

    One request asks several times of the same payload (the page's view, its refusals, the
    schema's verdict; the editor's text, check and body): the last few are remembered."""
    return _decompress(bytes(payload), limit)


@lru_cache(maxsize=8)
def _decompress(payload: bytes, limit: int) -> tuple[bytes, str] | None:
    unpacker = zlib.decompressobj(wbits=47)  # 32 + 15: gzip's header or zlib's, told apart
    try:
        data = unpacker.decompress(payload, limit + 1)
    except zlib.error:
        return None
    if len(data) > limit:
        return data, "more"
    return data, "whole" if unpacker.eof else "cut"


def decompressed_whole(payload: bytes, limit: int = UNPACK_LIMIT) -> bytes | None:
    """The payload decompressed when all of it decompresses within ``limit`` bytes, else None."""
    found = decompress(payload, limit)
    return found[0] if found is not None and found[1] == "whole" else None


def compression_of(headers: Mapping[str, Any] | str | None, payload: bytes) -> str | None:
    """How the payload is compressed ("Content-Encoding: gzip", "gzip bytes"), or None."""
    if isinstance(headers, str):
        headers = loads_shown(headers or "{}")
    for name, values in (headers or {}).items():
        if name.lower() == "content-encoding":
            for value in values if isinstance(values, list) else [values]:
                if str(value).strip().lower() in COMPRESSIONS:
                    return f"Content-Encoding: {str(value).strip()}"
    return GZIP_BYTES if payload[:2] == GZIP_MAGIC else None


#: The encodings a declared compressed payload is read in (decompress reads gzip's and zlib's).
READABLE = ("gzip", "x-gzip", "deflate")


def read_as_declared(how: str | None, payload: bytes) -> bytes | None:
    """A payload whose compression (compression_of) is ``how``, decompressed (whole, within
    UNPACK_LIMIT) when its Content-Encoding declares gzip or deflate, as its consumer reads it;
    None for any other."""
    if how and how != GZIP_BYTES and how.split(": ", 1)[1].lower() in READABLE:
        return decompressed_whole(payload)
    return None


def judged(headers: Mapping[str, Any] | str | None, payload: bytes) -> bytes:
    """What the schema judges of a payload republished as stored: a declared compressed one
    decompressed (its header goes with the republish), any other as it is (undeclared gzip
    bytes fail as the consumer failed them)."""
    unpacked = read_as_declared(compression_of(headers, payload), payload)
    return payload if unpacked is None else unpacked
