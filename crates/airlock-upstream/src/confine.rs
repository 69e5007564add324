//! Starting a confined stdio source: airlock runs itself as the confiner
//! (`airlock __confine …  -- PROGRAM ARGS`), which takes a user (and, for
//! `network = "none"`, a network) namespace of its own, sets the resource
//! limits, restricts itself with Landlock to the reviewed paths and then
//! becomes the program (see `airlock-cli/src/confine.rs`). What it may
//! reach is in the reviewed command identity, so widening it asks again.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use airlock_config::Confinement;

/// The first argument that makes `airlock` the confiner.
pub const CONFINE_ARG: &str = "__confine";

/// Variables the dynamic loader reads: set for a confined source, they
/// would load code into the confiner before it confines anything. They
/// reach it under this prefix, and it restores them just before `exec`.
pub const LOADER_PREFIX: &str = "AIRLOCK_CONFINED_";

/// Whether the dynamic loader reads `name` at start.
pub fn read_by_the_loader(name: &str) -> bool {
    name.starts_with("LD_") || matches!(name, "GCONV_PATH" | "GLIBC_TUNABLES" | "MALLOC_CONF")
}

/// The program and arguments that start `program args` confined by `c`.
pub(crate) fn wrap(
    program: &Path,
    args: &[String],
    c: &Confinement,
) -> Result<(PathBuf, Vec<OsString>), String> {
    if !cfg!(target_os = "linux") {
        return Err(
            "confinement is enforced on Linux only; on this system remove [confine] to run the source unconfined"
                .into(),
        );
    }
    let airlock = std::env::current_exe()
        .map_err(|e| format!("cannot find airlock's own program to confine the source: {e}"))?;
    let mut out: Vec<OsString> = vec![CONFINE_ARG.into()];
    for (flag, paths) in [("--read", &c.read), ("--write", &c.write)] {
        for p in paths {
            out.push(flag.into());
            out.push(p.into());
        }
    }
    out.push("--network".into());
    out.push(c.network.as_str().into());
    for (flag, v) in [
        ("--memory-mib", c.memory_mib),
        ("--processes", c.processes),
        ("--open-files", c.open_files),
    ] {
        if let Some(v) = v {
            out.push(flag.into());
            out.push(v.to_string().into());
        }
    }
    out.push("--".into());
    out.push(program.into());
    out.extend(args.iter().map(OsString::from));
    Ok((airlock, out))
}
