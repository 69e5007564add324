"""A hostile stdio server in Python, confined: a planted key, another
source's files, the hub's environment, writes outside its folder, a
loopback listener the test owns, a Unix socket (stream, or datagram from a
socketpair), a file's mode or ACL, a namespace of its own and more memory
than its limit are all out of reach, while the same server
unconfined reaches them (so the test can fail); the hub stays up."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mcp import Client, StdioServerParameters

from conftest import AIRLOCK, airlock_env, review

HERE = Path(__file__).resolve().parent
PYTHON = Path(os.path.realpath(sys.executable))


@pytest.fixture
def world(tmp_path):
    base = tmp_path.resolve()
    own, ssh, other = base / "own", base / "home" / ".ssh", base / "other-source"
    for d in (own, ssh, other):
        d.mkdir(parents=True)
    (ssh / "id_rsa").write_text("PRIVATE KEY")
    (other / "token").write_text("another source's token")
    (own / "notes").write_text("mine")
    readable = base / "readable"
    readable.mkdir()
    (readable / "file").write_text("data")
    os.chmod(readable / "file", 0o600)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(readable / "agent.sock"))
    unix.listen()
    unix.setblocking(False)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind(str(readable / "log.sock"))
    dgram.setblocking(False)
    (readable / "acl").write_text("data")
    os.chmod(readable / "acl", 0o600)
    yield {"base": base, "own": own, "ssh": ssh, "other": other, "readable": readable,
           "listener": listener, "unix": unix, "dgram": dgram}
    listener.close()
    unix.close()
    dgram.close()


def run(world, confine: str) -> str:
    config = world["base"] / "airlock.toml"
    config.write_text(
        f"""
[sources.hostile]
command = "{PYTHON}"
args = ["{HERE / 'hostile_stdio.py'}"]
quote_output = false
{confine}

[[rules]]
action = "allow"
source = "*"
"""
    )
    dirs = {"config": config, "home": world["base"] / "data"}
    review(dirs)
    port = world["listener"].getsockname()[1]
    args = {
        "read": [str(world["ssh"] / "id_rsa"), str(world["other"] / "token"), str(world["own"] / "notes")],
        "write": [str(world["ssh"] / "authorized_keys"), str(world["base"] / "x"), str(world["own"] / "new")],
        "hub_environ": True,
        "connect": f"127.0.0.1:{port}",
        "unix": str(world["readable"] / "agent.sock"),
        "chmod": str(world["readable"] / "file"),
        "acl": str(world["readable"] / "acl"),
        "dgram": str(world["readable"] / "log.sock"),
        "new_namespace": True,
        "allocate_mib": 1024,
    }
    target = StdioServerParameters(
        command=str(AIRLOCK), args=["serve", "--config", str(config)], env=airlock_env(dirs)
    )

    async def go():
        async with Client(target, mode="legacy") as client:
            said = (await client.call_tool("hostile__attempt", args)).content[0].text
            # The hub is still up.
            again = (await client.call_tool("hostile__attempt", {"read": [str(world["own"] / "notes")]})).content[0].text
            assert again == "read0=ok", again
            return said

    return anyio.run(go)


def test_a_hostile_python_server_confined_reaches_only_its_folder(world):
    confine = f"""
[sources.hostile.confine]
read = ["{world['readable']}", "{HERE}"]
write = ["{world['own']}"]
network = "none"
memory_mib = 512
"""
    said = run(world, confine)
    assert said == (
        "read0=denied read1=denied read2=ok write0=denied write1=denied write2=ok "
        "hub_environ=denied connect=denied unix=denied chmod=denied acl=denied dgram=denied "
        "new_namespace=denied allocate=denied"
    ), said
    # Nothing planted, nothing reached.
    assert not (world["ssh"] / "authorized_keys").exists()
    with pytest.raises(BlockingIOError):
        world["listener"].accept()
    with pytest.raises(BlockingIOError):
        world["unix"].accept()
    with pytest.raises(BlockingIOError):
        world["dgram"].recv(100)
    for name in ("file", "acl"):
        assert (os.stat(world["readable"] / name).st_mode & 0o777) == 0o600, name


def test_the_same_server_unconfined_reaches_everything(world):
    said = run(world, "")
    assert said == (
        "read0=ok read1=ok read2=ok write0=ok write1=ok write2=ok "
        "hub_environ=ok connect=ok unix=ok chmod=ok acl=ok dgram=ok new_namespace=ok allocate=ok"
    ), said
