//! The only way airlock makes outbound HTTP (I4).
//!
//! - https only; plain http, and any private address, only for a source
//!   that opts in with `allow_private = true`;
//! - a URL with credentials in it (`https://user:token@host`) is refused;
//! - an address in a loopback, private, link-local, CGNAT, multicast,
//!   unspecified, documentation, benchmark or unique-local range, or an IPv6
//!   address that embeds such an IPv4 one (mapped, compatible, NAT64,
//!   6to4), is refused unless the source opts in; cloud metadata addresses
//!   are refused always. Literal addresses are checked here; names are
//!   checked by the resolver, which returns only allowed addresses, so the
//!   connection is pinned to what was checked;
//! - redirects are followed only within the same origin (credentials stay
//!   on their origin), at most five, each hop resolved through the same
//!   guard; no proxy from the environment is used.
//!
//! A test fails if an HTTP client is built anywhere else in the product.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

const MAX_REDIRECTS: usize = 5;

/// Why an address may not be reached, if it may not.
pub fn forbidden(ip: IpAddr, allow_private: bool) -> Option<&'static str> {
    if is_metadata(ip) {
        return Some("a cloud metadata address");
    }
    let reason = match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }?;
    if allow_private && reason != "an unspecified address" {
        return None;
    }
    Some(reason)
}

fn is_metadata(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4 == Ipv4Addr::new(169, 254, 169, 254) || v4 == Ipv4Addr::new(100, 100, 100, 200)
        }
        IpAddr::V6(v6) => {
            v6 == "fd00:ec2::254"
                .parse::<Ipv6Addr>()
                .unwrap_or(Ipv6Addr::UNSPECIFIED)
                || embedded_v4(v6).is_some_and(|v4| is_metadata(IpAddr::V4(v4)))
        }
    }
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    Some(match o {
        [0, ..] => "an unspecified address",
        [127, ..] => "a loopback address",
        [10, ..] => "a private address",
        [172, b, ..] if (16..32).contains(&b) => "a private address",
        [192, 168, ..] => "a private address",
        [169, 254, ..] => "a link-local address",
        [100, b, ..] if (64..128).contains(&b) => "a shared (CGNAT) address",
        [192, 0, 0, _] => "an IETF-reserved address",
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => "a documentation address",
        [198, b, ..] if b == 18 || b == 19 => "a benchmarking address",
        [a, ..] if (224..240).contains(&a) => "a multicast address",
        [a, ..] if a >= 240 => "a reserved or broadcast address",
        _ => return None,
    })
}

/// The IPv4 address an IPv6 one carries, for mapped (::ffff:a.b.c.d),
/// compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        // `::` and `::1` too; v6_reason has named them before asking.
        [0, 0, 0, 0, 0, 0, _, _] => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        [0x2002, a, b, ..] => Some(Ipv4Addr::new(
            (a >> 8) as u8,
            a as u8,
            (b >> 8) as u8,
            b as u8,
        )),
        _ => None,
    }
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    if let Some(v4) = embedded_v4(ip) {
        return v4_reason(v4);
    }
    let s = ip.segments();
    Some(match s[0] {
        x if x & 0xfe00 == 0xfc00 => "a unique-local address",
        x if x & 0xffc0 == 0xfe80 => "a link-local address",
        x if x & 0xffc0 == 0xfec0 => "a site-local address",
        x if x & 0xff00 == 0xff00 => "a multicast address",
        // Global unicast is 2000::/3; the rest of the space is reserved
        // (the discard-only 100::/64 among it).
        x if x & 0xe000 != 0x2000 => "a reserved IPv6 address",
        0x2001 if s[1] == 0x0db8 => "a documentation address",
        // 2001::/23: Teredo, benchmarking, ORCHID and other protocol
        // assignments; no server a source would name lives there.
        0x2001 if s[1] < 0x0200 => "an IETF protocol-assignment address",
        _ => return None,
    })
}

/// Checks a source's URL before anything is sent: scheme, credentials,
/// and a literal address (in any spelling: the URL parser normalises
/// decimal, octal and hex IPv4).
pub fn check_target(url: &str, allow_private: bool) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|e| format!("`{url}` is not a valid URL: {e}"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("the URL carries credentials (user:password@); send them as a header from a stored secret".into());
    }
    match parsed.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => {
            return Err("plain http is allowed only for a source with allow_private = true (a server on this machine or network)".into());
        }
        other => return Err(format!("scheme `{other}` is not allowed; use https")),
    }
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
        Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
        Some(url::Host::Domain(d))
            if d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost") =>
        {
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        }
        Some(url::Host::Domain(_)) => None,
        None => return Err(format!("`{url}` has no host")),
    };
    if let Some(ip) = ip
        && let Some(why) = forbidden(ip, allow_private)
    {
        return Err(format!(
            "`{url}` points at {why} ({ip}); refused. Set allow_private = true on the source only if you mean to reach it"
        ));
    }
    Ok(parsed)
}

type Lookup = dyn Fn(String) -> futures::future::BoxFuture<'static, std::io::Result<Vec<SocketAddr>>>
    + Send
    + Sync;

/// Resolves names and keeps only the addresses the guard allows.
pub struct GuardedResolver {
    allow_private: bool,
    lookup: Arc<Lookup>,
}

