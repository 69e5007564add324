//! The egress guard against a reference table of the address ranges IANA's
//! special-purpose registries set aside (differential): an address is
//! refused exactly when it lies in one of them, also in any IPv6 spelling
//! that carries an IPv4 address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use airlock_upstream::egress::forbidden;
use proptest::prelude::*;

/// Not globally reachable (or not to be reached): (first address, prefix).
const V4: &[(&str, u8)] = &[
    ("0.0.0.0", 8),
    ("10.0.0.0", 8),
    ("100.64.0.0", 10),
    ("127.0.0.0", 8),
    ("169.254.0.0", 16),
    ("172.16.0.0", 12),
    ("192.0.0.0", 24),
    ("192.0.2.0", 24),
    ("192.168.0.0", 16),
    ("198.18.0.0", 15),
    ("198.51.100.0", 24),
    ("203.0.113.0", 24),
    ("224.0.0.0", 4),
    ("240.0.0.0", 4),
];

/// IPv6: everything outside global unicast (2000::/3: IANA's address
/// space registry), and inside it what the special-purpose registry sets
/// aside. The ranges outside 2000::/3 are listed one by one (unspecified,
/// loopback, discard-only, unique-local, link-local, site-local,
/// multicast) so that addresses are drawn at each of their edges too.
const V6: &[(&str, u8)] = &[
    ("::", 128),
    ("::1", 128),
    ("100::", 64),
    ("2001::", 23),
    ("2001:db8::", 32),
    ("fc00::", 7),
    ("fe80::", 10),
    ("fec0::", 10),
    ("ff00::", 8),
];

fn global_unicast(ip: Ipv6Addr) -> bool {
    u128::from(ip) >> 125 == 0b001
}

fn in_v4(ip: Ipv4Addr) -> bool {
    V4.iter().any(|(net, len)| {
        let net = u32::from(net.parse::<Ipv4Addr>().unwrap());
        let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
        u32::from(ip) & mask == net
    })
}

/// The IPv4 address an IPv6 one carries: mapped, compatible, NAT64, 6to4.
fn carried(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let b = u128::from(ip);
    let low = Ipv4Addr::from(b as u32);
    match b >> 32 {
        0xffff => Some(low),
        0 if b > 1 => Some(low),
        0x0064_ff9b_0000_0000_0000_0000 => Some(low),
        _ if b >> 112 == 0x2002 => Some(Ipv4Addr::from((b >> 80) as u32)),
        _ => None,
    }
}

fn in_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = carried(ip) {
        return in_v4(v4);
    }
    !global_unicast(ip)
        || V6.iter().any(|(net, len)| {
            let net = u128::from(net.parse::<Ipv6Addr>().unwrap());
            let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
            u128::from(ip) & mask == net
        })
}

fn reference(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => in_v4(v4),
        IpAddr::V6(v6) => in_v6(v6),
    }
}

/// Addresses near every edge of the table, and anywhere.
fn address() -> impl Strategy<Value = IpAddr> {
    let v4_near = (0..V4.len(), any::<u32>(), any::<bool>()).prop_map(|(i, bits, past)| {
        let (net, len) = V4[i];
        let net = u32::from(net.parse::<Ipv4Addr>().unwrap());
        let size = 1u64 << (32 - len);
        let offset = (u64::from(bits) % size) as u32;
        // Inside the range, or just past either end of it.
        let at = match past {
            false => net.wrapping_add(offset),
            true if bits % 2 == 0 => net.wrapping_sub(1 + bits % 4),
            true => net.wrapping_add(size as u32).wrapping_add(bits % 4),
        };
        Ipv4Addr::from(at)
    });
    let v6_near = (0..V6.len(), any::<u128>(), any::<bool>()).prop_map(|(i, bits, past)| {
        let (net, len) = V6[i];
        let net = u128::from(net.parse::<Ipv6Addr>().unwrap());
        let host = 128 - u32::from(len);
        let offset = match host {
            128 => bits,
            h => bits & ((1u128 << h) - 1),
        };
        // Inside the range, or just past either end of it.
        let size = match host {
            128 => 0,
            h => 1u128 << h,
        };
        let at = match past {
            false => net | offset,
            true if bits % 2 == 0 => net.wrapping_sub(1 + bits % 4),
            true => net.wrapping_add(size).wrapping_add(bits % 4),
        };
        Ipv6Addr::from(at)
    });
    prop_oneof![
        v4_near.clone().prop_map(IpAddr::V4),
        any::<u32>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        v6_near.prop_map(IpAddr::V6),
        any::<u128>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
        // IPv4 in each IPv6 spelling that carries one.
        (v4_near, 0..4usize).prop_map(|(v4, form)| {
            let v = u128::from(u32::from(v4));
            IpAddr::V6(Ipv6Addr::from(match form {
                0 => 0xffff_0000_0000 | v,
                1 => v,
                2 => (0x0064_ff9b_u128 << 96) | v,
                _ => (0x2002_u128 << 112) | (v << 80),
            }))
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]

    #[test]
    fn an_address_is_refused_exactly_when_the_table_sets_it_aside(ip in address()) {
        prop_assert_eq!(forbidden(ip, false).is_some(), reference(ip), "{}", ip);
    }

}

/// The refusal names the range, so the person reading it knows why.
#[test]
fn each_refusal_names_its_range() {
    for (ip, range) in [
        ("fd12::1", "a unique-local address"),
        ("fc00::", "a unique-local address"),
        ("fe80::1", "a link-local address"),
        ("febf:ffff::1", "a link-local address"),
        ("fec0::1", "a site-local address"),
        ("feff::1", "a site-local address"),
        ("ff02::1", "a multicast address"),
        ("100::1", "a reserved IPv6 address"),
        ("4000::1", "a reserved IPv6 address"),
        ("2001::1", "an IETF protocol-assignment address"),
        ("2001:1ff::1", "an IETF protocol-assignment address"),
        ("2001:db8::1", "a documentation address"),
        ("::ffff:10.0.0.1", "a private address"),
        ("::1", "a loopback address"),
        ("::", "an unspecified address"),
    ] {
        let addr: IpAddr = ip.parse().unwrap();
        assert_eq!(forbidden(addr, false), Some(range), "{ip}");
    }
    for ip in ["2001:200::1", "2606:4700::1", "2a00:1450::1"] {
        assert_eq!(forbidden(ip.parse().unwrap(), false), None, "{ip}");
    }
}
