"""The supervisor's viewers: over ``viewer.sock`` and, with ``--listen``, TCP.

Each viewer is sent the recording file from byte 0 and then follows it, so
a viewer attached late sees exactly what one attached at the start saw, and
a stalled viewer costs nothing but its file offset (no per-viewer buffers).

A TCP peer must present the session token in its first line, within
``AUTH_TIMEOUT_S``; at most ``MAX_HALF_OPEN`` wait at once and at most
``MAX_VIEWERS`` are served. The only things a viewer may ask for are the
``control`` messages in ``Controls``: a signal, a stop, a line of stdin.
"""

from __future__ import annotations

import hmac
import os
import secrets
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from ctmon.launch.recorder import Recorder
from ctmon.launch.sockets import is_local_only, parse_listen, refuse, same_user
from ctmon.wire import protocol

AUTH_TIMEOUT_S = 5.0
MAX_HALF_OPEN = 16  # TCP peers waiting to authenticate; the oldest is dropped for a new one
MAX_VIEWERS = 64  # viewers being served at once (both sockets); more are told so and closed


@dataclass
class Controls:
    """What a viewer's ``control`` messages do (the job role's handlers)."""

    signal: Callable[[str], None]  # interrupt / terminate / kill
    stop: Callable[[object], None]  # the grace, as sent
    stdin: Callable[[object], None]  # the data, as sent


class Viewer:
    def __init__(self, sock: socket.socket, authed: bool = True) -> None:
        self.sock = sock
        self.cursor = 0
        self.splitter = protocol.LineSplitter(max_line=4096)
        self.writing = False
        # TCP viewers must present the session token first, within a deadline.
        self.authed = authed
        self.deadline = time.monotonic() + AUTH_TIMEOUT_S


class Viewers:
    def __init__(self, sel: selectors.BaseSelector, recorder: Recorder, controls: Controls) -> None:
        self.sel = sel
        self.recorder = recorder
        self.controls = controls
        self.viewers: list[Viewer] = []
        self.tcp_sock: socket.socket | None = None
        self.tcp_address: str | None = None
        self.token: str | None = None
        self.tcp_all_interfaces = False

    # ---------------------------------------------------------------- accept

    def accept_unix(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        if not same_user(conn):
            conn.close()
            return
        conn.setblocking(False)
        if len(self.viewers) >= MAX_VIEWERS:
            refuse(conn, "too many viewers")
            return
        v = Viewer(conn)
        self.viewers.append(v)
        self.sel.register(conn, selectors.EVENT_READ, ("viewer", v))
        self.want_write(v)

    def listen_tcp(self, spec: str, session_dir: str) -> None:
        """Optional TCP for port forwarding: loopback unless a host is given; token required."""
        host, port = parse_listen(spec)
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(8)
        s.setblocking(False)
        self.tcp_sock = s
        bound = s.getsockname()
        self.tcp_address = f"[{host}]:{bound[1]}" if ":" in host else f"{host}:{bound[1]}"
        self.tcp_all_interfaces = not is_local_only(host)
        self.token = secrets.token_urlsafe(24)
        fd = os.open(os.path.join(session_dir, "token"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token)
        self.sel.register(s, selectors.EVENT_READ, ("tcp_listen", None))

    def accept_tcp(self) -> None:
        assert self.tcp_sock is not None
        try:
            conn, _ = self.tcp_sock.accept()
        except OSError:
            return
        waiting = [v for v in self.viewers if not v.authed]
        if len(waiting) >= MAX_HALF_OPEN:
            # Drop the peer that has waited longest rather than refuse the new
            # one: held-open connections then cannot lock a real viewer out,
            # which authenticates in its first line.
            self.drop(min(waiting, key=lambda w: w.deadline))
        conn.setblocking(False)
        if len(self.viewers) >= MAX_VIEWERS:
            refuse(conn, "too many viewers")
            return
        v = Viewer(conn, authed=False)
        self.viewers.append(v)
        self.sel.register(conn, selectors.EVENT_READ, ("viewer", v))

    def expire_unauthenticated(self) -> None:
        now = time.monotonic()
        for v in [v for v in self.viewers if not v.authed and now > v.deadline]:
            self.drop(v)

    def drop(self, v: Viewer, error: str | None = None) -> None:
        if v in self.viewers:
            self.viewers.remove(v)
            try:
                self.sel.unregister(v.sock)
            except (KeyError, ValueError):
                pass
            if error is not None:
                refuse(v.sock, error)
            else:
                v.sock.close()

    # ----------------------------------------------------------------- serve

    def wake_all(self) -> None:
        """The recording grew: every viewer behind it wants to write."""
        for v in self.viewers:
            self.want_write(v)

    def caught_up(self) -> bool:
        return all(v.cursor >= self.recorder.size for v in self.viewers)

    def want_write(self, v: Viewer) -> None:
        behind = v.authed and v.cursor < self.recorder.size
        if behind != v.writing and v in self.viewers:
            v.writing = behind
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if behind else 0)
            self.sel.modify(v.sock, events, ("viewer", v))

    def serve(self, v: Viewer, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            self._read(v)
        if mask & selectors.EVENT_WRITE and v in self.viewers:
            self._write(v)

    def _write(self, v: Viewer) -> None:
        try:
            chunk = os.pread(self.recorder.read_fd, 1 << 16, v.cursor)
            if chunk:
                n = v.sock.send(chunk, socket.MSG_NOSIGNAL)
                v.cursor += n
        except BlockingIOError:
            return
        except OSError:
            self.drop(v)
            return
        self.want_write(v)

    def _read(self, v: Viewer) -> None:
        try:
            data = v.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.drop(v)
            return
        for line in v.splitter.feed(data):
            msg = protocol.decode(line)
            if not v.authed:
                if not self.authenticates(msg):
                    self.drop(v, "authentication failed")
                    return
                v.authed = True
                self.want_write(v)
                continue
            if msg is None or msg.get("kind") != "control":
                continue
            action = msg.get("action")
            if action == "stdin":
                self.controls.stdin(msg.get("data"))
            elif action == "stop":
                self.controls.stop(msg.get("grace"))
            elif isinstance(action, str):
                self.controls.signal(action)

    def authenticates(self, msg: protocol.Event | None) -> bool:
        """A TCP peer's first line: a hello with the session token (any other
        type, or a string that is not the token, fails; nothing raises)."""
        if msg is None or msg.get("kind") != "hello" or self.token is None:
            return False
        token = msg.get("token")
        if not isinstance(token, str):
            return False
        # compare_digest on str refuses non-ASCII (TypeError): compare bytes.
        given = token.encode("utf-8", "surrogatepass")
        return hmac.compare_digest(given, self.token.encode("utf-8"))

    def close(self) -> None:
        for v in list(self.viewers):
            self.drop(v)
        if self.tcp_sock is not None:
            self.tcp_sock.close()
