"""Warm start: one process with torch, transformers and budgetdraft already imported forks a child per command.

A grid of hundreds of small cells otherwise spends seconds per job importing the same libraries (bench/README.md,
"Pipeline overhead"); every other pipeline command (prefills, training, tables) goes through it too. The Snakefile
starts ``python -m budgetdraft warm --socket PATH`` for local runs and exports ``BUDGETDRAFT_WARM=PATH``; the
``budgetdraft`` command line then hands its arguments and its stdin/stdout/stderr (SCM_RIGHTS) to that process,
which forks, runs the command in the child exactly as ``python -m budgetdraft`` would, and returns its exit
status. Without the variable, or when nothing answers on the socket, the command runs in its own process as
usual. Timings are taken inside the child, so a cell measures the same thing either way. Before forking an
``eval-cell`` the warm process also loads the CPU models it names, once each (its ``ModelStore``'s ``preload``):
the children share them copy-on-write instead of each reading the weights. The warm process never touches CUDA, runs torch on one thread, loads without transformers' loader
threads and starts no threads of its own (fork safety). It serves for as long as the process that started it
(Snakemake) lives, however long the training stages keep the grid waiting, and exits when that process is gone
or after ``--idle`` seconds without a request (default: never).

Each request gets a *keeper*, a fork of the warm process that forks the command's child into a process group of
its own and waits for whichever comes first: the child's exit (its status goes to the client) or the client's end
of the socket closing (the job was killed: Snakemake stopped, Ctrl-C, a timeout), which kills the child's group
with SIGTERM, so no orphaned cell goes on computing and writing while other cells are timed.

**Resident** (``--resident``; the pipeline's choice when ``device`` is an accelerator, ``warm_start: resident``
forces it on the CPU): CUDA cannot be used across a fork, so this server forks nothing. It runs ``eval-cell`` and
``prefill`` requests itself, one after another, and keeps every model they load (a ``ModelStore`` with ``keep``,
keyed by the directory's files as the preload is): a grid on one GPU reads its verifier once, not once per cell.
Every other command is answered "not served" and runs in its own process. A client whose socket closes interrupts
its command (KeyboardInterrupt in the server's main thread); a model a command left changed (a hook still
registered, train mode) is dropped. On a cluster, where no ``onstart`` runs inside a job, a job's Snakemake sets
``BUDGETDRAFT_WARM_AUTOSTART`` to its own pid with the socket path, and the first cell of a job group that finds no
server starts one (``autostart``) that lives as long as that Snakemake: the group's cells share its models.

**Whom it trusts.** The socket lives in a directory of its own that only this user can enter (``rendezvous``:
mode 0700, an unpredictable name, made by the Snakefile or the server); a client refuses a directory that is not a
real directory of its user's with mode 0700 (``private_dir``, by ``lstat``: a symbolic link is refused, not
followed). Both ends then read the other's credentials (``SO_PEERCRED``) and refuse a process of another uid: the
client runs its command in its own process and says why in one line, the server closes the connection unread. A
request carries the command's argv, cwd, standard streams and the few environment variables a command reads that
a job may set (``SENT_ENV``: paths, thread counts, caches, offline flags); everything else, tokens included, the
command takes from the server's own environment, which the same Snakemake (or the job's first cell) gave it.

**Tuning knobs**, read from the server's environment at its start (``intervals``; the tests set them small):
``BUDGETDRAFT_WARM_POLL_S`` (default 5), how often an idle server checks that its owner is still there, so how long
it may outlive it; ``BUDGETDRAFT_WARM_REQUEST_TIMEOUT_S`` (default 10), how long a connected client may take to send
its whole request, while the server serves no one else. A value that is not a number of seconds > 0 is one line.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import json
import math
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

from budgetdraft.base.atomic import running
from budgetdraft.pipeline.rendezvous import (
    foreign_peer,
    made_by_rendezvous,
    peer_credentials,
    private_dir,
)

ENV = "BUDGETDRAFT_WARM"
AUTOSTART = "BUDGETDRAFT_WARM_AUTOSTART"  # a pid: a client that finds no server starts a resident one it owns
ASYNC_LOAD_OFF = "HF_DEACTIVATE_ASYNC_LOAD"
RESIDENT_COMMANDS = ("eval-cell", "prefill")  # what a resident server runs itself: model loads it can keep
NOT_SERVED = -(1 << 30)  # a resident server's answer to any other command: the client runs it in its own process
# what the commands import besides budgetdraft's own modules, which come from the import graph (`preload_modules`)
LIBRARIES = ("torch", "pandas", "pyarrow.parquet", "transformers", "transformers.models.llama.modeling_llama")
# The environment a request carries: what the commands (and the libraries they call) read that differs from job to
# job or from the server's start. Nothing else travels: no token, no credential (the server has its own, from
# the same Snakemake). A name here that the client has unset is unset in the command too.
SENT_ENV = (
    *("PATH", "PYTHONPATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "TZ"),
    "CUDA_VISIBLE_DEVICES",
    # Snakemake sets these to a job's threads
    *("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"),
    "NUMEXPR_NUM_THREADS",
    # caches and offline switches (the Snakefile's shell prefix exports the offline ones)
    *("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_CACHE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"),
    *("XDG_CACHE_HOME", "BUDGETDRAFT_CACHE"),
)
MAX_PID = 2**22  # Linux's largest pid_max: a --owner or BUDGETDRAFT_WARM_AUTOSTART past it names no process
AUTOSTART_PATIENCE_S = 600  # how long a cell waits for the server it started to listen (it runs cold after)


def preload_modules() -> list[str]:
    """What the warm process imports before serving: the libraries, then every budgetdraft module a command runs
    (``budgetdraft.base.importgraph``; eval-cell's decoder factories, imported by a computed name, included), itself
    aside."""
    from budgetdraft.base import methods
    from budgetdraft.base.importgraph import command_imports, commands

    factories = tuple(d.factory for d in methods.DECODERS.values() if d.factory)
    ours = {module for command in commands() if command != "warm" for module in command_imports(command)}
    return [*LIBRARIES, *sorted(ours | set(command_imports("eval-cell", factories)) - {__name__})]


def sent_env() -> dict[str, str | None]:
    """The environment a request carries (``SENT_ENV``): each name's value here, None where it is unset."""
    return {name: os.environ.get(name) for name in SENT_ENV}


def _connect(path: str) -> socket.socket | None:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(path)
    except OSError:
        client.close()
        return None
    return client


def autostart(path: str, owner: int) -> socket.socket | None:
    """Start a resident server on ``path`` that exits with process ``owner``, unless one answers there, and connect
    to it (None if it does not come up). A lock file makes the cells of one job that start at once start one."""
    import fcntl
    import subprocess

    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if client := _connect(path):
            return client
        env = {k: v for k, v in os.environ.items() if k not in (ENV, AUTOSTART)}
        argv = ["--socket", path, "--resident", "--owner", str(owner)]
        with open(f"{path}.log", "a") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "budgetdraft", "warm", *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # not killed with the cell that started it
            )
        deadline = time.monotonic() + AUTOSTART_PATIENCE_S
        while not os.path.exists(path) and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # its imports take seconds (minutes on a loaded node, where 120 s ran a cell cold)
        return _connect(path)


