//! Streaming reader of the binary trace format (docs/trace-format.md, version 1).
//! The one reader of the format: `beamalloc.trace` hands its JSON header (bounded by
//! MAX_HEADER, kept in `header`) to `TraceHeader.from_json` and iterates the events from here.

use std::fmt;
use std::fs::File;
use std::io::Read;

pub const MAGIC: &[u8; 8] = b"\x89BATR\r\n\x1a";
pub const VERSION: u16 = 1;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Op {
    #[default]
    Alloc,
    Free,
    Realloc,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub t_ns: u64,
    pub op: Op,
    pub allocator: u64,
    pub instance: u64,
    pub type_: u64,
    pub size: u64,
    pub id: u64,
    pub new_id: u64,
    pub thread: u64,
}

#[derive(Debug)]
pub struct TraceError(pub String);

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceError {}

/// Longest possible record: tag, then at most eight varints of at most 10 bytes each (a
/// realloc with CTX and TYPE: time, allocator, instance, thread, type, size, id, new_id).
const MAX_RECORD: usize = 1 + 8 * 10;
/// The largest header accepted (JSON: the source, thread names, type tables: a few kB).
pub const MAX_HEADER: u64 = 16 << 20;
/// Read buffer size (records are decoded in place from it).
const BUF_SIZE: usize = 1 << 20;

pub struct TraceReader<R: Read> {
    r: R,
    where_: String,
    /// Undecoded input is `buf[pos..end]`; `base` is the file offset of `buf[0]`.
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    base: u64,
    eof: bool,
    count: u64,
    t: u64,
    id: u64,
    ctx: Option<(u64, u64, u64)>,
    type_: Option<u64>,
    done: bool,
    /// The header's JSON text, as stored.
    pub header: Vec<u8>,
    /// A trace that stops without its END record (a tracer that was killed) ends at its last
    /// whole record instead of failing.
    pub allow_truncated: bool,
    /// The last error was the input's end inside a record or before the END record.
    cut: bool,
    /// Tests and fuzzing: decode everything on the checked path, the reference for the fast one.
    #[cfg(any(test, fuzzing))]
    checked_only: bool,
}

impl TraceReader<File> {
    pub fn open(path: &str) -> Result<Self, TraceError> {
        let f = File::open(path).map_err(|e| TraceError(format!("{path}: {e}")))?;
        TraceReader::new(f, path)
    }
}

/// Fast-path varint: `b` holds at least 10 bytes from `*i`. None for anything unusual (over
/// 10 bytes, above 2^64-1), which the checked path then reports. (A branch-free 8-byte decode
/// was tried: fewer mispredictions, but 1.6x the instructions, slower overall.)
#[inline(always)]
fn fast_uvarint(b: &[u8], i: &mut usize) -> Option<u64> {
    let x = b[*i];
    if x < 0x80 {
        *i += 1;
        return Some(x as u64);
    }
    let mut v = (x & 0x7f) as u64;
    for k in 1..10 {
        let x = b[*i + k];
        if k == 9 && x > 1 {
            return None;
        }
        v |= ((x & 0x7f) as u64) << (7 * k);
        if x < 0x80 {
            *i += k + 1;
            return Some(v);
        }
    }
    None
}

/// `fast_uvarint` without a branch on the length up to 4 bytes (values below 2^28), for the
/// fields whose length varies from record to record (sizes, id deltas), where the length
/// branches of `fast_uvarint` mispredicted: one 4-byte load, the first byte without the
/// continuation bit ends the number, the 7-bit groups are joined by masks and shifts; longer
/// varints take `fast_uvarint`. The branch-free 8-byte decode dropped earlier cost 1.6x the
/// decoder's instructions; this one +23 % (115 -> 141 an event on bench_replay's trace, and
/// mispredicts 1.9 -> 0.4 an event), decoding alone 0.36 -> 0.24 s on 20 M events.
#[inline(always)]
fn fast_uvarint_mixed(b: &[u8], i: &mut usize) -> Option<u64> {
    let w = u32::from_le_bytes(b[*i..*i + 4].try_into().expect("4 bytes"));
    let stops = !w & 0x8080_8080;
    if stops == 0 {
        return fast_uvarint(b, i);
    }
    // 8, 16, 24 or 32: the bits up to and including the last byte
    let bits = stops.trailing_zeros() + 1;
    *i += (bits / 8) as usize;
    let w = (w as u64) << (64 - bits) >> (64 - bits);
    // bytes 0 and 1, 2 and 3 paired into 14-bit fields at bits 0 and 16, then joined
    let x = (w & 0x007f_007f) | (w >> 1 & 0x3f80_3f80);
    Some((x & 0x3fff) | (x >> 2 & 0xfff_c000))
}

