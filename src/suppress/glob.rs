//! The one wildcard of suppression values: `*` matches any run of characters, also an empty one
//! and also `/` and `:`. Every other character matches itself, case-sensitively.

/// A suppression value: literal text, or a pattern with at least one `*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pattern {
    text: String,
}

impl Pattern {
    pub(crate) fn new(text: impl Into<String>) -> Pattern {
        Pattern { text: text.into() }
    }

    /// The value as written (after unquoting).
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the value holds a `*`.
    pub(crate) fn is_glob(&self) -> bool {
        self.text.contains('*')
    }

    /// True when the whole of `text` matches.
    pub(crate) fn matches(&self, text: &str) -> bool {
        glob_match(self.text.as_bytes(), text.as_bytes())
    }

    /// True when `text` is matched as a whole or is a matched prefix followed by `:` and more:
    /// `src/a.rs:12` matches `src/a.rs:12` and `src/a.rs:12:5`, never `src/a.rs:120`.
    pub(crate) fn matches_location(&self, text: &str) -> bool {
        if self.matches(text) {
            return true;
        }
        let mut prefix = Vec::with_capacity(self.text.len() + 2);
        prefix.extend_from_slice(self.text.as_bytes());
        prefix.extend_from_slice(b":*");
        glob_match(&prefix, text.as_bytes())
    }
}

/// Wildcard matching with backtracking to the last `*` (linear in practice, `O(n * m)` at
/// worst). Bytes suffice: `*` is ASCII, so it never occurs inside a multi-byte character, and
/// literal characters match exactly when their bytes do.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it currently stands for the end of.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            // Let the last `*` absorb one more byte and retry from there.
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_match_only_themselves() {
        let p = Pattern::new("sum");
        assert!(p.matches("sum"));
        assert!(!p.matches("Sum"));
        assert!(!p.matches("sum2"));
        assert!(!p.matches("xsum"));
        assert!(!p.matches(""));
        assert!(!p.is_glob());
    }

    #[test]
    fn star_matches_any_run_including_empty() {
        let cases = [
            ("*", "", true),
            ("*", "anything/at:all", true),
            ("sum*", "sum", true),
            ("sum*", "sum_kernel<float>", true),
            ("*sum", "reduce_sum", true),
            ("*sum", "sum_x", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "a-b-b-c", true),
            ("a*b*c", "a-c-b", false),
            ("**", "x", true),
            ("a*a*a", "aaaa", true),
            ("a*a*a", "aa", false),
            ("src/*.rs", "src/model/deep.rs", true),
            ("ré*", "résumé", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(
                Pattern::new(pattern).matches(text),
                expected,
                "{pattern:?} against {text:?}"
            );
        }
        assert!(Pattern::new("a*").is_glob());
    }

    #[test]
    fn locations_match_by_whole_components() {
        let file = Pattern::new("src/model.rs");
        assert!(file.matches_location("src/model.rs"));
        assert!(file.matches_location("src/model.rs:120"));
        assert!(file.matches_location("src/model.rs:120:9"));
        assert!(!file.matches_location("src/model.rs.bak:1:1"));
        assert!(!file.matches_location("src/model.rsx:1:1"));

        let line = Pattern::new("src/model.rs:12");
        assert!(line.matches_location("src/model.rs:12:3"));
        assert!(!line.matches_location("src/model.rs:120:3"));
        assert!(!line.matches_location("src/model.rs:1"));

        let col = Pattern::new("src/model.rs:12:3");
        assert!(col.matches_location("src/model.rs:12:3"));
        assert!(!col.matches_location("src/model.rs:12:30"));

        let dir = Pattern::new("src/ops/*");
        assert!(dir.matches_location("src/ops/gpu.rs:1:1"));
        assert!(!dir.matches_location("src/model.rs:1:1"));
        // A directory without `*` is not a prefix of the files in it.
        assert!(!Pattern::new("src/ops").matches_location("src/ops/gpu.rs:1:1"));
    }
}
