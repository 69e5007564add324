//! Refusing credentials written into the config. A config file is copied,
//! shared and committed; a token in it leaks. Values in `env` and `headers`
//! must name a stored secret (`secret:NAME`, `${secret:NAME}`) instead.

/// Prefixes of tokens issued by common services.
const TOKEN_PREFIXES: &[&str] = &[
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xapp-",
    "AKIA",
    "ASIA",
    "AIza",
    "ya29.",
    "npm_",
    "pypi-",
    "hf_",
    "eyJ",
];

const CREDENTIAL_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
    "auth",
    "credential",
    "private",
    "key",
];

/// Why `value` under `key` looks like a live credential, if it does.
pub fn looks_like_credential(key: &str, value: &str) -> Option<String> {
    let v = value.trim();
    let v = v
        .strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))
        .or_else(|| v.strip_prefix("Basic "))
        .or_else(|| v.strip_prefix("token "))
        .unwrap_or(v);
    if let Some(p) = TOKEN_PREFIXES
        .iter()
        .find(|p| v.starts_with(**p) && v.len() >= p.len() + 8)
    {
        return Some(format!("it starts like a `{p}` token"));
    }
    let k = key.to_ascii_lowercase();
    if CREDENTIAL_WORDS.iter().any(|w| k.contains(w)) && v.len() >= 16 && entropy(v) >= 3.5 {
        return Some(format!(
            "`{key}` names a credential and the value looks random"
        ));
    }
    None
}

/// Shannon entropy in bits per character.
fn entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    for c in s.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
    }
    let n = s.chars().count() as f64;
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Where a literal password sits in `value`, as a byte range, in any of the
/// spellings connection strings use (a secret reference there is fine):
///
/// - a URL's userinfo, `scheme://user:PASSWORD@host`, anywhere in the value
///   (`--db=postgresql://app:pw@host/db` counts), also when the password
///   holds `/`, `?` or `#` unencoded;
/// - a `password=` / `passwd=` / `pwd=` / `pass=` pair, as in a URL's query
///   (`?user=app&password=pw`), a libpq string (`host=db password='p w'`)
///   or a JDBC one (`;password=pw`).
pub fn url_password(value: &str) -> Option<std::ops::Range<usize>> {
    userinfo_password(value).or_else(|| pair_password(value))
}

fn is_reference(text: &str) -> bool {
    text.contains("${secret:")
}

fn userinfo_password(value: &str) -> Option<std::ops::Range<usize>> {
    let mut from = 0;
    while let Some(found) = value[from..].find("://") {
        let start = from + found + 3;
        // The URL ends at whitespace or a quote.
        let end = value[start..]
            .find([' ', '\t', '\n', '"', '\''])
            .map_or(value.len(), |e| start + e);
        let url = &value[start..end];
        let authority_len = url.find(['/', '?', '#']).unwrap_or(url.len());
        let authority = &url[..authority_len];
        let userinfo = match authority.rfind('@') {
            Some(at) => Some(&authority[..at]),
            // `user:pa/ss@host`: no `@` before the first `/`, but a colon
            // that is not a port (`host:8080/...`) and an `@` later on.
            None => authority.split_once(':').and_then(|(_, after)| {
                let port = !after.is_empty() && after.chars().all(|c| c.is_ascii_digit());
                let at = url.rfind('@')?;
                (!port && at > authority_len).then(|| &url[..at])
            }),
        };
        if let Some(userinfo) = userinfo
            && let Some(colon) = userinfo.find(':')
        {
            let password = &userinfo[colon + 1..];
            if !password.is_empty() && !is_reference(password) {
                let begin = start + colon + 1;
                return Some(begin..begin + password.len());
            }
        }
        from = start;
    }
    None
}

static PAIR: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r#"(?i)(^|[\s?&;,-])(?:password|passwd|pwd|pass)\s*=\s*(?:'([^']*)'|"([^"]*)"|([^\s&;,'"]+))"#,
    )
    .expect("the password pair pattern compiles")
});