#[inline(always)]
fn unzigzag(u: u64) -> u64 {
    ((u >> 1) as i64 ^ -((u & 1) as i64)) as u64
}

impl<R: Read> TraceReader<R> {
    pub fn new(mut r: R, where_: &str) -> Result<Self, TraceError> {
        let mut fixed = [0u8; 16];
        let err = |m: String| TraceError(format!("{where_}: {m}"));
        r.read_exact(&mut fixed)
            .map_err(|_| err("not a beamalloc trace (bad magic)".into()))?;
        if &fixed[..8] != MAGIC {
            return Err(err("not a beamalloc trace (bad magic)".into()));
        }
        let version = u16::from_le_bytes([fixed[8], fixed[9]]);
        let flags = u16::from_le_bytes([fixed[10], fixed[11]]);
        let hlen = u32::from_le_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]) as u64;
        if version != VERSION {
            return Err(err(format!(
                "trace format version {version} is not supported (this reader: {VERSION})"
            )));
        }
        if flags != 0 {
            return Err(err(format!("unknown header flags 0x{flags:04x}")));
        }
        if hlen > MAX_HEADER {
            return Err(err(format!(
                "a header of {hlen} bytes (at most {MAX_HEADER})"
            )));
        }
        let mut header = Vec::new();
        (&mut r)
            .take(hlen)
            .read_to_end(&mut header)
            .map_err(|e| err(e.to_string()))?;
        if (header.len() as u64) < hlen {
            return Err(err(format!(
                "truncated header ({} of {hlen} bytes)",
                header.len()
            )));
        }
        Ok(TraceReader {
            r,
            where_: where_.to_string(),
            buf: vec![0u8; BUF_SIZE].into_boxed_slice(),
            pos: 0,
            end: 0,
            base: 16 + hlen,
            eof: false,
            count: 0,
            t: 0,
            id: 0,
            ctx: None,
            type_: None,
            done: false,
            header,
            allow_truncated: false,
            cut: false,
            #[cfg(any(test, fuzzing))]
            checked_only: false,
        })
    }

    /// Fuzzing: decode on the checked path only (the reference the fast path must agree with).
    #[cfg(any(test, fuzzing))]
    pub fn set_checked_only(&mut self, on: bool) {
        self.checked_only = on;
    }

    /// The name errors carry (the path, for a file).
    pub fn where_(&self) -> &str {
        &self.where_
    }

    fn err(&self, m: String) -> TraceError {
        TraceError(format!("{}: {m}", self.where_))
    }

    /// File offset of the next undecoded byte.
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Read until at least `want` bytes are buffered or the input ends.
    #[inline(never)]
    fn fill(&mut self, want: usize) -> Result<(), TraceError> {
        if self.end - self.pos >= want || self.eof {
            return Ok(());
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while self.end < want {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err(e.to_string())),
            }
        }
        Ok(())
    }

    fn byte(&mut self) -> Result<Option<u8>, TraceError> {
        self.fill(1)?;
        if self.pos == self.end {
            return Ok(None);
        }
        self.pos += 1;
        Ok(Some(self.buf[self.pos - 1]))
    }

    /// A varint; its errors name the file offset of the byte that made it bad.
    fn uvarint(&mut self, start: u64) -> Result<u64, TraceError> {
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let Some(b) = self.byte()? else {
                self.cut = true;
                return Err(self.err(format!(
                    "truncated record at byte {start} after {} events",
                    self.count
                )));
            };
            if shift == 63 && b >= 0x80 {
                return Err(self.err(format!(
                    "varint longer than 10 bytes ending at byte {}",
                    self.offset() - 1
                )));
            }
            if shift == 63 && b > 1 {
                return Err(self.err(format!(
                    "varint above 2^64-1 ending at byte {}",
                    self.offset() - 1
                )));
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                break;
            }
        }
        Ok(v)
    }

    fn svarint(&mut self, start: u64) -> Result<u64, TraceError> {
        Ok(unzigzag(self.uvarint(start)?))
    }

    /// The next event, Ok(None) after a valid END record.
    #[inline]
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        if self.done {
            return Ok(None);
        }
        if self.end - self.pos < MAX_RECORD {
            self.fill(MAX_RECORD)?;
        }
        if let Some(e) = self.next_buffered() {
            return Ok(Some(e));
        }
        self.next_checked()
    }

    /// Call `f` on every event up to the END record (the replay loop: no `Option`/`Result`
    /// wrapping per event on the fast path).
    #[inline]
    pub fn for_each_event(&mut self, mut f: impl FnMut(&Event)) -> Result<(), TraceError> {
        self.for_each_event_while(|e| {
            f(e);
            true
        })
    }

    /// `for_each_event` until `f` returns false (the events after it are left unread).
    #[inline]
    pub fn for_each_event_while(
        &mut self,
        mut f: impl FnMut(&Event) -> bool,
    ) -> Result<(), TraceError> {
        if self.done {
            return Ok(());
        }
        loop {
            if self.end - self.pos < MAX_RECORD {
                self.fill(MAX_RECORD)?;
            }
            // One call site of `f`, so that the compiler inlines it into this loop.
            let e = match self.next_buffered() {
                Some(e) => e,
                None => match self.next_checked() {
                    Ok(Some(e)) => e,
                    Ok(None) => return Ok(()),
                    Err(e) => {
                        self.done = true;
                        return Err(e);
                    }
                },
            };
            if !f(&e) {
                return Ok(());
            }
        }
    }

    /// Fast path: a well-formed alloc/free/realloc record that lies wholly in the buffer is
    /// decoded straight from it. Anything else (END, a bad tag, missing context, odd varints,
    /// the last bytes of the input) returns None with nothing consumed, for `next_checked`.
    /// Callers check `done` first.
    #[inline(always)]
    fn next_buffered(&mut self) -> Option<Event> {
        #[cfg(any(test, fuzzing))]
        if self.checked_only {
            return None;
        }
        if self.end - self.pos < MAX_RECORD {
            return None;
        }
        let b = &self.buf[self.pos..self.pos + MAX_RECORD];
        let tag = b[0];
        if tag & 0xf0 != 0 || tag & 3 == 3 {
            return None;
        }
        let mut i = 1;
        let dt = unzigzag(fast_uvarint(b, &mut i)?);
        let (allocator, instance, thread) = if tag & 0x04 != 0 {
            let a = fast_uvarint(b, &mut i)?;
            let ins = fast_uvarint(b, &mut i)?;
            (a, ins, fast_uvarint(b, &mut i)?)
        } else {
            self.ctx?
        };
        let ty = if tag & 0x08 != 0 {
            fast_uvarint(b, &mut i)?
        } else {
            self.type_?
        };
        let size = fast_uvarint_mixed(b, &mut i)?;
        let id = self
            .id
            .wrapping_add(unzigzag(fast_uvarint_mixed(b, &mut i)?));
        let op = match tag & 3 {
            0 => Op::Alloc,
            1 => Op::Free,
            _ => Op::Realloc,
        };
        let new_id = if op == Op::Realloc {
            id.wrapping_add(unzigzag(fast_uvarint(b, &mut i)?))
        } else {
            0
        };
        self.pos += i;
        self.t = self.t.wrapping_add(dt);
        self.id = id;
        if tag & 0x04 != 0 {
            self.ctx = Some((allocator, instance, thread));
        }
        if tag & 0x08 != 0 {
            self.type_ = Some(ty);
        }
        self.count += 1;
        Some(Event {
            t_ns: self.t,
            op,
            allocator,
            instance,
            type_: ty,
            size,
            id,
            new_id,
            thread,
        })
    }

    /// `next_checked_cut`, where a cut trace ends at its last whole record if allowed.
    #[cold]
    fn next_checked(&mut self) -> Result<Option<Event>, TraceError> {
        match self.next_checked_cut() {
            Err(_) if self.cut && self.allow_truncated => {
                self.done = true;
                Ok(None)
            }
            r => r,
        }
    }

    /// Byte-at-a-time decoding with every check and error message.
    fn next_checked_cut(&mut self) -> Result<Option<Event>, TraceError> {
        if self.done {
            return Ok(None);
        }
        let start = self.offset();
        let tag = match self.byte()? {
            Some(t) => t,
            None => {
                self.cut = true;
                return Err(self.err(format!(
                    "truncated after {} events (no END record at byte {start})",
                    self.count
                )));
            }
        };
        if tag == 0x03 {
            let total = self.uvarint(start)?;
            if total != self.count {
                return Err(self.err(format!(
                    "END record says {total} events but {} were read",
                    self.count
                )));
            }
            if self.byte()?.is_some() {
                return Err(self.err(format!(
                    "data after END record at byte {}",
                    self.offset() - 1
                )));
            }
            self.done = true;
            return Ok(None);
        }
        if tag & 0xf0 != 0 || tag & 3 == 3 {
            return Err(self.err(format!("bad record tag 0x{tag:02x} at byte {start}")));
        }
        self.t = self.t.wrapping_add(self.svarint(start)?);
        if tag & 0x04 != 0 {
            let a = self.uvarint(start)?;
            let i = self.uvarint(start)?;
            let th = self.uvarint(start)?;
            self.ctx = Some((a, i, th));
        }
        if tag & 0x08 != 0 {
            self.type_ = Some(self.uvarint(start)?);
        }
        let (Some((allocator, instance, thread)), Some(type_)) = (self.ctx, self.type_) else {
            return Err(self.err(format!(
                "record at byte {start} lacks allocator/type context"
            )));
        };
        let size = self.uvarint(start)?;
        self.id = self.id.wrapping_add(self.svarint(start)?);
        let op = match tag & 3 {
            0 => Op::Alloc,
            1 => Op::Free,
            _ => Op::Realloc,
        };
        let new_id = if op == Op::Realloc {
            self.id.wrapping_add(self.svarint(start)?)
        } else {
            0
        };
        self.count += 1;
        Ok(Some(Event {
            t_ns: self.t,
            op,
            allocator,
            instance,
            type_,
            size,
            id: self.id,
            new_id,
            thread,
        }))
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Event, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Streaming writer of the binary format (the Rust twin of `beamalloc.trace.TraceWriter`):
/// used by the bench's generator and the reader's round-trip and mutation tests.
pub struct TraceWriter<W: std::io::Write> {
    w: W,
    buf: Vec<u8>,
    t: u64,
    id: u64,
    ctx: Option<(u64, u64, u64)>,
    type_: Option<u64>,
    pub count: u64,
}

impl<W: std::io::Write> TraceWriter<W> {
    /// Writes the fixed prefix and `header_json` (a JSON object, docs/trace-format.md).
    pub fn new(mut w: W, header_json: &str) -> std::io::Result<Self> {
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&0u16.to_le_bytes())?;
        w.write_all(&(header_json.len() as u32).to_le_bytes())?;
        w.write_all(header_json.as_bytes())?;
        Ok(TraceWriter {
            w,
            buf: Vec::with_capacity(1 << 16),
            t: 0,
            id: 0,
            ctx: None,
            type_: None,
            count: 0,
        })
    }

    fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn svarint(&mut self, d: u64) {
        let d = d as i64;
        self.uvarint(((d << 1) ^ (d >> 63)) as u64);
    }

    pub fn write(&mut self, e: &Event) -> std::io::Result<()> {
        let mut tag = match e.op {
            Op::Alloc => 0u8,
            Op::Free => 1,
            Op::Realloc => 2,
        };
        let ctx = (e.allocator, e.instance, e.thread);
        if self.ctx != Some(ctx) {
            tag |= 0x04;
        }
        if self.type_ != Some(e.type_) {
            tag |= 0x08;
        }
        self.buf.push(tag);
        self.svarint(e.t_ns.wrapping_sub(self.t));
        if tag & 0x04 != 0 {
            self.uvarint(e.allocator);
            self.uvarint(e.instance);
            self.uvarint(e.thread);
            self.ctx = Some(ctx);
        }
        if tag & 0x08 != 0 {
            self.uvarint(e.type_);
            self.type_ = Some(e.type_);
        }
        self.uvarint(e.size);
        self.svarint(e.id.wrapping_sub(self.id));
        if e.op == Op::Realloc {
            self.svarint(e.new_id.wrapping_sub(e.id));
        }
        self.t = e.t_ns;
        self.id = e.id;
        self.count += 1;
        if self.buf.len() >= 1 << 16 {
            self.w.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the END record and returns the inner writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.buf.push(0x03);
        let n = self.count;
        self.uvarint(n);
        self.w.write_all(&self.buf)?;
        self.w.flush()?;
        Ok(self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_documented_example() {
        // docs/trace-format.md, "Example".
        let bytes: Vec<u8> = [
            &MAGIC[..],
            &[1, 0, 0, 0, 2, 0, 0, 0],
            b"{}",
            &[
                0x0c, 0x0a, 0x0a, 0x01, 0x01, 0xd6, 0x01, 0x64, 0x20, 0x03, 0x01,
            ],
        ]
        .concat();
        let mut r = TraceReader::new(&bytes[..], "ex").unwrap();
        let e = r.next_event().unwrap().unwrap();
        assert_eq!(
            (
                e.t_ns,
                e.op,
                e.allocator,
                e.instance,
                e.thread,
                e.type_,
                e.size,
                e.id
            ),
            (5, Op::Alloc, 10, 1, 1, 214, 100, 16)
        );
        assert!(r.next_event().unwrap().is_none());
    }

    #[test]
    fn bad_files_give_one_line_errors() {
        let e = TraceReader::new(&b"nonsense-------------"[..], "x")
            .err()
            .unwrap();
        assert_eq!(e.to_string(), "x: not a beamalloc trace (bad magic)");
        let cut: Vec<u8> = [&MAGIC[..], &[1, 0, 0, 0, 0, 0, 0, 0], &[0x0c, 0x0a]].concat();
        let mut r = TraceReader::new(&cut[..], "c").unwrap();
        let e = r.next_event().err().unwrap().to_string();
        assert!(e.starts_with("c: truncated record at byte 16"), "{e}");
    }
    fn random_trace(rng: &mut impl FnMut() -> u64, n: usize) -> (Vec<u8>, Vec<Event>) {
        let mut w = TraceWriter::new(Vec::new(), "{\"schedulers\":2}").unwrap();
        let mut evs = Vec::new();
        for _ in 0..n {
            let r = rng();
            let op = [Op::Alloc, Op::Free, Op::Realloc][(r % 3) as usize];
            // Extreme values on purpose: deltas of either sign across the whole u64 range.
            let pick = |x: u64| match x % 4 {
                0 => x >> 3,
                1 => u64::MAX - (x % 5),
                2 => x % 300,
                _ => 0,
            };
            let e = Event {
                t_ns: pick(rng()),
                op,
                allocator: rng() % 13,
                instance: rng() % 4,
                type_: pick(rng()),
                size: pick(rng()),
                id: pick(rng()),
                new_id: if op == Op::Realloc { pick(rng()) } else { 0 },
                thread: rng() % 3,
            };
            w.write(&e).unwrap();
            evs.push(e);
        }
        (w.finish().unwrap(), evs)
    }

    #[test]
    fn fast_varints_decode_every_length() {
        let mut rng = crate::tests::xorshift(0xfa57_u64);
        for bits in 0..=64u32 {
            for _ in 0..50 {
                let v = if bits == 0 { 0 } else { rng() >> (64 - bits) };
                let mut w = TraceWriter::new(Vec::new(), "{}").unwrap();
                w.buf.clear();
                w.uvarint(v);
                let len = w.buf.len();
                // the bytes after it: continuation bytes, or a random tail
                let tail = rng();
                for k in len..16 {
                    w.buf.push(if tail & 1 == 0 {
                        0xff
                    } else {
                        (tail >> k) as u8
                    });
                }
                let mut i = 0;
                assert_eq!(fast_uvarint(&w.buf, &mut i), Some(v), "{v:#x}");
                assert_eq!(i, len);
                let mut i = 0;
                assert_eq!(fast_uvarint_mixed(&w.buf, &mut i), Some(v), "{v:#x}");
                assert_eq!(i, len);
            }
        }
        // Any bytes (overlong forms, above 2^64-1, over 10 bytes): the branch-free decode
        // answers as the branchy one, value and length.
        for _ in 0..100_000 {
            let r = rng();
            let b: Vec<u8> = (0..16)
                .map(|k| {
                    let x = (rng() >> 8) as u8;
                    // runs of continuation bytes, of all lengths
                    if k < (r % 12) as usize {
                        x | 0x80
                    } else {
                        x
                    }
                })
                .collect();
            let (mut i, mut j) = (0, 0);
            assert_eq!(
                fast_uvarint_mixed(&b, &mut i),
                fast_uvarint(&b, &mut j),
                "{b:x?}"
            );
            assert_eq!(i, j);
        }
        // Above 2^64-1 and longer than 10 bytes: left to the checked path.
        let mut i = 0;
        assert_eq!(
            fast_uvarint(
                &[0xff; 9].iter().chain(&[2, 0]).copied().collect::<Vec<_>>(),
                &mut i
            ),
            None
        );
        assert_eq!(fast_uvarint(&[0xff; 12], &mut i), None);
    }

    /// A realloc with CTX and TYPE whose eight varints are all 10 bytes long is 81 bytes: the
    /// fast path decodes it in place (a 71-byte window read past its end and panicked).
    #[test]
    fn longest_records_decode_in_place() {
        let big = |k: u64| (1 << 63) | k;
        let evs: Vec<Event> = (0..4u64)
            .map(|k| Event {
                t_ns: if k % 2 == 0 { big(k) } else { 1 },
                op: Op::Realloc,
                allocator: big(k),
                instance: big(k + 1),
                type_: big(k + 2),
                size: big(k + 3),
                id: if k % 2 == 0 { big(k) } else { 1 },
                new_id: if k % 2 == 0 { 1 } else { big(k) },
                thread: big(k + 4),
            })
            .collect();
        let mut w = TraceWriter::new(Vec::new(), "{}").unwrap();
        for e in &evs {
            w.write(e).unwrap();
        }
        let bytes = w.finish().unwrap();
        assert_eq!(bytes[16 + 2..].len(), 4 * 81 + 2);
        let got: Vec<Event> = TraceReader::new(&bytes[..], "l")
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(got, evs);
        crate::fuzzing::read_trace(&bytes);
    }

    #[test]
    fn writer_and_reader_round_trip() {
        let mut rng = crate::tests::xorshift(0x5eed_u64);
        for n in [0, 1, 2, 50, 500] {
            let (bytes, evs) = random_trace(&mut rng, n);
            let got: Vec<Event> = TraceReader::new(&bytes[..], "rt")
                .unwrap()
                .map(|e| e.unwrap())
                .collect();
            assert_eq!(got, evs);
        }
    }

    /// Randomized mutation testing of the reader (the fuzz target; no libFuzzer needed): flip,
    /// overwrite, insert, delete and truncate bytes of valid traces. The reader must never
    /// panic, never loop, and either stop with an error or read to a valid END. Iterations:
    /// `REFALLOC_FUZZ_SECS` seconds if set (e.g. 3600 for an hour), else a quick 3000 cases.
    #[test]
    fn reader_survives_mutations() {
        let secs: u64 = std::env::var("REFALLOC_FUZZ_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let mut rng = crate::tests::xorshift(0xF022_u64 ^ secs);
        let mut cases = 0u64;
        while cases < 3000 || std::time::Instant::now() < deadline {
            cases += 1;
            let n = (rng() % 40) as usize;
            let (mut b, _) = random_trace(&mut rng, n);
            for _ in 0..1 + rng() % 4 {
                if b.is_empty() {
                    break;
                }
                let at = (rng() % b.len() as u64) as usize;
                match rng() % 5 {
                    0 => b[at] ^= 1 << (rng() % 8),
                    1 => b[at] = rng() as u8,
                    2 => b.insert(at, rng() as u8),
                    3 => {
                        b.remove(at);
                    }
                    _ => b.truncate(at),
                }
            }
            // The fast path must give exactly what the checked path gives: same events, same
            // error message at the same point.
            crate::fuzzing::read_trace(&b);
        }
        if secs > 0 {
            eprintln!("reader_survives_mutations: {cases} cases in {secs} s");
        }
    }
}
