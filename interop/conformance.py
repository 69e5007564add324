"""Runs the MCP conformance suite's server scenarios twice: against the
conformance fixture directly, and through airlock with the fixture as its
only (unprefixed) stdio source. Every check that passes directly must pass
through airlock. Prints both tallies; exits 1 on any regression."""

import json
import re
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "target" / "debug"
NODE = ROOT / ".tools" / "node_modules" / ".bin" / "node"
SUITE = ROOT / ".tools" / "node_modules" / ".bin" / "conformance"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {port}")


def run_suite(url: str, out: Path) -> dict:
    """{check id: status} over every scenario of the suite."""
    subprocess.run(
        [str(NODE), str(SUITE), "server", "--url", url, "--suite", "all", "-o", str(out)],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=600,
    )
    results = {}
    for checks in sorted(out.glob("*/checks.json")):
        scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T.*$", "", checks.parent.name)
        for check in json.loads(checks.read_text()):
            results[f"{scenario}/{check['id']}"] = check["status"]
    if not results:
        sys.exit(f"the suite produced no results for {url}")
    return results


def tally(results: dict) -> str:
    passed = sum(1 for s in results.values() if s == "SUCCESS")
    failed = sum(1 for s in results.values() if s == "FAILURE")
    return f"{passed} passed, {failed} failed, {len(results)} checks"


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="airlock-conformance-"))
    direct_port, hub_port = free_port(), free_port()
    fixture = subprocess.Popen(
        [str(BIN / "airlock-conformance-fixture"), "--http", f"127.0.0.1:{direct_port}"]
    )
    config = work / "airlock.toml"
    config.write_text(
        f'[sources.conformance]\ncommand = "{BIN / "airlock-conformance-fixture"}"\nprefix = false\n'
        '\n[[rules]]\naction = "allow"\nsource = "*"\n'
    )
    env = dict(os.environ, AIRLOCK_HOME=str(work / "home"), AIRLOCK_LOG="error")
    # The suite checks protocol behaviour; a person reviews the tools first.
    subprocess.run(
        [str(BIN / "airlock"), "tools", "review", "--config", str(config), "--approve-all"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    hub = subprocess.Popen(
        [str(BIN / "airlock"), "serve", "--config", str(config), "--http", f"127.0.0.1:{hub_port}"],
        env=env,
    )
    try:
        wait_port(direct_port, fixture)
        wait_port(hub_port, hub)
        direct = run_suite(f"http://127.0.0.1:{direct_port}/mcp", work / "direct")
        through = run_suite(f"http://127.0.0.1:{hub_port}/mcp", work / "through")
    finally:
        for p in (fixture, hub):
            p.terminate()
            p.wait(timeout=10)
    print(f"conformance fixture directly: {tally(direct)}")
    print(f"through airlock:              {tally(through)}")
    lost = [c for c, s in direct.items() if s == "SUCCESS" and through.get(c) != "SUCCESS"]
    if lost:
        print("checks that pass directly but not through airlock:")
        for c in lost:
            print(f"  {c}: {through.get(c, 'missing')}")
        sys.exit(1)
    print("every check that passes directly also passes through airlock")


if __name__ == "__main__":
    main()
