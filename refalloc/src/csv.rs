//! Native fast path for the rows of a CSV trace (docs/trace-format.md, "CSV").
//!
//! `beamalloc.trace`'s Python reader is the reference: it owns the header, the messages and
//! every corner of Python's `csv` and `int()`. This reader takes the rows after the header and
//! accepts only the plain shape that `write_csv` and most tools write (ASCII, unquoted, decimal
//! or `0x` numbers, `\n` or `\r\n` line ends). On anything else, valid or not, it stops and
//! names the row, and the caller hands the whole file to the reference reader: so a row it
//! reads means the same events as the reference's, and every error keeps the reference's
//! words. The fuzzer `csv_fast` (tests/fuzz/) checks that equivalence on arbitrary bytes.

use crate::replay::{Lookahead, Replay};
use crate::trace::{Event, Op, TraceError};
use std::collections::HashMap;
use std::io::Read;

/// Allocator names a CSV may use instead of numbers (ERTS_ALC_A_*, docs/erts/alloc_util.md §1;
/// the same table as `beamalloc.trace.ALLOCATOR_NAMES`).
fn allocator_number(name: &[u8]) -> Option<u64> {
    Some(match name {
        b"sys_alloc" => 1,
        b"temp_alloc" => 2,
        b"sl_alloc" => 3,
        b"std_alloc" => 4,
        b"ll_alloc" => 5,
        b"eheap_alloc" => 6,
        b"ets_alloc" => 7,
        b"fix_alloc" => 8,
        b"literal_alloc" => 9,
        b"binary_alloc" => 10,
        b"driver_alloc" => 11,
        b"test_alloc" => 12,
        _ => return None,
    })
}

/// Python's `csv.field_size_limit()` default: a longer field is an error there.
const FIELD_LIMIT: usize = 131_072;

/// Type names seen so far: the header's table, then the names rows introduce, numbered from
/// `next` on in order of first appearance (as the reference reader numbers them).
pub struct Types {
    pub known: HashMap<Vec<u8>, u64>,
    pub next: u64,
    /// (name, number, allocator of the row that introduced it)
    pub added: Vec<(String, u64, u64)>,
}

impl Types {
    pub fn new(known: HashMap<String, u64>, next: u64) -> Types {
        Types {
            known: known
                .into_iter()
                .map(|(k, v)| (k.into_bytes(), v))
                .collect(),
            next,
            added: Vec::new(),
        }
    }
}

/// Why the fast path stopped: the 1-based line number of the row it did not take.
#[derive(Debug, PartialEq, Eq)]
pub struct Declined(pub u64);

