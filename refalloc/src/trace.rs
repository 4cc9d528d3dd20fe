//! Streaming reader of the binary trace format (docs/trace-format.md, version 1).
//! The JSON header is skipped here: the Python side reads it and passes the config.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};

pub const MAGIC: &[u8; 8] = b"\x89BATR\r\n\x1a";
pub const VERSION: u16 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Alloc,
    Free,
    Realloc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

pub struct TraceReader<R: Read> {
    r: R,
    where_: String,
    offset: u64,
    count: u64,
    t: u64,
    id: u64,
    ctx: Option<(u64, u64, u64)>,
    type_: Option<u64>,
    done: bool,
}

impl TraceReader<BufReader<File>> {
    pub fn open(path: &str) -> Result<Self, TraceError> {
        let f = File::open(path).map_err(|e| TraceError(format!("{path}: {e}")))?;
        TraceReader::new(BufReader::with_capacity(1 << 20, f), path)
    }
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
        let skipped = std::io::copy(&mut (&mut r).take(hlen), &mut std::io::sink())
            .map_err(|e| err(e.to_string()))?;
        if skipped < hlen {
            return Err(err(format!("truncated header ({skipped} of {hlen} bytes)")));
        }
        Ok(TraceReader {
            r,
            where_: where_.to_string(),
            offset: 16 + hlen,
            count: 0,
            t: 0,
            id: 0,
            ctx: None,
            type_: None,
            done: false,
        })
    }

    fn err(&self, m: String) -> TraceError {
        TraceError(format!("{}: {m}", self.where_))
    }

    fn byte(&mut self) -> Result<Option<u8>, TraceError> {
        let mut b = [0u8; 1];
        match self.r.read(&mut b) {
            Ok(0) => Ok(None),
            Ok(_) => {
                self.offset += 1;
                Ok(Some(b[0]))
            }
            Err(e) => Err(self.err(e.to_string())),
        }
    }

    fn uvarint(&mut self, start: u64) -> Result<u64, TraceError> {
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?.ok_or_else(|| {
                self.err(format!(
                    "truncated record at byte {start} after {} events",
                    self.count
                ))
            })?;
            if shift == 63 && b > 1 {
                return Err(self.err(format!("varint above 2^64-1 at byte {}", self.offset)));
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(self.err(format!(
            "varint longer than 10 bytes at byte {}",
            self.offset
        )))
    }

    fn svarint(&mut self, start: u64) -> Result<u64, TraceError> {
        let u = self.uvarint(start)?;
        Ok(((u >> 1) as i64 ^ -((u & 1) as i64)) as u64)
    }

    /// The next event, Ok(None) after a valid END record.
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        if self.done {
            return Ok(None);
        }
        let start = self.offset;
        let tag = match self.byte()? {
            Some(t) => t,
            None => {
                return Err(self.err(format!(
                    "truncated after {} events (no END record at byte {start})",
                    self.count
                )))
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
                return Err(self.err(format!("data after END record at byte {}", self.offset - 1)));
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
}
