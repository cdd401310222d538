"""A local Hugging Face Hub for the tests: an HTTP server on 127.0.0.1 that speaks the part of the hub's API the real
clients use (huggingface_hub's `HfApi`, `hf_hub_download`, `snapshot_download` and `HfFileSystem`, transformers'
`from_pretrained`, datasets' `load_dataset(..., streaming=True)`), over git repositories, so every repository has
real commit ids: `pin` pins them, and a revision that is no commit of the repository is refused as the hub refuses
it. `HF_ENDPOINT` points the clients at it (`LocalHub.env`); nothing of the code under test is swapped.

Served (GET, HEAD; POST for paths-info), for repo types model and dataset:

- ``/api/{models|datasets}/OWNER/NAME[/revision/REV]``: the repository's info (``sha``, ``siblings``);
- ``/api/.../tree/REV[/PATH]`` (``recursive``, ``expand``), ``/api/.../paths-info/REV``, ``/api/.../refs``;
- ``[/datasets]/OWNER/NAME/resolve/REV/PATH``: a file, with the headers the clients read (``X-Repo-Commit``,
  ``ETag``, ``Content-Length``) and byte ranges (``Range``: what datasets' streaming reads of parquet use);
- errors as the hub words them: an unknown repository 401 ``RepoNotFound``, an unknown revision 404
  ``RevisionNotFound``, an unknown file 404 ``EntryNotFound``.

Why a fixture of our own: the package index's local hubs were tried (issue 47). `hf-local-hub` 3.0.0 ships only a
client (its server is a Go binary, not in the wheel); `olah` 0.5.4 serves local git mirrors for the revision-pinned
endpoints, but answers ``GET /api/models/OWNER/NAME`` (what `pin` and every unpinned read ask first) with 401
offline, its newest-commit lookup going upstream, and ignores byte ranges on mirrored files.

Every request must carry the token of `env` (``HF_TOKEN``, sent by the clients as a bearer token): the port is on
loopback, and another user of the machine who finds it gets 403, never a file.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import re
import secrets
import subprocess
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = re.compile(r"^[0-9a-f]{40}$")
BRANCH = re.compile(r"^[A-Za-z0-9._-]+$")
KINDS = {"models": "model", "datasets": "dataset"}


def git(cwd, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=cwd, input=data, capture_output=True, check=True,
        env={"GIT_AUTHOR_NAME": "hub", "GIT_AUTHOR_EMAIL": "hub@localhost", "GIT_COMMITTER_NAME": "hub",
             "GIT_COMMITTER_EMAIL": "hub@localhost", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd), "PATH": "/usr/bin:/bin",
             # objects stored, not deflated: the weights are random (zlib gains nothing), and deflating ~200 MB of
             # them took ~4 s of the hub fixture's ~10 (alone)
             "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.compression", "GIT_CONFIG_VALUE_0": "0"},
    ).stdout  # fmt: skip


class LocalHub:
    """Git repositories under ``root`` (``root/models/OWNER/NAME``, ``root/datasets/OWNER/NAME``), served once
    `start`ed. ``requests`` lists (method, path) of every request served; ``unknown`` those no route answered."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.token = "hf_" + secrets.token_hex(16)
        self.requests: list[tuple[str, str]] = []
        self.unknown: list[tuple[str, str]] = []
        self._blobs: dict[tuple, bytes] = {}
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------------------------------ repositories

    def repo_dir(self, kind: str, repo_id: str) -> Path:
        return self.root / f"{kind}s" / repo_id

    def add(self, repo_id: str, files: dict[str, bytes | str | Path], kind: str = "model", message: str = "") -> str:
        """Commit ``files`` ({path in the repository: bytes, text or a file to copy}) to the repository's main
        branch (created on first use); returns the new commit's id."""
        where = self.repo_dir(kind, repo_id)
        if not (where / ".git").is_dir():
            where.mkdir(parents=True, exist_ok=True)
            git(where, "init", "-q", "-b", "main")
        for name, content in files.items():
            target = where / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                target.write_bytes(content.read_bytes())
            else:
                target.write_bytes(content.encode() if isinstance(content, str) else content)
        git(where, "add", "-A")
        git(where, "commit", "-q", "--allow-empty", "-m", message or f"upload {len(files)} file(s)")
        return git(where, "rev-parse", "HEAD").decode().strip()

    def commit(self, kind: str, repo_id: str, revision: str) -> str | None:
        """The commit id ``revision`` (a branch name or a full commit id) names in the repository, or None."""
        where = self.repo_dir(kind, repo_id)
        if not (COMMIT.match(revision) or BRANCH.match(revision)):
            return None
        try:
            return git(where, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").decode().strip()
        except subprocess.CalledProcessError:
            return None

    def entries(self, kind: str, repo_id: str, commit: str, path: str = "", recursive: bool = True) -> list[dict]:
        """Tree entries at ``commit`` under ``path``: {type, path, oid, size} as the hub lists them."""
        args = ["ls-tree", "-l", "-z", commit]
        if recursive:
            args[1:1] = ["-r", "-t"]
        if path:
            args += ["--", path.rstrip("/") + "/"]
        out = git(self.repo_dir(kind, repo_id), *args).decode()
        entries = []
        for record in filter(None, out.split("\0")):
            meta, name = record.split("\t", 1)
            _, kind_, oid, size = meta.split()
            entries.append(
                {"type": "directory" if kind_ == "tree" else "file", "oid": oid, "path": name,
                 "size": 0 if kind_ == "tree" else int(size)}
            )  # fmt: skip
        return entries

    def blob(self, kind: str, repo_id: str, commit: str, path: str) -> bytes | None:
        key = (kind, repo_id, commit, path)
        if key not in self._blobs:
            try:
                self._blobs[key] = git(self.repo_dir(kind, repo_id), "cat-file", "blob", f"{commit}:{path}")
            except subprocess.CalledProcessError:
                return None
        return self._blobs[key]

    def commit_date(self, kind: str, repo_id: str, commit: str) -> str:
        seconds = int(git(self.repo_dir(kind, repo_id), "show", "-s", "--format=%ct", commit).decode())
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    # ------------------------------------------------------------------------------------------ serving

    def start(self) -> str:
        hub = self

        class Handler(HubHandler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.endpoint

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def env(self, home: Path) -> dict[str, str]:
        """What points the hub clients at this hub, with caches of their own under ``home`` (none of the user's)."""
        return {
            "HF_ENDPOINT": self.endpoint,
            "HF_TOKEN": self.token,
            "HF_HOME": str(home),
            "HF_HUB_CACHE": str(Path(home) / "hub"),
            "HF_DATASETS_CACHE": str(Path(home) / "datasets"),
            "HF_HUB_OFFLINE": "0",
            "HF_DATASETS_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_XET": "1",
        }


class HubHandler(BaseHTTPRequestHandler):
    hub: LocalHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: `hub.requests` records what was asked
        pass

    # ------------------------------------------------------------------------------------------ plumbing

    def send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def json(self, data, status: int = 200, headers: dict | None = None) -> None:
        self.send(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})

    def error(self, status: int, code: str, message: str) -> None:
        self.json({"error": message}, status, {"X-Error-Code": code, "X-Error-Message": message})

    def authorised(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.hub.token}":
            return True
        self.error(403, "Forbidden", "this local hub serves only its own test session")
        return False

    def do_GET(self) -> None:
        self.route()

    def do_HEAD(self) -> None:
        self.route()

    def do_POST(self) -> None:
        self.route()

    # ------------------------------------------------------------------------------------------ routes

    def route(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.hub.requests.append((self.command, self.path))
        if not self.authorised():
            return
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        query = urllib.parse.parse_qs(url.query)
        if parts[:1] == ["api"] and len(parts) >= 4 and parts[1] in KINDS:
            return self.api(KINDS[parts[1]], "/".join(parts[2:4]), parts[4:], query)
        kind = "dataset" if parts[:1] == ["datasets"] else "model"
        rest = parts[1:] if kind == "dataset" else parts
        if len(rest) >= 5 and rest[2] == "resolve":
            return self.resolve(kind, "/".join(rest[:2]), rest[3], "/".join(rest[4:]))
        self.hub.unknown.append((self.command, self.path))
        self.error(404, "NotFound", f"no route {self.command} {url.path}")

    def known(self, kind: str, repo_id: str) -> bool:
        if (self.hub.repo_dir(kind, repo_id) / ".git").is_dir():
            return True
        self.error(401, "RepoNotFound", "Repository not found")
        return False

    def revision(self, kind: str, repo_id: str, revision: str) -> str | None:
        commit = self.hub.commit(kind, repo_id, revision)
        if commit is None:
            self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def api(self, kind: str, repo_id: str, rest: list[str], query: dict) -> None:
        if not self.known(kind, repo_id):
            return
        action = rest[0] if rest else "revision"
        revision = rest[1] if len(rest) > 1 else "main"
        if action == "refs":
            head = self.hub.commit(kind, repo_id, "main")
            return self.json({"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": head}],
                              "tags": [], "converts": []})  # fmt: skip
        commit = self.revision(kind, repo_id, revision)
        if commit is None:
            return
        if action == "revision":
            return self.info(kind, repo_id, commit)
        if action == "tree":
            path = "/".join(rest[2:])
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            entries = self.hub.entries(kind, repo_id, commit, path, recursive)
            if path and not entries:
                return self.error(404, "EntryNotFound", f"{path} does not exist at {revision}")
            return self.json([self.expanded(kind, repo_id, commit, e, "expand" in query) for e in entries])
        if action == "paths-info":
            form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
            wanted = set(form.get("paths", []))
            everything = self.hub.entries(kind, repo_id, commit)
            found = [e for e in everything if e["path"] in wanted]
            return self.json([self.expanded(kind, repo_id, commit, e, "expand" in form) for e in found])
        self.hub.unknown.append((self.command, self.path))
        self.error(404, "NotFound", f"no API action {action}")

    def expanded(self, kind: str, repo_id: str, commit: str, entry: dict, expand: bool) -> dict:
        if not expand:
            return entry
        date = self.hub.commit_date(kind, repo_id, commit)
        return {**entry, "lastCommit": {"id": commit, "title": "upload", "date": date}}

    def info(self, kind: str, repo_id: str, commit: str) -> None:
        date = self.hub.commit_date(kind, repo_id, commit)
        files = [e for e in self.hub.entries(kind, repo_id, commit) if e["type"] == "file"]
        siblings = [{"rfilename": e["path"], "size": e["size"], "blobId": e["oid"]} for e in files]
        info = {
            "_id": repo_id, "id": repo_id, "author": repo_id.split("/")[0], "sha": commit, "lastModified": date,
            "createdAt": date, "private": False, "gated": False, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "siblings": siblings, "usedStorage": sum(e["size"] for e in files),
        }  # fmt: skip
        if kind == "model":
            info.update(modelId=repo_id, library_name="transformers")
        else:
            info.update(cardData={}, description="")
        self.json(info)

    def resolve(self, kind: str, repo_id: str, revision: str, path: str) -> None:
        if not self.known(kind, repo_id):
            return
        commit = self.revision(kind, repo_id, revision)
        if commit is None:
            return
        data = self.hub.blob(kind, repo_id, commit, path)
        if data is None:
            return self.error(404, "EntryNotFound", f"{path} does not exist at {revision}")
        oid = next(e["oid"] for e in self.hub.entries(kind, repo_id, commit) if e["path"] == path)
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{oid}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Last-Modified": email.utils.formatdate(usegmt=True),
        }
        wanted = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if wanted and self.command == "GET":
            start = int(wanted.group(1)) if wanted.group(1) else max(0, len(data) - int(wanted.group(2)))
            end = int(wanted.group(2)) if wanted.group(1) and wanted.group(2) else len(data) - 1
            end = min(end, len(data) - 1)
            if start > end:
                return self.send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return self.send(206, data[start : end + 1], headers)
        self.send(200, data, headers)
