//! String interning, so shadow state stores kernel names, argument names and source locations
//! as small integers and resolves them only when a report is built.

use std::hash::BuildHasher;

use rustc_hash::{FxBuildHasher, FxHashMap};

use super::shadow::Sym;

/// Entries of [`Symbols::recent`] (a power of two).
const RECENT: usize = 64;

/// Interned strings; symbol 0 is "none".
#[derive(Debug)]
pub struct Symbols {
    ids: FxHashMap<Box<str>, Sym>,
    strings: Vec<Box<str>>,
    /// A direct-mapped cache in front of `ids`, by the string's hash: every record names its
    /// kernel, and a program names few kernels over and over, so most lookups end here after
    /// one hash and one comparison.
    recent: [(u64, Sym); RECENT],
}

impl Default for Symbols {
    fn default() -> Self {
        Symbols {
            ids: FxHashMap::default(),
            strings: vec!["".into()],
            recent: [(0, 0); RECENT],
        }
    }
}

impl Symbols {
    /// The symbol of `s`, or 0 for `None`.
    pub fn intern(&mut self, s: Option<&str>) -> Sym {
        let Some(s) = s else { return 0 };
        let hash = FxBuildHasher.hash_one(s);
        let slot = (hash >> (64 - RECENT.trailing_zeros())) as usize;
        let (seen, id) = self.recent[slot];
        // Symbol 0 is never a string's, so an empty entry never matches.
        if seen == hash && id != 0 && *self.strings[id as usize] == *s {
            return id;
        }
        let id = match self.ids.get(s) {
            Some(&id) => id,
            None => {
                let id = self.strings.len() as Sym;
                self.strings.push(s.into());
                self.ids.insert(s.into(), id);
                id
            }
        };
        self.recent[slot] = (hash, id);
        id
    }

    /// True when `sym` is the symbol of `s` (0 of `None`).
    #[inline]
    pub fn is(&self, sym: Sym, s: Option<&str>) -> bool {
        match s {
            None => sym == 0,
            Some(s) => sym != 0 && *self.strings[sym as usize] == *s,
        }
    }

    /// The string of a symbol, `None` for 0.
    pub fn resolve(&self, sym: Sym) -> Option<String> {
        (sym != 0).then(|| self.strings[sym as usize].to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_zero_is_none() {
        let mut s = Symbols::default();
        assert_eq!(s.intern(None), 0);
        let a = s.intern(Some("sum"));
        let b = s.intern(Some("randn"));
        assert_ne!(a, b);
        assert_eq!(s.intern(Some("sum")), a);
        assert_eq!(s.resolve(a).as_deref(), Some("sum"));
        assert_eq!(s.resolve(0), None);
        assert!(s.is(a, Some("sum")) && s.is(0, None));
        assert!(!s.is(a, Some("randn")) && !s.is(a, None) && !s.is(0, Some("")));
    }

    #[test]
    fn many_strings_keep_distinct_symbols_through_the_cache() {
        let mut s = Symbols::default();
        let names: Vec<String> = (0..1000).map(|i| format!("kernel_{i}")).collect();
        let first: Vec<Sym> = names.iter().map(|n| s.intern(Some(n))).collect();
        for (n, &id) in names.iter().zip(&first).rev() {
            assert_eq!(s.intern(Some(n)), id);
            assert_eq!(s.resolve(id).as_deref(), Some(n.as_str()));
        }
        let mut unique = first.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        assert_eq!(
            s.intern(Some("")),
            s.intern(Some("")),
            "the empty string is a string"
        );
        assert_ne!(s.intern(Some("")), 0);
    }
}
