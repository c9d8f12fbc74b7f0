//! Suppressions files: the line syntax, its parser and the matching rules. The user-facing
//! specification is `docs/suppressions.md`; this module implements exactly that.
//!
//! ```text
//! # a comment
//! race:kernel=sum                          # either side's kernel (or operation name)
//! race:kind=write-after-read,kernel=axpy   # every condition of a line must hold
//! race:current.stream=side,buffer=logits*  # `current.` / `previous.` pin one side
//! warning:kind=leak
//! ```

use std::path::Path;

use super::error::FilterError;
use super::glob::Pattern;
use crate::engine::finding::{Race, RaceKind, Site, Warning, WarningKind};
use crate::report::warning_message;

/// What a suppression applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `race:`
    Race,
    /// `warning:`
    Warning,
}

impl Target {
    fn as_str(self) -> &'static str {
        match self {
            Target::Race => "race",
            Target::Warning => "warning",
        }
    }
}

/// Which side of a race a per-side condition looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// Unqualified: holds when it holds for the current or for the previous access.
    Either,
    /// `current.`
    Current,
    /// `previous.`
    Previous,
}

/// What a condition looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    /// The race kind, or the warning kind.
    Kind,
    /// The buffer's name, or its report symbol `bN`.
    Buffer,
    /// A side's `name` (the kernel of a launch, the label of any other operation).
    Kernel,
    /// A side's trace `op`.
    Op,
    /// A side's stream name, or its report symbol `sN`.
    Stream,
    /// A side's source location, matched as a prefix by whole `:` components.
    At,
    /// A warning's message.
    Message,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Condition {
    side: Side,
    field: Field,
    value: Pattern,
}

/// One suppression: a line of a suppressions file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suppression {
    /// The file it came from, as named to [`Suppressions::parse`] or [`Suppressions::load`].
    pub file: String,
    /// Its 1-based line in that file.
    pub line: u64,
    /// The suppression as written, without a trailing comment or surrounding blanks.
    pub text: String,
    pub target: Target,
    conditions: Vec<Condition>,
}

/// The trace `op`s a race side can carry (docs/report-format.md, site object).
const SITE_OPS: [&str; 7] = [
    "launch",
    "memcpy",
    "memset",
    "host_func",
    "host_access",
    "alloc",
    "free",
];

const RACE_KINDS: [RaceKind; 5] = RaceKind::ALL;
const WARNING_KINDS: [WarningKind; 5] = WarningKind::ALL;

const RACE_KEYS: &str =
    "kind, buffer, kernel, op, stream, at, or current./previous. before kernel, op, stream, at";
const WARNING_KEYS: &str = "kind, message";

impl Suppression {
    /// `file:line`, as messages name a suppression.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// True when this is a `race:` suppression and every one of its conditions holds.
    pub fn matches_race(&self, race: &Race) -> bool {
        self.target == Target::Race && self.conditions.iter().all(|c| c.holds_for_race(race))
    }

    /// True when this is a `warning:` suppression and every one of its conditions holds.
    pub fn matches_warning(&self, warning: &Warning) -> bool {
        self.target == Target::Warning
            && self.conditions.iter().all(|c| c.holds_for_warning(warning))
    }
}

impl Condition {
    fn holds_for_race(&self, race: &Race) -> bool {
        let v = &self.value;
        match self.field {
            Field::Kind => v.matches(race.kind.as_str()),
            Field::Buffer => {
                race.buffer.name.as_deref().is_some_and(|n| v.matches(n))
                    || v.matches(&format!("b{}", race.buffer.ordinal))
            }
            Field::Message => false,
            _ => match self.side {
                Side::Either => {
                    self.holds_for_site(&race.current) || self.holds_for_site(&race.previous)
                }
                Side::Current => self.holds_for_site(&race.current),
                Side::Previous => self.holds_for_site(&race.previous),
            },
        }
    }