#[inline]
fn strip(mut f: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = f {
        f = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = f {
        f = rest;
    }
    f
}

/// `[0-9]+` or `0x[0-9a-fA-F]+` within u64 (`f` stripped); anything else is the reference's
/// to judge.
#[inline]
fn number(f: &[u8]) -> Option<u64> {
    if f.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    if let [b'0', b'x' | b'X', digits @ ..] = f {
        if digits.is_empty() || digits.len() > 16 {
            return None;
        }
        for &b in digits {
            v = (v << 4) | (b as char).to_digit(16)? as u64;
        }
        return Some(v);
    }
    if f.len() <= 19 {
        // Below 10^19: no overflow to check, and no branch per digit.
        let mut bad = false;
        for &b in f {
            let d = b.wrapping_sub(b'0');
            bad |= d > 9;
            v = v.wrapping_mul(10).wrapping_add(d as u64);
        }
        return (!bad).then_some(v);
    }
    for &b in f {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(v)
}

/// `f` stripped, as every field `row` hands on.
fn allocator(f: &[u8]) -> Option<u64> {
    if let Some(n) = allocator_number(f) {
        return Some(n);
    }
    if f.first().is_some_and(u8::is_ascii_digit) {
        return number(f);
    }
    None
}

fn type_number(f: &[u8], alloc: u64, types: &mut Types) -> Option<u64> {
    if f.first().is_some_and(u8::is_ascii_digit) {
        return number(f);
    }
    if special(f) {
        return None;
    }
    if let Some(&n) = types.known.get(f) {
        return Some(n);
    }
    let n = types.next;
    types.next += 1;
    types.known.insert(f.to_vec(), n);
    // ASCII only reaches here (rows with other bytes are declined), so this cannot fail.
    types
        .added
        .push((String::from_utf8_lossy(f).into_owned(), n, alloc));
    Some(n)
}

/// Whether `f` has a byte the reference treats specially: a quote, NUL or another control but
/// tab, a lone CR, anything outside ASCII (UTF-8 checks, unicode whitespace and digits). A fold
/// without early exit, which the compiler vectorizes.
#[inline]
fn special(f: &[u8]) -> bool {
    f.iter().fold(false, |acc, &b| {
        acc | (b == b'"') | ((b < 0x20) & (b != b'\t')) | (b >= 0x7f)
    })
}

/// One data row (without its line end) -> Some(event), or None for a skipped row (blank or
/// `#` comment), or Err when the row is not the plain shape.
///
/// Special bytes (`special`) decline a row wherever they are, as the reference must judge it;
/// only comments and type names are scanned for them. Every other field is an exact word, a
/// number (digits only) or empty after stripping blanks, so a special byte there already fails
/// its field: one pass over the row instead of two.
fn row(line: &[u8], types: &mut Types) -> Result<Option<Event>, ()> {
    // Lines long enough to hold a field over Python csv's default field_size_limit are the
    // reference's to judge.
    if line.len() > FIELD_LIMIT {
        return Err(());
    }
    let mut fields: [&[u8]; 9] = [&[]; 9];
    let mut n = 0;
    let mut from = 0;
    let mut cut = |p: usize| {
        if n == 8 {
            return false;
        }
        fields[n] = &line[from..p];
        from = p + 1;
        n += 1;
        true
    };
    // Fields are a few bytes long, too short for memchr's setup: find the commas eight bytes
    // at a time instead (a byte is a comma where its XOR with ',' is zero; the zero test is
    // the exact one, with no false hits after a true one).
    let mut at = 0;
    while at + 8 <= line.len() {
        let x = u64::from_le_bytes(line[at..at + 8].try_into().unwrap()) ^ 0x2c2c_2c2c_2c2c_2c2c;
        const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
        let mut zero = !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7);
        while zero != 0 {
            if !cut(at + (zero.trailing_zeros() / 8) as usize) {
                return Err(());
            }
            zero &= zero - 1;
        }
        at += 8;
    }
    for (i, &b) in line[at..].iter().enumerate() {
        if b == b',' && !cut(at + i) {
            return Err(());
        }
    }
    fields[n] = &line[from..];
    n += 1;
    if line.is_empty() {
        return Ok(None);
    }
    if line[0] == b'#' {
        return if special(line) { Err(()) } else { Ok(None) };
    }
    if n < 8 {
        return Err(());
    }
    // Each field stripped of blanks once, here.
    for f in &mut fields[..n] {
        *f = strip(f);
    }
    let num = |i: usize| number(fields[i]);
    let op = match fields[1] {
        b"alloc" => Op::Alloc,
        b"free" => Op::Free,
        b"realloc" => Op::Realloc,
        _ => return Err(()),
    };
    let alloc = allocator(fields[2]).ok_or(())?;
    let new_id_text = fields[7];
    if (op == Op::Realloc) == new_id_text.is_empty() {
        return Err(());
    }
    let t_ns = num(0).ok_or(())?;
    let instance = num(3).ok_or(())?;
    let size = if !fields[5].is_empty() {
        num(5).ok_or(())?
    } else {
        0
    };
    let id = num(6).ok_or(())?;
    let new_id = if new_id_text.is_empty() {
        0
    } else {
        num(7).ok_or(())?
    };
    let thread = if n == 9 && !fields[8].is_empty() {
        num(8).ok_or(())?
    } else {
        0
    };
    // Last: a new type name is numbered only for a row that is taken.
    let type_ = type_number(fields[4], alloc, types).ok_or(())?;
    Ok(Some(Event {
        t_ns,
        op,
        allocator: alloc,
        instance,
        type_,
        size,
        id,
        new_id,
        thread,
    }))
}

/// Decimal digits from `line[*p..]` (advancing `p`): (value, count). More than 19 digits is
/// None: `number` takes those by the slow path.
#[inline(always)]
fn digits(line: &[u8], p: &mut usize) -> Option<(u64, usize)> {
    let start = *p;
    let mut v: u64 = 0;
    while let Some(&b) = line.get(*p) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = v.wrapping_mul(10).wrapping_add(d as u64);
        *p += 1;
    }
    let n = *p - start;
    (n <= 19).then_some((v, n))
}

/// Step over the comma at `line[*p]`, or None.
#[inline(always)]
fn comma(line: &[u8], p: &mut usize) -> Option<()> {
    (line.get(*p) == Some(&b',')).then(|| *p += 1)
}