def delegate(argv: list[str]) -> int | None:
    """Run ``budgetdraft argv`` in the warm process; its exit status, or None when no warm process answers, a
    resident one does not serve this command, or the socket is not to be trusted (then one line says why)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    autostarts = bool(os.environ.get(AUTOSTART)) and argv[0] in RESIDENT_COMMANDS
    owner = os.environ.get(AUTOSTART, "")
    if autostarts and not (owner.isascii() and owner.isdigit() and 1 <= int(owner) <= MAX_PID):
        print(f"budgetdraft: {AUTOSTART}={owner!r} is not a process id; running {argv[0]} here", file=sys.stderr)
        return None
    if not autostarts and not os.path.lexists(folder):
        return None  # nothing there: no server to trust or distrust
    why = private_dir(folder, create=autostarts)
    client = None
    if why is None:
        client = _connect(path) if os.path.lexists(path) else None
        if client is None and autostarts:
            client = autostart(path, int(os.environ[AUTOSTART]))
        if client is None:
            return None
        if why := foreign_peer(client, "process listening there"):
            client.close()
    if why:
        print(f"budgetdraft: not using the warm process at {path}: {why}; running {argv[0]} here", file=sys.stderr)
        return None
    with client:
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": sent_env()}).encode()
        socket.send_fds(client, [struct.pack("!I", len(request)) + request], [0, 1, 2])
        status = client.recv(4)
    code = struct.unpack("!i", status)[0] if len(status) == 4 else 1
    return None if code == NOT_SERVED else code


POLL_S = 5.0  # how often an idle server checks that its owner is still there
REQUEST_TIMEOUT_S = 10.0  # how long a connected client may take to send its request (ours sends it at once)
KNOBS = {"BUDGETDRAFT_WARM_POLL_S": POLL_S, "BUDGETDRAFT_WARM_REQUEST_TIMEOUT_S": REQUEST_TIMEOUT_S}  # their settings


def intervals() -> tuple[float, float]:
    """The server's poll interval and request deadline in seconds: each ``KNOBS`` setting where it is set, else its
    default. ValueError (one line) for a value that is not a finite number of seconds > 0 (0 would make the server
    spin, or drop every client)."""
    values = []
    for name, default in KNOBS.items():
        text = os.environ.get(name)
        try:
            values.append(default if text is None else float(text))
        except ValueError:
            values.append(math.nan)
        if not 0 < values[-1] < math.inf:
            raise ValueError(f"{name}={text!r} is not a number of seconds > 0 (unset, it is {default:g})")
    return values[0], values[1]


def _recv_request(conn: socket.socket, timeout: float) -> tuple[dict, list[int]] | None:
    """The request on ``conn`` and the client's standard streams; None, its descriptors closed, when the client left
    before it had sent them all (killed between connect and send), had not sent it whole ``timeout`` seconds after it
    connected (it would stall every later job: the server reads one request at a time; a deadline for the whole
    request, so a client dripping a byte at a time cannot hold it either), or sent something that is no request."""
    try:
        received = _recv_whole(conn, timeout)
    finally:
        conn.settimeout(None)
    if received is None:
        return None
    body, fds = received
    if why := _not_a_request(body):
        print(f"budgetdraft warm: dropped a request that {why}", flush=True)
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(body), fds


def _recv_whole(conn: socket.socket, timeout: float) -> tuple[bytes, list[int]] | None:
    """The framed body (4-byte length, then the JSON) and the three descriptors of one request, all received within
    ``timeout`` seconds from now, or None."""
    deadline = time.monotonic() + timeout
    try:
        conn.settimeout(timeout)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    except TimeoutError:
        print(f"budgetdraft warm: dropped a client that sent no request in {timeout:g} s", flush=True)
        return None
    except OSError:  # reset by a client killed as it sent
        return None
    body = data[4:]
    size = struct.unpack("!I", data[:4])[0] if len(data) >= 4 else None
    while size is not None and len(body) < size:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            conn.settimeout(left)
            more = conn.recv(size - len(body))
        except TimeoutError:
            print(f"budgetdraft warm: dropped a client that had not sent its request in {timeout:g} s", flush=True)
            more = b""
        except OSError:  # reset by a client killed as it sent
            more = b""
        if not more:
            break
        body += more
    if size is None or len(body) < size or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    return body, fds


def _not_a_request(body: bytes) -> str | None:
    """Why ``body`` is not a request ``delegate`` sends (JSON argv, cwd, env), or None. (A body that was not JSON
    raised in the server's loop and ended the server; one without argv ended the fork as a second server.)"""
    try:
        request = json.loads(body)
    except ValueError:  # not UTF-8, or not JSON
        return "is not JSON"
    if not isinstance(request, dict):
        return "is not a JSON object"
    argv, cwd, env = request.get("argv"), request.get("cwd"), request.get("env")
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        return "has no argv (a non-empty list of strings)"
    if not isinstance(cwd, str) or not isinstance(env, dict):
        return "has no cwd (a string) or env (an object)"
    if not all(isinstance(v, str | None) for v in env.values()):
        return "has an env value that is not a string or null"
    return None


def _child(request: dict, fds: list[int], models, run_command) -> int:
    global _command_running
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin, sys.stdout, sys.stderr = (  # closefd=False: the resident server restores its own 0, 1, 2 after
        os.fdopen(0, "r", closefd=False),
        os.fdopen(1, "w", buffering=1, closefd=False),
        os.fdopen(2, "w", buffering=1, closefd=False),
    )
    for name in SENT_ENV:  # the rest of the environment is the server's own
        value = request["env"].get(name)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for name in (ENV, AUTOSTART):  # a command in the warm process does not delegate again
        os.environ.pop(name, None)
    tempfile.tempdir = None  # read $TMPDIR again: the job's, not the one the server first saw
    os.environ[ASYNC_LOAD_OFF] = "1"  # a fork must not start transformers' loader threads (torch's OpenMP pool)
    sys.argv = ["budgetdraft", *request["argv"]]
    try:  # the command, as `python -m budgetdraft ARGV` runs it after no warm process took it; with this server's models
        os.chdir(request["cwd"])  # here: a client's folder that is gone fails its command, not a resident server
        run_command(request["argv"], models=models)
        return 0
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # its client left (resident server) or a Ctrl-C: the command has unwound
        _command_running = False  # first, before any call: the watcher's next interrupt is dropped
        import traceback

        traceback.print_exc()
        return 130
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _keep(conn: socket.socket, request: dict, fds: list[int], models, run_command) -> int:
    """In a fork of the server: run the command in a child leading its own process group; send its exit status
    (128 + N when signal N ended it) to the client, or kill the group with SIGTERM when the client's end of
    ``conn`` closes first (client killed). Returns the status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server's SIG_IGN would discard the child's status
    done, done_w = os.pipe()  # only the child holds done_w: done reads EOF once the child has exited
    pid = os.fork()
    if pid == 0:
        conn.close()
        os.close(done)
        os._exit(_child(request, fds, models, run_command))
    with contextlib.suppress(ProcessLookupError):  # a child that already exited
        os.setpgid(pid, pid)  # here, not in the child: the group must exist before any kill below
    for fd in (done_w, *fds):
        os.close(fd)
    ready, _, _ = select.select([conn, done], [], [])
    if done not in ready:  # the client sends nothing more: a readable conn means its end closed
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    code = code if code >= 0 else 128 - code
    with contextlib.suppress(OSError):  # a client that is gone
        conn.sendall(struct.pack("!i", code))
    return code


def _preload(request: dict, models) -> None:
    """Preload into ``models`` (this server's ``ModelStore``) what the request's command declares before it is forked:
    its module's ``preload(argv, models)`` hook, if it has one (eval-cell's: its models, warm-up and drafter
    prefills). A failure is left to the command, which meets it again when it loads the model itself and reports it
    in its own log."""
    import importlib

    from budgetdraft.base.importgraph import commands

    modules = commands()  # read from cli's source: cli imports this module
    name = request["argv"][0] if request["argv"] else None
    if name not in modules:
        return
    hook = getattr(importlib.import_module(modules[name]), "preload", None)
    if hook is None:
        return
    try:
        with contextlib.chdir(request["cwd"]):
            for done in hook(request["argv"][1:], models):
                print(f"budgetdraft warm: {done}", flush=True)
    except (Exception, SystemExit) as err:
        print(f"budgetdraft warm: nothing preloaded for {request['argv']}: {err!r}", flush=True)


# What a resident server's watcher raises in its main thread, with a handler of the server's own. (It was SIGINT:
# a process started from a background job, `snakemake ... &`, nohup, a CI script, inherits SIGINT ignored, Python
# then installs no handler for it, interrupt_main does nothing, and a killed client's command ran to its end.)
CLIENT_GONE = signal.SIGUSR2
REINTERRUPT_S = 1.0  # how often the watcher interrupts a command that goes on after its client left
_command_running = False  # in the resident server: whether a command runs (the CLIENT_GONE handler interrupts it)


def _interrupt_command(signum, frame) -> None:
    """The resident server's CLIENT_GONE handler: a KeyboardInterrupt in the command that runs; nothing between
    commands, where an interrupt the watcher raised as its command ended must not cut the server's own restoring
    of its streams, environment and working directory."""
    if _command_running:
        raise KeyboardInterrupt


def _watch(conn: socket.socket, done: int) -> None:
    """In a thread of the resident server: once the client's end of ``conn`` closes before ``done`` becomes
    readable (the command finished), interrupt the main thread's command, and again every REINTERRUPT_S until it
    has stopped: an interrupt that lands where Python drops exceptions (a finaliser prints "Exception ignored")
    or in code that catches everything must not leave the server decoding a killed client's 1,000 repeats."""
    ready, _, _ = select.select([conn, done], [], [])
    while done not in ready:
        _thread.interrupt_main(CLIENT_GONE)
        ready, _, _ = select.select([done], [], [], REINTERRUPT_S)


def _run_here(conn: socket.socket, request: dict, fds: list[int], models, run_command) -> int:
    """Run the command in this process (the resident server), then restore the server's own standard streams,
    environment, working directory and argv. Returns the command's exit status (130 when its client left)."""
    global _command_running
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved = (sys.stdin, sys.stdout, sys.stderr, dict(os.environ), os.getcwd(), sys.argv)
    done, done_w = os.pipe()
    watcher = threading.Thread(target=_watch, args=(conn, done), daemon=True)
    try:
        _command_running = True  # before the watcher starts: a client already gone interrupts the command
        watcher.start()
        return _child(request, fds, models, run_command)
    finally:
        _command_running = False  # from here on an interrupt is dropped (no call before this: nothing handles one)
        os.write(done_w, b"x")
        if watcher.ident is not None:
            watcher.join()
        for target, fd in zip((0, 1, 2), saved_fds):
            os.dup2(fd, target)
            os.close(fd)
        os.close(done)
        os.close(done_w)
        sys.stdin, sys.stdout, sys.stderr, env, cwd, sys.argv = saved
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)


