"""Runs the MCP conformance suite's server scenarios twice: against the
conformance fixture directly, and through airlock with the fixture as its
only (unprefixed) stdio source, for each of the suite's versions (0.1.16,
and 0.2.0-alpha.12 with the 2026-07-28 scenarios), one airlock per suite
for the whole run, scenarios in suite order. Every check that passes
directly must pass through airlock.

Then the suite's client scenarios with airlock as the client under test
(`conformance_client.py` puts airlock in front of each scenario's server):
every check passes or is listed, with its reason, in
`conformance-client-expected-failures.txt`. And every authorization
scenario each suite lists, at every protocol version it lists it for
(`conformance_auth.py` logs airlock in as a person would), except the
extensions airlock does not implement (client credentials, DPoP,
enterprise-managed authorization, workload identity). Prints the tallies;
exits 1 on any regression.

The suite's client cannot be given headers, and airlock's HTTP face wants
the user's token on every request, so the suite reaches airlock through a
small loopback relay that adds `Authorization: Bearer <token>` the way a
configured client does and passes everything else through unchanged."""

import http.client
import http.server
import json
import threading
import re
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The workspace binaries: scripts/test says which build (debug or release).
BIN = Path(os.environ.get("AIRLOCK_BIN_DIR", ROOT / "target" / "debug"))
NODE = ROOT / ".tools" / "node_modules" / ".bin" / "node"
SUITES = {
    "0.1.16": ROOT / ".tools" / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
    "0.2.0-alpha.12": ROOT / ".tools" / "node_modules" / "conformance-next" / "dist" / "index.js",
}


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