impl GuardedResolver {
    pub fn system(allow_private: bool) -> GuardedResolver {
        GuardedResolver {
            allow_private,
            lookup: Arc::new(|host: String| {
                Box::pin(
                    async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.collect()) },
                )
            }),
        }
    }

    /// With a stand-in for DNS, for tests.
    pub fn with_lookup(allow_private: bool, lookup: Arc<Lookup>) -> GuardedResolver {
        GuardedResolver {
            allow_private,
            lookup,
        }
    }

    /// The allowed addresses of `host`, or why there are none.
    pub async fn allowed(&self, host: &str) -> Result<Vec<SocketAddr>, String> {
        let all = (self.lookup)(host.to_string())
            .await
            .map_err(|e| format!("cannot resolve `{host}`: {e}"))?;
        let mut refused = Vec::new();
        let allowed: Vec<SocketAddr> = all
            .into_iter()
            .filter(|a| match forbidden(a.ip(), self.allow_private) {
                None => true,
                Some(why) => {
                    refused.push(format!("{} ({why})", a.ip()));
                    false
                }
            })
            .collect();
        if allowed.is_empty() {
            return Err(format!(
                "`{host}` resolves only to refused addresses: {}",
                if refused.is_empty() {
                    "none".to_string()
                } else {
                    refused.join(", ")
                }
            ));
        }
        Ok(allowed)
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let me = GuardedResolver {
            allow_private: self.allow_private,
            lookup: self.lookup.clone(),
        };
        Box::pin(async move {
            let addrs = me
                .allowed(&host)
                .await
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { e.into() })?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The type of the clients [`client`] builds, for code that wraps one.
pub type HttpClient = reqwest::Client;

/// The HTTP client for one source. Connections are kept alive: each was
/// made to an address the guarded resolver checked, so reusing one
/// cannot reach anywhere new.
pub fn client(allow_private: bool) -> Result<reqwest::Client, String> {
    build(allow_private, true)
}

/// The same guard, and a redirect is returned to the caller rather than
/// followed (token and registration requests: OAuth says not to follow).
pub fn client_without_redirects(allow_private: bool) -> Result<reqwest::Client, String> {
    build(allow_private, false)
}

fn build(allow_private: bool, follow: bool) -> Result<reqwest::Client, String> {
    if !follow {
        return reqwest::Client::builder()
            .dns_resolver(GuardedResolver::system(allow_private))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"));
    }
    let redirects = reqwest::redirect::Policy::custom(move |attempt| {
        let first = attempt.previous().first().cloned();
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        if let Some(first) = first
            && first.origin() != attempt.url().origin()
        {
            let to = attempt.url().to_string();
            return attempt.error(format!(
                "a redirect to another origin ({to}) was refused: credentials stay on their origin"
            ));
        }
        if let Err(e) = check_target(attempt.url().as_str(), allow_private) {
            return attempt.error(e);
        }
        attempt.follow()
    });
    reqwest::Client::builder()
        .dns_resolver(GuardedResolver::system(allow_private))
        .redirect(redirects)
        .no_proxy()
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssrf_vectors_are_refused() {
        for url in [
            "http://2130706433/mcp",
            "https://2130706433/mcp",
            "https://0177.0.0.1/mcp",
            "https://0x7f.0.0.1/mcp",
            "https://127.1/mcp",
            "https://0.0.0.0/mcp",
            "https://[::]/mcp",
            "https://[::1]/mcp",
            "https://[::ffff:127.0.0.1]/mcp",
            "https://[::ffff:7f00:1]/mcp",
            "https://[::127.0.0.1]/mcp",
            "https://[64:ff9b::a00:1]/mcp",
            "https://[2002:a00:1::]/mcp",
            "https://169.254.169.254/latest/meta-data",
            "https://[fd00::1]/mcp",
            "https://[fe80::1]/mcp",
            "https://10.1.2.3/mcp",
            "https://172.16.0.1/mcp",
            "https://192.168.1.1/mcp",
            "https://100.64.0.1/mcp",
            "https://224.0.0.1/mcp",
            "https://localhost/mcp",
            "https://user:tok@example.com/mcp",
            "ftp://example.com/mcp",
            "http://example.com/mcp",
        ] {
            assert!(check_target(url, false).is_err(), "{url} was allowed");
        }
        assert!(check_target("https://example.com/mcp", false).is_ok());
        assert!(check_target("https://93.184.215.14/mcp", false).is_ok());
    }

    #[test]
    fn opting_in_allows_private_but_never_metadata() {
        assert!(check_target("http://127.0.0.1:8080/mcp", true).is_ok());
        assert!(check_target("https://10.0.0.5/mcp", true).is_ok());
        assert!(check_target("http://169.254.169.254/", true).is_err());
        assert!(check_target("http://[::ffff:169.254.169.254]/", true).is_err());
        assert!(check_target("http://0.0.0.0/", true).is_err());
    }

    fn fake(answer: Vec<&'static str>) -> Arc<Lookup> {
        Arc::new(move |_host| {
            let addrs: Vec<SocketAddr> = answer
                .iter()
                .map(|a| SocketAddr::new(a.parse().unwrap(), 0))
                .collect();
            Box::pin(async move { Ok(addrs) })
        })
    }

    #[tokio::test]
    async fn a_public_name_resolving_private_is_refused() {
        let r = GuardedResolver::with_lookup(false, fake(vec!["10.0.0.7"]));
        let e = r.allowed("innocent.example").await.unwrap_err();
        assert!(e.contains("10.0.0.7"), "{e}");
        let r = GuardedResolver::with_lookup(false, fake(vec!["::ffff:192.168.0.1"]));
        assert!(r.allowed("innocent.example").await.is_err());
    }

    #[tokio::test]
    async fn only_allowed_addresses_are_kept_so_the_connection_is_pinned() {
        let r = GuardedResolver::with_lookup(false, fake(vec!["127.0.0.1", "93.184.215.14"]));
        let ok = r.allowed("mixed.example").await.unwrap();
        assert_eq!(
            ok,
            vec![SocketAddr::new("93.184.215.14".parse().unwrap(), 0)]
        );
    }
}
