//! The line syntax of a suppressions file (`docs/suppressions.md`): `race:` or `warning:`,
//! then `key=value` conditions separated by commas, values bare or quoted, `#` comments. Every
//! error names the line, the column and what was expected there.

use super::super::error::FilterError;
use super::super::glob::Pattern;
use super::{Condition, Key, Side, Suppression, Target};
use crate::engine::finding::{RaceKind, WarningKind};
use crate::trace::record::OpKind;

const RACE_KEYS: &str =
    "kind, buffer, kernel, op, stream, at, or current./previous. before kernel, op, stream, at";
const WARNING_KEYS: &str = "kind, message";

/// A cursor over one line, with byte positions for columns.
struct Cursor<'a> {
    line: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.line[self.pos..].chars().next()
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.pos += c.len_utf8();
        }
    }

    fn skip_blanks(&mut self) {
        self.take_while(char::is_whitespace);
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if !f(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        &self.line[start..self.pos]
    }

    /// The 1-based byte column of the cursor.
    fn column(&self) -> u64 {
        self.pos as u64 + 1
    }

    /// What is at the cursor, for "found ..." in messages: the next word, or the end of the
    /// line.
    fn found(&self) -> String {
        let rest = &self.line[self.pos..];
        if rest.is_empty() {
            return "the end of the line".into();
        }
        if rest.starts_with(char::is_whitespace) {
            return "a blank".into();
        }
        let word: String = rest
            .split(char::is_whitespace)
            .next()
            .unwrap_or(rest)
            .chars()
            .take(30)
            .collect();
        format!("`{word}`")
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

pub(super) fn parse_line(
    line: &str,
    file: &str,
    line_no: u64,
) -> Result<Option<Suppression>, FilterError> {
    let err = |column: u64, message: String| FilterError::new(file, line_no, Some(column), message);
    let mut c = Cursor { line, pos: 0 };
    c.skip_blanks();
    if matches!(c.peek(), None | Some('#')) {
        return Ok(None);
    }
    let start = c.pos;
    let word = c.take_while(is_word_char);
    if c.peek() != Some(':') {
        return Err(match word {
            "race" | "warning" => err(
                c.column(),
                format!("expected `:` after `{word}`, found {}", c.found()),
            ),
            _ => {
                c.pos = start;
                err(
                    c.column(),
                    format!(
                        "expected a suppression `race:CONDITIONS` or `warning:CONDITIONS`, \
                         or a `#` comment, found {}",
                        c.found()
                    ),
                )
            }
        });
    }
    let target = match word {
        "race" => Target::Race,
        "warning" => Target::Warning,
        _ => {
            return Err(err(
                start as u64 + 1,
                format!("unknown suppression type `{word}` (expected `race` or `warning`)"),
            ));
        }
    };
    c.bump(); // ':'

    let mut conditions = Vec::new();
    loop {
        c.skip_blanks();
        let key_column = c.column();
        let key = c.take_while(is_word_char);
        if key.is_empty() {
            let after = if conditions.is_empty() {
                format!("`{}:`", target.as_str())
            } else {
                "`,`".to_string()
            };
            return Err(err(
                key_column,
                format!(
                    "expected a condition `key=value` after {after}, found {}",
                    c.found()
                ),
            ));
        }
        let (side, field) = parse_key(target, key).map_err(|m| err(key_column, m))?;
        c.skip_blanks();
        if c.peek() != Some('=') {
            return Err(err(
                c.column(),
                format!("expected `=` after `{key}`, found {}", c.found()),
            ));
        }
        c.bump();
        c.skip_blanks();
        let value_column = c.column();
        let value = if c.peek() == Some('"') {
            parse_quoted(&mut c).map_err(|(column, m)| err(column, m))?
        } else {
            c.take_while(|ch| !ch.is_whitespace() && ch != ',' && ch != '#')
                .to_string()
        };
        if value.is_empty() {
            c.pos = value_column as usize - 1;
            return Err(err(
                value_column,
                format!(
                    "expected a value after `{key}=` (`*` matches anything; quote a value that \
                     holds blanks, `,` or `#`), found {}",
                    c.found()
                ),
            ));
        }
        let value = Pattern::new(value);
        check_value(target, field, &value).map_err(|m| err(value_column, m))?;
        conditions.push(Condition { side, field, value });
        c.skip_blanks();
        match c.peek() {
            None | Some('#') => break,
            Some(',') => c.bump(),
            Some(_) => {
                return Err(err(
                    c.column(),
                    format!(
                        "expected `,` before another condition, `#` before a comment, or the \
                         end of the line after the value of `{key}`, found {}",
                        c.found()
                    ),
                ));
            }
        }
    }
    Ok(Some(Suppression {
        file: file.to_string(),
        line: line_no,
        text: line[start..c.pos].trim_end().to_string(),
        target,
        conditions,
    }))
}

/// A `"..."` value at the cursor, with `\"` and `\\` as its only escapes. Errors carry their
/// column.
fn parse_quoted(c: &mut Cursor<'_>) -> Result<String, (u64, String)> {
    let open = c.column();
    c.bump();
    let mut out = String::new();
    loop {
        match c.peek() {
            None => {
                return Err((
                    open,
                    "unterminated quoted value: expected a closing `\"` before the end of the \
                     line"
                        .into(),
                ));
            }
            Some('"') => {
                c.bump();
                return Ok(out);
            }
            Some('\\') => {
                let escape = c.column();
                c.bump();
                match c.peek() {
                    Some(e @ ('"' | '\\')) => {
                        out.push(e);
                        c.bump();
                    }
                    other => {
                        let found = other.map_or("\\ at the end of the line".to_string(), |e| {
                            format!("`\\{e}`")
                        });
                        return Err((
                            escape,
                            format!(
                                "unknown escape in a quoted value: expected `\\\"` or `\\\\`, \
                                 found {found}"
                            ),
                        ));
                    }
                }
            }
            Some(ch) => {
                out.push(ch);
                c.bump();
            }
        }
    }
}

fn parse_key(target: Target, key: &str) -> Result<(Side, Key), String> {
    let (side, name) = if let Some(rest) = key.strip_prefix("current.") {
        (Side::Current, rest)
    } else if let Some(rest) = key.strip_prefix("previous.") {
        (Side::Previous, rest)
    } else {
        (Side::Either, key)
    };
    match target {
        Target::Race => {
            let field = match name {
                "kind" => Key::Kind,
                "buffer" => Key::Buffer,
                "kernel" => Key::Kernel,
                "op" => Key::Op,
                "stream" => Key::Stream,
                "at" => Key::At,
                _ => {
                    return Err(format!(
                        "unknown key `{key}` in a `race:` suppression (expected one of: \
                         {RACE_KEYS})"
                    ));
                }
            };
            if side != Side::Either && matches!(field, Key::Kind | Key::Buffer) {
                return Err(format!(
                    "`{key}`: `{name}` belongs to the race as a whole, not to one side \
                     (`current.` and `previous.` go with kernel, op, stream and at)"
                ));
            }
            Ok((side, field))
        }
        Target::Warning => {
            let field = match name {
                "kind" if side == Side::Either => Key::Kind,
                "message" if side == Side::Either => Key::Message,
                _ => {
                    return Err(format!(
                        "unknown key `{key}` in a `warning:` suppression (expected one of: \
                         {WARNING_KEYS})"
                    ));
                }
            };
            Ok((side, field))
        }
    }
}

/// Values of closed sets (kinds, ops) must name, or as a glob match, at least one member: a
/// typo is an error, not a suppression that silently never matches.
fn check_value(target: Target, field: Key, value: &Pattern) -> Result<(), String> {
    let (what, known): (&str, Vec<&str>) = match (target, field) {
        (Target::Race, Key::Kind) => ("race kind", RaceKind::ALL.map(RaceKind::as_str).to_vec()),
        (Target::Warning, Key::Kind) => (
            "warning kind",
            WarningKind::ALL.map(WarningKind::as_str).to_vec(),
        ),
        (_, Key::Op) => (
            "op",
            OpKind::ALL
                .into_iter()
                .filter(|op| op.accesses_memory())
                .map(OpKind::as_str)
                .collect(),
        ),
        _ => return Ok(()),
    };
    if known.iter().any(|k| value.matches(k)) {
        return Ok(());
    }
    let v = value.as_str();
    let expected = known.join(", ");
    Err(if value.is_glob() {
        format!("`{v}` matches no {what} (expected one of: {expected})")
    } else {
        format!("unknown {what} `{v}` (expected one of: {expected})")
    })
}