    fn holds_for_site(&self, site: &Site) -> bool {
        let v = &self.value;
        match self.field {
            Field::Kernel => site.name.as_deref().is_some_and(|n| v.matches(n)),
            Field::Op => v.matches(site.op.as_str()),
            Field::Stream => site.stream.as_ref().is_some_and(|s| {
                s.name.as_deref().is_some_and(|n| v.matches(n))
                    || v.matches(&format!("s{}", s.ordinal))
            }),
            Field::At => site.at.as_deref().is_some_and(|at| v.matches_location(at)),
            Field::Kind | Field::Buffer | Field::Message => false,
        }
    }

    fn holds_for_warning(&self, warning: &Warning) -> bool {
        match self.field {
            Field::Kind => self.value.matches(warning.kind().as_str()),
            Field::Message => self.value.matches(&warning_message(warning)),
            _ => false,
        }
    }
}

/// The suppressions of one or more files, in the order given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Suppressions {
    entries: Vec<Suppression>,
}

impl Suppressions {
    /// No suppressions.
    pub fn new() -> Suppressions {
        Suppressions::default()
    }

    /// Parses the text of a suppressions file; `file` names it in errors and in
    /// [`Suppression::file`]. The first malformed line is an error naming the line, the column
    /// and what was expected there.
    ///
    /// ```
    /// # use streamsan::suppress::Suppressions;
    /// let s = Suppressions::parse("# known\nrace:kernel=sum\nwarning:kind=leak\n", "s.supp")?;
    /// assert_eq!(s.len(), 2);
    /// assert_eq!(s.entries()[0].location(), "s.supp:2");
    /// let err = Suppressions::parse("race:kernal=sum\n", "s.supp").unwrap_err();
    /// assert!(err.to_string().starts_with("s.supp:1:6: unknown key `kernal`"));
    /// # Ok::<(), streamsan::suppress::FilterError>(())
    /// ```
    pub fn parse(text: &str, file: &str) -> Result<Suppressions, FilterError> {
        let mut entries = Vec::new();
        for (i, raw) in text.split('\n').enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if let Some(entry) = parse_line(line, file, i as u64 + 1)? {
                entries.push(entry);
            }
        }
        Ok(Suppressions { entries })
    }

    /// Reads and parses the file at `path`, named in errors as `path` displays.
    pub fn load(path: impl AsRef<Path>) -> Result<Suppressions, FilterError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| FilterError::read(&name, &e))?;
        Suppressions::parse(&text, &name)
    }

    /// Appends the suppressions of another file (several `--suppressions` files).
    pub fn extend(&mut self, other: Suppressions) {
        self.entries.extend(other.entries);
    }

    /// Every suppression, in file order then line order.
    pub fn entries(&self) -> &[Suppression] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The suppressions whose count in `hits` (one count per entry, as
    /// [`Filtered::hits`](super::Filtered::hits), summed over reports) is zero.
    pub fn unused(&self, hits: &[u64]) -> Vec<&Suppression> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, _)| hits.get(*i).copied().unwrap_or(0) == 0)
            .map(|(_, s)| s)
            .collect()
    }
}

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