def _serve_here(conn: socket.socket, request: dict, fds: list[int], models, run_command) -> None:
    """The resident server's handling of one request: run a resident command here, or answer NOT_SERVED."""
    code = NOT_SERVED
    if request["argv"][0] in RESIDENT_COMMANDS:
        try:
            code = _run_here(conn, request, fds, models, run_command)
        except KeyboardInterrupt:  # the client left just as its command ended
            code = 130
        finally:
            _after_command(models)
    else:
        for fd in fds:
            os.close(fd)
    with contextlib.suppress(OSError):  # a client that is gone
        conn.sendall(struct.pack("!i", code))
    conn.close()


def _after_command(models) -> None:
    for path in models.release_changed():
        print(f"budgetdraft warm: dropped {path}: the last command left it changed", flush=True)
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # the next cell's peak memory is its own


def serve(path: str, run_command, idle: float = 0, resident: bool = False, owner: int | None = None) -> None:
    """Serve on ``path`` until the process ``owner`` (default: the parent) exits, or ``idle`` seconds pass without
    a request (0: never). (A fixed idle limit alone killed the server while the training chain kept every cell
    waiting.) ``run_command(argv, models=...)`` runs a request's command in this process with this server's models,
    as `python -m budgetdraft` would (``budgetdraft.pipeline.cli.run``, handed in by the `warm` command: the command
    line imports this module to delegate, so this module does not import it back). ``resident``: run the resident
    commands here and keep their models, instead of forking. The socket's directory is made private (mode 0700) if
    it is missing and refused if it is not private."""
    import importlib

    poll_s, request_timeout_s = intervals()  # first: a bad setting is said at once
    parent = os.getppid()  # before the imports: a parent that dies meanwhile must still be seen gone
    folder = os.path.dirname(os.path.abspath(path))
    if why := private_dir(folder, create=True):
        raise SystemExit(f"budgetdraft warm: not serving on {path}: {why}")
    _refuse_if_taken(path)  # before the imports: the line comes at once (_listen checks again, after them)
    rendezvous_dir = folder if made_by_rendezvous(folder) else None  # now: a resident command leaves its $TMPDIR
    for module in preload_modules():
        importlib.import_module(module)
    from budgetdraft.decoding.loading import ModelStore

    models = ModelStore(keep=resident)  # this server's models, handed to the commands it runs
    _settle(resident)
    server, own = _listen(path, poll_s)
    last_request = time.monotonic()
    mode = "resident" if resident else "forking"
    malloc = _environ_at_start("GLIBC_TUNABLES") or "glibc's defaults"  # huge pages or not (base.defaults)
    about = f"{mode}, pid {os.getpid()}, owner {owner or parent}, malloc {malloc}, polls every {poll_s:g} s"
    print(f"budgetdraft warm: serving on {path} ({about}, waits {request_timeout_s:g} s for a request)", flush=True)
    try:
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                gone = os.getppid() != parent if owner is None else not running(owner)
                if gone or (idle and time.monotonic() - last_request > idle):
                    return
                continue
            if why := foreign_peer(conn, "client"):
                print(f"budgetdraft warm: refused a connection: {why}", flush=True)
                conn.close()  # nothing read from it, nothing run
                continue
            if (received := _recv_request(conn, request_timeout_s)) is None:
                conn.close()  # the client left before its request was complete
                continue
            request, fds = received
            if resident:
                _serve_here(conn, request, fds, models, run_command)
            else:
                _fork_keeper(server, conn, request, fds, models, run_command)
            last_request = time.monotonic()
    finally:
        server.close()
        _clean_up(path, own, rendezvous_dir)


