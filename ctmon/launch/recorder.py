"""The supervisor's recorder: the recording file and the job's raw output log.

Lines are appended to a pending list and written on the loop's next flush
(``writev``: no copy of them is joined first); a line of ``WRITE_NOW_BYTES``
or more (the job's output, when it writes fast) is written at once, from the
caller's buffer, which the caller may then reuse: no allocation per event
(page faults cost a fast job more than the copy). When the disk is full (or the
file is gone, or too large for the process's limit) the rest stays in
memory, up to ``MAX_PENDING_BYTES``, and the write is retried on every pass:
the job runs on regardless. Lines past that cap are only counted, and once
the recording can be written again a note says how many were lost.

The file only ever ends with a whole line: a write the disk cut short
mid-line is rolled back (truncated to the last whole line, which stays
``size``) and that line is written again, whole, with the rest. If the run
ends with lines still unwritten, ``seal`` ends the file with a note saying
how many, and the job's exit, in the room the disk has (trimming a few
whole lines from the end when even that room is missing): a reader of the
file alone learns that it is incomplete.

Viewers read what is on disk (``read_fd`` at their own offset, up to
``size``), so nothing here keeps per-viewer state.

A large chunk of the job's output (a job writing as fast as it can) is kept
in the output log and the recording points at it (``keep_chunk``): a copy
into the page cache, where a JSON line would cost an encode of every byte on
the job's pipe. ``attach`` writes all output to that log anyway; ``record``
opens it (``X.output.log`` beside ``X.jsonl``) at the first such chunk.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import BinaryIO

from ctmon.launch import files, runtime

MAX_PENDING_BYTES = 256 << 20  # events held in memory while the disk is full
WRITE_BATCH = 1024  # lines per writev (IOV_MAX on Linux)
WRITE_NOW_BYTES = 64 << 10  # lines this long are written as they come: the syscall is paid for
# How far ``seal`` trims whole lines from the end to make room for its note
# and the exit, tried in turn (bytes before the end).
SEAL_TRIMS = (0, 4 << 10, 64 << 10, 1 << 20)
LINE_SEARCH = 2 << 20  # the longest line a trim looks back over (readers skip lines over 1 MiB)


class RecorderError(Exception):
    """The recording (a one-line reason for the user) cannot be opened."""


class Recorder:
    def __init__(self, path: str, output_log: str | None, new_files: bool) -> None:
        self.path = path
        self.output_log = output_log
        self.new_files = new_files  # ctmon chose the names: create them, never reuse what is there
        self.fd = -1
        self.read_fd = -1
        self.size = 0  # bytes on disk, whole lines only: what viewers may be sent
        self.error: str | None = None  # why the last write failed, while it keeps failing
        self.last_error: str | None = None  # why a write last failed, kept once writes work again
        self.pending: list[bytes] = []  # lines not yet on disk (a full disk keeps them here), oldest first
        self._pending_bytes = 0
        self._lost_lines = 0  # past the memory cap, not yet reported in a note
        self._said: str | None = None  # a change of state the next flush tells
        self.unwritten = 0  # after ``seal``: events of the run that are not in the file
        self.sealed_at: int | None = None  # where ``seal`` wrote its note (and the exit)
        self.outlog: BinaryIO | None = None
        # where ``keep_chunk`` writes: the output log; in record mode opened
        # at the first large chunk; None once it failed (chunks go inline)
        self.chunk_log: BinaryIO | None = None
        self.chunk_log_path = output_log or runtime.output_log_path(path)
        self.chunk_log_refused: str | None = None  # why chunks are recorded inline, once said
        self._chunk_log_tried = False

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
            self.chunk_log, self._chunk_log_tried = self.outlog, True

    def empty(self) -> None:
        files.empty(self.fd)
        if self.outlog is not None:
            try:
                files.empty(self.outlog.fileno())
            except OSError:
                self.outlog = None

    # ------------------------------------------------------------ recording

    def append(self, line: bytes | bytearray) -> None:
        """One whole line (ending with a newline), lent: what must wait for
        a later write is copied, so the caller may reuse its buffer."""
        if self.fd < 0:
            return
        if self._pending_bytes + len(line) > MAX_PENDING_BYTES:
            self._lost_lines += 1  # the disk has been full for a long while
            return
        if len(line) >= WRITE_NOW_BYTES and self.error is None:
            self.pending.append(line)  # type: ignore[arg-type]  # lent, for the write just below
            self._pending_bytes += len(line)
            self._write()
            if self.pending and self.pending[-1] is line:
                self.pending[-1] = bytes(line)  # the disk refused it: ours to keep now
            return
        self.pending.append(bytes(line))  # (a bytes object is not copied)
        self._pending_bytes += len(line)

    @property
    def incomplete(self) -> bool:
        """Events of the run are not in the file (still in memory, or lost)."""
        return bool(self.pending or self._lost_lines or self.unwritten)

    def flush(self) -> tuple[str | None, int]:
        """Write what is pending. Returns a change of state for the user
        ("stuck" once when writes start failing, "resumed" once they work
        again, else None) and the number of lines lost to the memory cap,
        counted once the backlog is written."""
        lost = 0
        if self.pending and self.fd >= 0:
            self._write()
            if not self.pending and self._lost_lines:
                lost, self._lost_lines = self._lost_lines, 0
        if self.outlog is not None:
            try:
                self.outlog.flush()
            except OSError:
                self.outlog = None
        said, self._said = self._said, None
        return said, lost

    def _write(self) -> None:
        failure = self._write_pending()
        if failure is not None:
            # Disk full or gone: keep the rest in memory and retry on the
            # next pass; the job runs on regardless.
            if self.error is None:
                self._said = "stuck"
            self.error = self.last_error = failure
        elif self.error is not None:
            self.error = None
            # (a failure the user was not told of yet needs no "resumed")
            self._said = None if self._said == "stuck" else "resumed"

    def _write_pending(self) -> str | None:
        """Write the pending lines in order, whole; the reason writing
        stopped, or None when all are on disk."""
        pending = self.pending
        done = 0  # lines on disk
        done_bytes = 0
        failure: str | None = None
        try:
            while done < len(pending):
                batch = pending[done : done + WRITE_BATCH]
                n = os.writev(self.fd, batch)
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                for line in batch:
                    if n < len(line):
                        break
                    n -= len(line)
                    done += 1
                    done_bytes += len(line)
                    self.size += len(line)
                if n:  # cut short mid-line: the rest of that line, or none of it
                    line = pending[done]
                    self._write_all(memoryview(line)[n:])
                    done += 1
                    done_bytes += len(line)
                    self.size += len(line)
        except OSError as e:
            failure = e.strerror or str(e)
            self._roll_back()
        if done:
            del pending[:done]
            self._pending_bytes -= done_bytes
        return failure

    def _write_all(self, data: memoryview) -> None:
        while data:
            n = os.write(self.fd, data)
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data = data[n:]

    def _roll_back(self) -> None:
        """End the file at its last whole line (``size``), and write from there."""
        try:
            if stat.S_ISREG(os.fstat(self.fd).st_mode):
                os.ftruncate(self.fd, self.size)  # frees room: a shorter file needs no new block
            os.lseek(self.fd, self.size, os.SEEK_SET)
        except OSError:
            pass  # the file is gone, or the device is not a file: nothing more to undo

    # ------------------------------------------------------------ run's end

    def seal(self, exit_line: bytes | None, note: Callable[[int], bytes]) -> None:
        """The run is over and lines are still unwritten: end the file with
        ``note(n)`` (n: the events missing from it) and the exit line, in the
        room the disk has; when even that is missing, whole lines are trimmed
        from the end (at most ~1 MiB, never the first line) and counted as
        missing too. ``unwritten`` says how many events the file lacks."""
        missing = len(self.pending) + self._lost_lines
        if exit_line is not None and any(line is exit_line for line in self.pending):
            missing -= 1  # written below, in the note's company
        else:
            exit_line = None
        self.pending, self._pending_bytes, self._lost_lines = [], 0, 0
        trimmed = 0
        for trim in SEAL_TRIMS:
            if trim:
                cut = self._trim(trim)
                if cut is None:
                    break
                trimmed += cut
            tail = note(missing + trimmed) + (exit_line or b"")
            try:
                self._write_all(memoryview(tail))
            except OSError:
                self._roll_back()
                continue
            self.sealed_at = self.size
            self.size += len(tail)
            break
        unsealed_exit = exit_line is not None and self.sealed_at is None
        self.unwritten = missing + trimmed + unsealed_exit

    def _trim(self, room: int) -> int | None:
        """Cut the file back to the last line end at least ``room`` bytes
        before its end (never into the first line); the lines cut, or None
        when there is no such line end."""
        limit = self.size - room
        if limit <= 0 or self.read_fd < 0:
            return None
        start = max(0, limit - LINE_SEARCH)
        try:
            window = os.pread(self.read_fd, self.size - start, start)
            first_end = self._first_line_end()
        except OSError:
            return None
        if len(window) != self.size - start:
            return None
        at = window.rfind(b"\n", 0, limit - start)
        if at < 0 or start + at + 1 < first_end:
            return None
        end = start + at + 1
        cut = window.count(b"\n", end - start)
        self.size = end
        self._roll_back()
        return cut

    def _first_line_end(self) -> int:
        head = os.pread(self.read_fd, 1 << 16, 0)
        at = head.find(b"\n")
        return at + 1 if at >= 0 else len(head)

    def fsync(self) -> None:
        if self.fd >= 0:
            try:
                os.fsync(self.fd)
            except OSError:
                pass

    # ------------------------------------------------------------ output log

    def log_output(self, data: bytes | memoryview) -> None:
        """The job's output, raw, as it came (a log that fails is given up)."""
        if self.outlog is not None:
            try:
                self.outlog.write(data)
            except OSError:
                self.outlog = self.chunk_log = None

    def keep_chunk(self, data: bytes | memoryview) -> tuple[str, int] | None:
        """Write a chunk of output to the output log, whole: the log's name
        (beside the recording) and the offset the chunk starts at, or None
        when the log cannot take it (the caller records the chunk inline;
        ``chunk_log_refused`` says why, the first time)."""
        log = self._chunk_log()
        if log is None:
            return None
        try:
            log.flush()  # what is buffered goes first: the offset below is where this chunk starts
            at = log.tell()
            log.write(data)  # larger than the buffer: written through, not copied into it
            log.flush()
        except (OSError, ValueError) as e:
            self.chunk_log_refused = f"cannot write {self.chunk_log_path}: {getattr(e, 'strerror', None) or e}"
            if log is self.outlog:
                self.outlog = None
            self.chunk_log = None
            return None
        return os.path.basename(self.chunk_log_path), at

    def _chunk_log(self) -> BinaryIO | None:
        if not self._chunk_log_tried:
            self._chunk_log_tried = True
            path = self.chunk_log_path
            try:
                fd = files.open_new(path) if self.new_files else files.open_beside(path)
            except files.FileRefused as e:
                self.chunk_log_refused = str(e)
                return None
            try:
                files.empty(fd)
            except OSError as e:
                os.close(fd)
                self.chunk_log_refused = f"cannot write {path}: {e.strerror or e}"
                return None
            self.chunk_log = os.fdopen(fd, "wb", buffering=1 << 16)
        return self.chunk_log

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
        for log in {id(f): f for f in (self.outlog, self.chunk_log) if f is not None}.values():
            try:
                log.close()
            except OSError:
                pass
