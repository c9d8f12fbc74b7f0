//! The writer of trace format v1: one `write_all` per record, so an unbuffered writer never
//! leaves half a line behind a crash between calls.

use std::io::{self, Write};

use serde_json::{Map, Value};

use super::HEADER_KEY;
use super::record::{Access, Op, Pool, Record, StreamFlags, ThreadId};

/// Writes a trace: the header on construction, then one line per [`TraceWriter::write`].
///
/// Lines are in the canonical form that `docs/trace-format.md` shows: `op` first, then `name`,
/// the op's fields, `thread`, `at`; fields at their default value (`thread: 0`, `device: 0`,
/// `flags: "blocking"`, empty `reads` / `writes` / `atomics`, absent options) are left out.
///
/// ```
/// # use streamsan::trace::{TraceWriter, record::{Op, Record}};
/// let mut w = TraceWriter::new(Vec::new(), serde_json::Map::new())?;
/// let record = Record { line: 0, thread: 0, at: None, name: None, op: Op::DeviceSync { device: 0 } };
/// w.write(&record)?;
/// let text = String::from_utf8(w.into_inner()).unwrap();
/// assert_eq!(text, "{\"streamsan_trace\":1,\"minor\":3}\n{\"op\":\"device_sync\"}\n");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    /// The line being built, reused.
    line: Vec<u8>,
    /// Lines written so far, the header included.
    lines: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header `{"streamsan_trace":1,"minor":3, ...header_extra}` to `out`: the
    /// writer can write every record of this minor version, so it declares it, and readers that
    /// know only an older one skip the records they do not know (and say so). A
    /// `streamsan_trace` or `minor` key in `header_extra` is ignored.
    pub fn new(out: W, header_extra: Map<String, Value>) -> io::Result<TraceWriter<W>> {
        TraceWriter::start(out, header_json(Some(super::FORMAT_MINOR), &header_extra))
    }

    /// Writes the header as `header` holds it, its `minor` included (none when absent): for
    /// copying a trace read with [`TraceReader`](super::TraceReader), whose records may belong
    /// to a newer minor version. `streamsan_trace` comes first, then `minor`, then the other
    /// keys.
    pub fn with_header(out: W, header: &Map<String, Value>) -> io::Result<TraceWriter<W>> {
        let minor = header.get("minor").and_then(Value::as_u64);
        TraceWriter::start(out, header_json(minor, header))
    }

    fn start(out: W, mut line: Vec<u8>) -> io::Result<TraceWriter<W>> {
        line.push(b'\n');
        let mut this = TraceWriter {
            out,
            line,
            lines: 0,
        };
        this.out.write_all(&this.line)?;
        this.lines = 1;
        Ok(this)
    }

    /// Writes `record` as one line, in one `write_all`. `record.line` is not written (a
    /// record's line is its position); see [`TraceWriter::next_line`].
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`], writing nothing, for a record the format
    /// cannot express: a `launch` without a kernel name, or an access whose `off + len`
    /// overflows.
    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        self.line.clear();
        encode(record, &mut self.line)?;
        self.out.write_all(&self.line)?;
        self.lines += 1;
        Ok(())
    }

    /// Writes `n` blank lines, so the records after them keep their line numbers (as a trace
    /// with blank lines numbers them).
    pub fn skip_lines(&mut self, n: u64) -> io::Result<()> {
        const CHUNK: usize = 4096;
        let mut left = n;
        while left > 0 {
            let now = left.min(CHUNK as u64);
            self.out.write_all(&[b'\n'; CHUNK][..now as usize])?;
            left -= now;
        }
        self.lines += n;
        Ok(())
    }

    /// Writes `json`, one record line kept as text (a record whose op this crate does not know,
    /// read from a trace of a newer minor version), as it is. Fails with
    /// [`io::ErrorKind::InvalidInput`], writing nothing, when it holds a line break.
    pub fn write_json(&mut self, json: &str) -> io::Result<()> {
        if json.contains(['\n', '\r']) {
            return Err(invalid("a record kept as JSON must be one line"));
        }
        self.line.clear();
        self.line.extend_from_slice(json.as_bytes());
        self.line.push(b'\n');
        self.out.write_all(&self.line)?;
        self.lines += 1;
        Ok(())
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The line number the next record will have when read back.
    pub fn next_line(&self) -> u64 {
        self.lines + 1
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The underlying writer, mutably (writing to it directly breaks the trace).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Gives the underlying writer back (not flushed).
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// The header object as one line of JSON, without its newline: `streamsan_trace` first, then
/// `minor` where given, then the keys of `extra` but those two.
pub(crate) fn header_json(minor: Option<u64>, extra: &Map<String, Value>) -> Vec<u8> {
    let mut line = format!("{{\"{HEADER_KEY}\":{}", super::FORMAT_VERSION).into_bytes();
    if let Some(minor) = minor {
        line.extend_from_slice(format!(",\"minor\":{minor}").as_bytes());
    }
    for (key, value) in extra {
        if key != HEADER_KEY && key != "minor" {
            line.push(b',');
            // Serializing a JSON value into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut line, key);
            line.push(b':');
            let _ = serde_json::to_writer(&mut line, value);
        }
    }
    line.push(b'}');
    line
}

/// Appends `record` to `out` as one line of trace format v1, ending in `\n`. On error (see
/// [`TraceWriter::write`]) `out` is left as it was.
pub fn encode(record: &Record, out: &mut Vec<u8>) -> io::Result<()> {
    let name = record
        .name
        .as_deref()
        .map_or(NameText::None, NameText::Text);
    let at = record.at.as_deref().map_or(AtText::None, AtText::Text);
    encode_parts(&record.op, name, record.thread, at, out)
}

/// A line's `name` as its writer has it: the online layer names cudarc's events by number and
/// writes them without making a string first.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) enum NameText<'a> {
    None,
    /// Any text, escaped where needed.
    Text(&'a str),
    /// This prefix, then a number in decimal. The prefix needs no escaping.
    Numbered(&'static str, u64),
}

/// A line's `at` as its writer has it.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) enum AtText<'a> {
    None,
    /// Any text, escaped where needed.
    Text(&'a str),
    /// Text already written as a JSON string, quotes included ([`json_string`]): a call
    /// site's, kept by the online layer so that its records do not escape it again.
    Json(&'a [u8]),
}

/// `s` as a JSON string, quotes included, as lines write it.
pub(crate) fn json_string(s: &str) -> Vec<u8> {
    if plain(s.as_bytes()) {
        [b"\"", s.as_bytes(), b"\""].concat()
    } else {
        // Escaping into a Vec cannot fail.
        serde_json::to_vec(s).unwrap_or_default()
    }
}

/// [`encode`] from a record's parts: the op, its name, thread and location.
pub(crate) fn encode_parts(
    op: &Op,
    name: NameText<'_>,
    thread: ThreadId,
    at: AtText<'_>,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    // Most lines fit in a buffer on the stack; a longer one is written again into `out`,
    // with the room it turned out to need.
    let mut first = [0u8; 256];
    let len = encode_into(&mut first, op, name, thread, at)?;
    if len <= first.len() {
        out.extend_from_slice(&first[..len]);
        return Ok(());
    }
    let start = out.len();
    out.resize(start + len, 0);
    // The same line again: it fits, and it cannot fail where the first pass did not.
    let again = encode_into(&mut out[start..], op, name, thread, at);
    debug_assert!(matches!(again, Ok(n) if n == len));
    if again.is_err() {
        out.truncate(start);
    }
    again.map(drop)
}

/// Trace lines written where they will be read from: a buffer whose bytes past the lines stay
/// allocated and initialized, so that a line is written in place, with no room to zero and no
/// copy after (the online layer writes a call's lines on the program's thread).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct LineBuf {
    bytes: Vec<u8>,
    /// Bytes of whole lines at the start of `bytes`.
    len: usize,
}

impl std::fmt::Debug for LineBuf {
    /// The lines, not the room past them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineBuf")
            .field("lines", &String::from_utf8_lossy(self.as_bytes()))
            .finish()
    }
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl LineBuf {
    /// Room for a few kilobytes of lines before the first growth.
    pub(crate) fn new() -> LineBuf {
        LineBuf {
            bytes: vec![0; 4096],
            len: 0,
        }
    }

    /// Appends the line [`encode_parts`] makes of these parts; on error nothing is appended.
    pub(crate) fn push(
        &mut self,
        op: &Op,
        name: NameText<'_>,
        thread: ThreadId,
        at: AtText<'_>,
    ) -> io::Result<()> {
        loop {
            let end = self.len + encode_into(&mut self.bytes[self.len..], op, name, thread, at)?;
            if end <= self.bytes.len() {
                self.len = end;
                return Ok(());
            }
            // Once more with the room the line turned out to need: it fits then.
            let grown = end.max(2 * self.bytes.len());
            self.bytes.resize(grown, 0);
        }
    }

    /// The lines so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets the lines; the room stays.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
}

/// `,"key":`, the start of a field after the first.
macro_rules! key {
    ($k:literal) => {
        concat!(",\"", $k, "\":").as_bytes()
    };
}

/// Writes the line of these parts into `buf` as far as it fits; its whole length. The line
/// is written through a [`Line`] of its own, which the compiler keeps in registers. Bytes of
/// `buf` past the line may be changed too ([`Line::num`] stores digits a word at a time): `buf`
/// is room for the line, never memory whose bytes must survive.
fn encode_into(
    buf: &mut [u8],
    op: &Op,
    name: NameText<'_>,
    thread: ThreadId,
    at: AtText<'_>,
) -> io::Result<usize> {
    let mut l = Line { buf, len: 0 };
    encode_inner(op, name, thread, at, &mut l)?;
    Ok(l.len)
}

#[inline(always)]
fn encode_inner(
    op: &Op,
    name: NameText<'_>,
    thread: ThreadId,
    at: AtText<'_>,
    l: &mut Line<'_>,
) -> io::Result<()> {
    // Op names need no escaping (a test pins it). The op's closing quote starts the next
    // piece: fewer, longer pieces are fewer length checks.
    l.bytes(b"{\"op\":\"");
    l.bytes(op.name().as_bytes());
    match name {
        NameText::None => l.byte(b'"'),
        NameText::Text(name) => {
            l.bytes(b"\",\"name\":");
            l.str(name);
        }
        NameText::Numbered(prefix, n) => {
            debug_assert!(plain(prefix.as_bytes()));
            l.bytes(b"\",\"name\":\"");
            l.bytes(prefix.as_bytes());
            l.num(n);
            l.byte(b'"');
        }
    }
    match op {
        Op::Stream {
            id,
            device,
            kind,
            flags,
        } => {
            l.u64(key!("id"), *id);
            l.device(*device);
            l.bytes(key!("kind"));
            l.str(kind.as_str());
            if *flags != StreamFlags::Blocking {
                l.bytes(key!("flags"));
                l.str(flags.as_str());
            }
        }
        Op::Event { id } | Op::EventDestroy { id } | Op::StreamDestroy { id } => {
            l.u64(key!("id"), *id)
        }
        Op::Alloc {
            buf,
            bytes,
            device,
            space,
            stream,
            addr,
            pool,
        } => {
            l.u64(key!("buf"), *buf);
            l.u64(key!("bytes"), *bytes);
            l.device(*device);
            l.bytes(key!("space"));
            l.str(space.as_str());
            l.opt_u64(key!("stream"), *stream);
            l.opt_u64(key!("addr"), *addr);
            if *pool != Pool::Driver {
                l.bytes(key!("pool"));
                l.str(pool.as_str());
            }
        }
        Op::Free { buf, stream } => {
            l.u64(key!("buf"), *buf);
            l.opt_u64(key!("stream"), *stream);
        }
        Op::Launch {
            stream,
            reads,
            writes,
            atomics,
        } => {
            if matches!(name, NameText::None) {
                return Err(invalid(
                    "a launch record needs a kernel name (`Record::name`)",
                ));
            }
            l.u64(key!("stream"), *stream);
            l.accesses(key!("reads"), reads)?;
            l.accesses(key!("writes"), writes)?;
            l.accesses(key!("atomics"), atomics)?;
        }
        Op::Memcpy {
            stream,
            src,
            dst,
            blocking,
        } => {
            l.u64(key!("stream"), *stream);
            l.bytes(key!("src"));
            l.access(src)?;
            l.bytes(key!("dst"));
            l.access(dst)?;
            l.bool(key!("blocking"), *blocking);
        }
        Op::Memset {
            stream,
            dst,
            blocking,
        } => {
            l.u64(key!("stream"), *stream);
            l.bytes(key!("dst"));
            l.access(dst)?;
            l.bool(key!("blocking"), *blocking);
        }
        Op::HostFunc {
            stream,
            reads,
            writes,
        } => {
            l.u64(key!("stream"), *stream);
            l.accesses(key!("reads"), reads)?;
            l.accesses(key!("writes"), writes)?;
        }
        Op::HostAccess { reads, writes } => {
            l.accesses(key!("reads"), reads)?;
            l.accesses(key!("writes"), writes)?;
        }
        Op::Record { event, stream } => {
            l.u64(key!("event"), *event);
            l.u64(key!("stream"), *stream);
        }
        Op::Wait { stream, event } => {
            l.u64(key!("stream"), *stream);
            l.u64(key!("event"), *event);
        }
        Op::EventSync { event } => l.u64(key!("event"), *event),
        Op::EventQuery { event, done } => {
            l.u64(key!("event"), *event);
            l.bool(key!("done"), *done);
        }
        Op::StreamSync { stream } => l.u64(key!("stream"), *stream),
        Op::StreamQuery { stream, done } => {
            l.u64(key!("stream"), *stream);
            l.bool(key!("done"), *done);
        }
        Op::DeviceSync { device } => l.device(*device),
        Op::RecordStream { buf, stream } => {
            l.u64(key!("buf"), *buf);
            l.u64(key!("stream"), *stream);
        }
        Op::GraphBegin { graph, stream }
        | Op::GraphEnd { graph, stream }
        | Op::GraphLaunch { graph, stream } => {
            l.u64(key!("graph"), *graph);
            l.u64(key!("stream"), *stream);
        }
        Op::GraphDestroy { graph } => l.u64(key!("graph"), *graph),
    }
    if thread != 0 {
        l.u64(key!("thread"), thread);
    }
    match at {
        AtText::None => {}
        AtText::Text(at) => {
            l.bytes(key!("at"));
            l.str(at);
        }
        AtText::Json(at) => {
            l.bytes(key!("at"));
            l.bytes(at);
        }
    }
    l.bytes(b"}\n");
    Ok(())
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// Whether `s` can be written in a JSON string as it is: no control character, quote,
/// backslash or DEL. Eight bytes at a time: with a trace, every record's call site (tens of
/// bytes) passes here on the program's thread, and a byte at a time this check was a third of
/// the writer's instructions. The bytes after the last whole word are read as words that
/// overlap bytes already checked (a yes or no may see a byte twice), never copied into a word
/// first: reading a word just written byte by byte waits for the stores (a kernel's name
/// paid about 15 cycles there, a quarter of the writer's time on the program's thread).
#[inline]
fn plain(s: &[u8]) -> bool {
    let n = s.len();
    if n < 4 {
        // The first, middle and last bytes are all of them, the word's other bytes spaces.
        let Some((&first, &last)) = s.first().zip(s.last()) else {
            return true;
        };
        let word = [first, s[n / 2], last, b' ', b' ', b' ', b' ', b' '];
        return plain_word(word);
    }
    if n < 8 {
        // Two four-byte halves, overlapping when `n` < 8: every byte is in one of them.
        let half = |at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("four bytes"));
        let word = u64::from(half(0)) | u64::from(half(n - 4)) << 32;
        return plain_word(word.to_le_bytes());
    }
    let word = |at: usize| plain_word(s[at..at + 8].try_into().expect("eight bytes"));
    (0..n / 8).all(|i| word(8 * i)) && word(n - 8)
}

/// [`plain`] for eight bytes at once.
fn plain_word(word: [u8; 8]) -> bool {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    // Whether a byte of `w` is below `n` (exact as a yes or no for n <= 0x80).
    let below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGHS != 0;
    let any = |w: u64, b: u8| below(w ^ (ONES * u64::from(b)), 1);
    let w = u64::from_le_bytes(word);
    !(below(w, 0x20) || any(w, b'"') || any(w, b'\\') || any(w, 0x7f))
}

/// A JSON object being written into room set aside for it. A write past the room's end is
/// dropped but counted, so [`encode_into`]'s caller learns how much room the line needs: the lines
/// are built without a capacity check and length update of a `Vec` per byte. Keys come with
/// their separators ([`key!`]): a field is two pieces, its key and its value.
struct Line<'a> {
    buf: &'a mut [u8],
    /// Bytes of the line so far, whether or not they fit.
    len: usize,
}

impl Line<'_> {
    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        let end = self.len + b.len();
        if let Some(room) = self.buf.get_mut(self.len..end) {
            copy_short(room, b);
        }
        self.len = end;
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        if let Some(room) = self.buf.get_mut(self.len) {
            *room = b;
        }
        self.len += 1;
    }

    #[inline(always)]
    fn str(&mut self, s: &str) {
        if plain(s.as_bytes()) {
            self.byte(b'"');
            self.bytes(s.as_bytes());
            self.byte(b'"');
        } else {
            self.bytes(&json_string(s));
        }
    }

    /// A number in decimal. Below 10^8 (ids, sizes, lines: nearly every number) its digits
    /// are made in a register and stored as one word where the room allows, the bytes past
    /// them being room the line's next pieces write over: digits made in memory and then
    /// copied would be read back as words before their stores finish, and wait for them.
    #[inline(always)]
    fn num(&mut self, v: u64) {
        if v < 10 {
            self.byte(b'0' + v as u8);
            return;
        }
        if v < 100_000_000
            && let Some(room) = self.buf.get_mut(self.len..self.len + 8)
        {
            let (word, n) = eight_digits(v);
            room.copy_from_slice(&word.to_le_bytes());
            self.len += n;
            return;
        }
        self.bytes(decimal(v, &mut [0; 20]));
    }

    /// A number field: `key` is its [`key!`].
    #[inline(always)]
    fn u64(&mut self, key: &[u8], v: u64) {
        self.bytes(key);
        self.num(v);
    }

    #[inline(always)]
    fn opt_u64(&mut self, key: &[u8], v: Option<u64>) {
        if let Some(v) = v {
            self.u64(key, v);
        }
    }

    #[inline(always)]
    fn device(&mut self, device: u32) {
        if device != 0 {
            self.u64(key!("device"), u64::from(device));
        }
    }

    #[inline(always)]
    fn bool(&mut self, key: &[u8], v: bool) {
        self.bytes(key);
        self.bytes(if v { b"true" as &[u8] } else { b"false" });
    }

    #[inline(always)]
    fn accesses(&mut self, key: &[u8], list: &[Access]) -> io::Result<()> {
        let Some((first, rest)) = list.split_first() else {
            return Ok(());
        };
        self.bytes(key);
        self.byte(b'[');
        self.access(first)?;
        for access in rest {
            self.byte(b',');
            self.access(access)?;
        }
        self.byte(b']');
        Ok(())
    }

    /// A bare buffer id for a whole-buffer access without an argument name, else an object.
    #[inline(always)]
    fn access(&mut self, access: &Access) -> io::Result<()> {
        if access.range.is_none() && access.arg.is_none() {
            self.num(access.buf);
            return Ok(());
        }
        self.u64(b"{\"buf\":", access.buf);
        if let Some(range) = access.range {
            if range.off.checked_add(range.len).is_none() {
                return Err(invalid("an access's off + len overflows u64"));
            }
            self.u64(key!("off"), range.off);
            self.u64(key!("len"), range.len);
        }
        if let Some(arg) = &access.arg {
            self.bytes(key!("arg"));
            self.str(arg);
        }
        self.byte(b'}');
        Ok(())
    }
}

/// `dst.copy_from_slice(src)` (the lengths are equal), for the short texts lines are made of
/// without a call to `memcpy`: two overlapping copies of a fixed size.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    match n {
        0..4 => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = *s;
            }
        }
        4..8 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..].copy_from_slice(&src[n - 4..]);
        }
        8..=16 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..].copy_from_slice(&src[n - 8..]);
        }
        17..=32 => {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..].copy_from_slice(&src[n - 16..]);
        }
        33..=64 => {
            dst[..32].copy_from_slice(&src[..32]);
            dst[n - 32..].copy_from_slice(&src[n - 32..]);
        }
        _ => dst.copy_from_slice(src),
    }
}

/// The pairs of decimal digits "00" to "99".
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// `v` in decimal ASCII, written into the end of `digits`: what `format!` makes, without the
/// formatting machinery (trace lines and record labels write numbers on every call).
pub(crate) fn decimal(mut v: u64, digits: &mut [u8; 20]) -> &[u8] {
    // Two digits per division.
    let mut i = digits.len();
    while v >= 100 {
        let pair = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if v >= 10 {
        let pair = v as usize * 2;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        digits[i] = b'0' + v as u8;
    }
    &digits[i..]
}

/// `v` (below 10^8) in decimal ASCII as a little-endian word, its first digit in the lowest
/// byte, and how many of the word's bytes are digits.
#[inline(always)]
fn eight_digits(v: u64) -> (u64, usize) {
    debug_assert!(v < 100_000_000);
    let pair = |p: u64| {
        u64::from(u16::from_le_bytes([
            PAIRS[2 * p as usize],
            PAIRS[2 * p as usize + 1],
        ]))
    };
    let (high, low) = (v / 10_000, v % 10_000);
    // All eight digits, leading zeros included.
    let word =
        pair(high / 100) | pair(high % 100) << 16 | pair(low / 100) << 32 | pair(low % 100) << 48;
    // The leading zeros are the low bytes equal to '0'; a zero keeps one.
    let zeros = ((word ^ u64::from_le_bytes([b'0'; 8])).trailing_zeros() / 8).min(7) as usize;
    (word >> (8 * zeros), 8 - zeros)
}

#[cfg(test)]
mod tests;