def _environ_at_start(name: str) -> str | None:
    """``name``'s value in the environment this process was started with, which is what glibc read (Linux's
    /proc/self/environ; ``os.environ`` where there is none): `python -m budgetdraft` may have set it since
    (``base.defaults.with_cpu_allocator``), for its children only."""
    try:
        with open("/proc/self/environ", "rb") as f:
            given = dict(item.partition(b"=")[::2] for item in f.read().split(b"\0") if item)
    except OSError:
        return os.environ.get(name)
    value = given.get(name.encode())
    return None if value is None else value.decode(errors="replace")


def _settle(resident: bool) -> None:
    """No thread a fork would inherit (OpenMP's pool, transformers' loading pool, tqdm's monitor), and the signals
    a server of this kind answers."""
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)  # each command sets its own --threads
    os.environ[ASYNC_LOAD_OFF] = "1"
    hf_logging.disable_progress_bar()
    if resident:
        signal.signal(CLIENT_GONE, _interrupt_command)
    else:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the keepers are reaped by the kernel


def _refuse_if_taken(path: str) -> None:
    """Exit, in one line, when a server answers on ``path``. (A second server took the path of a live one: it
    unlinked the socket and bound its own, and the first went on unreachable, a resident one with its models in
    memory until its owner exited.)"""
    client = _connect(path)
    if client is None:
        return
    with client:
        pid = peer_credentials(client)[0] if hasattr(socket, "SO_PEERCRED") else "?"
    raise SystemExit(f"budgetdraft warm: not serving on {path}: a warm server (pid {pid}) already listens there")


