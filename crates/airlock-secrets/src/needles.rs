//! Finding any of many byte strings in one pass, leftmost-longest, fast
//! enough to run over every message: the scrubber's engine, and the
//! envelope's check for its own nonce.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, Input, MatchKind};

/// A set of byte strings to find (empty ones are ignored).
#[derive(Clone)]
pub struct Needles(Matcher);

impl Needles {
    pub fn new<S: AsRef<[u8]>>(needles: &[S]) -> Needles {
        let patterns: Vec<Vec<u8>> = needles
            .iter()
            .map(|n| n.as_ref().to_vec())
            .filter(|n| !n.is_empty())
            .collect();
        Needles(Matcher::new(&patterns))
    }

    /// The leftmost match, the longest of those that start there.
    pub fn find(&self, hay: &[u8]) -> Option<(usize, usize)> {
        self.0.next(hay, 0)
    }

    /// Every match, left to right, none overlapping.
    pub fn iter<'a>(&'a self, hay: &'a [u8]) -> impl Iterator<Item = (usize, usize)> + 'a {
        self.0.iter(hay)
    }

    /// Whether the fast sampled scan is used (every needle is long enough).
    pub fn sampled(&self) -> bool {
        matches!(self.0, Matcher::Sampled(_))
    }
}

/// Finds the leftmost-longest pattern matches.
///
/// With hundreds of patterns (every form of every secret) an Aho-Corasick
/// DFA outgrows the CPU caches and scans at a fraction of a GB/s. When
/// every pattern is at least [`WINDOW_MIN`] bytes long, the matcher samples
/// instead: any match of length `m` or more contains a `w`-byte window
/// that starts at a multiple of the stride `s = m - w + 1` (counted from
/// where the scan began), at an offset below `s` into the pattern. So
/// every pattern's windows at offsets `0..s` are indexed, the text is
/// looked at only every `s` bytes (a hash and a bit test in a filter that
/// fits in L1), and where the filter agrees the candidate patterns are
/// compared byte for byte. See [`Sampled::next`] for why this is leftmost-longest.
#[derive(Clone)]
enum Matcher {
    Sampled(Sampled),
    /// Some pattern is shorter than [`WINDOW_MIN`]: the automaton scans.
    Automaton(AhoCorasick),
}

/// Patterns shorter than this leave no window to sample.
const WINDOW_MIN: usize = 4;
/// The stride is capped so that very long secrets do not index hundreds
/// of windows each.
const STRIDE_MAX: usize = 32;

#[derive(Clone)]
struct Sampled {
    patterns: Vec<Vec<u8>>,
    /// Window width: 8 bytes when every pattern allows it, else 4.
    width: usize,
    stride: usize,
    /// Two bitsets over the windows, hashed two ways, `1 << bits` bits
    /// each: the first is tested at every sample, the second only where
    /// the first agrees.
    filters: [Box<[u64]>; 2],
    bits: u32,
    /// Every indexed window, sorted: (window, pattern, offset in pattern).
    windows: Vec<(u64, u32, u32)>,
}

impl Sampled {
    fn new(patterns: &[Vec<u8>]) -> Option<Sampled> {
        let shortest = patterns.iter().map(Vec::len).min()?;
        if shortest < WINDOW_MIN {
            return None;
        }
        let width = if shortest >= 12 { 8 } else { 4 };
        let stride = (shortest - width + 1).min(STRIDE_MAX);
        let mut windows = Vec::with_capacity(patterns.len() * stride);
        for (i, p) in patterns.iter().enumerate() {
            for offset in 0..stride {
                let w = if width == 8 {
                    window::<8>(p, offset)
                } else {
                    window::<4>(p, offset)
                };
                windows.push((w, i as u32, offset as u32));
            }
        }
        windows.sort_unstable();
        windows.dedup();
        // Up to 64 bits per window in each filter, within 2^12..2^18 bits
        // (at most 32 KiB each, so that the first stays in L1).
        let bits = (windows.len() * 64)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(12, 18);
        let filters = [MIX_1, MIX_2].map(|mix| {
            let mut filter = vec![0u64; 1 << (bits - 6)].into_boxed_slice();
            for &(w, _, _) in &windows {
                let h = hash(w, mix, bits);
                filter[h >> 6] |= 1 << (h & 63);
            }
            filter
        });
        Some(Sampled {
            patterns: patterns.to_vec(),
            width,
            stride,
            filters,
            bits,
            windows,
        })
    }

