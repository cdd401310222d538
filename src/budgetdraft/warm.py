"""Warm start: one process with torch, transformers and budgetdraft already imported forks a child per command.

A grid of hundreds of small cells otherwise spends seconds per job importing the same libraries (measured:
3.8 s CPU per ``eval-cell`` before any model work, about a third of an embedded-default cell). The Snakefile
starts ``python -m budgetdraft warm --socket PATH`` for local runs and exports ``BUDGETDRAFT_WARM=PATH``; the
``budgetdraft`` command line then hands its arguments and its stdin/stdout/stderr (SCM_RIGHTS) to that process,
which forks, runs the command in the child exactly as ``python -m budgetdraft`` would, and returns its exit
status. Without the variable, or when nothing answers on the socket, the command runs in its own process as
usual. Timings are taken inside the child, so a cell measures the same thing either way. The warm process never
touches CUDA or torch thread pools (fork safety) and exits after ``--idle`` seconds without a request.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys

ENV = "BUDGETDRAFT_WARM"
PRELOAD = ("torch", "pandas", "pyarrow.parquet", "transformers", "transformers.models.llama.modeling_llama",
           "budgetdraft.cells", "budgetdraft.training", "budgetdraft.targets")


def delegate(argv: list[str]) -> int | None:
    """Run ``budgetdraft argv`` in the warm process; its exit status, or None when no warm process answers."""
    path = os.environ.get(ENV)
    if not path or not os.path.exists(path):
        return None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(path)
    except OSError:
        return None
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(client, [struct.pack("!I", len(request)) + request], [0, 1, 2])
    status = client.recv(4)
    return struct.unpack("!i", status)[0] if len(status) == 4 else 1


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    size = struct.unpack("!I", data[:4])[0]
    body = data[4:]
    while len(body) < size:
        body += conn.recv(size - len(body))
    return json.loads(body), fds


def _child(request: dict, fds: list[int]) -> int:
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin, sys.stdout, sys.stderr = (os.fdopen(0, "r"), os.fdopen(1, "w", buffering=1),
                                         os.fdopen(2, "w", buffering=1))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ENV, None)
    from budgetdraft.cli import main

    try:
        main(request["argv"])
        return 0
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(path: str, idle: float) -> None:
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    server.settimeout(idle)
    print(f"budgetdraft warm: serving on {path} (pid {os.getpid()})", flush=True)
    try:
        while True:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                return
            request, fds = _recv_request(conn)
            if os.fork() == 0:  # child: run the command with the client's stdio, report its status, leave
                server.close()
                code = _child(request, fds)
                try:
                    conn.sendall(struct.pack("!i", code))
                finally:
                    os._exit(code)
            for fd in fds:
                os.close(fd)
            conn.close()
    finally:
        server.close()
        if os.path.exists(path):
            os.unlink(path)


def configure_parser(parser) -> None:
    parser.add_argument("--socket", required=True, help="Unix socket path to serve on")
    parser.add_argument("--idle", type=float, default=600, help="exit after this many seconds without a request")


def run(args) -> None:
    serve(args.socket, args.idle)
