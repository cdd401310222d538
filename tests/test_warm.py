"""Warm start: a cell run through the pre-imported process equals the same cell run in its own process, and a
killed client takes its command with it; the resident server (the GPU path, run here on device cpu) keeps each
model loaded across cells, forks nothing, and can be started by the first cell of a cluster job.

A server's start costs seconds of imports: the tests that only talk to a server share one of each kind (``server``,
module-scoped; each test reads the log its own requests wrote) and wait REQUEST_KNOB s for a silent client, not 10;
those that end or replace their server start their own, which polls every POLL_KNOB s, not 5."""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from conftest import tiny_cell_args, tiny_cell_inputs

SRC = str(Path(__file__).resolve().parents[1] / "src")
# How long a step may take before the test gives up: a bound against hanging, never the thing tested. (A 60 s
# wait for the server's imports failed under load; what a test checks is that something happens, or does not.)
PATIENCE_S = 600
# The server's tuning knobs (budgetdraft.pipeline.warm.KNOBS), set small where a test would wait on them
POLL_KNOB = {"BUDGETDRAFT_WARM_POLL_S": "0.2"}  # a server whose owner is gone exits within 0.2 s, not 5
REQUEST_KNOB = {"BUDGETDRAFT_WARM_REQUEST_TIMEOUT_S": "2"}  # a silent client is dropped after 2 s, not 10


def wait_until(done, patience: float = PATIENCE_S) -> bool:
    """Poll ``done()`` every 0.1 s until it is true (True) or ``patience`` seconds have passed (False)."""
    deadline = time.monotonic() + patience
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def wait_for_server(sock: Path, process: subprocess.Popen, log: Path) -> None:
    """Until ``process`` listens on ``sock`` (its imports take seconds, minutes on a loaded machine), failing at
    once if it exits instead."""
    wait_until(lambda: sock.exists() or process.poll() is not None)
    assert sock.exists(), f"warm process did not start: {log.read_text() if log.exists() else ''}"


@dataclass
class Server:
    """A warm process serving on ``sock`` (``python -m budgetdraft warm``) and logging to ``log``; ``env`` sends
    commands to it. ``start``: where the running test's part of the log begins."""

    process: subprocess.Popen
    env: dict
    sock: Path
    log: Path
    start: int = 0

    def log_text(self) -> str:
        """What the server logged since the running test began."""
        return self.log.read_bytes()[self.start :].decode()


@pytest.fixture(scope="module", params=["forking"])
def shared_server(tmp_path_factory, request):
    """A warm process (``resident`` when the test is parametrized so) shared by the module's tests of that kind,
    with REQUEST_KNOB and the default poll interval (``test_a_server_reads_its_intervals...``)."""
    folder = tmp_path_factory.mktemp(request.param)
    sock, log = folder / "warm.sock", folder / "warm.log"
    env = {**os.environ, "PYTHONPATH": SRC, **REQUEST_KNOB}
    env.pop("BUDGETDRAFT_WARM_POLL_S", None)
    mode = ["--resident"] if request.param == "resident" else []
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "budgetdraft", "warm", "--socket", str(sock), "--idle", str(PATIENCE_S), *mode],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            # as a server started from a background job is (`snakemake ... &`, nohup, CI): its shell ignores SIGINT,
            # which made Python's interrupt_main a no-op and a killed client's resident command run on (issue 30)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    wait_for_server(sock, process, log)
    yield Server(process, {**env, "BUDGETDRAFT_WARM": str(sock)}, sock, log)
    _end_descendants(process.pid)
    process.terminate()
    process.wait()


@pytest.fixture
def server(shared_server):
    """The shared server, its log read from this test's start on; a fork the test left running is ended after it."""
    shared_server.start = shared_server.log.stat().st_size
    yield shared_server
    _end_descendants(shared_server.process.pid)  # a fork a failed test left running would slow every later test


RESIDENT = pytest.mark.parametrize("shared_server", ["resident"], indirect=True)


def models_and_prompts(tmp_path):
    tiny_cell_inputs(tmp_path, list(range(40)))


def cell_argv(tmp_path, out, decodes="sd", new_tokens=8, repeats=1):
    args = tiny_cell_args(tmp_path, out, decodes=decodes, new_tokens=new_tokens, repeats=repeats)
    return [sys.executable, "-m", "budgetdraft", "eval-cell", *args]