    /// The first filter test, taken at every sample.
    fn maybe(&self, w: u64) -> bool {
        bit(&self.filters[0], hash(w, MIX_1, self.bits))
    }

    /// Both filter tests: the second keeps text that repeats an unlucky
    /// window from being compared over and over.
    fn likely(&self, w: u64) -> bool {
        self.maybe(w) && bit(&self.filters[1], hash(w, MIX_2, self.bits))
    }

    /// The leftmost-longest match starting at or after `at`.
    ///
    /// Samples are taken at `at, at + s, at + 2s…`. A match starting at
    /// `q` holds the sample `p` that is the first at or after `q`
    /// (`p - q < s`, and `p - q + w <= m` because `s = m - w + 1`), and the
    /// window at `p` is that pattern's window at offset `p - q`, which is
    /// indexed. Conversely every match starting in `(p - s, p]` is found
    /// from the sample `p`. So the first sample whose window yields a
    /// verified match yields every match starting in its stretch, none
    /// starts earlier (an earlier stretch would have yielded it), and the
    /// earliest start, longest pattern among them, is the answer.
    fn next(&self, hay: &[u8], at: usize) -> Option<(usize, usize)> {
        if self.width == 8 {
            self.scan::<8>(hay, at)
        } else {
            self.scan::<4>(hay, at)
        }
    }

    fn scan<const W: usize>(&self, hay: &[u8], at: usize) -> Option<(usize, usize)> {
        let s = self.stride;
        let mut p = at;
        // Four samples per step while they all fit.
        while p + 3 * s + W <= hay.len() {
            let any = self.maybe(window::<W>(hay, p))
                | self.maybe(window::<W>(hay, p + s))
                | self.maybe(window::<W>(hay, p + 2 * s))
                | self.maybe(window::<W>(hay, p + 3 * s));
            if any {
                for k in 0..4 {
                    if let Some(m) = self.verify::<W>(hay, at, p + k * s) {
                        return Some(m);
                    }
                }
            }
            p += 4 * s;
        }
        while p + W <= hay.len() {
            if let Some(m) = self.verify::<W>(hay, at, p) {
                return Some(m);
            }
            p += s;
        }
        None
    }

    /// The leftmost-longest match found through the window at `p`.
    fn verify<const W: usize>(&self, hay: &[u8], at: usize, p: usize) -> Option<(usize, usize)> {
        let key = window::<W>(hay, p);
        if !self.likely(key) {
            return None;
        }
        let first = self.windows.partition_point(|&(w, _, _)| w < key);
        let mut best: Option<(usize, usize)> = None;
        for &(w, i, offset) in &self.windows[first..] {
            if w != key {
                break;
            }
            let Some(start) = p.checked_sub(offset as usize).filter(|&q| q >= at) else {
                continue;
            };
            let pattern = &self.patterns[i as usize];
            let end = start + pattern.len();
            if hay.get(start..end) != Some(pattern.as_slice()) {
                continue;
            }
            let better = match best {
                None => true,
                Some((bs, be)) => start < bs || (start == bs && end > be),
            };
            if better {
                best = Some((start, end));
            }
        }
        best
    }
}

/// The `W` bytes at `at` (4 or 8), as a number.
fn window<const W: usize>(bytes: &[u8], at: usize) -> u64 {
    let chunk = bytes[at..]
        .first_chunk::<W>()
        .expect("the caller checked the length");
    let mut word = [0u8; 8];
    word[..W].copy_from_slice(chunk);
    u64::from_le_bytes(word)
}

const MIX_1: u64 = 0x9E37_79B9_7F4A_7C15;
const MIX_2: u64 = 0xC2B2_AE3D_27D4_EB4F;

fn bit(filter: &[u64], h: usize) -> bool {
    (filter[h >> 6] >> (h & 63)) & 1 != 0
}

