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
    /// the bytes a name starts with (most headers passed over fail on this one test)
    starts: [bool; 256],
    /// Boxed: memchr's AVX2 searcher holds 32-byte aligned vectors, and a pyo3 object's memory
    /// is only 16-byte aligned (held inline there, its aligned loads faulted)
    finder: Box<memmem::Finder<'static>>,
}

impl Want {
    pub fn new(specs: Vec<(Vec<u8>, bool)>) -> Want {
        let mut starts = [false; 256];
        for (name, _) in &specs {
            match name.first() {
                Some(&c) => starts[c as usize] = true,
                None => starts = [true; 256], // an empty name matches whatever follows
            }
        }
        Want {
            specs,
            starts,
            finder: Box::new(memmem::Finder::new(b"\n=")),
        }
    }

    /// Whether the header whose name starts at `data[at..]` (just after "\n=") is kept.
    pub fn matches(&self, data: &[u8], at: usize) -> bool {
        let rest = data.get(at..).unwrap_or(&[]);
        if let Some(&c) = rest.first() {
            if !self.starts[c as usize] {
                return false;
            }
        }
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

/// The limits of a scan (collector/dumpscan.py's CHUNK, MAX_LINE, MAX_SECTION, MAX_HEADER and
/// _EDGE, read at each scan so that tests can change them).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub chunk: usize,
    pub max_line: usize,
    pub max_section: usize,
    pub max_header: usize,
    pub edge: usize,
}

/// A kept section as `Scanner::next` gives it: its header line (trailing '\r's removed, at most
/// max_line bytes) in `Scanner::header`, its text (collector/dumpscan.py `_text`) in
/// `Scanner::body` where it has one.
#[derive(Debug, PartialEq, Eq)]
pub struct Found {
    /// the header's byte offset in the data (the head included)
    pub offset: u64,
    /// whether another header follows the section
    pub complete: bool,
    /// whether it has a text (`Scanner::body`)
    pub has_body: bool,
    /// the dump's first line (its header block), given whatever it is
    pub first: bool,
}

/// collector/dumpscan.py `scan`, step for step (the Python generator is the reference it is
/// tested and fuzzed against): the data is read in blocks of `chunk` bytes by `fill`, which
/// appends up to that many bytes to the vector it is given and returns how many (0 at the end).
/// The sections `want` does not keep are passed over with one SIMD search; only the last header
/// passed is copied (`last`, for a dump cut short).
/// What fills a scan's window: appends up to n bytes to the vector, returns how many (0: the
/// end of the data).
pub type Fill<'a, E> = dyn FnMut(&mut Vec<u8>, usize) -> Result<usize, E> + 'a;

pub struct Scanner {
    want: Want,
    lim: Limits,
    data: Vec<u8>,
    /// the next window, filled while `data` is still whole: nothing is dropped at the end
    alt: Vec<u8>,
    base: u64,
    eof: bool,
    pos: usize,
    first: bool,
    started: bool,
    done: bool,
    /// the sections read after the first (Stats.sections)
    pub sections: u64,
    /// the last header read or passed over, at most max_header bytes (Stats.last)
    pub last: Vec<u8>,
    pub header: Vec<u8>,
    pub body: Vec<u8>,
    nl_eq: Box<memmem::Finder<'static>>,
}

fn rstrip_cr(s: &[u8]) -> &[u8] {
    let n = s.iter().rev().take_while(|&&b| b == b'\r').count();
    &s[..s.len() - n]
}

impl Scanner {
    /// A scan of `head` and then what `fill` reads.
    pub fn new(specs: Vec<(Vec<u8>, bool)>, lim: Limits, head: &[u8]) -> Scanner {
        let lim = Limits {
            chunk: lim.chunk.max(1),
            ..lim
        };
        Scanner {
            want: Want::new(specs),
            lim,
            data: head.to_vec(),
            alt: Vec::new(),
            base: 0,
            eof: false,
            pos: 0,
            first: true,
            started: false,
            done: false,
            sections: 0,
            last: Vec::new(),
            header: Vec::new(),
            body: Vec::new(),
            nl_eq: Box::new(memmem::Finder::new(b"\n=")),
        }
    }

