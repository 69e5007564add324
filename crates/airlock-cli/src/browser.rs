//! Opening the approval page without putting its one-time link where other
//! users can read it.
//!
//! A browser launcher gets its URL on the command line, and every local
//! user can read every process's command line (`/proc/*/cmdline`). So the
//! link goes into a private file in the data directory (mode 0600, in a
//! directory only the user can enter) and the browser is pointed at that
//! file, which forwards to the link. Only the user's own processes can
//! read the file; it is removed a minute later.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the forwarding file stays (the browser reads it at once).
const KEEP: Duration = Duration::from_secs(60);

/// Opens `link` in the user's browser through a private forwarding file.
pub fn open(data_dir: &Path, link: &str) -> anyhow::Result<()> {
    launch(forwarding_file(data_dir, link)?)
}

/// Points the browser at a forwarding file, removed a minute later.
fn launch(file: PathBuf) -> anyhow::Result<()> {
    let target = format!("file://{}", file.display());
    let opened = webbrowser::open(&target);
    let cleanup = file.clone();
    std::thread::spawn(move || {
        std::thread::sleep(KEEP);
        let _ = std::fs::remove_file(cleanup);
    });
    if let Err(e) = opened {
        let _ = std::fs::remove_file(&file);
        return Err(e.into());
    }
    Ok(())
}

/// Opens an OAuth provider's authorization URL the same way: through a
/// private forwarding file, the URL escaped into it.
pub fn open_url(data_dir: &Path, url: &str) -> anyhow::Result<()> {
    if !(url.starts_with("https://")
        || url.starts_with("http://127.0.0.1:")
        || url.starts_with("http://localhost:"))
    {
        anyhow::bail!("refusing to open an authorization URL that is not https");
    }
    let escaped: String = url
        .chars()
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '\'' => "&#39;".to_string(),
            c => c.to_string(),
        })
        .collect();
    let file = write_private(
        data_dir,
        &format!(
            "<!doctype html><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">\
             <meta http-equiv=\"refresh\" content=\"0;url={escaped}\"><title>airlock</title>\
             <p>Opening the login page…</p>\n"
        ),
    )?;
    launch(file)
}

/// Writes the private page that forwards to `link`.
fn forwarding_file(data_dir: &Path, link: &str) -> anyhow::Result<PathBuf> {
    // The link is ours (http://127.0.0.1:PORT/open/<hex>), so it needs no
    // escaping in HTML; refuse anything else rather than quote it.
    if !link.starts_with("http://127.0.0.1:")
        || !link[7..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "./:-_?=".contains(c))
    {
        anyhow::bail!("refusing to forward to an unexpected approval link");
    }
    let html = format!(
        "<!doctype html><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">\
         <meta http-equiv=\"refresh\" content=\"0;url={link}\"><title>airlock</title>\
         <p>Opening the approval page…</p>\n"
    );
    write_private(data_dir, &html)
}

/// A new file only the user can read, in a directory only the user can
/// enter, holding `html`.
fn write_private(data_dir: &Path, html: &str) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join("open");
    std::fs::create_dir_all(&dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let file = dir.join(format!("{}.html", airlock_common::random::hex::<16>()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(&mut options.open(&file)?, html.as_bytes())?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_is_only_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let link = "http://127.0.0.1:4567/open/0123abcd";
        let file = forwarding_file(dir.path(), link).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(link));
        assert!(!file.to_string_lossy().contains("0123abcd"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            let dir_mode = std::fs::metadata(file.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(dir_mode, 0o700);
        }
        assert!(forwarding_file(dir.path(), "http://evil.example/\"><script>").is_err());
    }
}