/// `row` for the shape `write_csv` writes, read straight from the buffer: decimal numbers, a
/// numbered type, no blanks, no quotes, 8 or 9 fields, then `\n` or `\r\n`. One pass that
/// reads each number as it finds its comma and the row's end as it gets there, where
/// `read_rows` otherwise finds the line end first (memchr) and `row` cuts the line and reads
/// the fields after. Returns the event and the bytes the row took with its line end. Anything
/// else (a name for a type, `0x`, a blank, a comment, a bad row, a row the buffer cuts) is
/// None, and the line goes the slow way: so the events taken here are those `row` takes
/// (csv.rs tests `fast_rows_are_rows`).
#[inline]
fn fast_row(buf: &[u8]) -> Option<(Event, usize)> {
    let mut p = 0;
    let (t_ns, n) = digits(buf, &mut p)?;
    if n == 0 {
        return None;
    }
    comma(buf, &mut p)?;
    let rest = &buf[p..];
    let (op, len) = if rest.starts_with(b"alloc,") {
        (Op::Alloc, 6)
    } else if rest.starts_with(b"free,") {
        (Op::Free, 5)
    } else if rest.starts_with(b"realloc,") {
        (Op::Realloc, 8)
    } else {
        return None;
    };
    p += len;
    let allocator = if buf.get(p).is_some_and(u8::is_ascii_digit) {
        digits(buf, &mut p)?.0
    } else {
        // A name is at most 13 bytes: a plain scan beats memchr's setup.
        let name = &buf[p..buf.len().min(p + 16)];
        let len = name.iter().position(|&b| b == b',')?;
        let a = allocator_number(&name[..len])?;
        p += len;
        a
    };
    comma(buf, &mut p)?;
    let field = |p: &mut usize, empty_ok: bool| -> Option<(u64, usize)> {
        let (v, n) = digits(buf, p)?;
        (empty_ok || n > 0).then_some((v, n))
    };
    let (instance, _) = field(&mut p, false)?;
    comma(buf, &mut p)?;
    let (type_, _) = field(&mut p, false)?;
    comma(buf, &mut p)?;
    let (size, _) = field(&mut p, true)?;
    comma(buf, &mut p)?;
    let (id, _) = field(&mut p, false)?;
    comma(buf, &mut p)?;
    let (new_id, n_new) = field(&mut p, true)?;
    if (op == Op::Realloc) == (n_new == 0) {
        return None;
    }
    let mut thread = 0;
    if buf.get(p) == Some(&b',') {
        p += 1;
        thread = field(&mut p, true)?.0;
    }
    let end = match buf.get(p..p + 2) {
        Some([b'\n', _]) => p + 1,
        Some(b"\r\n") => p + 2,
        None if buf.get(p) == Some(&b'\n') => p + 1,
        _ => return None,
    };
    Some((
        Event {
            t_ns,
            op,
            allocator,
            instance,
            type_,
            size,
            id,
            new_id,
            thread,
        },
        end,
    ))
}

/// Read the rows of `r` (positioned after the header; `line` is the number of the last header
/// line), calling `emit` per event. Returns the event count, or the row it declined.
pub fn read_rows<R: Read>(
    mut r: R,
    mut line: u64,
    types: &mut Types,
    mut emit: impl FnMut(&Event) -> std::io::Result<()>,
) -> std::io::Result<Result<u64, Declined>> {
    let mut buf = vec![0u8; 1 << 20];
    let (mut start, mut end, mut eof) = (0, 0, false);
    let mut count = 0u64;
    loop {
        if let Some((ev, used)) = fast_row(&buf[start..end]) {
            line += 1;
            emit(&ev)?;
            count += 1;
            start += used;
            continue;
        }
        let (body, next, newline) = match memchr::memchr(b'\n', &buf[start..end]) {
            Some(p) => (start..start + p, start + p + 1, true),
            None if eof => {
                if start == end {
                    return Ok(Ok(count));
                }
                (start..end, end, false)
            }
            None => {
                // Keep the partial line and read more; a line longer than the buffer is far
                // past the field limit, so the buffer never needs to grow.
                buf.copy_within(start..end, 0);
                end -= start;
                start = 0;
                if end == buf.len() {
                    return Ok(Err(Declined(line + 1)));
                }
                let got = r.read(&mut buf[end..])?;
                eof = got == 0;
                end += got;
                continue;
            }
        };
        line += 1;
        let mut text = &buf[body];
        if let (true, [rest @ .., b'\r']) = (newline, text) {
            text = rest; // \r\n; a lone \r stays and is declined
        }
        match row(text, types) {
            Ok(Some(ev)) => {
                emit(&ev)?;
                count += 1;
            }
            Ok(None) => {}
            Err(()) => return Ok(Err(Declined(line))),
        }
        start = next;
    }
}

