"""A compressed payload read decompressed, within a bound: the entry page shows it so and the
editor holds it so (a few kilobytes of gzip can unpack to gigabytes)."""

from __future__ import annotations

import zlib
from functools import lru_cache

#: How much of a compressed payload is decompressed to be shown or edited.
UNPACK_LIMIT = 256 * 1024


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