    /// Read a block; the bytes before `drop` are dropped. The shift, or None at the end (then
    /// nothing is dropped).
    fn more<E>(&mut self, drop: usize, fill: &mut Fill<'_, E>) -> Result<Option<usize>, E> {
        if self.eof {
            return Ok(None);
        }
        self.alt.clear();
        self.alt.extend_from_slice(&self.data[drop..]);
        if fill(&mut self.alt, self.lim.chunk)? == 0 {
            self.eof = true;
            return Ok(None);
        }
        std::mem::swap(&mut self.data, &mut self.alt);
        self.base += drop as u64;
        Ok(Some(drop))
    }

    fn find_nl_eq(&self, from: usize) -> Option<usize> {
        let d = self.data.get(from..)?;
        self.nl_eq.find(d).map(|i| from + i)
    }

    /// Note the last header whose line starts in data[a + 1..b + 1] (none of them kept); where
    /// the data may be dropped up to (dumpscan.py `passed`).
    fn passed(&mut self, a: usize, b: usize) -> usize {
        let end = (b + 1).min(self.data.len());
        if a >= end {
            return b;
        }
        // the last "\n=" of data[a..end], found from its end by the '='s (memrchr: a SIMD
        // search; few '='s are not a header's, and the last header is near the block's end)
        let mut hi = end;
        let r = loop {
            let Some(i) = memchr::memrchr(b'=', &self.data[a + 1..hi]) else {
                return b;
            };
            let i = a + 1 + i;
            if self.data[i - 1] == b'\n' {
                break i;
            }
            hi = i;
        };
        let lim = (r + self.lim.max_header).min(self.data.len());
        let e = memchr::memchr(b'\n', &self.data[r..lim]).map(|k| r + k);
        if e.is_none() && self.data.len() < r + self.lim.max_header && !self.eof {
            return r - 1;
        }
        let last = rstrip_cr(&self.data[r..e.unwrap_or(lim)]).to_vec();
        self.last = last;
        b
    }

    /// A section's lines as one text into `body` (dumpscan.py `_text`): trailing '\r's of each
    /// line removed, lines over max_line left out; false where no line is left.
    fn text(&mut self, a: usize, b: usize) -> bool {
        let raw = &self.data[a..b];
        self.body.clear();
        if memchr::memchr(b'\r', raw).is_none() && raw.len() <= self.lim.max_line {
            self.body.extend_from_slice(raw);
            return true;
        }
        let mut any = false;
        for line in raw.split(|&c| c == b'\n') {
            let line = rstrip_cr(line);
            if line.len() <= self.lim.max_line {
                if any {
                    self.body.push(b'\n');
                }
                self.body.extend_from_slice(line);
                any = true;
            }
        }
        any
    }