def run_suite(suite: Path, url: str, out: Path) -> dict:
    """{check id: status} over every scenario of the suite."""
    subprocess.run(
        [str(NODE), str(suite), "server", "--url", url, "--suite", "all", "-o", str(out)],
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


HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization"}


def token_relay(upstream_port: int, token: str) -> http.server.ThreadingHTTPServer:
    """Forwards every request to 127.0.0.1:upstream_port with the token
    added, streaming the answer back (SSE included) as it arrives."""

    class Relay(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # close-delimited bodies: streams pass as they come

        def log_message(self, *args):
            pass

        def relay(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers["Authorization"] = f"Bearer {token}"
            # The relay is invisible: a Host or Origin naming the relay's own
            # port names the hub's (any other is passed on for the hub to judge).
            relay_port = self.server.server_address[1]
            for k in list(headers):
                if k.lower() in ("host", "origin") and headers[k].endswith(f":{relay_port}"):
                    headers[k] = headers[k][: -len(str(relay_port))] + str(upstream_port)
            conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=600)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                self.send_response(answer.status, answer.reason)
                for k, v in answer.getheaders():
                    if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                while True:
                    chunk = answer.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                pass
            finally:
                conn.close()

        do_GET = do_POST = do_DELETE = relay

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def tally(results: dict) -> str:
    passed = sum(1 for s in results.values() if s == "SUCCESS")
    failed = sum(1 for s in results.values() if s == "FAILURE")
    return f"{passed} passed, {failed} failed, {len(results)} checks"


def compare(version: str, suite: Path) -> bool:
    """Runs one suite directly and through airlock; whether nothing was lost."""
    work = Path(tempfile.mkdtemp(prefix="airlock-conformance-"))
    direct_port, hub_port = free_port(), free_port()
    fixture = subprocess.Popen(
        [str(BIN / "airlock-conformance-fixture"), "--http", f"127.0.0.1:{direct_port}"]
    )
    config = work / "airlock.toml"
    config.write_text(
        # The suite compares results byte for byte, so the fixture's output
        # is passed on unquoted (quote_output = false), as for a trusted source.
        f'[sources.conformance]\ncommand = "{BIN / "airlock-conformance-fixture"}"\nprefix = false\nquote_output = false\n'
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
        token = (work / "home" / "http-token").read_text().strip()
        relay = token_relay(hub_port, token)
        relay_port = relay.server_address[1]
        direct = run_suite(suite, f"http://127.0.0.1:{direct_port}/mcp", work / "direct")
        through = run_suite(suite, f"http://127.0.0.1:{relay_port}/mcp", work / "through")
        relay.shutdown()
    finally:
        for p in (fixture, hub):
            p.terminate()
            p.wait(timeout=10)
    print(f"suite {version}, conformance fixture directly: {tally(direct)}")
    print(f"suite {version}, through airlock:              {tally(through)}")
    lost = [c for c, s in direct.items() if s == "SUCCESS" and through.get(c) != "SUCCESS"]
    if lost:
        print(f"suite {version}: checks that pass directly but not through airlock:")
        for c in lost:
            print(f"  {c}: {through.get(c, 'missing')}")
        return False
    print(f"suite {version}: every check that passes directly also passes through airlock")
    return True


# The client scenarios the suite has for airlock's side, at the version each
# is asked for.
CLIENT_SCENARIOS = [
    ("initialize", "2025-11-25"),
    ("tools_call", "2025-11-25"),
    ("elicitation-sep1034-client-defaults", "2025-11-25"),
    ("sse-retry", "2025-11-25"),
    ("json-schema-2020-12-preservation", "2025-11-25"),
    ("tools_call", "2026-07-28"),
    ("json-schema-2020-12-preservation", "2026-07-28"),
    ("request-metadata", "2026-07-28"),
    ("http-standard-headers", "2026-07-28"),
    ("http-custom-headers", "2026-07-28"),
    ("http-invalid-tool-headers", "2026-07-28"),
    ("sep-2322-client-request-state", "2026-07-28"),
]
EXPECTED_CLIENT_FAILURES = Path(__file__).with_name("conformance-client-expected-failures.txt")


def expected_client_failures() -> dict:
    """{"version/scenario/check": reason} from the expected-failures file."""
    expected = {}
    for line in EXPECTED_CLIENT_FAILURES.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        check, _, reason = line.partition(" ")
        if not reason.strip():
            sys.exit(f"{EXPECTED_CLIENT_FAILURES.name}: `{check}` gives no reason")
        expected[check] = reason.strip()
    return expected


def auth_scenarios(suite: Path) -> list:
    """[(scenario, version)] for every authorization scenario `suite`
    lists, at each version it names (not extensions, nor a draft that the
    newer suite runs at its dated version)."""
    listed = subprocess.run([str(NODE), str(suite), "list"], capture_output=True, text=True, check=True).stdout
    runs = []
    for name, versions in re.findall(r"^\s*- (auth/[\w.-]+) \[([^\]]+)\]", listed, re.M):
        for version in versions.split(","):
            if version not in ("extension", "draft"):
                runs.append((name, version))
    if not runs:
        sys.exit(f"{suite}: lists no authorization scenarios; the suite's output changed")
    return runs


def run_client_scenarios(label: str, suite: Path, runs: list, script: str, work: Path, results: dict) -> None:
    command = f"{sys.executable} {Path(__file__).with_name(script)}"
    for scenario, version in runs:
        out = work / label / version / scenario
        try:
            subprocess.run(
                [str(NODE), str(suite), "client", "--command", command, "--scenario", scenario,
                 "--spec-version", version, "-o", str(out)],
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            results[f"{label}/{version}/{scenario}/finished"] = "FAILURE"
            continue
        found = sorted(out.glob("**/checks.json"))
        if not found:
            results[f"{label}/{version}/{scenario}/ran"] = "FAILURE"
        for checks in found:
            for check in json.loads(checks.read_text()):
                results[f"{label}/{version}/{scenario}/{check['id']}"] = check["status"]


def client_side() -> bool:
    """airlock as the client under test: whether every check passed or
    failed as expected."""
    work = Path(tempfile.mkdtemp(prefix="airlock-conformance-client-"))
    results = {}
    newest = SUITES["0.2.0-alpha.12"]
    run_client_scenarios("0.2.0-alpha.12", newest, CLIENT_SCENARIOS, "conformance_client.py", work, results)
    for label, suite in SUITES.items():
        run_client_scenarios(label, suite, auth_scenarios(suite), "conformance_auth.py", work, results)
    expected = expected_client_failures()
    print(f"client scenarios, airlock as the client: {tally(results)}")
    unexpected = [c for c, s in results.items() if s == "FAILURE" and c not in expected]
    for c in unexpected:
        print(f"  unexpected failure: {c}")
    for c in expected:
        if results.get(c) == "SUCCESS":
            print(f"  now passes, remove it from {EXPECTED_CLIENT_FAILURES.name}: {c}")
    return not unexpected


def main() -> None:
    ok = [compare(version, suite) for version, suite in SUITES.items()]
    ok.append(client_side())
    if not all(ok):
        sys.exit(1)


if __name__ == "__main__":
    main()