fn pair_password(value: &str) -> Option<std::ops::Range<usize>> {
    PAIR.captures_iter(value).find_map(|c| {
        let m = c.get(2).or_else(|| c.get(3)).or_else(|| c.get(4))?;
        let mut range = m.range();
        // In a URL's query, `#` starts the fragment.
        if matches!(c.get(1).map(|s| s.as_str()), Some("?" | "&"))
            && let Some(hash) = m.as_str().find('#')
        {
            range.end = range.start + hash;
        }
        let text = &value[range.clone()];
        (!text.is_empty() && !is_reference(text)).then_some(range)
    })
}

/// A config error for a credential in a stdio source's arguments. Every
/// local user can read every process's command line (`/proc/*/cmdline`,
/// `ps`), so nothing secret may be there, resolved or not: not a password
/// inside a URL, not a token, not a secret reference.
pub(crate) fn check_arg(key: &str, value: &str) -> Result<(), (String, String)> {
    let why = if url_password(value).is_some() {
        Some(
            "holds a password in a connection string (user:password@, password=, pwd=)".to_string(),
        )
    } else if value.contains("secret:") {
        Some("names a secret, which airlock would have to put on the command line".to_string())
    } else {
        looks_like_credential(key, value).map(|why| format!("looks like a live credential ({why})"))
    };
    match why {
        None => Ok(()),
        Some(why) => Err((
            format!(
                "`{key}` {why}; every user of this machine can read a process's arguments, so airlock never puts a secret there"
            ),
            "give it to the server in its environment instead: store it with `airlock secret set NAME` and add e.g. env = { DATABASE_URL = \"postgresql://app:${secret:NAME}@host/db\" } (see the server's docs for the variable it reads)".into(),
        )),
    }
}

/// A config error for a password inside a URL (in `env` or `headers`):
/// message and fix.
pub(crate) fn check_url_password(key: &str, value: &str) -> Result<(), (String, String)> {
    if url_password(value).is_none() {
        return Ok(());
    }
    let name = key
        .to_ascii_uppercase()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    Err((
        format!(
            "`{key}` holds a password in a connection string (user:password@, password=, pwd=); airlock refuses to keep secrets in config"
        ),
        format!(
            "store the password with `airlock secret set {name}` and write it as ${{secret:{name}}} in its place, e.g. postgresql://app:${{secret:{name}}}@host/db"
        ),
    ))
}

/// A config error for a literal credential: message and fix.
pub(crate) fn check(key: &str, value: &str) -> Result<(), (String, String)> {
    check_url_password(key, value)?;
    if value.contains("secret:") {
        return check_reference(value);
    }
    match looks_like_credential(key, value) {
        None => Ok(()),
        Some(why) => {
            let name = key.to_ascii_uppercase().replace(['-', ' '], "_");
            Err((
                format!(
                    "the value of `{key}` looks like a live credential ({why}); airlock refuses to keep secrets in config"
                ),
                format!(
                    "store it with `airlock secret set {name}` and write \"secret:{name}\" (or \"Bearer ${{secret:{name}}}\") here instead"
                ),
            ))
        }
    }
}

fn check_reference(value: &str) -> Result<(), (String, String)> {
    let names: Vec<&str> = if let Some(name) = value.strip_prefix("secret:") {
        vec![name]
    } else {
        value
            .split("${secret:")
            .skip(1)
            .map(|rest| rest.split('}').next().unwrap_or(""))
            .collect()
    };
    for n in names {
        if !is_secret_name(n) {
            return Err((
                format!("`{n}` is not a secret name"),
                "write secret:NAME or ${secret:NAME} with letters, digits, '_' and '-'".into(),
            ));
        }
        if airlock_common::is_reserved_secret_name(n) {
            return Err((
                format!("`{n}` names one of airlock's own OAuth entries, which config cannot use"),
                "store the value under a name that does not start with `oauth_`".into(),
            ));
        }
    }
    Ok(())
}

