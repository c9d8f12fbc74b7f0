//! The JSON tokens of the fast path, read straight off the line's bytes.
//!
//! Every method accepts a subset of what serde_json accepts and reads it to the same value; it
//! returns `None` where serde_json would fail, and also where the fast path does not follow
//! serde_json (escapes in strings, numbers that are not plain unsigned 64-bit integers, deep
//! nesting). `None` only ever means "let serde_json read this line", never "invalid".

use super::number;

/// A read position in one line, or at the start of a line in a block of input bytes
/// ([`Cursor::at_line_start`]).
pub(super) struct Cursor<'a> {
    /// The line as text, when it is known to be UTF-8 (`None` on raw input bytes).
    text: Option<&'a str>,
    bytes: &'a [u8],
    pos: usize,
}

/// How deep an ignored value may nest before the fast path gives up (serde_json itself has no
/// limit for ignored values; this only bounds the recursion here).
const SKIP_DEPTH: u32 = 32;

/// The bytes that end the plain part of a JSON string: the closing quote, the start of an
/// escape, and the control characters serde_json rejects inside strings.
const STRING_STOP: [bool; 256] = {
    let mut stop = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        stop[b] = true;
        b += 1;
    }
    stop[b'"' as usize] = true;
    stop[b'\\' as usize] = true;
    stop
};

/// [`STRING_STOP`], and the bytes that are not ASCII: on raw input bytes an ASCII body needs
/// no UTF-8 check, and only a body that stops at such a byte takes one.
const ASCII_STRING_STOP: [bool; 256] = {
    let mut stop = STRING_STOP;
    let mut b = 0x80;
    while b < 0x100 {
        stop[b] = true;
        b += 1;
    }
    stop
};

impl<'a> Cursor<'a> {
    pub(super) fn new(text: &'a str) -> Cursor<'a> {
        Cursor {
            text: Some(text),
            bytes: text.as_bytes(),
            pos: 0,
        }
    }

    /// A cursor on raw input bytes that start with a line and may go on past its end, not yet
    /// known to be UTF-8: string bodies are checked as they are read. Only for the writer's
    /// layout (`written`), which reads no whitespace, so nothing it accepts crosses a line end
    /// (a string body stops at a control character, every other token is a literal or digits).
    pub(super) fn at_line_start(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor {
            text: None,
            bytes,
            pos: 0,
        }
    }

    /// The next byte after whitespace, not consumed. Compact lines have no whitespace and
    /// `json.dumps`-style lines one space, so those cases are handled here, inline.
    #[inline(always)]
    pub(super) fn peek(&mut self) -> Option<u8> {
        match self.bytes.get(self.pos) {
            Some(&b) if b > b' ' => Some(b),
            Some(b' ') => match self.bytes.get(self.pos + 1) {
                Some(&b) if b > b' ' => {
                    self.pos += 1;
                    Some(b)
                }
                _ => self.peek_after_whitespace(),
            },
            _ => self.peek_after_whitespace(),
        }
    }

    /// Skips JSON whitespace, exactly the four bytes serde_json skips, and peeks.
    #[inline(never)]
    fn peek_after_whitespace(&mut self) -> Option<u8> {
        let skipped = self.bytes[self.pos.min(self.bytes.len())..]
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .count();
        self.pos += skipped;
        self.bytes.get(self.pos).copied()
    }

    /// The next byte after whitespace, consumed.
    #[inline(always)]
    pub(super) fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    /// Consumes `byte` (after whitespace), or gives up.
    #[inline(always)]
    pub(super) fn eat(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// Consumes `byte` (after whitespace) if it is next.
    #[inline(always)]
    pub(super) fn eat_if(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.pos += usize::from(found);
        found
    }

    /// Nothing but whitespace is left (serde_json's `Deserializer::end`).
    #[inline(always)]
    pub(super) fn at_end(&mut self) -> bool {
        self.pos == self.bytes.len() || self.peek().is_none()
    }

    /// The `N` bytes at the read position, if there are that many (no whitespace skipped).
    #[inline(always)]
    pub(super) fn window<const N: usize>(&self) -> Option<[u8; N]> {
        let end = self.pos.checked_add(N)?;
        self.bytes.get(self.pos..end)?.try_into().ok()
    }

    /// `byte` is next (no whitespace skipped).
    #[inline(always)]
    pub(super) fn at(&self, byte: u8) -> bool {
        self.bytes.get(self.pos) == Some(&byte)
    }

    /// The read position, to come back to with [`Cursor::rewind`].
    #[inline(always)]
    pub(super) fn position(&self) -> usize {
        self.pos
    }

    /// Goes back to a position [`Cursor::position`] gave.
    #[inline(always)]
    pub(super) fn rewind(&mut self, pos: usize) {
        self.pos = pos;
    }

    /// Moves the read position `n` bytes on, past bytes the caller has matched.
    #[inline(always)]
    pub(super) fn advance(&mut self, n: usize) {
        self.pos += n;
    }

    /// After `"`: the string up to its closing quote, borrowed. Gives up on an escape (the value
    /// would differ from the text), on a control character (serde_json rejects those) and, on
    /// raw bytes, on a body that is not UTF-8 (the line's reader words that error).
    #[inline(always)]
    pub(super) fn string_body(&mut self) -> Option<&'a str> {
        let start = self.pos;
        let rest = self.bytes.get(start..)?;
        let Some(text) = self.text else {
            return self.raw_string_body(rest);
        };
        let len = rest.iter().position(|&b| STRING_STOP[usize::from(b)])?;
        if rest[len] != b'"' {
            return None;
        }
        self.pos = start + len + 1;
        // Both ends sit next to an ASCII quote, so this is a whole `str` of the line.
        text.get(start..start + len)
    }

    /// [`Cursor::string_body`] on raw input bytes, `rest` from the read position on.
    #[inline(always)]
    fn raw_string_body(&mut self, rest: &'a [u8]) -> Option<&'a str> {
        let ascii = rest
            .iter()
            .position(|&b| ASCII_STRING_STOP[usize::from(b)])?;
        let body = if rest[ascii] == b'"' {
            // SAFETY: every byte before `ascii` is ASCII, so these bytes are UTF-8.
            unsafe { std::str::from_utf8_unchecked(&rest[..ascii]) }
        } else {
            let len = ascii
                + rest[ascii..]
                    .iter()
                    .position(|&b| STRING_STOP[usize::from(b)])?;
            if rest[len] != b'"' {
                return None;
            }
            std::str::from_utf8(&rest[..len]).ok()?
        };
        self.pos += body.len() + 1;
        Some(body)
    }

    /// The line ends at the read position: the length of its ending (`\n` or `\r\n`), or
    /// `None` where anything else is next (trailing whitespace, the end of the bytes).
    #[inline(always)]
    pub(super) fn line_ending(&self) -> Option<usize> {
        match self.bytes.get(self.pos..)? {
            [b'\n', ..] => Some(1),
            [b'\r', b'\n', ..] => Some(2),
            _ => None,
        }
    }

    /// A string value (after whitespace), borrowed.
    #[inline(always)]
    pub(super) fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        self.string_body()
    }

    /// `null` (after whitespace), consumed if it is there.
    #[inline(always)]
    pub(super) fn null(&mut self) -> bool {
        self.peek() == Some(b'n') && self.literal(b"null").is_some()
    }

    /// `true` or `false` (after whitespace).
    pub(super) fn bool(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.literal(b"true").map(|()| true),
            b'f' => self.literal(b"false").map(|()| false),
            _ => None,
        }
    }

