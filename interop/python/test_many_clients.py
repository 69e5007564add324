"""Several official Python SDK clients on one source through airlock: each
answers only its own elicitation, and a client that is killed mid-call
leaves nothing running at the source."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

import mcp.types as types
from mcp import Client

from conftest import AIRLOCK, BIN_DIR, _npm_bin, _serve_http, airlock_env, review

FIXTURE = BIN_DIR / "airlock-fixture"


@pytest.fixture(scope="module")
def per_client_dir(tmp_path_factory):
    """server-everything on stdio with a process per client session."""
    base = tmp_path_factory.mktemp("airlock-per-client")
    config = base / "airlock.toml"
    config.write_text(
        f"""
[hub]
call_timeout = "30s"

[sources.everything]
command = "{_npm_bin('mcp-server-everything')}"
protocol = "legacy"
sessions = "per-client"

[[rules]]
action = "allow"
source = "*"
"""
    )
    dirs = {"base": base, "config": config, "home": base / "home"}
    review(dirs)
    return dirs


@pytest.fixture(scope="module")
def per_client_hub(per_client_dir):
    yield from _serve_http(per_client_dir)


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_two_clients_of_one_stdio_source_each_answer_their_own_elicitation(per_client_hub, mode):
    names = ["Ada Lovelace", "Grace Hopper"]
    asked = {name: [] for name in names}
    both_asked = anyio.Event()

    def answering(name):
        async def on_elicit(context, params):
            asked[name].append(params.message)
            if all(asked.values()):
                both_asked.set()
            # Each answer waits until the other client was asked too: the
            # two calls are provably in flight together.
            with anyio.fail_after(20):
                await both_asked.wait()
            return types.ElicitResult(action="accept", content={"name": name})

        return on_elicit

    results = {}

    async def one(name):
        # Two programs: a 2026-07-28 client has no session, so airlock
        # knows it by the program it names.
        program = types.Implementation(name=f"client of {name}", version="1")
        async with Client(
            per_client_hub.transport(),
            mode=mode,
            elicitation_callback=answering(name),
            client_info=program,
        ) as client:
            tool = "everything__trigger-elicitation-request"
            with anyio.fail_after(60):
                while tool not in [t.name for t in (await client.list_tools()).tools]:
                    await anyio.sleep(0.2)
            results[name] = await client.call_tool(tool, {})

    async def run():
        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(one, name)

    anyio.run(run)
    for name, other in [names, names[::-1]]:
        assert len(asked[name]) == 1, asked
        text = text_of(results[name])
        assert not results[name].is_error, text
        assert name in text and other not in text, f"{name} got: {text}"


CHILD = """
import sys, anyio
from mcp import Client, StdioServerParameters
import os

async def main():
    server = StdioServerParameters(command=sys.argv[1], args=["serve", "--config", sys.argv[2]], env=dict(os.environ))
    async with Client(server, mode="legacy") as client:
        print("calling", flush=True)
        await client.call_tool("fixture__hang", {})

anyio.run(main)
"""


def test_a_client_killed_mid_call_leaves_no_call_running_at_the_source(tmp_path):
    """The client process is killed, so it says nothing: airlock sees its
    stdin end, and the source hears the call cancelled at once, well before
    the call's own timeout."""
    log = tmp_path / "fixture.log"
    config = tmp_path / "airlock.toml"
    config.write_text(
        f"""
[sources.fixture]
command = "{FIXTURE}"
call_timeout = "120s"

[sources.fixture.env]
FIXTURE_LOG = "{log}"

[[rules]]
action = "allow"
source = "*"
"""
    )
    dirs = {"base": tmp_path, "config": config, "home": tmp_path / "home"}
    review(dirs)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(AIRLOCK), str(config)],
        env=airlock_env(dirs),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout.readline().strip() == "calling"
        deadline = time.time() + 30
        while "hang" not in (log.read_text() if log.exists() else ""):
            assert time.time() < deadline, "the call never reached the source"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        deadline = time.time() + 10
        while "cancelled:" not in log.read_text():
            assert time.time() < deadline, f"the source still runs the call: {log.read_text()}"
            time.sleep(0.05)
        # airlock, orphaned by the kill, leaves once its stdin has ended,
        # and its source with it.
        deadline = time.time() + 10
        while running_with(config):
            assert time.time() < deadline, f"still running: {running_with(config)}"
            time.sleep(0.1)
    finally:
        if child.poll() is None:
            child.kill()


def running_with(config: Path) -> list:
    """The command lines of processes started with `config` (Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(config) in cmdline:
            found.append(cmdline)
    return found
