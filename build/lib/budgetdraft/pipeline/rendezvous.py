"""Where a warm process listens and whom it trusts (`budgetdraft.pipeline.warm`): a socket in a private directory
(mode 0700, this user's, an unpredictable name under ``$TMPDIR``: ``rendezvous``, ``private_dir``), and the uid of
the process at the other end of a connection (``foreign_peer``): a client refuses a server of another user, a server
another user's client.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct
import tempfile

SOCKET_NAME = "warm.sock"
RENDEZVOUS_PREFIX = "budgetdraft-"  # the start of a rendezvous directory's name (tempfile.mkdtemp adds the rest)


def rendezvous(tag: str) -> str:
    """A socket path for a warm process in a new private directory under ``$TMPDIR``: mode 0700 and a name no
    other user can guess or take first (``tempfile.mkdtemp``). Whoever calls this removes the directory."""
    return os.path.join(tempfile.mkdtemp(prefix=f"{RENDEZVOUS_PREFIX}{tag}-"), SOCKET_NAME)


def made_by_rendezvous(folder: str) -> bool:
    """Whether ``folder`` looks like a directory ``rendezvous`` made: named so, right under ``$TMPDIR``, ours, 0700."""
    in_tmp = os.path.samefile(os.path.dirname(folder), tempfile.gettempdir())
    return in_tmp and os.path.basename(folder).startswith(RENDEZVOUS_PREFIX) and private_dir(folder) is None


def private_dir(path: str, create: bool = False) -> str | None:
    """Why directory ``path`` is no place for a warm socket, or None when it is one: a directory (not a symbolic
    link: ``lstat``, nothing followed) owned by this user with mode 0700. ``create``: make it so if it is missing."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # whatever the umask
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return f"{path} does not exist"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link (not followed)"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if info.st_uid != os.geteuid():
        return f"{path} is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if stat.S_IMODE(info.st_mode) != 0o700:
        return f"{path} has mode {stat.S_IMODE(info.st_mode):04o}, not 0700: other users can enter it"
    return None


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket (``SO_PEERCRED``: for a listening
    server, the credentials it had when it called listen)."""
    size = struct.calcsize("3i")
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))


def foreign_peer(conn: socket.socket, who: str) -> str | None:
    """Why the process at the other end of ``conn`` is not to be trusted (another uid), or None."""
    if not hasattr(socket, "SO_PEERCRED"):
        return "this platform cannot tell who is at the other end of a socket (no SO_PEERCRED)"
    pid, uid, _ = peer_credentials(conn)
    if uid != os.geteuid():
        return f"the {who} (pid {pid}) runs as uid {uid}, not as this user (uid {os.geteuid()})"
    return None
