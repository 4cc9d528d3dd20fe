//! The one reader of CSV traces (docs/trace-format.md, "CSV"): `CsvReader` (below) reads the
//! header lines and every row, and accepts what the Python reader it replaced accepted (csv.reader
//! over text decoded with surrogateescape, str.strip, int()) with the same one-line messages.
//!
//! Two fast paths serve the plain shape `write_csv` and most tools write (ASCII, unquoted,
//! decimal or `0x` numbers, `\n` or `\r\n` line ends): `fast_row` and `row`. On anything else,
//! valid or not, they decline and the row goes through `Record` and `interpret`, the full path:
//! so a row they read means the same event, and every error keeps the full path's words. The
//! replay reads plain rows straight from a CSV with them (`replay_rows`, declining the file at
//! the first row they do not take). The fuzzers (tests/fuzz/csv_props.py, atheris_csv.py)
//! check that the fast paths and the full path (`checked_only`) agree on arbitrary bytes.

use crate::replay::{Lookahead, Replay};
use crate::trace::{Event, Op, TraceError};
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Read;

/// Allocator names a CSV may use instead of numbers (ERTS_ALC_A_*, docs/erts/alloc_util.md §1;
/// the same table as `beamalloc.trace.ALLOCATOR_NAMES`), the most frequent in traces first:
/// `allocator_by_key` tries them in this order.
const ALLOCATORS: [(&[u8], u64); 12] = [
    (b"binary_alloc", 10),
    (b"eheap_alloc", 6),
    (b"ets_alloc", 7),
    (b"driver_alloc", 11),
    (b"std_alloc", 4),
    (b"sl_alloc", 3),
    (b"temp_alloc", 2),
    (b"ll_alloc", 5),
    (b"fix_alloc", 8),
    (b"literal_alloc", 9),
    (b"sys_alloc", 1),
    (b"test_alloc", 12),
];

fn allocator_number(name: &[u8]) -> Option<u64> {
    ALLOCATORS
        .iter()
        .find(|&&(n, _)| n == name)
        .map(|&(_, a)| a)
}

/// Python's `csv.field_size_limit()` default: a longer field is an error there.
const FIELD_LIMIT: usize = 131_072;

/// The fast paths look a type name up per row, and names are a few bytes long, where the
/// standard SipHash (or FNV, a dependent multiply per byte) costs about what the rest of the
/// row does: this hashes a word at a time (FxHash's step).
#[derive(Default)]
pub struct NameHasher(u64);

impl NameHasher {
    #[inline(always)]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7cc1_b727_220a_95);
    }
}

impl Hasher for NameHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().unwrap()));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Type name -> number.
pub type Names = HashMap<Vec<u8>, u64, BuildHasherDefault<NameHasher>>;

/// Type names seen so far: the header's table, then the names rows introduce, numbered from
/// `next` on in order of first appearance (as the full path numbers them).
pub struct Types {
    pub known: Names,
    pub next: u64,
    /// (name, number, allocator of the row that introduced it)
    pub added: Vec<(String, u64, u64)>,
    /// The name the fast paths found last: rows of one trace repeat a few types, so most rows
    /// compare their name with it instead of hashing it.
    pub last: NameMemo,
}

/// A known type name up to 16 bytes and its number (`len` 0: none yet). Cells: the fast paths
/// read `Types` shared. A name once known keeps its number, so the memo never goes stale.
#[derive(Default)]
pub struct NameMemo {
    key: Cell<[u8; 16]>,
    len: Cell<usize>,
    n: Cell<u64>,
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
            last: NameMemo::default(),
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

/// `[0-9]+` or `0x[0-9a-fA-F]+` within u64 (`f` stripped); anything else is the full path's
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
    if f.len() > MAX_STR_DIGITS {
        return None; // int() refuses it (leading zeros and all): the full path says so
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

/// The number of type name `f`, a fast path's raw field, where `row` would take the row with
/// that number: a name already known (a new one is numbered by `row`, so that names get their
/// numbers in row order), nothing `strip` would cut at either end, not a number (a leading
/// digit), no special byte (a header may declare names the rows cannot use plainly).
#[inline(always)]
fn known_type(f: &[u8], types: &Types) -> Option<u64> {
    let memo = &types.last;
    let len = memo.len.get();
    if len != 0 && f.len() == len && f == &memo.key.get()[..len] {
        return Some(memo.n.get());
    }
    remembered(f, types)
}

/// `known_type` once the memo missed: the name looked up, and kept in the memo if it fits.
#[inline(always)]
fn remembered(f: &[u8], types: &Types) -> Option<u64> {
    let memo = &types.last;
    let n = new_known_type(f, &types.known)?;
    if f.len() <= 16 {
        let mut k = [0u8; 16];
        k[..f.len()].copy_from_slice(f);
        memo.key.set(k);
        memo.len.set(f.len());
        memo.n.set(n);
    }
    Some(n)
}

/// `known_type` of `win[s..s + n]`, compared with the memo by two masked words: the slice
/// compare called memcmp, a tenth of a named row's time.
#[inline(always)]
fn known_type_at(win: &[u8; WIDE], s: usize, n: usize, types: &Types) -> Option<u64> {
    let memo = &types.last;
    if n != 0 && n == memo.len.get() {
        // The memo's key is zero past its length, as the loaded words are past the field.
        let key = memo.key.get();
        let (k0, k1) = (
            u64::from_le_bytes(*key.first_chunk::<8>().unwrap()),
            u64::from_le_bytes(*key.last_chunk::<8>().unwrap()),
        );
        let w0 = word(win, s) & low_bytes(n.min(8));
        let w1 = word(win, s + 8) & low_bytes(n.saturating_sub(8));
        if w0 == k0 && w1 == k1 {
            return Some(memo.n.get());
        }
    }
    remembered(&win[s..s + n], types)
}

/// `known_type` past the memo.
#[inline(never)]
fn new_known_type(f: &[u8], known: &Names) -> Option<u64> {
    let (&first, &last) = (f.first()?, f.last()?);
    if first.is_ascii_digit() || matches!(first, b' ' | b'\t') || matches!(last, b' ' | b'\t') {
        return None;
    }
    if special(f) {
        return None;
    }
    known.get(f).copied()
}

/// Whether `f` has a byte the full path must judge: a quote, NUL or another control but
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
/// Special bytes (`special`) decline a row wherever they are, as the full path must judge it;
/// only comments and type names are scanned for them. Every other field is an exact word, a
/// number (digits only) or empty after stripping blanks, so a special byte there already fails
/// its field: one pass over the row instead of two.
fn row(line: &[u8], types: &mut Types) -> Result<Option<Event>, ()> {
    // Lines long enough to hold a field over Python csv's default field_size_limit are the
    // full path's to judge.
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
/// numbered type or one of the `known` names (`known_type`), no blanks, no quotes, 8 or 9
/// fields, then `\n` or `\r\n`. Returns the event and the bytes the row took with its line
/// end. Anything else (a new type name, `0x`, a blank, a comment, a bad row, a row the buffer
/// cuts) is None, and the line goes the slow way: so the events taken here are those `row`
/// takes (csv.rs tests `fast_rows_are_rows`).
///
/// `wide_row` reads a row that ends within its window; `narrow_row`, the same shape byte by
/// byte, the rows it leaves undecided (longer, or near the end of what is buffered).
#[inline(always)]
fn fast_row(buf: &[u8], types: &Types) -> Option<(Event, usize)> {
    if let Some(win) = buf.first_chunk::<WIDE>() {
        if let Ok(r) = wide_row(win, types) {
            return r;
        }
    }
    narrow_row(buf, types)
}

/// The rows `wide_row` judges end within the first `WINDOW` bytes; the 16 after them let it
/// load 8 bytes at any field's start without a bounds check.
const WINDOW: usize = 128;
const WIDE: usize = WINDOW + 16;

/// Per 16 bytes of `chunk`, a bit per byte: [commas, line ends (`\n`), not ASCII digits].
#[inline(always)]
fn classes(chunk: &[u8; 16]) -> [u32; 3] {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_set1_epi8, _mm_sub_epi8,
        };
        // SAFETY: SSE2 is part of x86_64's baseline, and the load reads the 16 bytes of
        // `chunk` (unaligned loads allowed).
        unsafe {
            let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
            let bits = |m| _mm_movemask_epi8(m) as u32;
            let d = _mm_sub_epi8(v, _mm_set1_epi8(b'0' as i8));
            // A digit is a byte whose distance from '0' is at most 9, unsigned.
            let digit = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);
            [
                bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(b',' as i8))),
                bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\n' as i8))),
                !bits(digit) & 0xffff,
            ]
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut out = [0u32; 3];
        for (i, &b) in chunk.iter().enumerate() {
            out[0] |= ((b == b',') as u32) << i;
            out[1] |= ((b == b'\n') as u32) << i;
            out[2] |= (!b.is_ascii_digit() as u32) << i;
        }
        out
    }
}

