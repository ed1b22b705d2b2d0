"""The text of an output chunk's tail, as an ``output`` event carries it."""

from __future__ import annotations

BINARY_TAIL_BYTES = 1024  # ... of a chunk that is not UTF-8: a glimpse is all the screen can use


def tail_text(tail: bytes) -> str:
    """The text of a chunk's tail: UTF-8 as it is (a character the cut split
    at its start left out), else the last bytes with U+FFFD, decoded short:
    the replace handler is called per bad byte, slow on a MiB of binary."""
    start = 0
    while start < min(3, len(tail)) and tail[start] & 0xC0 == 0x80:
        start += 1  # the end of a character whose start is before the tail
    try:
        return tail[start:].decode("utf-8")
    except UnicodeDecodeError:
        return tail[-BINARY_TAIL_BYTES:].decode("utf-8", "replace")