    /// An unsigned integer that fits in 64 bits (after whitespace), written as serde_json reads
    /// one to a `u64`: digits without a leading zero, no sign, fraction or exponent (those
    /// become floats or errors there). A number too large becomes a float there, an error
    /// here: gives up.
    #[inline(always)]
    pub(super) fn u64(&mut self) -> Option<u64> {
        self.peek()?;
        self.digits()
    }

    /// [`Cursor::u64`] right at the read position, no whitespace skipped.
    #[inline(always)]
    pub(super) fn digits(&mut self) -> Option<u64> {
        let (value, end) = number::unsigned(self.bytes, self.pos)?;
        self.pos = end;
        Some(value)
    }

    /// Skips any JSON value as serde_json's `IgnoredAny` does, validating it the same way.
    pub(super) fn skip_value(&mut self) -> Option<()> {
        self.skip_nested(SKIP_DEPTH)
    }

    fn skip_nested(&mut self, depth: u32) -> Option<()> {
        match self.next()? {
            b'"' => self.string_body().map(drop),
            b'n' => self.literal(b"ull"),
            b't' => self.literal(b"rue"),
            b'f' => self.literal(b"alse"),
            b'-' => self.skip_number(),
            b'0'..=b'9' => {
                self.pos -= 1;
                self.skip_number()
            }
            b'[' => {
                let depth = depth.checked_sub(1)?;
                if self.eat_if(b']') {
                    return Some(());
                }
                loop {
                    self.skip_nested(depth)?;
                    match self.next()? {
                        b',' => {}
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b'{' => {
                let depth = depth.checked_sub(1)?;
                if self.eat_if(b'}') {
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.eat(b':')?;
                    self.skip_nested(depth)?;
                    match self.next()? {
                        b',' => {}
                        b'}' => return Some(()),
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }

    /// The bytes `word` next (no whitespace skipped), consumed.
    #[inline(always)]
    pub(super) fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes.get(self.pos..)?.starts_with(word) {
            self.pos += word.len();
            Some(())
        } else {
            None
        }
    }

    /// Skips a number (its sign, if any, consumed) by JSON's grammar, which is what serde_json
    /// checks of an ignored number: `0` or digits without a leading zero, then optionally `.`
    /// and digits, then optionally `e`/`E`, a sign and digits.
    fn skip_number(&mut self) -> Option<()> {
        let bytes = self.bytes;
        let digits = |pos: usize| {
            bytes
                .get(pos..)
                .unwrap_or_default()
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count()
        };
        let mut pos = self.pos;
        match bytes.get(pos)? {
            b'0' => {
                pos += 1;
                if bytes.get(pos).is_some_and(u8::is_ascii_digit) {
                    return None;
                }
            }
            b'1'..=b'9' => pos += digits(pos),
            _ => return None,
        }
        if bytes.get(pos) == Some(&b'.') {
            let n = digits(pos + 1);
            if n == 0 {
                return None;
            }
            pos += 1 + n;
        }
        if let Some(b'e' | b'E') = bytes.get(pos) {
            pos += 1;
            if let Some(b'+' | b'-') = bytes.get(pos) {
                pos += 1;
            }
            let n = digits(pos);
            if n == 0 {
                return None;
            }
            pos += n;
        }
        self.pos = pos;
        Some(())
    }
}