fn hash(w: u64, mix: u64, bits: u32) -> usize {
    (w.wrapping_mul(mix) >> (64 - bits)) as usize
}

impl Matcher {
    fn new(patterns: &[Vec<u8>]) -> Matcher {
        match Sampled::new(patterns) {
            Some(sampled) => Matcher::Sampled(sampled),
            None => Matcher::Automaton(automaton(patterns)),
        }
    }

    /// The first match starting at or after `at`.
    fn next(&self, hay: &[u8], at: usize) -> Option<(usize, usize)> {
        match self {
            Matcher::Sampled(s) => s.next(hay, at),
            Matcher::Automaton(a) => a
                .find(Input::new(hay).range(at..))
                .map(|m| (m.start(), m.end())),
        }
    }

    /// Every match, left to right, none overlapping.
    fn iter<'a>(&'a self, hay: &'a [u8]) -> impl Iterator<Item = (usize, usize)> + 'a {
        let mut at = 0;
        std::iter::from_fn(move || {
            let (start, end) = self.next(hay, at)?;
            at = end.max(start + 1);
            Some((start, end))
        })
    }
}

fn automaton(patterns: &[Vec<u8>]) -> AhoCorasick {
    AhoCorasickBuilder::new()
        .match_kind(MatchKind::LeftmostLongest)
        .kind(Some(AhoCorasickKind::DFA))
        .build(patterns)
        .expect("patterns build an automaton")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sampled scan against the plain automaton, on text built from
    /// pieces of patterns that share prefixes, nest and overlap, for
    /// pattern sets whose shortest member gives strides 1 to 9 and both
    /// window widths.
    #[test]
    fn sampled_scan_finds_what_the_plain_automaton_finds() {
        let sets: [&[&str]; 4] = [
            &["abcdef", "abcdefgh", "bcdexy", "cdefab", "zzzz", "abcdzz"],
            &[
                "abcdefghijkl",
                "abcdefghijklmn",
                "cdefghijklab",
                "ghijklabcdef",
            ],
            &[
                "aaaaaaaaaaaaaaaaaaaa",
                "aaaaaaaaaaaaaaab",
                "abababababababab",
            ],
            &[
                "abcdabcdabcd",
                "bcdabcdabcda",
                "dabcdabcdabcdab",
                "abcdzabcdzab",
            ],
        ];
        let mut seed = 7u64;
        for set in sets {
            let patterns: Vec<Vec<u8>> = set.iter().map(|p| p.as_bytes().to_vec()).collect();
            let matcher = Matcher::new(&patterns);
            assert!(matches!(matcher, Matcher::Sampled(_)));
            let plain = automaton(&patterns);
            let mut next = || {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                seed
            };
            for _ in 0..3000 {
                let mut hay = Vec::new();
                for _ in 0..(next() >> 60) {
                    let seed = next();
                    let piece = &patterns[(seed >> 33) as usize % patterns.len()];
                    let cut = (seed >> 20) as usize % (piece.len() + 1);
                    hay.extend_from_slice(&piece[..cut]);
                    hay.extend_from_slice(&b"abz.a"[..(seed >> 40) as usize % 3]);
                }
                let ours: Vec<_> = matcher.iter(&hay).collect();
                let theirs: Vec<_> = plain
                    .find_iter(&hay)
                    .map(|m| (m.start(), m.end()))
                    .collect();
                assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(&hay));
                // And from every starting point, as the stream scrubber asks.
                for at in 0..hay.len().min(24) {
                    let theirs = plain
                        .find(Input::new(&hay).range(at..))
                        .map(|m| (m.start(), m.end()));
                    assert_eq!(matcher.next(&hay, at), theirs);
                }
            }
        }
    }

    #[test]
    fn short_needles_are_scanned_by_the_automaton() {
        let n = Needles::new(&["abc", "abcdefgh"]);
        assert!(!n.sampled());
        assert_eq!(
            n.iter(b"xabcx abcdefgh").collect::<Vec<_>>(),
            [(1, 4), (6, 14)]
        );
        assert!(Needles::new(&["abcd"]).sampled());
        assert_eq!(Needles::new::<&str>(&[]).find(b"anything"), None);
    }
}