fn parse_line(line: &str, file: &str, line_no: u64) -> Result<Option<Suppression>, FilterError> {
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

fn parse_key(target: Target, key: &str) -> Result<(Side, Field), String> {
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
                "kind" => Field::Kind,
                "buffer" => Field::Buffer,
                "kernel" => Field::Kernel,
                "op" => Field::Op,
                "stream" => Field::Stream,
                "at" => Field::At,
                _ => {
                    return Err(format!(
                        "unknown key `{key}` in a `race:` suppression (expected one of: \
                         {RACE_KEYS})"
                    ));
                }
            };
            if side != Side::Either && matches!(field, Field::Kind | Field::Buffer) {
                return Err(format!(
                    "`{key}`: `{name}` belongs to the race as a whole, not to one side \
                     (`current.` and `previous.` go with kernel, op, stream and at)"
                ));
            }
            Ok((side, field))
        }
        Target::Warning => {
            let field = match name {
                "kind" if side == Side::Either => Field::Kind,
                "message" if side == Side::Either => Field::Message,
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
fn check_value(target: Target, field: Field, value: &Pattern) -> Result<(), String> {
    let (what, known): (&str, Vec<&str>) = match (target, field) {
        (Target::Race, Field::Kind) => ("race kind", RACE_KINDS.map(RaceKind::as_str).to_vec()),
        (Target::Warning, Field::Kind) => (
            "warning kind",
            WARNING_KINDS.map(WarningKind::as_str).to_vec(),
        ),
        (_, Field::Op) => ("op", SITE_OPS.to_vec()),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::finding::{AccessKind, BufferInfo, StreamInfo};
    use crate::engine::finding::{Unordered, WarningFact};
    use crate::trace::record::OpKind;
    use crate::trace::record::{MemSpace, StreamFlags, StreamKind};

    fn parse(text: &str) -> Suppressions {
        Suppressions::parse(text, "t.supp").unwrap_or_else(|e| panic!("{e}"))
    }

    fn error(text: &str) -> String {
        Suppressions::parse(text, "t.supp")
            .expect_err("a syntax error")
            .to_string()
    }

    fn stream(id: u64, ordinal: u32, name: Option<&str>) -> StreamInfo {
        StreamInfo {
            id,
            ordinal,
            device: 0,
            kind: if ordinal == 0 {
                StreamKind::LegacyDefault
            } else {
                StreamKind::Created
            },
            flags: StreamFlags::NonBlocking,
            name: name.map(str::to_string),
        }
    }

    /// `sum` on stream s1 "side" reads buffer b1 "logits" that `randn` on s0 wrote.
    pub(crate) fn race() -> Race {
        Race {
            kind: RaceKind::ReadAfterWrite,
            buffer: BufferInfo {
                id: 10,
                ordinal: 1,
                name: Some("logits".into()),
                bytes: 64,
                space: MemSpace::Device,
                device: 0,
                alloc_line: 3,
                alloc_at: Some("src/alloc.rs:1:1".into()),
                alloc_stream: None,
                addr: None,
            },
            range: (0, 64),
            current: Site {
                line: 7,
                stream: Some(stream(5, 1, Some("side"))),
                thread: 0,
                op: OpKind::Launch,
                name: Some("sum".into()),
                access: AccessKind::Read,
                arg: Some("x".into()),
                at: Some("src/model.rs:120:5".into()),
            },
            previous: Site {
                line: 6,
                stream: Some(stream(0, 0, None)),
                thread: 0,
                op: OpKind::Launch,
                name: Some("randn".into()),
                access: AccessKind::Write,
                arg: Some("out".into()),
                at: Some("src/model.rs:118:5".into()),
            },
            why: Unordered::NeverSynchronized,
        }
    }

    fn matches(line: &str, race: &Race) -> bool {
        parse(line).entries()[0].matches_race(race)
    }

    #[test]
    fn comments_blank_lines_and_entries() {
        let s = parse(
            "# header comment\n\
             \n   \t\n\
             race:kernel=sum            # either side\n\
             \u{20}\u{20}warning:kind=leak\r\n\
             race: kind = write-after-read , kernel = axpy#tight comment\n",
        );
        let e = s.entries();
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].line, e[0].text.as_str()), (4, "race:kernel=sum"));
        assert_eq!(e[0].target, Target::Race);
        assert_eq!((e[1].line, e[1].text.as_str()), (5, "warning:kind=leak"));
        assert_eq!(e[1].target, Target::Warning);
        assert_eq!(
            e[2].text, "race: kind = write-after-read , kernel = axpy",
            "blanks around separators are allowed"
        );
        assert_eq!(e[2].conditions.len(), 2);
        assert_eq!(e[2].location(), "t.supp:6");
        assert!(parse("").is_empty());
        assert!(parse("# only\n").is_empty());
    }

    #[test]
    fn quoted_values_hold_blanks_commas_hashes_and_escapes() {
        let s = parse(r#"race:kernel="void axpy<float, 4>(#1) \"q\" \\",op=launch"#);
        let c = &s.entries()[0].conditions;
        assert_eq!(c[0].value.as_str(), r#"void axpy<float, 4>(#1) "q" \"#);
        assert_eq!(c[1].value.as_str(), "launch");
    }

    #[test]
    fn every_syntax_error_names_line_column_and_what_was_expected() {
        let cases: &[(&str, &str)] = &[
            (
                "kernel=sum",
                "t.supp:1:1: expected a suppression `race:CONDITIONS` or `warning:CONDITIONS`, \
                 or a `#` comment, found `kernel=sum`",
            ),
            (
                "  =x",
                "t.supp:1:3: expected a suppression `race:CONDITIONS` or `warning:CONDITIONS`, \
                 or a `#` comment, found `=x`",
            ),
            (
                "race",
                "t.supp:1:5: expected `:` after `race`, found the end of the line",
            ),
            (
                "race kernel=sum",
                "t.supp:1:5: expected `:` after `race`, found a blank",
            ),
            (
                "races:kernel=sum",
                "t.supp:1:1: unknown suppression type `races` (expected `race` or `warning`)",
            ),
            (
                "race:",
                "t.supp:1:6: expected a condition `key=value` after `race:`, found the end of \
                 the line",
            ),
            (
                "warning: # nothing",
                "t.supp:1:10: expected a condition `key=value` after `warning:`, found `#`",
            ),
            (
                "race:kernel=sum,",
                "t.supp:1:17: expected a condition `key=value` after `,`, found the end of the \
                 line",
            ),
            (
                "race:kernel=sum,,op=free",
                "t.supp:1:17: expected a condition `key=value` after `,`, found `,op=free`",
            ),
            (
                "race:kernal=sum",
                "t.supp:1:6: unknown key `kernal` in a `race:` suppression (expected one of: \
                 kind, buffer, kernel, op, stream, at, or current./previous. before kernel, op, \
                 stream, at)",
            ),
            (
                "race:message=x",
                "t.supp:1:6: unknown key `message` in a `race:` suppression (expected one of: \
                 kind, buffer, kernel, op, stream, at, or current./previous. before kernel, op, \
                 stream, at)",
            ),
            (
                "race:next.kernel=x",
                "t.supp:1:6: unknown key `next.kernel` in a `race:` suppression (expected one \
                 of: kind, buffer, kernel, op, stream, at, or current./previous. before kernel, \
                 op, stream, at)",
            ),
            (
                "race:current.kind=use-after-free",
                "t.supp:1:6: `current.kind`: `kind` belongs to the race as a whole, not to one \
                 side (`current.` and `previous.` go with kernel, op, stream and at)",
            ),
            (
                "race:previous.buffer=x",
                "t.supp:1:6: `previous.buffer`: `buffer` belongs to the race as a whole, not to \
                 one side (`current.` and `previous.` go with kernel, op, stream and at)",
            ),
            (
                "warning:kernel=sum",
                "t.supp:1:9: unknown key `kernel` in a `warning:` suppression (expected one of: \
                 kind, message)",
            ),
            (
                "warning:current.kind=leak",
                "t.supp:1:9: unknown key `current.kind` in a `warning:` suppression (expected \
                 one of: kind, message)",
            ),
            (
                "race:kernel",
                "t.supp:1:12: expected `=` after `kernel`, found the end of the line",
            ),
            (
                "race:kernel:sum",
                "t.supp:1:12: expected `=` after `kernel`, found `:sum`",
            ),
            (
                "race:kernel=",
                "t.supp:1:13: expected a value after `kernel=` (`*` matches anything; quote a \
                 value that holds blanks, `,` or `#`), found the end of the line",
            ),
            (
                "race:kernel=,op=free",
                "t.supp:1:13: expected a value after `kernel=` (`*` matches anything; quote a \
                 value that holds blanks, `,` or `#`), found `,op=free`",
            ),
            (
                "race:kernel=\"\"",
                "t.supp:1:13: expected a value after `kernel=` (`*` matches anything; quote a \
                 value that holds blanks, `,` or `#`), found `\"\"`",
            ),
            (
                "race:kernel=my kernel",
                "t.supp:1:16: expected `,` before another condition, `#` before a comment, or \
                 the end of the line after the value of `kernel`, found `kernel`",
            ),
            (
                "race:kernel=\"sum\"x",
                "t.supp:1:18: expected `,` before another condition, `#` before a comment, or \
                 the end of the line after the value of `kernel`, found `x`",
            ),
            (
                "race:kernel=\"sum",
                "t.supp:1:13: unterminated quoted value: expected a closing `\"` before the end \
                 of the line",
            ),
            (
                "race:kernel=\"a\\nb\"",
                "t.supp:1:15: unknown escape in a quoted value: expected `\\\"` or `\\\\`, found \
                 `\\n`",
            ),
            (
                "race:kernel=\"a\\",
                "t.supp:1:15: unknown escape in a quoted value: expected `\\\"` or `\\\\`, found \
                 \\ at the end of the line",
            ),
            (
                "race:kind=read-after-wrote",
                "t.supp:1:11: unknown race kind `read-after-wrote` (expected one of: \
                 read-after-write, write-after-read, write-after-write, free-while-in-use, \
                 use-after-free)",
            ),
            (
                "race:kind=wirte-*",
                "t.supp:1:11: `wirte-*` matches no race kind (expected one of: \
                 read-after-write, write-after-read, write-after-write, free-while-in-use, \
                 use-after-free)",
            ),
            (
                "warning:kind=leaks",
                "t.supp:1:14: unknown warning kind `leaks` (expected one of: unrecorded-event, \
                 foreign-per-thread-stream, host-access-to-device, leak, skipped-record)",
            ),
            (
                "race:current.op=kernel",
                "t.supp:1:17: unknown op `kernel` (expected one of: launch, memcpy, memset, \
                 host_func, host_access, alloc, free)",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(&error(text), expected, "for {text:?}");
        }
        // The first bad line is named, after good ones.
        assert_eq!(
            error("# ok\nrace:kernel=sum\n\nrace:kernel\n"),
            "t.supp:4:12: expected `=` after `kernel`, found the end of the line"
        );
    }

    #[test]
    fn load_names_the_file_in_errors() {
        let err = Suppressions::load("/nonexistent/streamsan.supp").unwrap_err();
        assert_eq!(err.file, "/nonexistent/streamsan.supp");
        assert_eq!(err.line, 0);
        assert!(
            err.to_string()
                .starts_with("/nonexistent/streamsan.supp: cannot read: "),
            "{err}"
        );
    }

    #[test]
    fn race_fields_match_exactly_or_by_glob() {
        let r = race();
        for (line, expected) in [
            ("race:kind=read-after-write", true),
            ("race:kind=write-after-read", false),
            ("race:kind=*-after-write", true),
            ("race:buffer=logits", true),
            ("race:buffer=log*", true),
            ("race:buffer=logit", false),
            ("race:buffer=b1", true),
            ("race:buffer=b2", false),
            ("race:kernel=sum", true),
            ("race:kernel=randn", true),
            ("race:kernel=Sum", false),
            ("race:kernel=su", false),
            ("race:op=launch", true),
            ("race:op=memcpy", false),
            ("race:stream=side", true),
            ("race:stream=s0", true),
            ("race:stream=s1", true),
            ("race:stream=s2", false),
            ("race:stream=main", false),
            ("race:at=src/model.rs", true),
            ("race:at=src/model.rs:120", true),
            ("race:at=src/model.rs:118:5", true),
            ("race:at=src/model.rs:12", false),
            ("race:at=src/*", true),
            ("race:at=src", false),
            ("race:at=src/alloc.rs", false),
        ] {
            assert_eq!(matches(line, &r), expected, "{line}");
        }
    }

    #[test]
    fn sides_either_or_pinned() {
        let r = race();
        assert!(matches("race:current.kernel=sum", &r));
        assert!(!matches("race:previous.kernel=sum", &r));
        assert!(matches("race:previous.kernel=randn", &r));
        assert!(matches("race:previous.stream=s0", &r));
        assert!(!matches("race:current.stream=s0", &r));
        assert!(matches("race:current.at=src/model.rs:120", &r));
        assert!(!matches("race:previous.at=src/model.rs:120", &r));
        assert!(matches("race:current.op=launch,previous.op=launch", &r));
        // Unqualified conditions are checked one by one against either side: the pair of
        // kernels is written as two conditions.
        assert!(matches("race:kernel=randn,kernel=sum", &r));
        assert!(!matches("race:kernel=randn,kernel=axpy", &r));
        assert!(matches("race:kernel=sum,stream=s0", &r), "different sides");
        assert!(!matches("race:current.kernel=sum,current.stream=s0", &r));
    }

    #[test]
    fn all_conditions_must_hold() {
        let r = race();
        assert!(matches(
            "race:kind=read-after-write,buffer=logits,kernel=sum,stream=side,at=src/*",
            &r
        ));
        assert!(!matches("race:kind=write-after-read,kernel=sum", &r));
        assert!(!matches("race:kernel=sum,buffer=other", &r));
    }

    #[test]
    fn missing_values_never_match_except_through_symbols() {
        let mut r = race();
        r.buffer.name = None;
        r.current.name = None;
        r.current.at = None;
        r.previous.at = None;
        r.current.stream = None; // host code
        assert!(matches("race:buffer=*", &r), "every buffer has a symbol");
        assert!(matches("race:buffer=b1", &r), "the symbol still matches");
        assert!(!matches("race:buffer=logits", &r));
        assert!(!matches("race:current.kernel=*", &r));
        assert!(!matches("race:at=*", &r));
        assert!(!matches("race:current.stream=*", &r));
        assert!(matches("race:current.op=launch", &r));
    }

    #[test]
    fn targets_do_not_cross() {
        let r = race();
        let mut tmp = crate::report::fixtures::buffer_x();
        tmp.name = Some("tmp".into());
        let w = Warning {
            line: 9,
            fact: WarningFact::Leak {
                first: vec![tmp],
                count: 1,
            },
        };
        let s = parse("race:kernel=*\nwarning:kind=leak\nwarning:message=*\"tmp\"*\n");
        let e = s.entries();
        assert!(e[0].matches_race(&r) && !e[0].matches_warning(&w));
        assert!(e[1].matches_warning(&w) && !e[1].matches_race(&r));
        assert!(e[2].matches_warning(&w));
        assert!(!parse("warning:kind=unrecorded-event").entries()[0].matches_warning(&w));
        assert!(!parse("warning:message=never").entries()[0].matches_warning(&w));
    }

    #[test]
    fn unused_are_those_without_hits_and_extend_keeps_order() {
        let mut s = parse("race:kernel=a\nrace:kernel=b\n");
        s.extend(Suppressions::parse("warning:kind=leak\n", "u.supp").unwrap());
        assert_eq!(s.len(), 3);
        let unused: Vec<String> = s.unused(&[1, 0, 0]).iter().map(|u| u.location()).collect();
        assert_eq!(unused, ["t.supp:2", "u.supp:1"]);
    }
}
