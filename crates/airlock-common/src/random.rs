//! Random bytes from the operating system, the one source every secret,
//! id and nonce airlock makes comes from.

/// `N` random bytes. Panics only if the OS has no random source, which no
/// supported system lacks and nothing safe can continue without.
pub fn bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    getrandom::fill(&mut out).expect("the OS random source is available");
    out
}

/// `N` random bytes as `2N` lowercase hex digits.
pub fn hex<const N: usize>() -> String {
    ::hex::encode(bytes::<N>())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_fresh_and_sized() {
        let (a, b) = (super::hex::<16>(), super::hex::<16>());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