/// A bit per byte of the window: u64 for a row within its first 64 bytes, u128 past them.
trait Bits: Copy + Eq + std::ops::BitAnd<Output = Self> + std::ops::BitOr<Output = Self> {
    const ZERO: Self;
    /// Bits 0..n.
    fn below(n: usize) -> Self;
    fn lowest(self) -> usize;
    fn without_lowest(self) -> Self;
    fn not(self) -> Self;
}

macro_rules! bits {
    ($t:ty) => {
        impl Bits for $t {
            const ZERO: Self = 0;
            #[inline(always)]
            fn below(n: usize) -> Self {
                !<$t>::MAX.checked_shl(n as u32).unwrap_or(0)
            }
            #[inline(always)]
            fn lowest(self) -> usize {
                self.trailing_zeros() as usize
            }
            #[inline(always)]
            fn without_lowest(self) -> Self {
                self & self.wrapping_sub(1)
            }
            #[inline(always)]
            fn not(self) -> Self {
                !self
            }
        }
    };
}
bits!(u64);
bits!(u128);

const ONES: u64 = 0x0101_0101_0101_0101;

/// The value of 8 digit bytes (the first digit in the lowest byte; zero bytes count as
/// leading zeros): pairs, then quads, then the eight, each step one multiply.
#[inline(always)]
fn eight_digits(w: u64) -> u64 {
    let w = ((w & (0x0f * ONES)).wrapping_mul(10 << 8 | 1)) >> 8;
    let w = ((w & 0x00ff_00ff_00ff_00ff).wrapping_mul(100 << 16 | 1)) >> 16;
    ((w & 0x0000_ffff_0000_ffff).wrapping_mul(10_000 << 32 | 1)) >> 32
}

/// 8 bytes of the window from `at` (at most `WINDOW`), the first in the lowest byte.
#[inline(always)]
fn word(win: &[u8; WIDE], at: usize) -> u64 {
    u64::from_le_bytes(*win[at..].first_chunk::<8>().unwrap())
}

/// The number `win[s..s + n]`, whose bytes are known to be digits; 0 for an empty field, None
/// past 19 digits (`number` reads those).
#[inline(always)]
fn value(win: &[u8; WIDE], s: usize, n: usize) -> Option<u64> {
    if n <= 8 {
        // The digits shifted to the top of the word: the bytes below them are leading zeros.
        return Some(eight_digits(
            word(win, s).checked_shl(64 - 8 * n as u32).unwrap_or(0),
        ));
    }
    if n <= 16 {
        let hi = eight_digits(word(win, s) << (128 - 8 * n as u32));
        return Some(hi * 100_000_000 + eight_digits(word(win, s + n - 8)));
    }
    if n > 19 {
        return None;
    }
    // Below 10^19: no overflow.
    Some(
        win[s..s + n]
            .iter()
            .fold(0, |v, &b| v * 10 + (b - b'0') as u64),
    )
}

/// An allocator's name (8 to 13 bytes) as a key: its first 8 bytes, then the rest with its
/// length in the top byte.
const fn name_key(name: &[u8]) -> (u64, u64) {
    let mut k = (0u64, (name.len() as u64) << 56);
    let mut i = 0;
    while i < name.len() {
        if i < 8 {
            k.0 |= (name[i] as u64) << (8 * i);
        } else {
            k.1 |= (name[i] as u64) << (8 * (i - 8));
        }
        i += 1;
    }
    k
}

/// `allocator_number` of `win[s..s + n]` by its key: compares of words, not of bytes.
#[inline(always)]
fn allocator_by_key(win: &[u8; WIDE], s: usize, n: usize) -> Option<u64> {
    const NAMES: [((u64, u64), u64); 12] = {
        let mut out = [((0, 0), 0); 12];
        let mut i = 0;
        while i < out.len() {
            out[i] = (name_key(ALLOCATORS[i].0), ALLOCATORS[i].1);
            i += 1;
        }
        out
    };
    // Every name is "..._alloc", 8 to 13 bytes.
    if !(8..=13).contains(&n) {
        return None;
    }
    let key = (
        word(win, s),
        word(win, s + 8) & low_bytes(n - 8) | (n as u64) << 56,
    );
    NAMES.iter().find(|&&(k, _)| k == key).map(|&(_, a)| a)
}

/// The low `n` bytes of a word (n <= 8).
#[inline(always)]
fn low_bytes(n: usize) -> u64 {
    !u64::MAX.checked_shl(8 * n as u32).unwrap_or(0)
}

/// `narrow_row` for a row that ends within the window, without a branch per byte: its
/// commas, line end and bytes other than digits are found 16 bytes at a time, then each
/// number is read where it lies, by words. Ok(None): a row the fast paths decline; Err(()):
/// no line end in the window, the row is `narrow_row`'s to judge.
#[inline(always)]
fn wide_row(win: &[u8; WIDE], types: &Types) -> Result<Option<(Event, usize)>, ()> {
    let classes_at = |i: usize| classes(win[16 * i..].first_chunk::<16>().unwrap());
    let (a, b, c) = (classes_at(0), classes_at(1), classes_at(2));
    let first = |k: usize| (a[k] | b[k] << 16) as u64 | (c[k] as u64) << 32;
    if first(1) != 0 {
        // Most rows end in the first 48 bytes (those write_csv writes for an allocator
        // trace of a few hours) or 64.
        return Ok(wide_fields(
            win,
            first(0),
            first(2),
            first(1).lowest(),
            types,
        ));
    }
    let d = classes_at(3);
    let low = |k: usize| first(k) | (d[k] as u64) << 48;
    if low(1) != 0 {
        return Ok(wide_fields(win, low(0), low(2), low(1).lowest(), types));
    }
    let (e, f, g, h) = (classes_at(4), classes_at(5), classes_at(6), classes_at(7));
    let high = |k: usize| (e[k] | f[k] << 16) as u128 | ((g[k] | h[k] << 16) as u128) << 32;
    if high(1) == 0 {
        return Err(());
    }
    let wide = |k: usize| low(k) as u128 | high(k) << 64;
    Ok(wide_fields(
        win,
        wide(0),
        wide(2),
        64 + high(1).lowest(),
        types,
    ))
}

