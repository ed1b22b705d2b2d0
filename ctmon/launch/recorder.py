"""The supervisor's recorder: the recording file and the job's raw output log.

Lines are appended to a pending list and written on the loop's next flush.
When the disk is full (or the file is gone) the rest stays in memory, up to
``MAX_PENDING_BYTES``, and the write is retried on every pass: the job runs
on regardless. Lines past that cap are only counted, and once the recording
can be written again a note says how many were lost.

Viewers read what is on disk (``read_fd`` at their own offset, up to
``size``), so nothing here keeps per-viewer state.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from ctmon.launch import files

MAX_PENDING_BYTES = 256 << 20  # events held in memory while the disk is full


class RecorderError(Exception):
    """The recording (a one-line reason for the user) cannot be opened."""


class Recorder:
    def __init__(self, path: str, output_log: str | None, new_files: bool) -> None:
        self.path = path
        self.output_log = output_log
        self.new_files = new_files  # ctmon chose the names: create them, never reuse what is there
        self.fd = -1
        self.read_fd = -1
        self.size = 0  # bytes on disk, what viewers may be sent
        self.error: str | None = None  # why the last write failed, while it keeps failing
        self.pending: list[bytes] = []  # lines not yet on disk (a full disk keeps them here)
        self._pending_bytes = 0
        self._lost_lines = 0
        self.outlog: BinaryIO | None = None

    def open(self) -> None:
        """Open and lock the recording (and output log); an existing file is
        emptied by ``empty`` only once setup has gone through
        (ctmon/launch/files.py)."""
        path = self.path
        try:
            self.fd = files.open_new(path) if self.new_files else files.open_given(path)
            self.read_fd = files.reopen_for_reading(self.fd, path)
        except (files.FileRefused, OSError) as e:
            raise RecorderError(str(e) if isinstance(e, files.FileRefused) else f"cannot open {path}: {e}") from None
        if self.output_log:
            try:
                log = self.output_log
                lfd = files.open_new(log) if self.new_files else files.open_beside(log)
                self.outlog = os.fdopen(lfd, "wb", buffering=1 << 16)
            except (files.FileRefused, OSError):
                self.outlog = None  # the job's output still reaches viewers and the recording

    def empty(self) -> None:
        files.empty(self.fd)
        if self.outlog is not None:
            try:
                files.empty(self.outlog.fileno())
            except OSError:
                self.outlog = None

    # ------------------------------------------------------------ recording

    def append(self, line: bytes) -> None:
        if self.fd < 0:
            return
        if self._pending_bytes + len(line) > MAX_PENDING_BYTES:
            self._lost_lines += 1  # the disk has been full for a long while
            return
        self.pending.append(line)
        self._pending_bytes += len(line)

    def flush(self) -> tuple[str | None, int]:
        """Write what is pending. Returns a change of state for the user
        ("stuck: REASON" once when writes start failing, "resumed" once they
        work again, else None) and the number of lines lost to the memory cap,
        counted once the backlog is written."""
        said: str | None = None
        lost = 0
        if self.pending and self.fd >= 0:
            data = memoryview(b"".join(self.pending))
            written = 0
            try:
                while written < len(data):
                    written += os.write(self.fd, data[written:])
            except OSError as e:
                # Disk full or gone: keep the rest in memory and retry on the
                # next pass; the job runs on regardless.
                if self.error is None:
                    self.error = e.strerror or str(e)
                    said = "stuck"
            else:
                if self.error is not None:
                    self.error = None
                    said = "resumed"
            self.size += written
            rest = bytes(data[written:])
            self.pending = [rest] if rest else []
            self._pending_bytes = len(rest)
            if not rest and self._lost_lines:
                lost, self._lost_lines = self._lost_lines, 0
        if self.outlog is not None:
            try:
                self.outlog.flush()
            except OSError:
                self.outlog = None
        return said, lost

    def fsync(self) -> None:
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            except OSError:
                pass

    # ------------------------------------------------------------ output log

    def log_output(self, data: bytes) -> None:
        """The job's output, raw, as it came (a log that fails is given up)."""
        if self.outlog is not None:
            try:
                self.outlog.write(data)
            except OSError:
                self.outlog = None

    def outlog_fd(self) -> int | None:
        """The output log's fd, flushed, for a relay that outlives us."""
        if self.outlog is None:
            return None
        try:
            self.outlog.flush()
            return self.outlog.fileno()
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        if self.outlog is not None:
            try:
                self.outlog.close()
            except OSError:
                pass
