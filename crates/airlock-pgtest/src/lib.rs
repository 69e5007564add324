//! A throwaway PostgreSQL server for tests.
//!
//! [`Server::shared`] starts one cluster per test process (Debian's
//! PostgreSQL: `initdb` into a temporary directory, run as an
//! unprivileged user when the tests run as root, listening on a free
//! loopback port), and [`Server::database`] gives each test a database of
//! its own with airlock's schema owner and hub role. Nothing here is used
//! outside tests.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The superuser `initdb` creates; it owns airlock's schema in tests.
pub const ADMIN: &str = "admin";
/// The role hubs connect as: no superuser, no BYPASSRLS, owns nothing.
pub const HUB_ROLE: &str = "airlock_hub";

pub struct Server {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// Run the server's programs as this user (uid 65534) when root.
    unprivileged: bool,
    next: AtomicU32,
}

/// One test's database.
pub struct Database {
    pub name: String,
    port: u16,
}

impl Database {
    /// As the schema's owner (a superuser here: it stands for the
    /// operator, and for an attacker with raw access in tamper tests).
    pub fn admin_url(&self) -> String {
        format!("postgres://{ADMIN}@127.0.0.1:{}/{}", self.port, self.name)
    }

    /// As the hub's role.
    pub fn hub_url(&self) -> String {
        format!(
            "postgres://{HUB_ROLE}@127.0.0.1:{}/{}",
            self.port, self.name
        )
    }

    /// The URL of `role` (created, with LOGIN, if it does not exist yet):
    /// a team store gives each tenant's hubs a role of their own.
    pub fn url_as(&self, role: &str) -> String {
        assert!(
            role.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{role}"
        );
        Server::shared().psql(
            "postgres",
            &format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') \
                 THEN CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END $$"
            ),
        );
        format!("postgres://{role}@127.0.0.1:{}/{}", self.port, self.name)
    }

    /// Runs `sql` as the superuser with airlock's schema first on the
    /// search path (as someone with raw access to the database would).
    pub fn sql(&self, sql: &str) -> String {
        Server::shared().psql(&self.name, &format!("SET search_path = airlock; {sql}"))
    }

    /// Everything the database holds, as `pg_dump` writes it: what a
    /// secret must never be found in.
    pub fn dump(&self) -> Vec<u8> {
        let server = Server::shared();
        let out = Command::new(server.bin.join("pg_dump"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", ADMIN, "-d", &self.name])
            .output()
            .expect("pg_dump runs");
        checked("pg_dump", out).into_bytes()
    }
}

static SHARED: OnceLock<Server> = OnceLock::new();

/// Where Debian (or the PATH) keeps `initdb` and `pg_ctl`.
fn find_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("AIRLOCK_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists())
        .collect();
    found.sort();
    if let Some(newest) = found.pop() {
        return newest;
    }
    let on_path = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match on_path {
        Some(p) => Path::new(&p).parent().unwrap().to_path_buf(),
        None => panic!(
            "PostgreSQL's server programs (initdb, pg_ctl) are not installed: \
             scripts/install-peers installs Debian's postgresql, or set AIRLOCK_PG_BIN"
        ),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn checked(what: &str, out: Output) -> String {
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Server {
    /// The process's server, started on first use.
    pub fn shared() -> &'static Server {
        SHARED.get_or_init(Server::start)
    }

    fn start() -> Server {
        let bin = find_bin();
        // Kept past the test process by the reaper below, which removes it.
        let dir = tempfile::Builder::new()
            .prefix("airlock-pg-")
            .tempdir()
            .expect("a temporary directory")
            .keep();
        let unprivileged = is_root();
        if unprivileged {
            checked(
                "chown",
                Command::new("chown")
                    .args(["65534:65534"])
                    .arg(&dir)
                    .output()
                    .expect("chown"),
            );
        }
        let server = Server {
            dir,
            bin,
            port: free_port(),
            unprivileged,
            next: AtomicU32::new(0),
        };
        let data = server.dir.join("data");
        server.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                ADMIN.as_ref(),
                "--auth=trust".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-instructions".as_ref(),
            ],
        );
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
            server.port,
            server.dir.display()
        );
        let log = server.dir.join("server.log");
        server.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "start".as_ref(),
            ],
        );
        server.reap_after(std::process::id());
        server.psql(
            "postgres",
            &format!("CREATE ROLE {HUB_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS"),
        );
        server
    }

    /// A shared server outlives nothing: once the test process `pid` is
    /// gone, a small watcher stops the server (immediate shutdown) and
    /// removes its directory, however the tests ended.
    fn reap_after(&self, pid: u32) {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; \
             kill -QUIT \"$(head -n 1 '{dir}/data/postmaster.pid')\" 2>/dev/null; \
             sleep 1; rm -rf '{dir}'",
            dir = self.dir.display()
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> String {
        let path = self.bin.join(program);
        let mut cmd = if self.unprivileged {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&path);
            c
        } else {
            Command::new(&path)
        };
        cmd.args(args).current_dir(&self.dir);
        checked(
            program,
            cmd.output().unwrap_or_else(|e| panic!("{program}: {e}")),
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Runs `sql` in `database` as the superuser; what psql printed
    /// (unaligned, tuples only).
    pub fn psql(&self, database: &str, sql: &str) -> String {
        checked("psql", self.psql_output(ADMIN, database, sql))
    }

    /// Runs `sql` as `role`; the raw output, failed or not.
    pub fn psql_output(&self, role: &str, database: &str, sql: &str) -> Output {
        Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", role, "-d", database, "-c", sql])
            .output()
            .expect("psql runs")
    }

    /// A new, empty database for one test.
    pub fn database(&self) -> Database {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let name = format!("t{}_{n}", std::process::id());
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        Database {
            name,
            port: self.port,
        }
    }
}