def cell(tmp_path, env, out, decodes="sd"):
    return subprocess.run(cell_argv(tmp_path, out, decodes), env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def cold_cell(tmp_path_factory):
    """The cell that the warm and resident cells must equal, run once in its own process (no warm process) on models
    and prompts that ``models_and_prompts`` writes alike in every folder: its rows and its stderr."""
    folder = tmp_path_factory.mktemp("cold")
    models_and_prompts(folder)
    env = {k: v for k, v in os.environ.items() if k != "BUDGETDRAFT_WARM"}
    cold = cell(folder, {**env, "PYTHONPATH": SRC}, folder / "cold.parquet")
    assert cold.returncode == 0, cold.stderr
    return pd.read_parquet(folder / "cold.parquet"), cold.stderr


def test_warm_cell_equals_cold_cell_and_errors_come_through(tmp_path, server, cold_cell):
    warm = server.env
    models_and_prompts(tmp_path)
    b, cold_stderr = cold_cell
    hot = cell(tmp_path, warm, tmp_path / "hot.parquet")
    assert hot.returncode == 0, hot.stderr
    assert "sample 0 repeat 0" in hot.stderr  # the child wrote to the client's stderr
    a = pd.read_parquet(tmp_path / "hot.parquet")
    assert list(a.output_ids[0]) == list(b.output_ids[0]) and a.drafted[0] == b.drafted[0]
    # the hot cell decoded with the models the server preloaded before forking it (not with its own reads)
    log = server.log_text()
    assert f"preloaded {tmp_path / 'v'}" in log and f"preloaded {tmp_path / 'd'}" in log, log
    # and it warmed up once with them, before the fork: the cell decoded its prompts at once; the cold one warmed
    assert "warmed up sd with" in log and "warm-up: run once by the warm process" in hot.stderr, log
    assert "warm-up: run once" not in cold_stderr
    # its drafter's full prefills too: the hot cell cut them to its budget and was charged their recorded seconds
    assert "full prefills shared by the warm process" in hot.stderr and "shared" not in cold_stderr
    assert list(a.accepted) == list(b.accepted) and list(a.drafted) == list(b.drafted)
    assert (a.drafter_prefill_s > 0).all()
    again = cell(tmp_path, warm, tmp_path / "again.parquet")
    assert again.returncode == 0 and server.log_text().count("warmed up sd with") == 1
    assert "warm-up: run once by the warm process" in again.stderr
    bad = cell(tmp_path, warm, tmp_path / "bad.parquet", decodes="nope")
    assert bad.returncode == 1 and "--decodes 'nope' is not one of" in bad.stderr
    assert not (tmp_path / "bad.parquet").exists()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # an exited child nobody has reaped yet is not running


def _descendants(pid: int) -> list[int]:
    """The running processes below ``pid`` (children, their children, ...)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (FileNotFoundError, ProcessLookupError):  # exited meanwhile
            continue
        if state != "Z":
            children.setdefault(int(ppid), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _end_descendants(pid: int) -> None:
    """SIGKILL the running processes below ``pid``."""
    for below in _descendants(pid):
        with contextlib.suppress(ProcessLookupError):  # it may exit between the listing and the kill
            os.kill(below, signal.SIGKILL)


def test_a_killed_client_takes_its_command_with_it(tmp_path, server):
    """A job killed while its cell runs (Snakemake stopped, Ctrl-C, a job timeout) must not leave the cell
    computing on and writing its file later, beside other cells being timed."""
    process, env = server.process, server.env
    models_and_prompts(tmp_path)
    out, log = tmp_path / "killed.parquet", tmp_path / "killed.log"
    with open(log, "w") as stderr:  # a log file as under Snakemake (a closed pipe would end the command itself)
        client = subprocess.Popen(cell_argv(tmp_path, out, new_tokens=200, repeats=1000), env=env, stderr=stderr)
    wait_until(lambda: "repeat 0" in log.read_text() or client.poll() is not None)  # minutes of work if it went on
    assert "repeat 0" in log.read_text() and _descendants(process.pid), "no command running in the warm process"
    client.kill()
    client.wait()
    assert wait_until(lambda: not _descendants(process.pid)), "the killed client's command went on"
    assert not out.exists() and not list(tmp_path.glob(".killed.parquet.*"))


def test_the_server_outlives_idle_time_but_not_the_process_that_started_it(tmp_path):
    """The training stages keep every cell waiting for minutes: the server must not time out meanwhile (it once
    did, and every later cell paid its imports), and it must not outlive Snakemake. (It polls every POLL_KNOB s,
    as its log says: the wait below spans more than two polls.)"""
    sock, log = tmp_path / "warm.sock", tmp_path / "warm.log"
    starter = (
        "import subprocess, sys; p = subprocess.Popen([sys.executable, '-m', 'budgetdraft', 'warm', "
        "'--socket', sys.argv[1]], stdout=open(sys.argv[2], 'w')); print(p.pid, flush=True); sys.stdin.readline()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", starter, str(sock), str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, **POLL_KNOB},
    )
    server = int(parent.stdout.readline())
    wait_until(lambda: sock.exists() or not _running(server))
    assert sock.exists(), "warm process did not start"
    poll = float(POLL_KNOB["BUDGETDRAFT_WARM_POLL_S"])
    wait_until(lambda: "budgetdraft warm: serving on" in log.read_text())  # printed just after the socket is bound
    assert f"polls every {poll:g} s" in log.read_text(), log.read_text()
    time.sleep(2 * poll + 1)  # idle for more than one poll
    assert _running(server)
    parent.stdin.close()
    parent.wait()
    assert wait_until(lambda: not _running(server)), "the server outlived the process that started it"


def test_a_preloaded_model_is_handed_out_once_and_never_after_its_files_change(tmp_path, monkeypatch):
    import torch
    from conftest import tiny_llama

    from budgetdraft.decoding.loading import ModelStore
    from budgetdraft.pipeline.commands.cmd_eval_cell import preload

    models_and_prompts(tmp_path)
    store = ModelStore()  # a forking server's
    argv = tiny_cell_args(tmp_path, tmp_path / "out.parquet")
    v, d = tmp_path / "v", tmp_path / "d"
    prompts = tmp_path / "p.parquet"
    assert preload(argv, store) == [
        f"preloaded {v}",
        f"preloaded {d}",
        f"warmed up sd with {v} + {d}",
        f"prefilled {len(pd.read_parquet(prompts))} prompts of {prompts} with {d}",
    ]
    assert preload(argv, store) == []  # already there, already warmed up with
    verifier, drafter = store.models.values()
    assert store.load(str(tmp_path / "v")) is verifier
    assert store.load(str(tmp_path / "v")) is not verifier  # once: a second load is the command's own
    tiny_llama(seed=2, layers=1).save_pretrained(tmp_path / "d")  # the drafter retrained after the preload
    fresh = store.load(str(tmp_path / "d"))
    assert fresh is not drafter and store.models  # the stale copy is neither handed out nor taken
    weight = "model.layers.0.mlp.down_proj.weight"
    assert torch.equal(fresh.state_dict()[weight], tiny_llama(seed=2, layers=1).state_dict()[weight])
    assert not torch.equal(fresh.state_dict()[weight], drafter.state_dict()[weight])


@RESIDENT
def test_resident_cells_equal_cold_cells_and_read_each_model_once(tmp_path, server, cold_cell):
    process, warm = server.process, server.env
    models_and_prompts(tmp_path)
    first, second = cell(tmp_path, warm, tmp_path / "a.parquet"), cell(tmp_path, warm, tmp_path / "b.parquet")
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    rows = [pd.read_parquet(tmp_path / f"{name}.parquet") for name in ("a", "b")] + [cold_cell[0]]
    assert all(
        list(r.output_ids[0]) == list(rows[2].output_ids[0]) and r.drafted[0] == rows[2].drafted[0] for r in rows
    )
    for model in ("v", "d"):  # loaded by the first cell, handed to the second without a read
        assert f"loaded {tmp_path / model} (cpu, float32); it stays resident" in first.stderr, first.stderr
        assert f"{tmp_path / model} (cpu, float32) is resident: not loaded again" in second.stderr, second.stderr
    assert not _descendants(process.pid)  # nothing forked
    bad = cell(tmp_path, warm, tmp_path / "bad.parquet", decodes="nope")
    assert bad.returncode == 1 and "--decodes 'nope' is not one of" in bad.stderr
    again = cell(tmp_path, warm, tmp_path / "c.parquet")  # an error leaves the server serving, its models kept
    assert again.returncode == 0 and "is resident: not loaded again" in again.stderr, again.stderr


@RESIDENT
def test_a_resident_server_leaves_other_commands_to_their_own_process(tmp_path, server, monkeypatch):
    from budgetdraft.pipeline import warm

    env = server.env
    for partial in (b"", struct.pack("!I", 100) + b'{"argv"'):  # clients killed before or while sending
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(env[warm.ENV])
            client.sendall(partial)
    monkeypatch.setenv(warm.ENV, env[warm.ENV])
    assert warm.delegate(["claims", "--help"]) is None  # not served: the command line runs it itself
    models_and_prompts(tmp_path)
    run = subprocess.run(cell_argv(tmp_path, tmp_path / "x.parquet"), env=env, capture_output=True, text=True)
    assert run.returncode == 0 and "it stays resident" in run.stderr, run.stderr


@RESIDENT
def test_a_killed_client_interrupts_its_resident_command(tmp_path, server):
    """The killed client's command stops (interrupted, its file never written) and the next command is served,
    also in a server that ignores SIGINT (the fixture starts it so): it once went on with all 1,000 repeats when
    the suite ran as a background job, whose shell ignores SIGINT, which made interrupt_main a no-op."""
    env = server.env
    models_and_prompts(tmp_path)
    out, log = tmp_path / "killed.parquet", tmp_path / "killed.log"
    with open(log, "w") as stderr:
        client = subprocess.Popen(cell_argv(tmp_path, out, new_tokens=200, repeats=1000), env=env, stderr=stderr)
    wait_until(lambda: "repeat 0" in log.read_text() or client.poll() is not None)
    assert "repeat 0" in log.read_text(), log.read_text()
    client.kill()
    client.wait()
    # served once the killed command has stopped (the patience only guards against a hang: the evidence that it
    # did not go on is below, whatever the machine's load)
    after = subprocess.run(
        cell_argv(tmp_path, tmp_path / "after.parquet"), env=env, capture_output=True, text=True, timeout=PATIENCE_S
    )
    assert after.returncode == 0, after.stderr
    assert "is resident: not loaded again" in after.stderr, after.stderr
    assert log.read_text().rstrip().endswith("KeyboardInterrupt"), log.read_text()[-2000:]  # interrupted
    assert "repeat 999" not in log.read_text()
    assert not out.exists() and not list(tmp_path.glob(".killed.parquet.*"))


def test_the_first_cell_of_a_cluster_job_starts_the_resident_server(tmp_path):
    """No onstart runs inside a cluster job: the first cell that finds no server starts a resident one, the next
    cell of the same job group uses it, and the server exits with the job's Snakemake (here: a sleeping process).
    The server takes the cell's environment: a knob set there (POLL_KNOB) and the default of one unset, and glibc's
    tunable that `python -m budgetdraft` adds to it (base.defaults.CPU_ALLOCATOR_ENV), read at the server's start."""
    from budgetdraft.pipeline import warm

    models_and_prompts(tmp_path)
    job = subprocess.Popen(["sleep", "600"])
    env = {**os.environ, "PYTHONPATH": SRC, warm.ENV: str(tmp_path / "job.sock"), warm.AUTOSTART: str(job.pid)}
    env = {k: v for k, v in {**env, **POLL_KNOB}.items() if k not in REQUEST_KNOB and k != "GLIBC_TUNABLES"}
    try:
        first, second = cell(tmp_path, env, tmp_path / "a.parquet"), cell(tmp_path, env, tmp_path / "b.parquet")
        assert first.returncode == second.returncode == 0, first.stderr + second.stderr
        assert "it stays resident" in first.stderr and "is resident: not loaded again" in second.stderr
        log = (tmp_path / "job.sock.log").read_text()
        assert "polls every 0.2 s, waits 10 s for a request)" in log, log  # the knob; REQUEST_TIMEOUT_S's default
        assert ", malloc glibc.malloc.hugetlb=1, " in log, log
        server = int(re.search(r"\(resident, pid (\d+)", log)[1])
        assert _running(server)
    finally:
        job.kill()
        job.wait()
    assert wait_until(lambda: not _running(server)), "the server outlived the job's Snakemake"


def test_the_warm_process_imports_what_the_commands_run():
    """Read from the import graph, not a list kept by hand: the modules an eval-cell of any method runs (metrics
    and draftvocab were missing from the hand-kept code lists) and those of the report commands."""
    from budgetdraft.base.importgraph import command_imports
    from budgetdraft.pipeline.warm import preload_modules

    preloaded = set(preload_modules())
    for command in ("eval-cell", "prefill", "train", "claims", "paper"):
        assert set(command_imports(command)) <= preloaded, command
    assert {
        "budgetdraft.decoding.metrics",
        "budgetdraft.decoding.draftvocab",
        "budgetdraft.decoding.baselines.triforce",
        "torch",
    } <= preloaded


def test_a_resident_model_a_command_left_hooked_is_dropped_but_not_for_transformers_own_hooks(tmp_path, monkeypatch):
    """A budgetdraft hook still registered after a command would act in the next cell: that model is read again.
    transformers installs its output-capturing hooks on the first output_hidden_states call (EAGLE-3's prefill)
    and keeps them, inert: a model with only those stays resident (it was dropped after every EAGLE-3 cell)."""
    import torch
    from conftest import tiny_llama

    from budgetdraft.decoding.kvcache import QueryCapture
    from budgetdraft.decoding.loading import ModelStore

    tiny_llama(seed=0, layers=2).save_pretrained(tmp_path / "v")
    store = ModelStore(keep=True)  # a resident server's
    model = store.load(str(tmp_path / "v"))
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert any(m._forward_hooks for m in model.modules())  # transformers' own, left in place
    assert store.release_changed() == [] and store.load(str(tmp_path / "v")) is model
    QueryCapture(model, window=2)  # never removed
    assert store.release_changed() == [str((tmp_path / "v").resolve())]
    assert store.load(str(tmp_path / "v")) is not model


def _inode(path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file at ``path`` (not followed), None when there is none."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def test_a_second_server_on_a_live_servers_path_refuses_to_start(tmp_path, server):
    """A second server started on the path of a live one took it (unlinked its socket, bound its own): the first
    went on unreachable, a resident one holding its models until its owner exited. Now it says so and leaves."""
    from budgetdraft.pipeline.rendezvous import peer_credentials

    process, sock = server.process, server.sock
    before = _inode(sock)
    command = [sys.executable, "-m", "budgetdraft", "warm", "--socket", str(sock)]
    second = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": SRC}, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: second.poll() is not None or _inode(sock) != before)
        assert second.poll() == 1 and _inode(sock) == before, "the second server took the path"
        line = f"budgetdraft warm: not serving on {sock}: a warm server (pid {process.pid}) already listens there"
        assert second.stderr.read().splitlines() == [line]
    finally:
        second.kill()
        second.wait()
        second.stderr.close()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:  # the first one still answers there
        client.connect(str(sock))
        assert peer_credentials(client)[0] == process.pid


def test_a_server_never_unlinks_a_socket_that_is_not_its_own(tmp_path):
    """Once another process has the path (here a listener of the test's, bound after the server's socket was
    removed), the server leaves it when it exits: it once unlinked whatever was at its path."""
    sock, log = tmp_path / "warm.sock", tmp_path / "warm.log"
    owner = subprocess.Popen(["sleep", "600"])
    command = [sys.executable, "-m", "budgetdraft", "warm", "--socket", str(sock), "--owner", str(owner.pid)]
    with open(log, "w") as out:
        first = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": SRC, **POLL_KNOB}, stdout=out, stderr=out)
    try:
        wait_for_server(sock, first, log)
        sock.unlink()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
            other.bind(str(sock))
            other.listen()
            taken = _inode(sock)
            owner.kill()
            owner.wait()  # reaped: a zombie still counts as running
            assert wait_until(lambda: first.poll() is not None), "the server outlived its owner"
            assert _inode(sock) == taken, f"the exiting server removed the other's socket: {log.read_text()}"
    finally:
        owner.kill()
        owner.wait()
        first.kill()
        first.wait()


def test_a_snakemake_killed_with_sigkill_leaves_nothing_in_the_temporary_directory(tmp_path):
    """The server exits when its owner is gone; after a kill -9 no onstart/atexit removes the rendezvous
    directory, which stayed in $TMPDIR (empty) for good. The server removes its socket and that directory."""
    # the owner's and the server's $TMPDIR, what the test inspects: short, as a socket path must be (108 bytes)
    tmp = Path(tempfile.mkdtemp(prefix="bd-", dir="/tmp"))
    starter = (
        "import os, subprocess, sys; from budgetdraft.pipeline.rendezvous import rendezvous; path = rendezvous('test'); "
        "argv = [sys.executable, '-m', 'budgetdraft', 'warm', '--socket', path, '--owner', str(os.getpid())]; "
        "log = open(sys.argv[1], 'w'); p = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True); "
        "print(path, p.pid, flush=True); sys.stdin.readline()"
    )
    env = {**os.environ, "PYTHONPATH": SRC, "TMPDIR": str(tmp), **POLL_KNOB}
    log = tmp_path / "warm.log"
    snakemake = subprocess.Popen(
        [sys.executable, "-c", starter, str(log)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    path, pid = snakemake.stdout.readline().split()
    server = int(pid)
    try:
        wait_until(lambda: os.path.exists(path) or not _running(server))
        assert os.path.exists(path), f"warm process did not start: {log.read_text()}"
        snakemake.kill()  # SIGKILL: no onsuccess / onerror, no atexit
        snakemake.wait()
        assert wait_until(lambda: not _running(server)), "the server outlived its owner"
        assert list(tmp.iterdir()) == [], log.read_text()
    finally:
        snakemake.kill()
        snakemake.wait()
        snakemake.stdin.close()
        snakemake.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_server_reads_its_intervals_from_its_environment_or_takes_the_defaults(tmp_path, server, monkeypatch):
    """The poll interval and the request deadline are 5 s and 10 s unless BUDGETDRAFT_WARM_POLL_S and
    BUDGETDRAFT_WARM_REQUEST_TIMEOUT_S say otherwise (the tests' servers are started so), and a setting that is no
    number of seconds > 0 stops the server in one line before it binds anything. The shared server was started with
    REQUEST_KNOB and no poll setting: its first line shows both."""
    from budgetdraft.pipeline import cli, warm

    for name in warm.KNOBS:
        monkeypatch.delenv(name, raising=False)
    assert warm.intervals() == (warm.POLL_S, warm.REQUEST_TIMEOUT_S) == (5.0, 10.0)
    monkeypatch.setenv("BUDGETDRAFT_WARM_POLL_S", "0.25")
    assert warm.intervals() == (0.25, 10.0)
    sock = tmp_path / "w.sock"
    for name, default in warm.KNOBS.items():
        for bad in ("", "soon", "0", "-1", "1e999", "nan"):
            monkeypatch.setenv(name, bad)
            with pytest.raises(SystemExit) as stopped:
                cli.run(["warm", "--socket", str(sock)])
            line = f"budgetdraft warm: error: {name}={bad!r} is not a number of seconds > 0 (unset, it is {default:g})"
            assert stopped.value.code == line
            assert not sock.exists()
        monkeypatch.setenv(name, "1")
    serving = [line for line in server.log.read_text().splitlines() if line.startswith("budgetdraft warm: serving")]
    assert serving[0].startswith(f"budgetdraft warm: serving on {server.sock} (forking"), serving
    assert serving[0].endswith(", polls every 5 s, waits 2 s for a request)"), serving


@pytest.mark.parametrize("shared_server", ["forking", "resident"], indirect=True)
def test_a_silent_client_or_a_request_that_is_not_json_neither_stalls_nor_ends_the_server(tmp_path, server):
    """The server read a request with no timeout, so one client that connected and sent nothing stalled every later
    job; a framed request that was not JSON raised in its loop and ended it (issue 38). The server waits REQUEST_KNOB
    seconds for a request (the default, 10 s, is test_a_server_reads_its_intervals...'s)."""
    from budgetdraft.pipeline import warm

    process, env = server.process, server.env
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(env[warm.ENV])
    garbage = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    garbage.connect(env[warm.ENV])
    body = b"\xffnot json"
    socket.send_fds(garbage, [struct.pack("!I", len(body)) + body], [0, 1, 2])
    try:
        later = subprocess.run(  # a later job: answered once the silent client has had its time (2 s)
            [sys.executable, "-m", "budgetdraft", "claims", "--help"],
            env=env,
            capture_output=True,
            text=True,
            timeout=PATIENCE_S,
        )
        assert later.returncode == 0 and "--settings" in later.stdout, later.stderr
        assert garbage.recv(4) == b""  # dropped, unanswered
        assert process.poll() is None, "the server ended"
    finally:
        silent.close()
        garbage.close()
    log = server.log_text()
    deadline = REQUEST_KNOB["BUDGETDRAFT_WARM_REQUEST_TIMEOUT_S"]
    assert f"dropped a client that sent no request in {deadline} s" in log, log
    assert "dropped a request that is not JSON" in log, log


def test_a_client_dripping_its_request_is_dropped_at_the_requests_deadline():
    """The timeout held each recv, not the request: a client sending one byte every 8 s of a 10 s limit held the
    server for ever. Now the whole request has one deadline (here 0.6 s; a byte every 0.2 s)."""
    import threading
    import time

    from budgetdraft.pipeline import warm

    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    body = json.dumps({"argv": ["claims", "--help"], "cwd": "/", "env": {}}).encode()

    def drip():
        socket.send_fds(client, [struct.pack("!I", len(body)) + body[:1]], [0, 1, 2])
        for byte in body[1:]:
            time.sleep(0.2)
            try:
                client.send(bytes([byte]))
            except OSError:
                return

    sender = threading.Thread(target=drip, daemon=True)
    start = time.monotonic()
    sender.start()
    assert warm._recv_request(server, 0.6) is None
    assert time.monotonic() - start < 2.0
    server.close()
    client.close()


def test_the_warm_process_warms_up_once_only_what_every_fork_inherits(tmp_path):
    """A forking server runs a cell's warm-up itself only for AR or the paper's drafter, eager, one thread on the CPU,
    with local model directories; anything else warms itself up in its own process."""
    import argparse

    from budgetdraft.evaluation.cells import warm_key
    from budgetdraft.pipeline.commands.cmd_eval_cell import cell_spec, configure_parser

    models_and_prompts(tmp_path)
    parser = argparse.ArgumentParser()
    configure_parser(parser)

    def key(*extra, decodes="sd"):
        args = parser.parse_args(tiny_cell_args(tmp_path, tmp_path / "o.parquet", decodes=decodes) + list(extra))
        return warm_key(cell_spec(args))

    assert key()[0] == "sd" and key(decodes="ar")[0] == "ar"
    assert key("--threads", "2") is None  # a pool of threads is not inherited across a fork
    assert key("--engine", "graphs") is None and key(decodes="triforce") is None
    assert key("--drafter", "JackFram/llama-68m") is None  # a hub id: nothing held, nothing warmed
    before = key()
    tiny_llama_again = __import__("conftest").tiny_llama(seed=3, layers=1)
    tiny_llama_again.save_pretrained(tmp_path / "d")  # another drafter in the same directory: another key
    assert key() != before


def test_the_warm_process_holds_drafter_prefills_up_to_its_byte_limit(monkeypatch):
    """Full prefills are held per drafter, the least recently used dropped first once they exceed the limit; the
    drafter just added is never dropped."""
    from types import SimpleNamespace

    from budgetdraft.decoding import loading

    monkeypatch.setattr(loading, "SHARED_PREFILL_BYTES", 250)
    store = loading.ModelStore()
    prefill = SimpleNamespace(nbytes=100)
    store.keep_prefills(("a",), {"p": prefill})
    store.keep_prefills(("b",), {"p": prefill})
    assert store.keep_prefills(("a",), {"q": prefill}) == {"p": prefill, "q": prefill}  # a: used last
    assert list(store.prefills) == [("a",)]  # 300 bytes > 250: b, the least recently used, went
    store.keep_prefills(("c",), {"p": prefill, "q": prefill, "r": prefill})
    assert list(store.prefills) == [("c",)]  # over the limit alone, and kept
