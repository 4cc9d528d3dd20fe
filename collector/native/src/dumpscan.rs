//! A crash dump's wanted section headers, found at byte level (collector/dumpscan.py, issue 28
//! item 1). A dump is `=HEADER` lines each followed by its section's lines; most of a large
//! dump's headers (=fun, =mod, =proc_heap, ...) belong to sections no reader uses. `Want::search`
//! finds the next header a reader keeps with one SIMD search for "\n=" (memchr's memmem) and a
//! few byte compares per header, where the Python side's regex stepped through every byte.
//!
//! What matches is what the pattern dumpscan.Headers.pattern() builds matches (the reference
//! the fuzzer reads against): after "\n=", a `prefix` name and anything, or a `line` name
//! followed by '\r's and then '\n' or the end of the data (a regex's `\Z`).

use memchr::memmem;

/// The headers a reader keeps.
pub struct Want {
    /// (name, whole line): a whole-line name matches only with nothing but '\r's after it
    specs: Vec<(Vec<u8>, bool)>,
    /// Boxed: memchr's AVX2 searcher holds 32-byte aligned vectors, and a pyo3 object's memory
    /// is only 16-byte aligned (held inline there, its aligned loads faulted)
    finder: Box<memmem::Finder<'static>>,
}

impl Want {
    pub fn new(specs: Vec<(Vec<u8>, bool)>) -> Want {
        Want { specs, finder: Box::new(memmem::Finder::new(b"\n=")) }
    }

    /// Whether the header whose name starts at `data[at..]` (just after "\n=") is kept.
    pub fn matches(&self, data: &[u8], at: usize) -> bool {
        let rest = data.get(at..).unwrap_or(&[]);
        self.specs.iter().any(|(name, line)| {
            let Some(after) = rest.strip_prefix(name.as_slice()) else {
                return false;
            };
            if !*line {
                return true;
            }
            let cr = after.iter().take_while(|&&b| b == b'\r').count();
            cr == after.len() || after[cr] == b'\n'
        })
    }

    /// Where the first kept header at or after `from` starts: the index of the '\n' of its
    /// "\n=". None when there is none in `data`.
    pub fn search(&self, data: &[u8], from: usize) -> Option<usize> {
        let mut i = from;
        while i < data.len() {
            let k = i + self.finder.find(&data[i..])?;
            if self.matches(data, k + 2) {
                return Some(k);
            }
            i = k + 1;
        }
        None
    }

    /// For each name, the rest of the first line of `text` that starts with it (the names of
    /// a section's `Key: ` lines, collector/dumpscan.Keys): what a regex `^(NAME|...)(.*)$`
    /// with re.M finds first, without a regex step a byte. Lines end at '\n' only.
    pub fn line_values(&self, text: &[u8]) -> Vec<Option<(usize, usize)>> {
        let mut out = vec![None; self.specs.len()];
        let mut left = self.specs.len();
        let mut start = 0;
        while left > 0 && start <= text.len() {
            let end = memchr::memchr(b'\n', &text[start..]).map_or(text.len(), |i| start + i);
            let line = &text[start..end];
            for (slot, (name, _)) in out.iter_mut().zip(&self.specs) {
                if line.starts_with(name) {
                    if slot.is_none() {
                        *slot = Some((start + name.len(), end));
                        left -= 1;
                    }
                    break; // no name is a prefix of another's "Key: "
                }
            }
            start = end + 1;
        }
        out
    }
}

/// Python's `str.isspace()`: Rust's White_Space and the separators \x1c-\x1f (what
/// `str.strip()` removes).
pub fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// A value as a count (`[0-9]{1,20}` once stripped, at most `max`), or None.
pub fn count(v: &str, max: u128) -> Option<u128> {
    let v = v.trim_matches(py_space);
    if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u128>().ok().filter(|&x| x <= max)
}

#[cfg(test)]
mod tests {
    use super::Want;

    fn want() -> Want {
        let s = |n: &str, l: bool| (n.as_bytes().to_vec(), l);
        Want::new(vec![s("allocator:", false), s("ets:", false), s("ets", true), s("end", true)])
    }

    #[test]
    fn finds_kept_headers_only() {
        let w = want();
        let d = b"=x\n=fun:1\nA\n=ets:<0.1.0>\nB\n=end\n";
        assert_eq!(w.search(d, 0), Some(11));
        assert_eq!(w.search(d, 12), Some(26));
        assert_eq!(w.search(d, 27), None);
    }

    #[test]
    fn a_line_name_needs_its_line_end() {
        let w = want();
        assert_eq!(w.search(b"a\n=ets_x\n=ets\r\r\n", 0), Some(8));
        assert_eq!(w.search(b"a\n=endx\n=end", 0), Some(7)); // the end of the data ends a line
        assert_eq!(w.search(b"a\n=end\rx\n", 0), None);
        assert_eq!(w.search(b"a\n=", 0), None);
        assert_eq!(w.search(b"a\n=allocator", 0), None);
        assert_eq!(w.search(b"\n=allocator:", 5), None);
    }

    #[test]
    fn line_values_first_of_each_at_a_line_start() {
        let s = |n: &str| (n.as_bytes().to_vec(), false);
        let w = Want::new(vec![s("OldHeap: "), s("OldHeap unused: "), s("State: "), s("Name: ")]);
        let t: &[u8] = b"State: Waiting\nInternal State: X\nOldHeap unused: 3\n\
                         OldHeap: 5\nState: Y\nOldHeap: ";
        let v: Vec<Option<&[u8]>> =
            w.line_values(t).into_iter().map(|r| r.map(|(a, b)| &t[a..b])).collect();
        assert_eq!(v, vec![Some(&b"5"[..]), Some(&b"3"[..]), Some(&b"Waiting"[..]), None]);
        assert_eq!(w.line_values(b""), vec![None; 4]);
    }

    #[test]
    fn counts_as_python_strips_and_matches_them() {
        use super::count;
        assert_eq!(count(" 12\x1f\u{a0}", 100), Some(12));
        assert_eq!(count("0012", 100), Some(12));
        assert_eq!(count("101", 100), None);
        assert_eq!(count("", 100), None);
        assert_eq!(count("1 2", 100), None);
        assert_eq!(count("\u{663}", 100), None); // another script's digit
        assert_eq!(count(&"9".repeat(20), u128::MAX), Some(99_999_999_999_999_999_999));
        assert_eq!(count(&"1".repeat(21), u128::MAX), None);
    }

    #[test]
    fn long_data() {
        let w = want();
        let mut d = b"abcdefgh\n=fun:1\n".repeat(10_000);
        let at = d.len() - 1;
        d.extend_from_slice(b"=end");
        assert_eq!(w.search(&d, 0), Some(at));
    }
}
