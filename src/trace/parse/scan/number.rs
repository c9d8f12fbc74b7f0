//! Unsigned integers as serde_json reads them into a `u64`, the short ones eight bytes at a
//! time: ids, sizes and offsets in traces are mostly a few digits long.

/// `u64::MAX` in decimal: a 20-digit number is in range when it is not greater, as text.
const U64_MAX_DIGITS: &[u8; 20] = b"18446744073709551615";

/// Every byte of a word set to `b`.
const fn splat(b: u8) -> u64 {
    u64::from_le_bytes([b; 8])
}

/// The unsigned integer starting at `pos`, and the position after it: digits without a leading
/// zero, at most `u64::MAX`, not followed by a fraction or an exponent (serde_json makes those
/// floats, and so errors for every field here). `None` for anything else.
#[inline(always)]
pub(super) fn unsigned(bytes: &[u8], pos: usize) -> Option<(u64, usize)> {
    let Some(chunk) = next_eight(bytes, pos) else {
        return unsigned_bytewise(bytes, pos);
    };
    // Digits become 0..=9; the first byte is the lowest.
    let digits = chunk ^ splat(b'0');
    // The high bit of each byte that is not a digit (`x >= 10`). A carry out of a byte only
    // leaves one that is not a digit, so the lowest flag is exact.
    let not_digit = (digits.wrapping_add(splat(0x76)) | digits) & splat(0x80);
    if not_digit == 0 {
        // Eight digits or more.
        return unsigned_bytewise(bytes, pos);
    }
    let len = (not_digit.trailing_zeros() / 8) as usize;
    let after = (chunk >> (8 * len)) as u8;
    if len == 0 || (len > 1 && digits as u8 == 0) || matches!(after, b'.' | b'e' | b'E') {
        return None;
    }
    // Leading zero bytes in front of the digits leave the value as it is.
    Some((eight_digits(digits << (8 * (8 - len))), pos + len))
}

/// The eight bytes from `pos`, the first in the lowest byte; near the end of the line, the
/// bytes left followed by zero bytes (which are not digits). `None` at the end, or in a line
/// shorter than eight bytes.
#[inline(always)]
fn next_eight(bytes: &[u8], pos: usize) -> Option<u64> {
    let word = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let left = bytes.len().checked_sub(pos)?;
    match left {
        0 => None,
        1..8 => Some(word(bytes.len().checked_sub(8)?)? >> (8 * (8 - left))),
        _ => word(pos),
    }
}

/// The value of eight digit values (0..=9), the most significant in the lowest byte: pairs,
/// then quads, then the whole, each step one multiplication.
#[inline(always)]
fn eight_digits(v: u64) -> u64 {
    let v = (v.wrapping_mul(10 * 256 + 1) >> 8) & 0x00ff_00ff_00ff_00ff;
    let v = (v.wrapping_mul(100 * 65536 + 1) >> 16) & 0x0000_ffff_0000_ffff;
    v.wrapping_mul(10000 * (1 << 32) + 1) >> 32
}

/// [`unsigned`] a byte at a time: long numbers, and numbers near the end of the line.
#[inline(never)]
fn unsigned_bytewise(bytes: &[u8], start: usize) -> Option<(u64, usize)> {
    let mut pos = start;
    let mut value = 0u64;
    while let Some(&b) = bytes.get(pos) {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
        pos += 1;
    }
    let digits = bytes.get(start..pos)?;
    let in_range = match digits.len() {
        0 => false,
        1 => true,
        // No leading zero; 20 digits only up to u64::MAX (the value wrapped if beyond).
        2..20 => digits[0] != b'0',
        20 => digits[0] != b'0' && digits <= U64_MAX_DIGITS.as_slice(),
        _ => false,
    };
    if !in_range || matches!(bytes.get(pos), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    Some((value, pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json makes of the number at the start of `text` for a `u64` field: the
    /// value and its length, or `None` for an error (or a float, an error too).
    fn reference(text: &str) -> Option<(u64, usize)> {
        let len = text.bytes().take_while(u8::is_ascii_digit).count();
        let digits = &text[..len];
        if len == 0 || (len > 1 && digits.starts_with('0')) {
            return None;
        }
        if matches!(text.as_bytes().get(len), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        digits.parse().ok().map(|v| (v, len))
    }

    fn check(text: &str) {
        for prefix in ["", ":", "\"stream\":"] {
            let line = format!("{prefix}{text}");
            let got =
                unsigned(line.as_bytes(), prefix.len()).map(|(v, end)| (v, end - prefix.len()));
            assert_eq!(got, reference(text), "{text:?}");
        }
    }

    #[test]
    fn agrees_with_serde_json_s_reading() {
        let tails = [
            "",
            "}",
            ",\"x\":1}",
            "]",
            " ",
            ".5",
            "e3",
            "E3",
            "x",
            "\u{e9}",
            "0123456789",
        ];
        let mut numbers: Vec<String> = (0..2000u64).map(|n| n.to_string()).collect();
        for shift in 0..64 {
            let n = 1u64 << shift;
            numbers.extend([n - 1, n, n + 1].map(|n| n.to_string()));
        }
        for n in [
            9_999_999u64,
            10_000_000,
            99_999_999,
            100_000_000,
            u64::MAX - 1,
            u64::MAX,
        ] {
            numbers.push(n.to_string());
        }
        numbers.extend(
            [
                "18446744073709551616",
                "99999999999999999999",
                "100000000000000000000",
                "0",
                "00",
                "01",
                "007",
                "-1",
                "",
                "a",
            ]
            .map(str::to_owned),
        );
        for number in &numbers {
            for tail in tails {
                check(&format!("{number}{tail}"));
            }
        }
        // Every byte right after one to seven digits.
        for len in 1..8 {
            for b in 0..=255u8 {
                let mut text = b"1234567"[..len].to_vec();
                text.push(b);
                text.extend_from_slice(b"xxxxxxxx");
                if let Ok(text) = String::from_utf8(text) {
                    check(&text);
                }
            }
        }
    }

    #[test]
    fn eight_digits_is_the_decimal_value() {
        for n in [
            0u64, 1, 12, 123, 1234, 12345, 123_456, 1_234_567, 12_345_678, 99_999_999, 10_000_001,
        ] {
            let text = format!("{n:08}");
            let digits = u64::from_le_bytes(text.as_bytes().try_into().unwrap()) ^ splat(b'0');
            assert_eq!(eight_digits(digits), n);
        }
    }
}
