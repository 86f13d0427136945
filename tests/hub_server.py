"""A Hugging Face Hub API server on 127.0.0.1, written for the tests.

The real Hub cannot be reached from CI, and no open-source Hub server accepts uploads (see
../shared/notes/hub-facts.md). This one answers the calls that huggingface_hub 2.4 (with
``HF_HUB_DISABLE_XET=1``: classic LFS) and datasets 3.6 / 5.x make to push and to stream a
dataset repo:

- ``POST /api/repos/create``; ``GET /api/{type}s/{ns}/{name}[/revision/{rev}]``; ``/api/whoami-v2``;
  ``POST /api/validate-yaml``
- ``POST .../preupload/{rev}``; ``POST /{prefix}{ns}/{name}.git/info/lfs/objects/batch``;
  ``PUT`` and ``POST`` (verify) on the upload links it hands out; ``POST .../commit/{rev}`` (NDJSON)
- ``GET .../tree/{rev}[/{path}]`` (paginated with a ``Link`` header); ``POST .../paths-info/{rev}``;
  ``GET .../refs``; ``POST``/``DELETE .../branch/{name}``
- ``GET``/``HEAD /{prefix}{ns}/{name}/resolve/{rev}/{path}`` with HTTP Range (206) and the headers
  the client reads (``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag``, ``X-Linked-Size``).

State lives on disk under ``root`` (content-addressed objects plus one JSON file per repo), so a
server can be stopped and started again on the same state. Tokens: ``WRITE_TOKEN`` may write
to namespaces of user ``USER``; ``READ_TOKEN`` may only read. Faults can be injected to test
interrupted uploads. Every request is logged (method, path, Range) for counting.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from tests.http_server import QuietServer, RequestLog, send_file

USER = "tester"
WRITE_TOKEN = "hf_test_write_0123456789"
READ_TOKEN = "hf_test_read_0123456789"
TOKENS = {WRITE_TOKEN: "write", READ_TOKEN: "read"}
TREE_PAGE = 50  # small, so listings of test repos span pages as big repos do on the Hub
# The Hub's limits for one repository (https://huggingface.co/docs/hub/repositories-recommendations),
# enforced on every commit as the Hub does, so a layout over them fails here as it would there.
MAX_FOLDER_ENTRIES = 10_000  # files and subfolders in one folder: fewer than this
MAX_REPO_FILES = 100_000  # fewer than this
MAX_COMMIT_FILES = 100  # files added or deleted by one commit (the Hub's advice for HTTP commits)


@dataclass
class Faults:
    """Failures to inject. ``None`` means never."""

    lfs_uploads_before_failure: int | None = None  # this many LFS PUTs succeed, then every PUT fails
    commits_before_failure: int | None = None  # this many commits succeed, then every commit fails
    status: int = 507  # not one huggingface_hub retries (it retries 429 and 5xx up to 504)
    lfs_upload_delay: float = 0.0  # seconds each LFS PUT takes: a slow link, to interrupt a push mid-upload
    #: While set to an Event that is not set, every LFS PUT waits for it: uploads that never end
    #: (a dead link), so that a client that stops at all was interrupted.
    lfs_upload_gate: threading.Event | None = None
    latency: float = 0.0  # seconds before every answer: a network round trip, for benchmarks
    #: Every this many commits, the Hub's rate limit: the next commit request is answered 429 (with
    #: Retry-After: 1), as the Hub answers a client that commits too often.
    commits_between_rate_limits: int | None = None


@dataclass
class Counters:
    lfs_uploads: int = 0
    commits: int = 0
    rate_limited: int = 0  # commit requests answered 429
    limited: bool = False  # the last commit request was answered 429 (the next is let through)


def _write_replacing(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _check_limits(files: dict[str, Any], operations: int) -> None:
    """Refuse a commit that leaves the repo over the Hub's limits, or changes too many files."""
    if operations > MAX_COMMIT_FILES:
        raise HttpError(400, f"Too many files in one commit: {operations} (at most {MAX_COMMIT_FILES})")
    if len(files) >= MAX_REPO_FILES:
        raise HttpError(400, f"Too many files in the repository: {len(files)} (fewer than {MAX_REPO_FILES})")
    entries: dict[str, set[str]] = {}
    for path in files:
        parts = path.split("/")
        for depth in range(len(parts)):
            entries.setdefault("/".join(parts[:depth]), set()).add(parts[depth])
    for folder, names in entries.items():
        if len(names) >= MAX_FOLDER_ENTRIES:
            raise HttpError(
                400, f"Too many entries in folder {folder or '/'}: {len(names)} (fewer than {MAX_FOLDER_ENTRIES})"
            )


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