/// The row of `win` ending at its line end `end`, given the bits of its commas and of its
/// bytes that are not digits.
#[inline(always)]
fn wide_fields<M: Bits>(
    win: &[u8; WIDE],
    commas: M,
    others: M,
    end: usize,
    types: &Types,
) -> Option<(Event, usize)> {
    let row = M::below(end);
    let mut rest = commas & row;
    // c[i]: the comma after field i; the last field ends at the line end, before a \r there.
    let mut c = [0usize; 9];
    for at in &mut c[..7] {
        if rest == M::ZERO {
            return None;
        }
        *at = rest.lowest();
        rest = rest.without_lowest();
    }
    let n_commas = if rest == M::ZERO {
        7
    } else {
        c[7] = rest.lowest();
        rest = rest.without_lowest();
        if rest != M::ZERO {
            return None;
        }
        8
    };
    let last_end = end - (win[end - 1] == b'\r') as usize;
    c[n_commas] = last_end;
    let start = |i: usize| c[i - 1] + 1;
    let len = |i: usize| c[i] - start(i);
    // Bytes other than digits may be commas, the op, allocator and type fields' (checked
    // below) and that \r: every other field is digits.
    let text = M::below(c[2]) & M::below(c[0] + 1).not();
    let type_field = M::below(c[4]) & M::below(start(4)).not();
    if others & row & (commas | text | type_field | M::below(last_end).not()).not() != M::ZERO {
        return None;
    }
    // t_ns, instance, type and id are never empty; size, new_id and thread may be.
    if c[0] == 0 || len(3) == 0 || len(4) == 0 || len(6) == 0 {
        return None;
    }
    let n = len(1);
    let w = word(win, start(1)) & low_bytes(n.min(8));
    let op = match (n, w) {
        (5, 0x63_6f6c_6c61) => Op::Alloc,        // "alloc"
        (4, 0x6565_7266) => Op::Free,            // "free"
        (7, 0x63_6f6c_6c61_6572) => Op::Realloc, // "realloc"
        _ => return None,
    };
    if (op == Op::Realloc) == (len(7) == 0) {
        return None;
    }
    let (s, n) = (start(2), len(2));
    let allocator = if win[s].is_ascii_digit() {
        if others & M::below(s + n) & M::below(s).not() != M::ZERO {
            return None;
        }
        value(win, s, n)?
    } else {
        allocator_by_key(win, s, n)?
    };
    let thread = if n_commas == 8 {
        value(win, start(8), len(8))?
    } else {
        0
    };
    Some((
        Event {
            t_ns: value(win, 0, c[0])?,
            op,
            allocator,
            instance: value(win, start(3), len(3))?,
            type_: if others & type_field == M::ZERO {
                value(win, start(4), len(4))?
            } else {
                known_type_at(win, start(4), len(4), types)?
            },
            size: value(win, start(5), len(5))?,
            id: value(win, start(6), len(6))?,
            new_id: value(win, start(7), len(7))?,
            thread,
        },
        end + 1,
    ))
}

