"""Fixtures: a scratch airlock config in front of the official MCP servers
from npm, served on stdio (launched by the client) or Streamable HTTP."""

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"
# The workspace binaries: scripts/test says which build (debug or release).
BIN_DIR = Path(os.environ.get("AIRLOCK_BIN_DIR", ROOT / "target" / "debug"))
AIRLOCK = BIN_DIR / "airlock"


def _npm_bin(name: str) -> str:
    path = TOOLS / "node_modules" / ".bin" / name
    if not path.exists():
        pytest.exit(f"{path} is missing: run scripts/install-peers first", returncode=2)
    return str(path)


@pytest.fixture(scope="session")
def everything_http():
    """server-everything serving Streamable HTTP, as an HTTP source."""
    port = _free_port()
    env = dict(os.environ, PORT=str(port))
    proc = subprocess.Popen(
        [_npm_bin("mcp-server-everything"), "streamableHttp"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_port(port, proc)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def hub_dir(tmp_path_factory, everything_http):
    """Data directory, config and a folder server-filesystem may touch
    (and, confined, nothing else)."""
    base = tmp_path_factory.mktemp("airlock")
    files = base / "files"
    files.mkdir()
    (files / "hello.txt").write_text("hello from the filesystem server\n")
    config = base / "airlock.toml"
    config.write_text(
        f"""
[hub]
call_timeout = "30s"

[sources.demo]
command = "{AIRLOCK}"
args = ["demo-server"]

[sources.everything]
command = "{_npm_bin('mcp-server-everything')}"

# The official servers run confined, as a careful user would run them:
# their own code readable, the served folder writable, no network.
[sources.everything.confine]
read = ["{(TOOLS / 'node_modules').resolve()}"]
network = "none"

[sources.fs]
command = "{_npm_bin('mcp-server-filesystem')}"
args = ["{files}"]

[sources.fs.confine]
read = ["{(TOOLS / 'node_modules').resolve()}"]
write = ["{files.resolve()}"]
network = "none"

[sources.everything-http]
url = "{everything_http}"
allow_private = true      # it runs on this machine

# The interop suite checks that traffic passes; policy has its own tests.
[[rules]]
action = "allow"
source = "*"
"""
    )
    dirs = {"base": base, "config": config, "files": files, "home": base / "home"}
    review(dirs)
    return dirs


def review(dirs) -> None:
    """What a person does once: pin every tool's contract."""
    subprocess.run(
        [str(AIRLOCK), "tools", "review", "--config", str(dirs["config"]), "--approve-all"],
        env=airlock_env(dirs),
        check=True,
        stdout=subprocess.DEVNULL,
    )


@pytest.fixture(scope="session")
def default_policy_dir(tmp_path_factory):
    """server-filesystem behind airlock with no rules at all, reviewed;
    nobody approves, so asking calls time out after a second."""
    base = tmp_path_factory.mktemp("airlock-default")
    files = base / "files"
    files.mkdir()
    config = base / "airlock.toml"
    config.write_text(
        f"""
[hub]
approval_wait = "1s"
approval_ttl = "2s"

[sources.fs]
command = "{_npm_bin('mcp-server-filesystem')}"
args = ["{files}"]
"""
    )
    dirs = {"base": base, "config": config, "files": files, "home": base / "home"}
    review(dirs)
    return dirs


@pytest.fixture(scope="session")
def asking_dir(tmp_path_factory):
    """server-filesystem behind airlock with no rules: writes ask, and a
    person answers in the client, on the approval page or not at all."""
    base = tmp_path_factory.mktemp("airlock-asking")
    files = base / "files"
    files.mkdir()
    config = base / "airlock.toml"
    config.write_text(
        f"""
[hub]
approval_wait = "30s"
approval_ttl = "60s"

[sources.fs]
command = "{_npm_bin('mcp-server-filesystem')}"
args = ["{files}"]
"""
    )
    dirs = {"base": base, "config": config, "files": files, "home": base / "home"}
    review(dirs)
    return dirs


def airlock_env(hub_dir) -> dict:
    env = dict(os.environ)
    env["AIRLOCK_HOME"] = str(hub_dir["home"])
    env["AIRLOCK_NO_BROWSER"] = "1"  # print the approval page's link
    env["AIRLOCK_LOG"] = os.environ.get("TEST_AIRLOCK_LOG", "warn,rmcp=error")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"{proc.args[0]} exited with {proc.returncode}")
            time.sleep(0.1)
    pytest.fail(f"nothing listens on {port}")


class HttpHub:
    """A running airlock HTTP face: its URL and the client token it wants."""

    def __init__(self, url: str, token: str):
        self.url = url
        self.token = token

    def transport(self):
        """A Streamable HTTP transport that sends the token, as a client
        configured with `headers` does."""
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers={"Authorization": f"Bearer {self.token}"})
        return streamable_http_client(self.url, http_client=client)


def _serve_http(dirs):
    """airlock serving Streamable HTTP with `dirs`' config, until the
    generator is closed."""
    port = _free_port()
    proc = subprocess.Popen(
        [str(AIRLOCK), "serve", "--config", str(dirs["config"]), "--http", f"127.0.0.1:{port}"],
        env=airlock_env(dirs),
    )
    _wait_port(port, proc)
    home = Path(airlock_env(dirs)["AIRLOCK_HOME"])
    yield HttpHub(f"http://127.0.0.1:{port}/mcp", (home / "http-token").read_text().strip())
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def http_url(hub_dir):
    """airlock serving Streamable HTTP for the whole session."""
    yield from _serve_http(hub_dir)


@pytest.fixture(scope="session")
def asking_http_url(asking_dir):
    """airlock serving Streamable HTTP in front of the asking config."""
    yield from _serve_http(asking_dir)