/// A stored secret's name: 1 to 64 letters, digits, `_` and `-`.
pub(crate) fn is_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_tokens_and_random_values_are_refused() {
        assert!(
            looks_like_credential("GITHUB_TOKEN", "ghp_16C7e42F292c6912E7710c838347Ae178B4a")
                .is_some()
        );
        assert!(
            looks_like_credential("Authorization", "Bearer sk-proj-abcdefghijklmnop").is_some()
        );
        assert!(looks_like_credential("DB_PASSWORD", "x8#Kp2!qLm9$Tz4vR7wB").is_some());
    }

    #[test]
    fn passwords_inside_urls_are_found_wherever_they_are() {
        for v in [
            "postgresql://app:hunter2@db.internal/app",
            "--db=postgresql://app:hunter2@db.internal:5432/app?sslmode=require",
            "redis://:hunter2@cache:6379/0",
            "see https://x.example and mysql://root:hunter2@127.0.0.1/db",
            "postgresql://db.internal/app?user=app&password=hunter2",
            "postgresql://db/app?sslmode=require&PWD=hunter2#x",
            "host=db user=app password=hunter2 dbname=app",
            "host=db password = 'hunter2' dbname=app",
            "jdbc:sqlserver://db:1433;user=app;password=hunter2;encrypt=true",
            "--password=hunter2",
        ] {
            let r = url_password(v).unwrap_or_else(|| panic!("missed {v}"));
            assert_eq!(&v[r], "hunter2", "{v}");
        }
        // Unencoded `/`, `?` and `#` inside the password.
        for (v, pw) in [
            ("postgresql://app:hun/ter2@db/app", "hun/ter2"),
            ("postgresql://app:hun?ter#2@db:5432/app", "hun?ter#2"),
            ("host=db password='p w/x' dbname=app", "p w/x"),
        ] {
            let r = url_password(v).unwrap_or_else(|| panic!("missed {v}"));
            assert_eq!(&v[r], pw, "{v}");
        }
        for v in [
            "postgresql://app@db/app",
            "postgresql://app:${secret:DB}@db/app",
            "https://example.com/a:b@c",
            "/home/me/file",
            "user:pass@host",
            "https://example.com:8443/a:b@c",
            "postgresql://db/app?password=${secret:DB}",
            "host=db password='${secret:DB}'",
            "--bypass=1 --compass=north",
        ] {
            assert!(url_password(v).is_none(), "{v}");
        }
        assert!(check("ARGS", "postgresql://app:hunter2@db/app").is_err());
        assert!(check("ARGS", "postgresql://app:${secret:DB}@db/app").is_ok());
    }

    #[test]
    fn nothing_secret_goes_into_arguments() {
        for a in [
            "postgresql://app:hunter2@db/app",
            "postgresql://app:${secret:DB}@db/app",
            "--token=secret:GH",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        ] {
            assert!(check_arg("pg.args[2]", a).is_err(), "{a}");
        }
        for a in [
            "-y",
            "@modelcontextprotocol/server-postgres",
            "postgresql://app@db/app",
            "/tmp",
        ] {
            assert!(check_arg("pg.args[2]", a).is_ok(), "{a}");
        }
    }

    #[test]
    fn ordinary_values_pass() {
        assert!(looks_like_credential("LOG_LEVEL", "debug").is_none());
        assert!(looks_like_credential("HOME", "/home/me/some/long/path/here").is_none());
        assert!(looks_like_credential("API_KEY_FILE", "keys.txt").is_none());
        assert!(check("GITHUB_TOKEN", "secret:GH").is_ok());
        assert!(check("Authorization", "Bearer ${secret:GH}").is_ok());
        assert!(check("X", "${secret:bad name}").is_err());
    }
}

/// Parts of a variable name that mark it as a credential.
const CREDENTIAL_NAMES: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
];

/// Whether a variable's name says it holds a credential, whatever its
/// value (airlock's own `AIRLOCK_*` settings are not credentials).
pub fn names_a_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    !upper.starts_with("AIRLOCK_") && CREDENTIAL_NAMES.iter().any(|part| upper.contains(part))
}

#[cfg(test)]
mod credential_names {
    #[test]
    fn credential_names_are_recognised_in_any_case() {
        for name in [
            "GITHUB_TOKEN",
            "openai_api_key",
            "PGPASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(super::names_a_credential(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "DISPLAY",
            "DBUS_SESSION_BUS_ADDRESS",
            "AIRLOCK_HOME",
            "AIRLOCK_SECRET_STORE",
        ] {
            assert!(!super::names_a_credential(name), "{name}");
        }
    }
}