/// Events handed from the reading thread to the replaying one at a time.
const BATCH: usize = 1 << 14;

/// Replay the rows of `r` (as `read_rows`) straight into `rp`, with no binary file between:
/// one thread reads and parses rows while this one replays the previous batch, so a CSV costs
/// about what the slower of the two costs. Ok(Err(declined)) leaves `rp` half-fed, for the
/// caller to drop.
pub fn replay_rows<R: Read + Send>(
    rp: &mut Replay,
    r: R,
    line: u64,
    types: &mut Types,
    where_: &str,
) -> Result<Result<(), Declined>, TraceError> {
    let mut ahead = Lookahead::new();
    let read = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(4);
        // Replayed batches go back to the reader to be filled again: a fresh 1 MB batch each
        // time would cost its page faults, a third of the reading.
        let (back_tx, back) = std::sync::mpsc::channel::<Vec<Event>>();
        let reader = s.spawn(move || {
            let fresh = || {
                back.try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(BATCH))
            };
            let mut batch = fresh();
            let read = read_rows(r, line, types, |ev| {
                batch.push(*ev);
                if batch.len() == BATCH {
                    let full = std::mem::replace(&mut batch, fresh());
                    // The replay stopped listening only if it panicked: stop reading too.
                    tx.send(full).map_err(|_| std::io::ErrorKind::BrokenPipe)?;
                }
                Ok(())
            });
            if !batch.is_empty() {
                let _ = tx.send(batch);
            }
            read
        });
        for mut batch in rx {
            for ev in &batch {
                ahead.push(rp, ev);
            }
            batch.clear();
            let _ = back_tx.send(batch); // the reader may be done: then the batch is dropped
        }
        reader.join().expect("the CSV reading thread panicked")
    })
    .map_err(|e| TraceError(format!("{where_}: {e}")))?;
    let last = ahead.drain(rp);
    if let Err(d) = read {
        return Ok(Err(d));
    }
    // As for a binary trace, the model's failure (an outgrown address space) is the error.
    rp.finish(last, where_)?;
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types() -> Types {
        Types {
            known: HashMap::from([(b"binary".to_vec(), 7)]),
            next: 0x10000,
            added: Vec::new(),
        }
    }

    fn read(text: &str) -> (Result<u64, Declined>, Vec<Event>, Types) {
        let mut t = types();
        let mut out = Vec::new();
        let r = read_rows(text.as_bytes(), 1, &mut t, |e| {
            out.push(*e);
            Ok(())
        })
        .unwrap();
        (r, out, t)
    }

    #[test]
    fn reads_plain_rows_and_numbers_new_types_in_order() {
        let (r, ev, t) = read(
            "5,alloc,binary_alloc,1,binary,100,0x10,,2\r\n\
             # a comment\n\n\
             6,realloc,10,1,msg,200,16,32\n\
             7,free,eheap_alloc,0,heap,,32,,\n\
             8,alloc,6,0,msg,8,48,\n",
        );
        assert_eq!(r, Ok(4));
        assert_eq!(ev[0].allocator, 10);
        assert_eq!((ev[0].type_, ev[0].id, ev[0].thread), (7, 16, 2));
        assert_eq!(
            (ev[1].op, ev[1].new_id, ev[1].type_),
            (Op::Realloc, 32, 0x10000)
        );
        assert_eq!((ev[2].size, ev[2].type_), (0, 0x10001));
        assert_eq!(ev[3].type_, 0x10000);
        assert_eq!(
            t.added,
            vec![("msg".into(), 0x10000, 10), ("heap".into(), 0x10001, 6)]
        );
    }

    /// Every row the fast path takes, `row` takes as the same event; and it declines (leaves
    /// to `row`) every shape it does not read itself.
    #[test]
    fn fast_rows_are_rows() {
        let lines = [
            "5,alloc,binary_alloc,1,7,100,16,,2",
            "5,alloc,10,1,7,100,16,",
            "6,realloc,10,1,214,200,16,32",
            "7,free,eheap_alloc,0,3,,32,,",
            "7,free,6,0,3,,32,,9",
            "0,alloc,12,0,0,0,0,,0",
            "9999999999999999999,alloc,10,0,1,8,9999999999999999999,,1",
            "18446744073709551615,alloc,10,0,1,8,9,,1",
            "99999999999999999999,alloc,10,0,1,8,9,,1",
            "1,alloc,10,0,1,8,09,,1",
            "1,alloc,10,0,binary,8,9,,1",
            "1,alloc,10,0,1,8,0x9,,1",
            "1, alloc,10,0,1,8,9,,1",
            "1,alloc,10,0,1,8,9,,1 ",
            "1,alloc,10,0,1,8,9,3,1",
            "1,realloc,10,0,1,8,9,,1",
            "1,alloc,10,0,1,8,9,,1,",
            "1,alloc,10,0,1,8,9",
            "1,alloc,nope,0,1,8,9,,",
            "1,alloc,,0,1,8,9,,",
            "1,alloc,10,,1,8,9,,",
            "1,alloc,10,0,1,8,,,",
            ",alloc,10,0,1,8,9,,",
            "1,Alloc,10,0,1,8,9,,",
            "1,alloc,10,0,1,8,9,,\r",
            "# 1,alloc,10,0,1,8,9,,",
            "",
        ];
        let mut taken = 0;
        for line in lines {
            for end in ["\n", "\r\n", "\nmore", ""] {
                let text = format!("{line}{end}");
                let Some((ev, used)) = fast_row(text.as_bytes()) else {
                    continue;
                };
                // What read_rows hands `row`: the line without its end (\r\n or \n).
                let nl = text
                    .find('\n')
                    .expect("a row is taken only with its line end");
                let body = text[..nl].strip_suffix('\r').unwrap_or(&text[..nl]);
                let want = row(body.as_bytes(), &mut types()).ok().flatten();
                assert_eq!(Some(ev), want, "{text:?}");
                assert_eq!(used, nl + 1, "{text:?}");
                taken += 1;
            }
        }
        // The 8 plain rows with each of the 3 line ends, and the one whose CR meets a \n (twice);
        // never a row the buffer may still cut.
        assert_eq!(taken, 8 * 3 + 2);
        let (r, ev, _) = read("1,alloc,10,0,1,8,9,,1\n2,free,10,0,1,,9,,1");
        assert_eq!((r, ev.len()), (Ok(2), 2));
    }

    #[test]
    fn declines_what_the_reference_must_judge() {
        for (text, line) in [
            ("1,alloc,binary_alloc,0,binary,1,2,\n\"q\",x\n", 3),
            ("1,alloc,binary_alloc,0,binary,+1,2,\n", 2),
            ("1,alloc,binary_alloc,0,binary,1_0,2,\n", 2),
            ("1,alloc,binary_alloc,0,binary,1,18446744073709551616,\n", 2),
            ("1,allocate,binary_alloc,0,binary,1,2,\n", 2),
            ("1,alloc,binary_alloc,0,bin\u{e4}ry,1,2,\n", 2),
            ("1,alloc,binary_alloc,0,binary,1,2,3\n", 2),
            ("1,realloc,binary_alloc,0,binary,1,2,\n", 2),
            ("1,alloc,binary_alloc,0,binary,1\n", 2),
            ("1,alloc,binary_alloc,0,binary,1,2,,0,9\n", 2),
            ("1,alloc,binary_alloc,0,binary,1,2,\rx\n", 2),
            ("1,alloc,nope,0,binary,1,2,\n", 2),
            ("  \n", 2),
        ] {
            assert_eq!(read(text).0, Err(Declined(line)), "{text:?}");
        }
    }

    #[test]
    fn special_bytes_decline_in_every_field_and_number_no_type() {
        // One row per field, a special byte in it, beside a type name never seen: each row is
        // declined (as the whole-row scan did) and no type is numbered for it.
        let row = [
            "1",
            "alloc",
            "binary_alloc",
            "0",
            "newtype",
            "8",
            "2",
            "",
            "3",
        ];
        for field in 0..row.len() {
            for bad in ["\"", "\u{1}", "\r", "\u{e4}", "\u{7f}"] {
                let mut f = row.map(String::from);
                f[field] = format!("{bad}{}", f[field]);
                let text = format!("{}\n", f.join(","));
                let (r, _, t) = read(&text);
                assert_eq!(r, Err(Declined(2)), "{text:?}");
                assert!(t.added.is_empty(), "{text:?}");
            }
        }
        // A type name with special bytes is the reference's even when the header declared it.
        let mut t = types();
        t.known.insert("bin\"ary".as_bytes().to_vec(), 9);
        let r = read_rows(&b"1,alloc,10,0,bin\"ary,8,2,\n"[..], 1, &mut t, |_| Ok(())).unwrap();
        assert_eq!(r, Err(Declined(2)));
        assert_eq!(read("# a \"quoted\" comment\n").0, Err(Declined(2)));
        assert_eq!(read("# plain comment\n").0, Ok(0));
    }
}