def _listen(path: str, poll_s: float = POLL_S) -> tuple[socket.socket, tuple[int, int]]:
    """Listen on ``path`` (accept timing out every ``poll_s``); also the (st_dev, st_ino) of the socket file, by
    which the server knows at exit whether the path is still its own. A file there that nobody answers on (left by
    a server killed with SIGKILL) is replaced; a live server there makes this one exit. (It binds first and checks
    after: of two servers started at once on a free path, the second finds the first there.)"""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
    except OSError as err:
        if err.errno != errno.EADDRINUSE:
            raise
        _refuse_if_taken(path)
        with contextlib.suppress(FileNotFoundError):  # another server replacing the same stale file
            os.unlink(path)
        server.bind(path)
    server.listen(64)
    server.settimeout(poll_s)
    info = os.lstat(path)
    return server, (info.st_dev, info.st_ino)


def _clean_up(path: str, own: tuple[int, int], rendezvous_dir: str | None) -> None:
    """Remove the socket at ``path`` and what belongs with it, only while ``path`` is still the socket this server
    bound (``own``): another server's socket, lock and directory are left to it. With the socket go the lock an
    autostart took there (``autostart``) and, in a directory ``rendezvous`` made, the autostart's log and then the
    directory if nothing else is in it. The Snakemake that made the directory removes it when it ends normally,
    but a Snakemake killed with SIGKILL runs no onsuccess, onerror or atexit: the server, which exits when its
    owner is gone, is the last process of ours that knows the directory (it stayed in $TMPDIR for good)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if (info.st_dev, info.st_ino) != own:
        return
    leftovers = [path, f"{path}.lock"] + ([f"{path}.log"] if rendezvous_dir else [])
    for leftover in leftovers:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)
    if rendezvous_dir:
        with contextlib.suppress(OSError):  # not empty: something else is in it
            os.rmdir(rendezvous_dir)


def _fork_keeper(
    server: socket.socket, conn: socket.socket, request: dict, fds: list[int], models, run_command
) -> None:
    _preload(request, models)
    if os.fork() == 0:  # keeper: run the command, report its status, leave
        server.close()
        code = 1
        try:
            code = _keep(conn, request, fds, models, run_command)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    conn.close()
