"""Socket helpers the supervisor's roles share: listening, who the peer is,
refusing one with a reason, and ``--listen`` addresses."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import time

from ctmon.wire import protocol


def listen_unix(path: str) -> socket.socket:
    # The file appears at bind(), but connect() is refused until listen():
    # clients take the file's existence as "ready" (start_detached), so
    # bind a temporary name and rename it into place once listening. The
    # temporary name is as long as the final one, so it fits wherever
    # that does (a socket path is limited to 107 bytes).
    head, tail = os.path.split(path)
    tmp = os.path.join(head, "~" + tail[1:])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # socket file 0600 from the start
    try:
        s.bind(tmp)
    finally:
        os.umask(old)
    s.listen(16)
    s.setblocking(False)
    os.replace(tmp, path)
    return s


def same_user(conn: socket.socket) -> bool:
    """Peer credentials: only this user's processes may connect.

    Where the platform has no SO_PEERCRED the socket's 0600 mode inside a
    0700 directory is the guard; where it has one but the query fails, the
    peer is refused (fail closed)."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    except OSError:
        return False
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


def refuse(sock: socket.socket, message: str) -> None:
    """Tell a viewer why it is being closed (one ``error`` line), then close.

    Best effort and never blocking: the line is tiny and goes out at once on
    a fresh connection. What the peer sent is read first, so closing does not
    reset the connection and discard the line before the peer reads it."""
    try:
        sock.setblocking(False)
        sock.send(protocol.encode({"kind": "error", "t": time.time(), "message": message}), socket.MSG_NOSIGNAL)
        sock.shutdown(socket.SHUT_WR)
        for _ in range(16):
            if not sock.recv(65536):
                break
    except OSError:
        pass
    sock.close()


def parse_listen(spec: str) -> tuple[str, int]:
    """ "7777" -> ("127.0.0.1", 7777); "0.0.0.0:7777"; "[::1]:7777".

    "0:7777" means every IPv4 interface, as 0.0.0.0 (it is what the C
    library makes of "0"), and is spelt out so no one is surprised."""
    host, sep, port = spec.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", spec
    host = host.strip("[]") or "127.0.0.1"
    if host == "0":
        host = "0.0.0.0"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad --listen '{spec}': expected [HOST:]PORT")
    return host, int(port)


def is_local_only(host: str) -> bool:
    """True when a listening address is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may well be a network interface
