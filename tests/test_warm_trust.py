"""Whom the warm socket trusts (issue 29): a listener that is not ours gets nothing (not the environment, not a
token, not the job's streams) and the command runs in its own process, saying why in one line: a socket in a
directory that is not private (another owner, another mode, a symbolic link) is not even connected to, a listener
of another uid (SO_PEERCRED) is dropped unanswered, a server drops a client of another uid unread, and what a
request carries is the allow-list ``SENT_ENV`` (no HF_TOKEN)."""

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from budgetdraft.pipeline import cli, rendezvous, warm

SRC = str(Path(__file__).resolve().parents[1] / "src")
SECRET = "hf_secret123"
KNOCK = b"the test knocks"
NOBODY = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else None
needs_root = pytest.mark.skipif(NOBODY is None, reason="switching to another uid needs root")


def _listen_and_report(path: Path, uid: int | None, bind_first: bool, wait_s: float, report: int) -> None:
    """A listener that is not ours (in a fork): binds ``path``, becomes ``uid`` (before binding, or after it but
    before listening: SO_PEERCRED gives a client the credentials of the listen call), answers every message
    with status 0 (what the issue's 12-line listener did) and writes to ``report`` what it received."""
    if uid is not None and not bind_first:
        os.setgid(uid)
        os.setuid(uid)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    if uid is not None and bind_first:
        os.setgid(uid)
        os.setuid(uid)
    server.listen()
    os.write(report, b"L")
    server.settimeout(wait_s)
    try:
        conn, _ = server.accept()
    except TimeoutError:
        os.write(report, json.dumps({"connected": False}).encode())
        return
    conn.settimeout(60)
    received, fds = b"", 0
    while True:
        data, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * 4))
        fds += sum(len(cdata) // 4 for _, _, cdata in ancillary)
        if not data:
            break
        received += data
        if received == KNOCK:
            break
        conn.sendall((0).to_bytes(4, "big"))
    if received == KNOCK:  # the test's own connection, made once its client had finished: nobody came before
        os.write(report, json.dumps({"connected": False}).encode())
        return
    os.write(report, json.dumps({"connected": True, "received": received.decode("latin-1"), "fds": fds}).encode())


def listener(path: Path, uid: int | None = None, bind_first: bool = False, wait_s: float = 300) -> tuple[int, int]:
    """Start a foreign listener on ``path`` in a fork (another uid where ``uid`` is given); returns once it listens."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (a fork)
        code = 0
        try:
            os.close(read)
            _listen_and_report(path, uid, bind_first, wait_s, write)
        except BaseException as err:
            os.write(write, f"E{err!r}".encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    first = os.read(read, 1)
    assert first == b"L", first + os.read(read, 4096)
    return pid, read


def heard(started: tuple[int, int], knock: Path | None = None) -> dict:
    """What a listener received (it reports when its client's end closes). ``knock``: connect to it first, as
    the test, so that it reports whether anyone connected before (accept takes connections in order)."""
    pid, read = started
    if knock is not None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as test:
            test.connect(str(knock))
            test.sendall(KNOCK)
    with os.fdopen(read, "rb") as report:
        text = report.read()
    os.waitpid(pid, 0)
    return json.loads(text)


@pytest.fixture
def passable():
    """A directory under /tmp that another uid may pass through (mode 0711; tmp_path's parents are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="budgetdraft-test-"))
    base.chmod(0o711)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def run_command(sock: Path, **extra_env) -> subprocess.CompletedProcess:
    """`budgetdraft claims --help` (a warm command, light) with the warm socket ``sock`` and a token set."""
    env = {**os.environ, "PYTHONPATH": SRC, warm.ENV: str(sock), "HF_TOKEN": SECRET, **extra_env}
    command = [sys.executable, "-m", "budgetdraft", "claims", "--help"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def refused_and_ran_here(run: subprocess.CompletedProcess, why: str) -> None:
    assert run.returncode == 0 and "usage: budgetdraft claims" in run.stdout, run.stderr  # it ran here
    lines = [line for line in run.stderr.splitlines() if "not using the warm process" in line]
    assert len(lines) == 1 and why in lines[0] and "running claims here" in lines[0], run.stderr


def private(path: Path) -> Path:
    path.mkdir(mode=0o700)
    path.chmod(0o700)
    return path


@needs_root
def test_a_listener_of_another_uid_in_our_private_directory_is_refused_by_its_credentials(tmp_path):
    """The socket is where it should be, but the process listening on it is another uid's (SO_PEERCRED): the
    client closes the connection before sending anything and runs the command itself."""
    sock = private(tmp_path / "rendezvous") / "warm.sock"
    foreign = listener(sock, NOBODY, bind_first=True)
    run = run_command(sock)
    refused_and_ran_here(run, f"runs as uid {NOBODY}, not as this user (uid 0)")
    got = heard(foreign)
    assert got == {"connected": True, "received": "", "fds": 0}  # no argv, no environment, no streams


@needs_root
def test_a_directory_another_uid_owns_is_not_connected_to(passable):
    """The issue's attack: another user got there first and listens in a directory of theirs (mode 0700)."""
    theirs = passable / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    sock = theirs / "warm.sock"
    foreign = listener(sock, NOBODY)
    run = run_command(sock)
    refused_and_ran_here(run, f"is owned by uid {NOBODY}, not by this user (uid 0)")
    assert heard(foreign, knock=sock) == {"connected": False}


@pytest.mark.parametrize("mode", [0o755, 0o711, 0o770])
def test_a_directory_others_can_enter_is_not_connected_to(tmp_path, mode):
    """Where the test cannot switch uid: a directory of ours that others can enter (or could list) is refused,
    naming its mode; nothing connects to the listener in it."""
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(mode)
    foreign = listener(folder / "warm.sock")
    refused_and_ran_here(run_command(folder / "warm.sock"), f"has mode {mode:04o}, not 0700")
    assert heard(foreign, knock=folder / "warm.sock") == {"connected": False}


def test_a_symbolic_link_to_a_private_directory_is_not_followed(tmp_path):
    target = private(tmp_path / "real")
    (tmp_path / "link").symlink_to(target)
    foreign = listener(target / "warm.sock")
    refused_and_ran_here(run_command(tmp_path / "link" / "warm.sock"), "is a symbolic link")
    assert heard(foreign, knock=target / "warm.sock") == {"connected": False}


def test_a_request_carries_no_token_only_the_allowed_environment(tmp_path):
    """Even to a listener that passes every check (ours), a request carries the allow-listed variables, never
    HF_TOKEN or anything else of the client's environment."""
    sock = private(tmp_path / "rendezvous") / "warm.sock"
    ours = listener(sock)
    run = run_command(sock, HF_HOME=str(tmp_path / "hf"), SOME_PASSWORD="pw-456", OMP_NUM_THREADS="3")
    assert run.returncode == 0 and "not using the warm process" not in run.stderr, run.stderr  # served ("0")
    got = heard(ours)
    assert got["connected"] and got["fds"] == 3
    assert SECRET not in got["received"] and "pw-456" not in got["received"]
    request = json.loads(got["received"][4:])
    assert set(request["env"]) == set(warm.SENT_ENV)
    assert request["env"]["HF_HOME"] == str(tmp_path / "hf") and request["env"]["OMP_NUM_THREADS"] == "3"
    assert request["argv"] == ["claims", "--help"]
    assert not any(word in name for name in warm.SENT_ENV for word in ("TOKEN", "SECRET", "PASSWORD", "KEY"))


def test_no_server_no_line(tmp_path):
    """A socket path whose directory does not exist (no warm process): the command runs here, silently."""
    run = run_command(tmp_path / "gone" / "warm.sock")
    assert run.returncode == 0 and "usage: budgetdraft claims" in run.stdout and not run.stderr, run.stderr


def _connect_as(uid: int | None, path: Path) -> int:
    """A fork that connects to ``path`` (as ``uid`` when given) and waits for the connection to close."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (a fork)
        try:
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(path))
            client.recv(1)
        finally:
            os._exit(0)
    return pid


@needs_root
def test_the_server_refuses_a_client_of_another_uid(passable):
    """The server's side of SO_PEERCRED, the check its accept loop makes before it reads anything
    (``foreign_peer``): a connection from another uid is named as such, one from this uid passes."""
    path = passable / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)  # nobody may connect: the test is what the server says, not the file's mode
    server.listen()
    server.settimeout(120)
    with server:
        for uid, expected in ((NOBODY, "runs as uid {uid}, not as this user (uid 0)"), (None, None)):
            pid = _connect_as(uid, path)
            conn, _ = server.accept()
            with conn:
                why = rendezvous.foreign_peer(conn, "client")
            os.waitpid(pid, 0)
            assert why == (expected and f"the client (pid {pid}) " + expected.format(uid=uid))


def test_a_server_will_not_serve_from_a_directory_others_can_enter(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    with pytest.raises(SystemExit, match=r"not serving on .*has mode 0755, not 0700"):
        warm.serve(str(folder / "warm.sock"), cli.run)
    created = tmp_path / "new" / "warm.sock"  # a missing directory is made private
    assert rendezvous.private_dir(str(created.parent), create=True) is None
    assert (created.parent.stat().st_mode & 0o777) == 0o700


def test_a_rendezvous_is_private_and_unpredictable():
    a, b = rendezvous.rendezvous("job1"), rendezvous.rendezvous("job1")
    try:
        assert a != b and rendezvous.private_dir(os.path.dirname(a)) is None
    finally:
        os.rmdir(os.path.dirname(a))
        os.rmdir(os.path.dirname(b))


def test_a_server_replaces_a_stale_socket_refuses_a_live_one_and_removes_only_its_own(tmp_path, monkeypatch):
    """What ``serve`` does with its path, in-process: a socket file nobody answers on is replaced, a live one is
    left with one line naming the path, and at exit the server removes its socket and an empty rendezvous directory
    (never a directory with something else in it, nor one ``rendezvous`` did not make)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = rendezvous.rendezvous("t")
    folder = os.path.dirname(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:
        live.bind(path)
        live.listen()
        line = f"budgetdraft warm: not serving on {path}: a warm server (pid {os.getpid()}) already listens there"
        with pytest.raises(SystemExit) as refused:
            warm._listen(path)
        assert str(refused.value) == line
    server, own = warm._listen(path)  # the listener above closed without unlinking: a stale file
    server.close()
    assert rendezvous.made_by_rendezvous(folder) and not rendezvous.made_by_rendezvous(str(private(tmp_path / "mine")))
    Path(folder, "note").write_text("not the server's")
    warm._clean_up(path, own, folder)
    assert os.listdir(folder) == ["note"]
    os.unlink(os.path.join(folder, "note"))
    os.rmdir(folder)