class HttpError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.retry_after = retry_after


class HubState:
    """Repos, revisions and objects, persisted under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects = root / "objects"
        self.incoming = root / "incoming"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.incoming.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self._repos: dict[Path, dict[str, Any]] = {}

    # -- repos ---------------------------------------------------------------------------------
    def _repo_path(self, repo_type: str, repo_id: str) -> Path:
        return self.root / "repos" / f"{repo_type}s" / f"{repo_id}.json"

    def load(self, repo_type: str, repo_id: str) -> dict[str, Any] | None:
        """The repo (kept in memory once read: a request reads it, and a repo of 10,000 shards
        pushed in 200 commits is too large to read from disk for each)."""
        path = self._repo_path(repo_type, repo_id)
        with self.lock:
            repo = self._repos.get(path)
            if repo is not None or not path.exists():
                return repo
            repo = json.loads(path.read_text())
            for sha, commit in repo["commits"].items():
                commit["files"] = json.loads((path.with_suffix(".commits") / f"{sha}.json").read_text())
            self._repos[path] = repo
            return repo  # type: ignore[no-any-return]

    def save(self, repo_type: str, repo_id: str, repo: dict[str, Any]) -> None:
        """Persist the repo: its refs and commits, each commit's files in a file of its own,
        written once (a commit never changes)."""
        path = self._repo_path(repo_type, repo_id)
        commits = path.with_suffix(".commits")
        commits.mkdir(parents=True, exist_ok=True)
        for sha, commit in repo["commits"].items():
            files = commits / f"{sha}.json"
            if not files.exists():
                _write_replacing(files, json.dumps(commit["files"]))
        meta = {k: v for k, v in repo.items() if k != "commits"}
        meta["commits"] = {sha: {k: v for k, v in c.items() if k != "files"} for sha, c in repo["commits"].items()}
        _write_replacing(path, json.dumps(meta))
        self._repos[path] = repo

    def types_holding(self, repo_id: str) -> list[str]:
        return [t for t in ("model", "dataset", "space") if self._repo_path(t, repo_id).exists()]

    def create_repo(self, repo_type: str, repo_id: str, private: bool) -> dict[str, Any]:
        with self.lock:
            taken = self.types_holding(repo_id)
            if taken:
                raise HttpError(409, f"You already created this {taken[0]} repo: {repo_id}", None)
            root = self._new_commit({}, None, "initial commit")
            repo = {"private": private, "refs": {"main": root["id"]}, "commits": {root["id"]: root}}
            self.save(repo_type, repo_id, repo)
            return repo

    @staticmethod
    def _new_commit(files: dict[str, Any], parent: str | None, summary: str) -> dict[str, Any]:
        body = json.dumps({"files": files, "parent": parent, "summary": summary, "t": time.time_ns()}, sort_keys=True)
        return {"id": hashlib.sha1(body.encode()).hexdigest(), "parent": parent, "summary": summary, "files": files}

    @staticmethod
    def resolve_revision(repo: dict[str, Any], revision: str) -> str:
        refs: dict[str, str] = repo["refs"]
        if revision in refs:
            return refs[revision]
        if revision.startswith("refs/heads/") and revision[11:] in refs:
            return refs[revision[11:]]
        if revision in repo["commits"]:
            return revision
        raise HttpError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    # -- objects -------------------------------------------------------------------------------
    def object_path(self, sha256: str) -> Path:
        return self.objects / sha256

    def has_object(self, sha256: str, size: int) -> bool:
        path = self.object_path(sha256)
        return path.is_file() and path.stat().st_size == size

    def store_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        path = self.object_path(sha)
        if not path.exists():
            tmp = self.incoming / f"{sha}.{threading.get_ident()}"
            tmp.write_bytes(data)
            tmp.replace(path)
        return sha

    # -- commits -------------------------------------------------------------------------------
    def commit(self, repo_type: str, repo_id: str, branch: str, lines: list[dict[str, Any]]) -> str:
        with self.lock:
            repo = self.load(repo_type, repo_id)
            if repo is None:
                raise HttpError(404, "Repository not found", "RepoNotFound")
            if branch not in repo["refs"]:
                raise HttpError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            head = repo["refs"][branch]
            header = lines[0]["value"] if lines and lines[0].get("key") == "header" else {}
            parent = header.get("parentCommit")
            if parent and parent != head:
                raise HttpError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(repo["commits"][head]["files"])
            for item in lines[1:]:
                key, value = item["key"], item["value"]
                path = value["path"]
                if key == "file":
                    data = base64.b64decode(value["content"])
                    files[path] = {
                        "size": len(data),
                        "sha256": self.store_bytes(data),
                        "lfs": False,
                        "oid": git_blob_oid(data),
                    }
                elif key == "lfsFile":
                    if not self.has_object(value["oid"], value["size"]):
                        raise HttpError(
                            422,
                            f"Your push was rejected because an LFS pointer ({path}) pointed to a file that"
                            " does not exist",
                        )
                    files[path] = {
                        "size": value["size"],
                        "sha256": value["oid"],
                        "lfs": True,
                        "oid": git_blob_oid(lfs_pointer(value["oid"], value["size"])),
                    }
                elif key == "deletedFile":
                    if files.pop(path, None) is None:
                        raise HttpError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                elif key == "deletedFolder":
                    prefix = path.rstrip("/") + "/"
                    for name in [n for n in files if n.startswith(prefix)]:
                        del files[name]
                else:
                    raise HttpError(400, f"unknown commit line {key!r}")
            _check_limits(files, len(lines) - 1)
            commit = self._new_commit(files, head, header.get("summary", ""))
            repo["commits"][commit["id"]] = commit
            repo["refs"][branch] = commit["id"]
            self.save(repo_type, repo_id, repo)
            return str(commit["id"])


def _directories(files: dict[str, Any]) -> set[str]:
    dirs = set()
    for path in files:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


def _file_info(path: str, entry: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = {"type": "file", "path": path, "size": entry["size"], "oid": entry["oid"]}
    if entry["lfs"]:
        info["lfs"] = {
            "oid": entry["sha256"],
            "size": entry["size"],
            "pointerSize": len(lfs_pointer(entry["sha256"], entry["size"])),
        }
    return info


def _dir_info(path: str) -> dict[str, Any]:
    return {"type": "directory", "path": path, "size": 0, "oid": hashlib.sha1(path.encode()).hexdigest()}


_API_REPO = re.compile(r"^/api/(models|datasets|spaces)/([^/]+/[^/]+?)(?:/(.*))?$")
_RESOLVE = re.compile(r"^/(?:(datasets|spaces)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_LFS_BATCH = re.compile(r"^/(?:(datasets|spaces)/)?([^/]+/[^/]+)\.git/info/lfs/objects/batch$")


class HubServer:
    """Start with :func:`run_hub_server`; ``url`` is what ``HF_ENDPOINT`` should be."""

    def __init__(self, root: Path, user: str = USER) -> None:
        self.user = user  # the tokens' owner: the namespace they may write to
        self.state = HubState(root)
        self.log = RequestLog()
        self.faults = Faults()
        self.counters = Counters()
        self.counters_lock = threading.Lock()
        self.unknown: list[str] = []  # requests no route answered, to spot a client change
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- test helpers --------------------------------------------------------------------------
    def read_file(self, repo_id: str, path: str, revision: str = "main", repo_type: str = "dataset") -> bytes:
        repo = self.state.load(repo_type, repo_id)
        assert repo is not None, repo_id
        files = repo["commits"][HubState.resolve_revision(repo, revision)]["files"]
        return self.state.object_path(files[path]["sha256"]).read_bytes()

    def files(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> dict[str, dict[str, Any]]:
        repo = self.state.load(repo_type, repo_id)
        assert repo is not None, repo_id
        return dict(repo["commits"][HubState.resolve_revision(repo, revision)]["files"])

    def refs(self, repo_id: str, repo_type: str = "dataset") -> dict[str, str]:
        repo = self.state.load(repo_type, repo_id)
        assert repo is not None, repo_id
        return dict(repo["refs"])

    def start(self) -> None:
        self._server = QuietServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@contextmanager
def run_hub_server(root: Path, user: str = USER) -> Iterator[HubServer]:
    server = HubServer(root, user)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _make_handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    state = hub.state

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # else each response waits ~40 ms on delayed ACKs

        def log_message(self, format: str, *args: object) -> None:
            pass

        # -- plumbing --------------------------------------------------------------------------
        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        break
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _json_body(self, raw: bytes) -> Any:
            if "application/x-www-form-urlencoded" in self.headers.get("Content-Type", ""):
                return {k: v for k, v in parse_qs(raw.decode()).items()}
            return json.loads(raw or b"{}")

        def _send(self, status: int, payload: Any = None, headers: dict[str, str] | None = None) -> None:
            body = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, exc: HttpError) -> None:
            headers = {"X-Error-Message": exc.message}
            if exc.code:
                headers["X-Error-Code"] = exc.code
            if exc.retry_after is not None:
                headers["Retry-After"] = str(exc.retry_after)
            self._send(exc.status, {"error": exc.message}, headers)

        def _token_role(self) -> str | None:
            auth = self.headers.get("Authorization", "")
            if not auth:
                return None
            token = auth.removeprefix("Bearer ").strip()
            if token not in TOKENS:
                raise HttpError(401, "Invalid credentials in Authorization header")
            return TOKENS[token]

        def _require_write(self, namespace: str) -> None:
            role = self._token_role()
            if role is None:
                raise HttpError(401, "Invalid username or password.")
            if role != "write" or namespace != hub.user:
                raise HttpError(
                    403, f"You don't have the rights to write to {namespace}: use a token with write access"
                )

        def _repo(self, repo_type: str, repo_id: str, *, write: bool = False) -> dict[str, Any]:
            if write:
                self._require_write(repo_id.split("/")[0])
            repo = state.load(repo_type, repo_id)
            if repo is None or (repo["private"] and self._token_role() is None):
                raise HttpError(404, "Repository not found", "RepoNotFound")
            return repo

        def _dispatch(self) -> None:
            split = urlsplit(self.path)
            hub.log.add(self.command, split.path, self.headers.get("Range"))
            if hub.faults.latency:
                time.sleep(hub.faults.latency)
            query = parse_qs(split.query)
            raw = self._body() if self.command in ("POST", "PUT", "DELETE") else b""
            try:
                if not self._route(split.path, query, raw):
                    hub.unknown.append(f"{self.command} {self.path}")
                    self._send(404, {"error": "no such route"})
            except HttpError as exc:
                self._error(exc)

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch

        # -- routes ----------------------------------------------------------------------------
        def _route(self, path: str, query: dict[str, list[str]], raw: bytes) -> bool:
            method = self.command
            if path == "/api/whoami-v2" and method == "GET":
                role = self._token_role()
                if role is None:
                    raise HttpError(401, "Invalid username or password.")
                self._send(200, {"type": "user", "name": hub.user, "auth": {"accessToken": {"role": role}}})
                return True
            if path == "/api/agent-harnesses" and method == "GET":  # huggingface_hub's user-agent registry
                self._send(200, {"standardEnvVars": [], "harnesses": {}})
                return True
            if path == "/api/repos/create" and method == "POST":
                payload = self._json_body(raw)
                namespace = payload.get("organization") or hub.user
                self._require_write(namespace)
                repo_type = payload.get("type") or "model"
                repo_id = f"{namespace}/{payload['name']}"
                state.create_repo(repo_type, repo_id, payload.get("visibility") == "private")
                prefix = "" if repo_type == "model" else f"{repo_type}s/"
                self._send(200, {"url": f"{hub.url}/{prefix}{repo_id}", "name": repo_id})
                return True
            if path == "/api/validate-yaml" and method == "POST":
                content = self._json_body(raw).get("content", "")
                match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
                try:
                    data = yaml.safe_load(match.group(1)) if match else {}
                except yaml.YAMLError as exc:
                    self._send(400, {"errors": [{"message": f"invalid YAML: {exc}"}]})
                    return True
                if match and not isinstance(data, dict):
                    self._send(400, {"errors": [{"message": "the YAML front matter is not a mapping"}]})
                    return True
                self._send(200, {"errors": [], "warnings": []})
                return True
            if path.startswith("/lfs-upload/") and method == "PUT":
                return self._lfs_put(path.rsplit("/", 1)[1], raw)
            if path.startswith("/lfs-verify/") and method == "POST":
                body = self._json_body(raw)
                if not state.has_object(body["oid"], body["size"]):
                    raise HttpError(404, f"object {body['oid']} not found")
                self._send(200, {"success": True})
                return True
            match = _LFS_BATCH.match(path)
            if match and method == "POST":
                return self._lfs_batch((match.group(1) or "models")[:-1], match.group(2), self._json_body(raw))
            match = _RESOLVE.match(path)
            if match and method in ("GET", "HEAD"):
                repo_type = (match.group(1) or "models")[:-1]
                return self._resolve(repo_type, match.group(2), unquote(match.group(3)), unquote(match.group(4)))
            match = _API_REPO.match(path)
            if match:
                return self._repo_api(match.group(1)[:-1], match.group(2), match.group(3) or "", query, raw)
            return False

        def _repo_api(self, repo_type: str, repo_id: str, rest: str, query: dict[str, list[str]], raw: bytes) -> bool:
            method = self.command
            op, _, tail = rest.partition("/")
            if op in ("", "revision") and method == "GET":
                repo = self._repo(repo_type, repo_id)
                sha = HubState.resolve_revision(repo, unquote(tail) if op else "main")
                files = repo["commits"][sha]["files"]
                self._send(
                    200,
                    {
                        "id": repo_id,
                        "author": repo_id.split("/")[0],
                        "sha": sha,
                        "private": repo["private"],
                        "disabled": False,
                        "gated": False,
                        "tags": [],
                        "siblings": [{"rfilename": p} for p in sorted(files)],
                        "lastModified": "2026-11-22T00:00:00.000Z",
                    },
                )
                return True
            if op == "preupload" and method == "POST":
                repo = self._repo(repo_type, repo_id, write=True)
                sha = HubState.resolve_revision(repo, unquote(tail))
                return self._preupload(repo["commits"][sha]["files"], self._json_body(raw))
            if op == "commit" and method == "POST":
                self._repo(repo_type, repo_id, write=True)
                lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
                with hub.counters_lock:
                    limit = hub.faults.commits_before_failure
                    if limit is not None and hub.counters.commits >= limit:
                        raise HttpError(hub.faults.status, "injected failure: commits are failing")
                    every = hub.faults.commits_between_rate_limits
                    if every is not None and hub.counters.commits % every == 0 and not hub.counters.limited:
                        hub.counters.limited, hub.counters.rate_limited = True, hub.counters.rate_limited + 1
                        raise HttpError(429, "You have exceeded the rate limit for commits", retry_after=1)
                    hub.counters.limited = False
                    commit_id = state.commit(repo_type, repo_id, unquote(tail), lines)
                    hub.counters.commits += 1
                prefix = "" if repo_type == "model" else f"{repo_type}s/"
                self._send(
                    200,
                    {
                        "success": True,
                        "commitOid": commit_id,
                        "commitUrl": f"{hub.url}/{prefix}{repo_id}/commit/{commit_id}",
                    },
                )
                return True
            if op == "tree" and method == "GET":
                return self._tree(repo_type, repo_id, tail, query)
            if op == "paths-info" and method == "POST":
                repo = self._repo(repo_type, repo_id)
                files = repo["commits"][HubState.resolve_revision(repo, unquote(tail))]["files"]
                dirs = _directories(files)
                wanted = self._json_body(raw).get("paths", [])
                infos = [
                    _file_info(p, files[p]) if p in files else _dir_info(p) for p in wanted if p in files or p in dirs
                ]
                self._send(200, infos)
                return True
            if op == "refs" and method == "GET":
                repo = self._repo(repo_type, repo_id)
                branches = [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": c} for n, c in repo["refs"].items()]
                self._send(200, {"branches": branches, "converts": [], "tags": [], "pullRequests": []})
                return True
            if op == "branch" and method in ("POST", "DELETE"):
                branch = unquote(tail)
                with state.lock:
                    repo = self._repo(repo_type, repo_id, write=True)
                    if method == "DELETE":
                        if branch not in repo["refs"] or branch == "main":
                            raise HttpError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
                        del repo["refs"][branch]
                    else:
                        if branch in repo["refs"]:
                            raise HttpError(409, f"Reference already exists: refs/heads/{branch}")
                        start = self._json_body(raw).get("startingPoint") or "main"
                        repo["refs"][branch] = HubState.resolve_revision(repo, start)
                    state.save(repo_type, repo_id, repo)
                self._send(200, {})
                return True
            return False

        def _preupload(self, files: dict[str, Any], payload: dict[str, Any]) -> bool:
            rules = []
            if ".gitattributes" in files:
                text = state.object_path(files[".gitattributes"]["sha256"]).read_text()
                rules = [line.split()[0] for line in text.splitlines() if "filter=lfs" in line]
            answer = []
            for item in payload["files"]:
                sample = base64.b64decode(item["sample"])
                name = item["path"]
                lfs = (
                    item["size"] > 10_000_000
                    or b"\0" in sample
                    or any(fnmatch.fnmatch(name, r) or fnmatch.fnmatch(name.rsplit("/", 1)[-1], r) for r in rules)
                )
                entry = files.get(name)
                oid = (entry["sha256"] if entry["lfs"] else entry["oid"]) if entry else None
                answer.append(
                    {"path": name, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
                )
            self._send(200, {"files": answer})
            return True

        def _lfs_batch(self, repo_type: str, repo_id: str, payload: dict[str, Any]) -> bool:
            self._repo(repo_type, repo_id, write=True)
            objects = []
            for obj in payload["objects"]:
                oid, size = obj["oid"], obj["size"]
                if state.has_object(oid, size):
                    objects.append({"oid": oid, "size": size})  # already stored: nothing to send
                else:
                    objects.append(
                        {
                            "oid": oid,
                            "size": size,
                            "actions": {
                                "upload": {"href": f"{hub.url}/lfs-upload/{oid}"},
                                "verify": {"href": f"{hub.url}/lfs-verify/{oid}"},
                            },
                        }
                    )
            self._send(200, {"transfer": "basic", "objects": objects})
            return True

        def _lfs_put(self, oid: str, data: bytes) -> bool:
            if hashlib.sha256(data).hexdigest() != oid:
                raise HttpError(400, f"uploaded bytes do not hash to {oid}")
            time.sleep(hub.faults.lfs_upload_delay)
            gate = hub.faults.lfs_upload_gate
            if gate is not None:
                gate.wait(300)
            with hub.counters_lock:  # uploads run in parallel: check and count as one step
                limit = hub.faults.lfs_uploads_before_failure
                if limit is not None and hub.counters.lfs_uploads >= limit:
                    raise HttpError(hub.faults.status, "injected failure: the storage backend is unavailable")
                hub.counters.lfs_uploads += 1
            state.store_bytes(data)
            self._send(200, {})
            return True

        def _tree(self, repo_type: str, repo_id: str, tail: str, query: dict[str, list[str]]) -> bool:
            repo = self._repo(repo_type, repo_id)
            revision, _, sub = tail.partition("/")
            files = repo["commits"][HubState.resolve_revision(repo, unquote(revision))]["files"]
            sub = unquote(sub).strip("/")
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            prefix = f"{sub}/" if sub else ""
            dirs = _directories(files)
            if sub and sub not in dirs:
                raise HttpError(404, f"Entry not found: {sub}", "EntryNotFound")
            entries = []
            for d in sorted(dirs):
                if d.startswith(prefix) and (recursive or "/" not in d[len(prefix) :]):
                    entries.append(_dir_info(d))
            for p in sorted(files):
                if p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :]):
                    entries.append(_file_info(p, files[p]))
            start = int(query.get("cursor", ["0"])[0])
            page = entries[start : start + TREE_PAGE]
            headers = {}
            if start + TREE_PAGE < len(entries):
                args = f"cursor={start + TREE_PAGE}" + ("&recursive=true" if recursive else "")
                headers["Link"] = f'<{hub.url}{urlsplit(self.path).path}?{args}>; rel="next"'
            self._send(200, page, headers)
            return True

        def _resolve(self, repo_type: str, repo_id: str, revision: str, path: str) -> bool:
            repo = self._repo(repo_type, repo_id)
            sha = HubState.resolve_revision(repo, revision)
            entry = repo["commits"][sha]["files"].get(path)
            if entry is None:
                raise HttpError(404, f"Entry not found: {path}", "EntryNotFound")
            headers = {"X-Repo-Commit": sha, "ETag": f'"{entry["oid"]}"'}
            if entry["lfs"]:
                headers["X-Linked-Etag"] = f'"{entry["sha256"]}"'
                headers["X-Linked-Size"] = str(entry["size"])
            send_file(self, state.object_path(entry["sha256"]), send_body=self.command == "GET", headers=headers)
            return True

    return Handler


def main() -> None:
    """``python -m tests.hub_server --root DIR``: serve until killed; print the URL (for the demo)."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--root", required=True, type=Path, help="where repos and objects are kept")
    parser.add_argument("--user", default=USER, help="the namespace the write token may write to")
    args = parser.parse_args()
    server = HubServer(args.root, args.user)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    server.start()  # its threads inherit the mask: the main thread alone takes the signal
    print(server.url, flush=True)
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
    server.stop()


if __name__ == "__main__":
    main()