    /// The next section the scan keeps (the first line first), or None at the end.
    pub fn next<E>(&mut self, fill: &mut Fill<'_, E>) -> Result<Option<Found>, E> {
        if self.done {
            return Ok(None);
        }
        if !self.started {
            self.started = true;
            if self.data.is_empty() && self.more(0, fill)?.is_none() {
                self.done = true;
                return Ok(None);
            }
        }
        let lim = self.lim;
        loop {
            // the header line, at most max_line of it
            let mut pos = self.pos;
            let mut e = memchr::memchr(b'\n', &self.data[pos..]).map(|k| pos + k);
            while e.is_none() && self.data.len() - pos <= lim.max_line {
                let Some(s) = self.more(pos, fill)? else {
                    break;
                };
                pos -= s;
                e = memchr::memchr(b'\n', &self.data[pos..]).map(|k| pos + k);
            }
            let stop = e.unwrap_or(self.data.len());
            let header = rstrip_cr(&self.data[pos..stop.min(pos + lim.max_line)]);
            let offset = self.base + pos as u64;
            if !self.first {
                self.last.clear();
                self.last
                    .extend_from_slice(&header[..header.len().min(lim.max_header)]);
            }
            let kept = header.first() == Some(&b'=') && self.want.matches(header, 1);
            if !self.first && !kept {
                // pass over to the next header `want` keeps
                let mut a = pos;
                let m = loop {
                    let m = self.want.search(&self.data, a);
                    if let Some(k) = m {
                        if self.eof || k + lim.edge <= self.data.len() {
                            break m;
                        }
                    }
                    if self.eof {
                        break m;
                    }
                    let drop = a.max(self.data.len().saturating_sub(lim.edge));
                    let drop = self.passed(a, drop);
                    a = if self.more(drop, fill)?.is_some() {
                        0
                    } else {
                        drop
                    };
                };
                let Some(k) = m else {
                    self.passed(a, self.data.len());
                    self.done = true;
                    return Ok(None);
                };
                self.pos = k + 1;
                continue;
            }
            self.header.clear();
            self.header.extend_from_slice(header);
            let first = self.first;
            self.sections += u64::from(!first);
            self.first = false;
            let mut has_body = false;
            let mut n;
            match e {
                None => n = self.find_nl_eq(pos),
                Some(mut e) => {
                    // the section's lines run from e + 1 up to the next "\n=" or the end
                    n = self.find_nl_eq(e);
                    while n.is_none() && self.data.len() - e <= lim.max_section + 1 {
                        let Some(s) = self.more(pos, fill)? else {
                            break;
                        };
                        pos -= s;
                        e -= s;
                        n = self.find_nl_eq(e);
                    }
                    match n {
                        Some(k) if k - e <= lim.max_section + 1 => {
                            if k > e {
                                has_body = self.text(e + 1, k);
                            }
                        }
                        None if self.eof => {
                            // the file ends inside the section
                            let mut end = self.data.len();
                            if end > e + 1 {
                                if self.data[end - 1] == b'\n' {
                                    end -= 1;
                                }
                                has_body = self.text(e + 1, end);
                            }
                        }
                        _ => {
                            // longer than max_section: its first lines only
                            let end = (e + 1 + lim.max_section).min(self.data.len());
                            if let Some(k) = memchr::memrchr(b'\n', &self.data[e + 1..end]) {
                                has_body = self.text(e + 1, e + 1 + k);
                            }
                        }
                    }
                }
            }
            while n.is_none() {
                // pass over the rest
                let drop = pos.max(self.data.len() - 1);
                let Some(s) = self.more(drop, fill)? else {
                    break;
                };
                pos = pos.saturating_sub(s);
                let from =
                    pos.max((self.data.len() as u64).saturating_sub(lim.chunk as u64 + 1) as usize);
                n = self.find_nl_eq(from);
            }
            match n {
                Some(k) => self.pos = k + 1,
                None => self.done = true,
            }
            return Ok(Some(Found {
                offset,
                complete: n.is_some(),
                has_body,
                first,
            }));
        }
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
        Want::new(vec![
            s("allocator:", false),
            s("ets:", false),
            s("ets", true),
            s("end", true),
        ])
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
        let w = Want::new(vec![
            s("OldHeap: "),
            s("OldHeap unused: "),
            s("State: "),
            s("Name: "),
        ]);
        let t: &[u8] = b"State: Waiting\nInternal State: X\nOldHeap unused: 3\n\
                         OldHeap: 5\nState: Y\nOldHeap: ";
        let v: Vec<Option<&[u8]>> = w
            .line_values(t)
            .into_iter()
            .map(|r| r.map(|(a, b)| &t[a..b]))
            .collect();
        assert_eq!(
            v,
            vec![
                Some(&b"5"[..]),
                Some(&b"3"[..]),
                Some(&b"Waiting"[..]),
                None
            ]
        );
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
        assert_eq!(
            count(&"9".repeat(20), u128::MAX),
            Some(99_999_999_999_999_999_999)
        );
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
