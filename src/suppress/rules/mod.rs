//! Suppressions: the rules and how they match races and warnings; `syntax` parses the line
//! syntax of a suppressions file. The user-facing
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

mod syntax;
#[cfg(test)]
pub(crate) mod tests;

use super::error::FilterError;
use super::glob::Pattern;
use crate::engine::finding::{Race, Site, Warning};
use crate::report::warning_message;
use syntax::parse_line;

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
pub(super) enum Side {
    /// Unqualified: holds when it holds for the current or for the previous access.
    Either,
    /// `current.`
    Current,
    /// `previous.`
    Previous,
}

/// What a condition looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Key {
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
pub(super) struct Condition {
    pub(super) side: Side,
    pub(super) field: Key,
    pub(super) value: Pattern,
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
    pub(super) conditions: Vec<Condition>,
}

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
            Key::Kind => v.matches(race.kind.as_str()),
            Key::Buffer => {
                race.buffer.name.as_deref().is_some_and(|n| v.matches(n))
                    || v.matches(&format!("b{}", race.buffer.ordinal))
            }
            Key::Message => false,
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
            Key::Kernel => site.name.as_deref().is_some_and(|n| v.matches(n)),
            Key::Op => v.matches(site.op.as_str()),
            Key::Stream => site.stream.as_ref().is_some_and(|s| {
                s.name.as_deref().is_some_and(|n| v.matches(n))
                    || v.matches(&format!("s{}", s.ordinal))
            }),
            Key::At => site.at.as_deref().is_some_and(|at| v.matches_location(at)),
            Key::Kind | Key::Buffer | Key::Message => false,
        }
    }

    fn holds_for_warning(&self, warning: &Warning) -> bool {
        match self.field {
            Key::Kind => self.value.matches(warning.kind().as_str()),
            Key::Message => self.value.matches(&warning_message(warning)),
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
        let text = crate::suppress::error::read_text(path, &name)?;
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