/// `fast_row` one byte after another: reads each number as it finds its comma and the row's
/// end as it gets there.
#[inline]
fn narrow_row(buf: &[u8], types: &Types) -> Option<(Event, usize)> {
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
    let type_ = if buf.get(p).is_some_and(u8::is_ascii_digit) {
        field(&mut p, false)?.0
    } else {
        // A name: up to its comma, which a row this path takes has within the field limit.
        let name = &buf[p..buf.len().min(p + FIELD_LIMIT)];
        let len = memchr::memchr(b',', name)?;
        p += len;
        known_type(&name[..len], types)?
    };
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
    // Twice the field limit: a longer line is declined whether it fits or not (by `row`, or
    // below), and a small buffer stays in the core's own cache between the copy and the
    // parse, and costs fewer page faults.
    let mut buf = vec![0u8; 2 * FIELD_LIMIT];
    let (mut start, mut end, mut eof) = (0, 0, false);
    let mut count = 0u64;
    loop {
        if let Some((ev, used)) = fast_row(&buf[start..end], types) {
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
                // Keep the partial line and read more; a line longer than the buffer is past the
                // field limit, so the buffer never needs to grow.
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

/// Events handed from the reading thread to the replaying one at a time: 300 KB, so that the
/// batches in flight (up to 7) cost few page faults and stay in the shared cache.
const BATCH: usize = 1 << 12;

/// Send the full `batch` to the replay, leaving an empty one (a replayed batch back, if there
/// is one, for a fresh one would cost its page faults, a third of the reading).
#[inline(never)]
fn hand_over(
    batch: &mut Vec<Event>,
    tx: &std::sync::mpsc::SyncSender<Vec<Event>>,
    back: &std::sync::mpsc::Receiver<Vec<Event>>,
) -> std::io::Result<()> {
    let empty = back
        .try_recv()
        .unwrap_or_else(|_| Vec::with_capacity(BATCH));
    let full = std::mem::replace(batch, empty);
    // The replay stopped listening only if it panicked: stop reading too.
    tx.send(full)
        .map_err(|_| std::io::ErrorKind::BrokenPipe.into())
}

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
    let mut ahead = Lookahead::for_model(rp);
    let read = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(4);
        // Replayed batches go back to the reader to be filled again (`hand_over`).
        let (back_tx, back) = std::sync::mpsc::channel::<Vec<Event>>();
        let reader = s.spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            // A push per row, inlined into the parsing (an event handed over through memory
            // cost a stall per row: its op byte stored, then read back by wider loads).
            let read = read_rows(r, line, types, |ev| {
                batch.push(*ev);
                if batch.len() == BATCH {
                    hand_over(&mut batch, &tx, &back)?;
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

/// The replay's reader agrees with the whole reader's full path (the fuzz target `read_csv`,
/// and `csv_reader_survives_mutations`): `read_rows`, from where the header ends, gives the
/// events the full path gives, up to the row it declines, and when it declines none the full
/// path ends without an error, having numbered the same new types.
#[cfg(any(test, fuzzing))]
pub fn rows_agree(data: &[u8]) {
    let Ok(mut full) = CsvReader::new(data, "fz") else {
        return;
    };
    if full.read_columns().is_err() {
        return;
    }
    full.checked_only = true;
    let (offset, line) = full.rows_at;
    let mut want = Vec::new();
    let failed = loop {
        match full.next_event() {
            Ok(Some(e)) => want.push(e),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    let mut types = Types::new(HashMap::new(), 0x10000);
    let mut got = Vec::new();
    let read = read_rows(&data[offset as usize..], line, &mut types, |e| {
        got.push(*e);
        Ok(())
    })
    .unwrap();
    assert!(got.len() <= want.len() && got[..] == want[..got.len()]);
    if read.is_ok() {
        assert!(!failed && got.len() == want.len());
        assert_eq!(types.added, full.types.added);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types() -> Types {
        Types {
            known: Names::from_iter([
                (b"binary".to_vec(), 7),
                (b" padded".to_vec(), 8),
                (b"b\"q".to_vec(), 9),
            ]),
            next: 0x10000,
            added: Vec::new(),
            last: NameMemo::default(),
        }
    }

    fn read(text: &str) -> (Result<u64, Declined>, Vec<Event>, Types) {
        read_with(text, types())
    }

    /// `read` with the given type table.
    fn read_with(text: &str, mut t: Types) -> (Result<u64, Declined>, Vec<Event>, Types) {
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
            "1,alloc,binary_alloc,0,binary,8,9,,1",
            "1,alloc,10,0,binary ,8,9,,1",
            "1,alloc,10,0, padded,8,9,,1",
            "1,alloc,10,0,b\"q,8,9,,1",
            "1,alloc,10,0,unknown,8,9,,1",
            "1,alloc,10,0,bin,8,9,,1",
            "1,alloc,10,0,7binary,8,9,,1",
            // after a known name (the fast paths' memo holds it): an empty or longer one
            "1,alloc,10,0,,8,9,,1",
            "1,alloc,10,0,binaryx,8,9,,1",
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
        let known = types();
        for line in lines {
            for end in ["\n", "\r\n", "\nmore", ""] {
                // Alone, `narrow_row` reads it; with bytes after it, `wide_row` (the same).
                let text = format!("{line}{end}");
                let wide = format!("{text}{}", "x".repeat(WIDE));
                let got = fast_row(text.as_bytes(), &known);
                assert_eq!(got, fast_row(wide.as_bytes(), &known), "{text:?}");
                let Some((ev, used)) = got else {
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
        // The 10 plain rows (2 with a known type name) with each of the 3 line ends, and the one
        // whose CR meets a \n (twice); never a row the buffer may still cut, a new type name, or
        // one `row` would strip, read as a number or decline.
        assert_eq!(taken, 10 * 3 + 2);
        let (r, ev, _) = read("1,alloc,10,0,1,8,9,,1\n2,free,10,0,1,,9,,1");
        assert_eq!((r, ev.len()), (Ok(2), 2));
    }

    /// The wide path compares a row's type name with the memo by masked words
    /// (`known_type_at`): rows whose names are near misses of the one before (a byte changed
    /// at each position, one byte shorter or longer, across the 8- and 16-byte words and past
    /// the memo's 16 bytes) read as `row` reads them, one at a time.
    #[test]
    fn memo_words_compare_as_bytes() {
        let mut next = crate::tests::xorshift(0x3E30);
        let mut names: Vec<Vec<u8>> = Vec::new();
        for len in 1..=20usize {
            let base: Vec<u8> = (0..len).map(|_| b'a' + (next() % 26) as u8).collect();
            for at in 0..len {
                let mut v = base.clone();
                v[at] = if v[at] == b'z' { b'y' } else { v[at] + 1 };
                names.push(v);
            }
            names.push(base[..len - 1].to_vec());
            names.push([&base[..], b"q"].concat());
            names.push(base);
        }
        names.retain(|n| !n.is_empty());
        for round in 0..40 {
            // Half the names known (by a header), the rest new to the rows.
            let known = Names::from_iter(
                names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| (i + round) % 2 == 0)
                    .map(|(i, n)| (n.clone(), 100 + i as u64)),
            );
            let fresh = || Types {
                known: known.clone(),
                next: 0x10000,
                added: Vec::new(),
                last: NameMemo::default(),
            };
            let mut text = String::new();
            for i in 0..200 {
                let n = &names[next() as usize % names.len()];
                let name = std::str::from_utf8(n).unwrap();
                text += &format!("{i},alloc,binary_alloc,1,{name},8,{i},,1\n");
            }
            let mut want = Vec::new();
            let mut by_row = fresh();
            for line in text.lines() {
                want.extend(row(line.as_bytes(), &mut by_row).unwrap());
            }
            let (r, got, t) = read_with(&text, fresh());
            assert_eq!(r, Ok(200));
            assert_eq!(got, want, "round {round}");
            assert_eq!(t.added, by_row.added);
        }
    }

    /// `wide_row` takes a row, with the same event and length, exactly when `narrow_row` does,
    /// on random rows near the plain shape (fields of 0 to 21 digits, allocator and type names,
    /// blanks, quotes, CRs, missing or extra fields; rows past 64 and past 128 bytes), whatever
    /// follows them.
    #[test]
    fn wide_rows_are_narrow_rows() {
        let mut next = crate::tests::xorshift(0x5EED);
        let mut rng = move |n: u64| next() % n;
        let noise: &[&[u8]] = &[
            b" ",
            b"\r",
            b"\"",
            b"x",
            b"0x1",
            b"-",
            b"+",
            b"\t",
            b"\x00",
            b"\xc3\xa4",
            b",",
            b"\n",
        ];
        let known = types();
        let (mut taken, mut declined, mut long, mut named) = (0, 0, 0, 0);
        for case in 0..200_000 {
            let mut row: Vec<u8> = Vec::new();
            let n_fields = [8, 9, 9, 8, 9, 8, 7, 10][rng(8) as usize];
            let op = [
                &b"alloc"[..],
                b"free",
                b"realloc",
                b"alloc",
                b"free",
                b"Alloc",
                b"",
            ][rng(7) as usize];
            for f in 0..n_fields {
                if f > 0 {
                    row.push(b',');
                }
                match f {
                    1 => row.extend_from_slice(op),
                    2 if rng(2) == 0 => {
                        // every allocator name, and near misses
                        let misses: [&[u8]; 4] =
                            [b"sl_alloc\x00", b"binary_allo", b"binary_alloc_", b"x"];
                        let k = rng((ALLOCATORS.len() + misses.len()) as u64) as usize;
                        row.extend_from_slice(match ALLOCATORS.get(k) {
                            Some(&(name, _)) => name,
                            None => misses[k - ALLOCATORS.len()],
                        });
                    }
                    4 if rng(4) == 0 => {
                        // known type names, and names the fast paths leave to `row`
                        let names: [&[u8]; 6] = [
                            b"binary", b"binary", b"bin", b" padded", b"b\"q", b"binary ",
                        ];
                        row.extend_from_slice(names[rng(6) as usize]);
                    }
                    // new_id: empty for alloc and free, mostly
                    7 if rng(4) != 0 && op != b"realloc" => {}
                    _ => {
                        let len = if rng(16) == 0 {
                            [0, 20, 21][rng(3) as usize]
                        } else {
                            [1, 2, 3, 5, 7, 8, 9, 12, 15, 16, 17, 19][rng(12) as usize]
                        };
                        for _ in 0..len {
                            row.push(b'0' + rng(10) as u8);
                        }
                        if len == 20 && rng(2) == 0 {
                            let at = row.len() - 20;
                            row[at..].copy_from_slice(b"18446744073709551615");
                        }
                    }
                }
            }
            if rng(8) == 0 {
                let at = rng(row.len() as u64 + 1) as usize;
                let bad = noise[rng(noise.len() as u64) as usize];
                row.splice(at..at, bad.iter().copied());
            }
            row.extend_from_slice([&b"\n"[..], b"\r\n", b"\r\r\n", b""][rng(4) as usize]);
            // Whatever follows: more rows, digits, commas.
            for _ in 0..WIDE {
                row.push(b"0123456789,\n\r "[rng(14) as usize]);
            }
            let win: &[u8; WIDE] = row.first_chunk().unwrap();
            let Ok(wide) = wide_row(win, &known) else {
                assert!(!win[..WINDOW].contains(&b'\n'), "case {case}");
                continue;
            };
            assert_eq!(
                wide,
                narrow_row(&row, &known),
                "case {case}: {:?}",
                String::from_utf8_lossy(&row)
            );
            if let Some((ev, used)) = wide {
                taken += 1;
                long += (used > 64) as u32;
                named += (ev.type_ == 7 && row.windows(6).any(|w| w == b"binary")) as u32;
            } else {
                declined += 1;
            }
        }
        // Both outcomes are common, and rows past 64 bytes, so the comparison covers each.
        assert!(
            taken > 20_000 && declined > 20_000 && long > 5_000 && named > 2_000,
            "{taken} taken ({long} past 64 bytes, {named} with a type name), {declined} declined"
        );
    }

    /// The whole reader on rows only its full path reads: Python's csv, strip and int() as
    /// the old reader had them (quotes, Unicode digits and spaces, underscores, hex), and its
    /// messages.
    #[test]
    fn full_path_reads_what_python_read() {
        let head = "t_ns,op,allocator,instance,type,size,id,new_id,thread\n";
        let one = |row: &str| {
            let text = format!("{head}{row}");
            let mut r = CsvReader::new(text.as_bytes(), "f").unwrap();
            r.next_event()
                .map(|e| e.map(|e| (e.t_ns, e.allocator, e.type_, e.size, e.id)))
        };
        let ok = |row: &str, want: (u64, u64, u64, u64, u64)| {
            assert_eq!(one(row).unwrap(), Some(want), "{row:?}")
        };
        ok(
            "\"1\",alloc,\"1\u{0660}\",0,7,\"8\",1,,0\n",
            (1, 10, 7, 8, 1),
        );
        ok(
            "\u{0663},alloc,10,0,7,1_000,0x_f,,\u{3000}\n",
            (3, 10, 7, 1000, 15),
        );
        ok("+5, alloc ,6,0,7,-0,0X1F,,\u{85}\n", (5, 6, 7, 0, 31));
        ok("\"#x\",\"\n\"\n1,\"al\"loc,6,0,7,8,1,,0\n", (1, 6, 7, 8, 1));
        let err = |row: &str, want: &str| {
            let e = one(row).unwrap_err().0;
            assert_eq!(e, want, "{row:?}")
        };
        err(
            "1,alloc,\u{b2},0,7,8,1,,0\n",
            "f:2: allocator is not an integer (a field of 1 characters)",
        );
        err(
            "1,alloc,10,0,7,1__0,1,,0\n",
            "f:2: size is not an integer (a field of 4 characters)",
        );
        err(
            "1,alloc,10,0,7,-5,1,,0\n",
            "f:2: size is outside 0..2^64-1 (a negative number)",
        );
        err(
            "1,alloc,10,0,7,0x10000000000000000,1,,0\n",
            "f:2: size is outside 0..2^64-1 (a number of 20 digits)",
        );
        err(
            "\"1\n2\",alloc,10,0,7,8,1,,0,\n",
            "f:2: expected 8 or 9 fields, got 10",
        );
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

    /// Randomized mutation testing of the whole reader (the fuzz target `read_csv`, no
    /// libFuzzer needed): fast paths and full path agree on mutated traces. Iterations:
    /// `REFALLOC_FUZZ_SECS` seconds if set, else a quick 3000 cases.
    #[test]
    fn csv_reader_survives_mutations() {
        let secs: u64 = std::env::var("REFALLOC_FUZZ_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let mut rng = crate::tests::xorshift(0xC5F_u64 ^ secs);
        let base: String = "# beamalloc-trace 1 {}\nt_ns,op,allocator,instance,type,size,id,new_id,thread\n"
            .to_string()
            + &(1..12)
                .map(|i| format!("{i},alloc,binary_alloc,0,binary,{},{i},,0\n{i}5,realloc,10,1,msg{},0x{i:x},{i},{},2\r\n", 100 * i, i % 3, i + 1))
                .collect::<String>();
        let pieces: [&[u8]; 16] = [
            b"\"",
            b"\r",
            b"\n",
            b",",
            b"\x00",
            "\u{e9}".as_bytes(),
            b"\xff",
            b"+",
            b"_",
            b" ",
            b"0x",
            b"#",
            "\u{661}".as_bytes(),
            "\u{3000}".as_bytes(),
            b"99999999999999999999",
            b"realloc",
        ];
        let mut cases = 0u64;
        while cases < 3000 || std::time::Instant::now() < deadline {
            cases += 1;
            let mut b = base.clone().into_bytes();
            for _ in 0..1 + rng() % 4 {
                let at = (rng() % (b.len() as u64 + 1)) as usize;
                match rng() % 4 {
                    0 => {
                        let p = pieces[(rng() % 16) as usize];
                        b.splice(at..at, p.iter().copied());
                    }
                    1 if at < b.len() => b[at] = rng() as u8,
                    2 => {
                        b.drain(at..(at + 1 + (rng() % 5) as usize).min(b.len()));
                    }
                    _ => b.truncate(at),
                }
            }
            crate::fuzzing::read_csv(&b);
            rows_agree(&b);
        }
        if secs > 0 {
            eprintln!("csv_reader_survives_mutations: {cases} cases in {secs} s");
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
        // A type name with special bytes is the full path's even when the header declared it.
        let mut t = types();
        t.known.insert("bin\"ary".as_bytes().to_vec(), 9);
        let r = read_rows(&b"1,alloc,10,0,bin\"ary,8,2,\n"[..], 1, &mut t, |_| Ok(())).unwrap();
        assert_eq!(r, Err(Declined(2)));
        assert_eq!(read("# a \"quoted\" comment\n").0, Err(Declined(2)));
        assert_eq!(read("# plain comment\n").0, Ok(0));
    }
}

// ---- The whole reader: header, then every row (fast paths above, the rest below) ----------
//
// What Python's reader (csv.reader over text decoded with surrogateescape, str.strip, int())
// accepted, this accepts, with the same words: the rows `row`/`fast_row` do not take go
// through `Record` (csv's excel dialect, non-strict, as CPython 3.11's _csv.c parses it) and
// `interpret` (the old beamalloc/trace.py's checks, in their order). Unicode facts below are
// Python 3.11's (unicodedata 14.0.0): its whitespace, decimal digits (int() reads them) and
// digits (str.isdigit()).

/// The first code point of each run of ten decimal digits (Unicode Nd, 0..9 in order).
const DECIMAL_ZEROS: [u32; 66] = [
    0x30, 0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6, 0xd66,
    0xde6, 0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0, 0x1a80, 0x1a90,
    0x1b50, 0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0, 0xa9f0, 0xaa50, 0xabf0, 0xff10,
    0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650,
    0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50,
    0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
];
/// Code points str.isdigit() accepts that int() does not (superscripts, circled digits, ...).
const DIGITS_ONLY: [u32; 128] = [
    0xb2, 0xb3, 0xb9, 0x1369, 0x136a, 0x136b, 0x136c, 0x136d, 0x136e, 0x136f, 0x1370, 0x1371,
    0x19da, 0x2070, 0x2074, 0x2075, 0x2076, 0x2077, 0x2078, 0x2079, 0x2080, 0x2081, 0x2082, 0x2083,
    0x2084, 0x2085, 0x2086, 0x2087, 0x2088, 0x2089, 0x2460, 0x2461, 0x2462, 0x2463, 0x2464, 0x2465,
    0x2466, 0x2467, 0x2468, 0x2474, 0x2475, 0x2476, 0x2477, 0x2478, 0x2479, 0x247a, 0x247b, 0x247c,
    0x2488, 0x2489, 0x248a, 0x248b, 0x248c, 0x248d, 0x248e, 0x248f, 0x2490, 0x24ea, 0x24f5, 0x24f6,
    0x24f7, 0x24f8, 0x24f9, 0x24fa, 0x24fb, 0x24fc, 0x24fd, 0x24ff, 0x2776, 0x2777, 0x2778, 0x2779,
    0x277a, 0x277b, 0x277c, 0x277d, 0x277e, 0x2780, 0x2781, 0x2782, 0x2783, 0x2784, 0x2785, 0x2786,
    0x2787, 0x2788, 0x278a, 0x278b, 0x278c, 0x278d, 0x278e, 0x278f, 0x2790, 0x2791, 0x2792,
    0x10a40, 0x10a41, 0x10a42, 0x10a43, 0x10e60, 0x10e61, 0x10e62, 0x10e63, 0x10e64, 0x10e65,
    0x10e66, 0x10e67, 0x10e68, 0x11052, 0x11053, 0x11054, 0x11055, 0x11056, 0x11057, 0x11058,
    0x11059, 0x1105a, 0x1f100, 0x1f101, 0x1f102, 0x1f103, 0x1f104, 0x1f105, 0x1f106, 0x1f107,
    0x1f108, 0x1f109, 0x1f10a,
];
/// The longest header line read (the binary format's MAX_HEADER).
pub const MAX_HEADER_LINE: usize = 16 << 20;
/// Python's sys.get_int_max_str_digits() default: int() of longer decimal text fails.
const MAX_STR_DIGITS: usize = 4300;

fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn py_strip(s: &str) -> &str {
    s.trim_matches(py_space)
}

fn decimal(c: char) -> Option<u32> {
    let c = c as u32;
    let i = DECIMAL_ZEROS.partition_point(|&z| z <= c);
    (i > 0 && c - DECIMAL_ZEROS[i - 1] < 10).then(|| c - DECIMAL_ZEROS[i - 1])
}

fn py_isdigit(c: char) -> bool {
    decimal(c).is_some() || DIGITS_ONLY.binary_search(&(c as u32)).is_ok()
}

/// `_describe` of the old reader: the kind and length of a field, never its bytes.
fn describe(s: &str) -> String {
    if py_strip(s).is_empty() {
        "an empty field".into()
    } else {
        format!("a field of {} characters", s.chars().count())
    }
}

enum PyInt {
    Fits(u64),
    Negative,
    /// Above 2^64-1: its decimal digits (None: more than Python could print, 4300).
    Big(Option<usize>),
}

/// int(text) (or int(text, 16) when `hex`) on stripped text, as CPython parses it: Unicode
/// decimal digits and spaces mapped to ASCII first, a sign, single underscores between digits
/// (and one after 0x), at most 4300 decimal digits. None: a ValueError.
fn py_int(text: &str, hex: bool) -> Option<PyInt> {
    let mut s = Vec::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            s.push(c as u8);
        } else if py_space(c) {
            s.push(b' ');
        } else {
            s.push(b'0' + decimal(c)? as u8);
        }
    }
    let mut p = 0;
    while s.get(p).is_some_and(u8::is_ascii_whitespace) || s.get(p) == Some(&0x0b) {
        p += 1;
    }
    let mut negative = false;
    match s.get(p) {
        Some(b'+') => p += 1,
        Some(b'-') => {
            negative = true;
            p += 1
        }
        _ => {}
    }
    let base: u32 = if hex { 16 } else { 10 };
    if hex && s.get(p) == Some(&b'0') && matches!(s.get(p + 1), Some(b'x' | b'X')) {
        p += 2;
        if s.get(p) == Some(&b'_') {
            p += 1;
        }
    }
    if s.get(p) == Some(&b'_') {
        return None;
    }
    let mut digits = Vec::new();
    let mut prev = 0u8;
    while let Some(&b) = s.get(p) {
        if b == b'_' {
            if prev == b'_' {
                return None;
            }
        } else if let Some(d) = (b as char).to_digit(base) {
            digits.push(d as u8);
        } else {
            break;
        }
        prev = b;
        p += 1;
    }
    if prev == b'_' || digits.is_empty() {
        return None;
    }
    while s.get(p).is_some_and(u8::is_ascii_whitespace) || s.get(p) == Some(&0x0b) {
        p += 1;
    }
    if p != s.len() || (!hex && digits.len() > MAX_STR_DIGITS) {
        return None;
    }
    let sig = &digits[digits.iter().position(|&d| d != 0).unwrap_or(digits.len())..];
    let mut v: u64 = 0;
    let mut big = false;
    for &d in sig {
        match v
            .checked_mul(base as u64)
            .and_then(|v| v.checked_add(d as u64))
        {
            Some(n) => v = n,
            None => {
                big = true;
                break;
            }
        }
    }
    if negative && (big || v != 0) {
        return Some(PyInt::Negative);
    }
    if !big {
        return Some(PyInt::Fits(v));
    }
    if !hex {
        return Some(PyInt::Big(Some(sig.len())));
    }
    // len(str(v)) of a hex value: exact below 4000 hex digits (at most 4817 decimal ones), and
    // past 4300 decimal digits Python itself could not print it.
    if sig.len() > 4000 {
        return Some(PyInt::Big(None));
    }
    let mut limbs: Vec<u32> = Vec::new(); // little-endian, base 2^32
    for &d in sig {
        let mut carry = d as u64;
        for l in limbs.iter_mut() {
            let x = ((*l as u64) << 4) | carry;
            *l = x as u32;
            carry = x >> 32;
        }
        if carry > 0 {
            limbs.push(carry as u32);
        }
    }
    let mut n = 0;
    while !limbs.is_empty() {
        let mut rem = 0u64;
        for l in limbs.iter_mut().rev() {
            let x = (rem << 32) | *l as u64;
            *l = (x / 1_000_000_000) as u32;
            rem = x % 1_000_000_000;
        }
        while limbs.last() == Some(&0) {
            limbs.pop();
        }
        n += if limbs.is_empty() {
            rem.to_string().len()
        } else {
            9
        };
    }
    Some(PyInt::Big((n <= MAX_STR_DIGITS).then_some(n)))
}

/// `_int` of the old reader: a field as a u64, or its one-line error.
fn int_field(text: &str, what: &str, at: &str) -> Result<u64, TraceError> {
    let t = py_strip(text);
    let hex = t.len() >= 2 && t.as_bytes()[0] == b'0' && matches!(t.as_bytes()[1], b'x' | b'X');
    match py_int(t, hex) {
        Some(PyInt::Fits(v)) => Ok(v),
        None => Err(TraceError(format!(
            "{at}: {what} is not an integer ({})",
            describe(t)
        ))),
        Some(PyInt::Negative) => Err(TraceError(format!(
            "{at}: {what} is outside 0..2^64-1 (a negative number)"
        ))),
        Some(PyInt::Big(n)) => Err(TraceError(format!(
            "{at}: {what} is outside 0..2^64-1 (a number of {} digits)",
            n.map_or_else(|| format!("more than {MAX_STR_DIGITS}"), |n| n.to_string())
        ))),
    }
}

/// One CSV record as csv.reader returns it: the first nine fields (enough to judge a row: more
/// is an error), how many there were, whether a byte was not UTF-8 (a lone surrogate there).
#[derive(Default)]
struct Record {
    fields: Vec<String>,
    count: usize,
    cur: String,
    cur_len: usize,
    invalid: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    StartRecord,
    StartField,
    InField,
    InQuoted,
    QuoteInQuoted,
    EatCrnl,
}

/// A decoded unit of the input: a character, a byte that is not UTF-8 (surrogateescape's lone
/// surrogate), or the end of a line as the text reader splits them (after \n, \r\n, lone \r).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ch {
    C(char),
    Bad,
    Eol,
}

impl Record {
    fn add(&mut self, c: Ch) -> Result<(), String> {
        if self.cur_len >= FIELD_LIMIT {
            return Err(format!("field larger than field limit ({FIELD_LIMIT})"));
        }
        self.cur_len += 1;
        match c {
            Ch::C(c) if self.count < 9 => self.cur.push(c),
            Ch::Bad => {
                self.invalid = true;
                if self.count < 9 {
                    self.cur.push('\u{fffd}');
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn save(&mut self) {
        if self.count < 9 {
            self.fields.push(std::mem::take(&mut self.cur));
        }
        self.count += 1;
        self.cur_len = 0;
    }

    /// _csv.c's parse_process_char for the excel dialect (delimiter ',', quote '"', double
    /// quotes, not strict).
    fn step(&mut self, st: St, c: Ch) -> Result<St, String> {
        let nl = matches!(c, Ch::C('\n' | '\r'));
        let end = |r: &mut Record| {
            r.save();
            if c == Ch::Eol {
                St::StartRecord
            } else {
                St::EatCrnl
            }
        };
        Ok(match st {
            St::StartRecord if c == Ch::Eol => St::StartRecord,
            St::StartRecord if nl => St::EatCrnl,
            St::StartRecord | St::StartField => match c {
                _ if nl || c == Ch::Eol => end(self),
                Ch::C('"') => St::InQuoted,
                Ch::C(',') => {
                    self.save();
                    St::StartField
                }
                _ => {
                    self.add(c)?;
                    St::InField
                }
            },
            St::InField => match c {
                _ if nl || c == Ch::Eol => end(self),
                Ch::C(',') => {
                    self.save();
                    St::StartField
                }
                _ => {
                    self.add(c)?;
                    St::InField
                }
            },
            St::InQuoted => match c {
                Ch::Eol => St::InQuoted,
                Ch::C('"') => St::QuoteInQuoted,
                _ => {
                    self.add(c)?;
                    St::InQuoted
                }
            },
            St::QuoteInQuoted => match c {
                Ch::C('"') => {
                    self.add(c)?;
                    St::InQuoted
                }
                Ch::C(',') => {
                    self.save();
                    St::StartField
                }
                _ if nl || c == Ch::Eol => end(self),
                _ => {
                    self.add(c)?;
                    St::InField
                }
            },
            St::EatCrnl => match c {
                _ if nl => St::EatCrnl,
                Ch::Eol => St::StartRecord,
                _ => {
                    return Err("new-line character seen in unquoted field - do you need to                                 open the file with newline=''?"
                        .into())
                }
            },
        })
    }
}

/// Any trace read as CSV: the header lines, then events, streaming.
pub struct CsvReader<R: Read> {
    r: R,
    where_: String,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    /// File offset of buf[0].
    base: u64,
    /// The number of the last row (or header line) read, as the old reader counted: csv
    /// records, not physical lines.
    line: u64,
    /// The marker line's JSON header, if it has one.
    pub header_json: Option<String>,
    /// Byte offset and line number where the rows start (the replay's fast path starts there).
    pub rows_at: (u64, u64),
    pub types: Types,
    /// Tests and the fuzzers: every row through `Record` and `interpret`, none through the
    /// fast paths, the reference the fast paths must agree with.
    pub checked_only: bool,
    columns_due: bool,
    done: bool,
}

impl<R: Read> CsvReader<R> {
    pub fn new(r: R, where_: &str) -> Result<Self, TraceError> {
        let mut me = CsvReader {
            r,
            where_: where_.to_string(),
            buf: vec![0u8; 1 << 20],
            pos: 0,
            end: 0,
            eof: false,
            base: 0,
            line: 0,
            header_json: None,
            rows_at: (0, 0),
            types: Types::new(HashMap::new(), 0x10000),
            checked_only: false,
            columns_due: false,
            done: false,
        };
        let first = me.header_line()?;
        if let Some(rest) = first.strip_prefix("# beamalloc-trace") {
            me.line += 1;
            let rest = py_strip(rest);
            let (version, json) = match rest.find(py_space) {
                Some(i) => (&rest[..i], Some(rest[i..].trim_start_matches(py_space))),
                None => (rest, None),
            };
            if version != "1" {
                return Err(TraceError(format!(
                    "{where_}:1: CSV trace version is not supported (this reader: 1)"
                )));
            }
            me.header_json = json.map(str::to_string);
            me.columns_due = true;
        } else {
            me.columns(&first)?;
        }
        Ok(me)
    }

    /// After a marker line, the column line: read once the header's JSON has been judged
    /// (its errors come first, as they did).
    pub fn read_columns(&mut self) -> Result<(), TraceError> {
        if self.columns_due {
            self.columns_due = false;
            let cols = self.header_line()?;
            self.columns(&cols)?;
        }
        Ok(())
    }

    fn columns(&mut self, text: &str) -> Result<(), TraceError> {
        self.line += 1;
        let cols: Vec<&str> = py_strip(text).split(',').map(py_strip).collect();
        let want = [
            "t_ns",
            "op",
            "allocator",
            "instance",
            "type",
            "size",
            "id",
            "new_id",
        ];
        if cols.len() < 8 || cols[..8] != want || !matches!(&cols[8..], [] | ["thread"]) {
            return Err(TraceError(format!(
                "{}:{}: expected CSV columns {}[,thread], got {} column(s) that differ",
                self.where_,
                self.line,
                want.join(","),
                cols.len()
            )));
        }
        self.rows_at = (self.base + self.pos as u64, self.line);
        Ok(())
    }

    /// Read until `want` bytes are buffered from pos or the input ends; the buffer grows for
    /// a header line only.
    fn fill(&mut self, want: usize) -> Result<(), TraceError> {
        if self.end - self.pos >= want || self.eof {
            return Ok(());
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while self.end < want {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TraceError(format!("{}: {e}", self.where_))),
            }
        }
        Ok(())
    }

    /// The next line as the text reader's readline gives it (ending after \n, \r\n or a lone
    /// \r), checked to be UTF-8 as the old reader checked it.
    fn header_line(&mut self) -> Result<String, TraceError> {
        let mut out = Vec::new();
        loop {
            self.fill(2)?;
            if self.pos == self.end {
                break;
            }
            let b = self.buf[self.pos];
            self.pos += 1;
            out.push(b);
            if b == b'\n' {
                break;
            }
            if b == b'\r' {
                self.fill(1)?;
                if self.pos < self.end && self.buf[self.pos] == b'\n' {
                    self.pos += 1;
                    out.push(b'\n');
                }
                break;
            }
            if out.len() > MAX_HEADER_LINE {
                return Err(TraceError(format!(
                    "{}:{}: a header line of more than {MAX_HEADER_LINE} bytes",
                    self.where_,
                    self.line + 1
                )));
            }
        }
        String::from_utf8(out)
            .map_err(|_| TraceError(format!("{}:{}: not UTF-8 text", self.where_, self.line + 1)))
    }

    /// The next unit of input at pos (a character, a byte that is not UTF-8, or the end).
    fn unit(&mut self) -> Result<Option<(Ch, usize)>, TraceError> {
        self.fill(4)?;
        if self.pos == self.end {
            return Ok(None);
        }
        let b = self.buf[self.pos];
        if b < 0x80 {
            return Ok(Some((Ch::C(b as char), 1)));
        }
        let s = &self.buf[self.pos..self.end.min(self.pos + 4)];
        let valid = match std::str::from_utf8(s) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&s[..e.valid_up_to()]).unwrap_or(""),
        };
        Ok(Some(match valid.chars().next() {
            Some(c) => (Ch::C(c), c.len_utf8()),
            None => (Ch::Bad, 1),
        }))
    }

    /// One csv record from pos (_csv.c's Reader_iternext over the text reader's lines); None
    /// at the end of the input.
    fn record(&mut self) -> Result<Option<Record>, TraceError> {
        let mut rec = Record::default();
        let mut st = St::StartRecord;
        let mut line_has = false; // a line has begun: the end of input ends it
        let err = |me: &Self, m: String| TraceError(format!("{}:{}: {m}", me.where_, me.line + 1));
        loop {
            let Some((c, n)) = self.unit()? else {
                if line_has {
                    st = rec.step(st, Ch::Eol).map_err(|m| err(self, m))?;
                    if st == St::StartRecord {
                        return Ok(Some(rec));
                    }
                }
                if rec.cur_len != 0 || st == St::InQuoted {
                    rec.save();
                    return Ok(Some(rec));
                }
                return Ok(None);
            };
            self.pos += n;
            line_has = true;
            st = rec.step(st, c).map_err(|m| err(self, m))?;
            let eol = match c {
                Ch::C('\n') => true,
                Ch::C('\r') => {
                    self.fill(1)?;
                    !(self.pos < self.end && self.buf[self.pos] == b'\n')
                }
                _ => false,
            };
            if eol {
                line_has = false;
                st = rec.step(st, Ch::Eol).map_err(|m| err(self, m))?;
                if st == St::StartRecord {
                    return Ok(Some(rec));
                }
            }
        }
    }

    /// The old reader's checks of one record, in its order: Ok(None) for a blank or comment row.
    fn interpret(&mut self, rec: Record) -> Result<Option<Event>, TraceError> {
        let f = &rec.fields;
        if rec.count == 0 || f[0].starts_with('#') {
            return Ok(None);
        }
        let at = format!("{}:{}", self.where_, self.line);
        let fail = |m: String| Err(TraceError(format!("{at}: {m}")));
        if rec.invalid {
            return fail("not UTF-8 text".into());
        }
        if !matches!(rec.count, 8 | 9) {
            return fail(format!("expected 8 or 9 fields, got {}", rec.count));
        }
        let op = match py_strip(&f[1]) {
            "alloc" => Op::Alloc,
            "free" => Op::Free,
            "realloc" => Op::Realloc,
            _ => {
                return fail(format!(
                    "op is not alloc, free or realloc ({})",
                    describe(&f[1])
                ))
            }
        };
        let a = py_strip(&f[2]);
        let allocator = match allocator_number(a.as_bytes()) {
            Some(n) => n,
            None if !a.chars().next().is_some_and(py_isdigit) => {
                return fail(format!(
                    "unknown allocator ({}; a name such as binary_alloc, or a number)",
                    describe(a)
                ))
            }
            None => int_field(a, "allocator", &at)?,
        };
        let new_id = py_strip(&f[7]);
        if op == Op::Realloc && new_id.is_empty() {
            return fail("realloc needs new_id".into());
        }
        if op != Op::Realloc && !new_id.is_empty() {
            return fail(format!(
                "new_id is for realloc only (empty on {})",
                py_strip(&f[1])
            ));
        }
        let t_ns = int_field(&f[0], "t_ns", &at)?;
        let instance = int_field(&f[3], "instance", &at)?;
        let name = py_strip(&f[4]);
        let type_ = if name.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            int_field(name, "type", &at)?
        } else if let Some(&n) = self.types.known.get(name.as_bytes()) {
            n
        } else {
            let n = self.types.next;
            self.types.next += 1;
            self.types.known.insert(name.as_bytes().to_vec(), n);
            self.types.added.push((name.to_string(), n, allocator));
            n
        };
        let size = if py_strip(&f[5]).is_empty() {
            0
        } else {
            int_field(&f[5], "size", &at)?
        };
        let id = int_field(&f[6], "id", &at)?;
        let new_id = if new_id.is_empty() {
            0
        } else {
            int_field(new_id, "new_id", &at)?
        };
        let thread = if rec.count == 9 && !py_strip(&f[8]).is_empty() {
            int_field(&f[8], "thread", &at)?
        } else {
            0
        };
        Ok(Some(Event {
            t_ns,
            op,
            allocator,
            instance,
            type_,
            size,
            id,
            new_id,
            thread,
        }))
    }

    /// The plain row at pos through `fast_row` or `row`, if they take it: Some(event or a
    /// skipped row), having stepped over it.
    fn plain(&mut self) -> Result<Option<Option<Event>>, TraceError> {
        if let Some((ev, used)) = fast_row(&self.buf[self.pos..self.end], &self.types) {
            self.pos += used;
            return Ok(Some(Some(ev)));
        }
        let mut nl = memchr::memchr(b'\n', &self.buf[self.pos..self.end]);
        if nl.is_none() && !self.eof {
            self.fill(self.buf.len())?;
            nl = memchr::memchr(b'\n', &self.buf[self.pos..self.end]);
        }
        let (body_end, next) = match nl {
            Some(p) => (self.pos + p, self.pos + p + 1),
            None if self.eof => (self.end, self.end),
            None => return Ok(None), // a line longer than the buffer: the record's to read
        };
        let mut body = &self.buf[self.pos..body_end];
        if nl.is_some() {
            if let [rest @ .., b'\r'] = body {
                body = rest;
            }
        }
        match row(body, &mut self.types) {
            Ok(r) => {
                self.pos = next;
                Ok(Some(r))
            }
            Err(()) => Ok(None),
        }
    }

    /// The next event; None at the end of the input.
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        if self.columns_due {
            self.done = true;
            self.read_columns()?;
            self.done = false;
        }
        while !self.done {
            self.fill(1 << 12)?;
            if self.pos == self.end {
                self.done = true;
                break;
            }
            let taken = if self.checked_only {
                None
            } else {
                self.plain()?
            };
            let ev = match taken {
                Some(ev) => {
                    self.line += 1;
                    ev
                }
                None => match self.record() {
                    Ok(Some(rec)) => {
                        self.line += 1;
                        self.interpret(rec).inspect_err(|_| self.done = true)?
                    }
                    Ok(None) => {
                        self.done = true;
                        None
                    }
                    Err(e) => {
                        self.done = true;
                        return Err(e);
                    }
                },
            };
            if ev.is_some() {
                return Ok(ev);
            }
        }
        Ok(None)
    }
}
