"""Errors the wire reports to users (standard library only: the command line
catches them before it has imported anything heavier)."""

from __future__ import annotations


class RecordingError(Exception):
    """A recording that cannot be read at all (one-line message for the user)."""
