//! String interning, so shadow state stores kernel names, argument names and source locations
//! as small integers and resolves them only when a report is built.

use rustc_hash::FxHashMap;

use super::shadow::Sym;

/// Interned strings; symbol 0 is "none".
#[derive(Debug)]
pub struct Symbols {
    ids: FxHashMap<Box<str>, Sym>,
    strings: Vec<Box<str>>,
}

impl Default for Symbols {
    fn default() -> Self {
        Symbols {
            ids: FxHashMap::default(),
            strings: vec!["".into()],
        }
    }
}

impl Symbols {
    /// The symbol of `s`, or 0 for `None`.
    pub fn intern(&mut self, s: Option<&str>) -> Sym {
        let Some(s) = s else { return 0 };
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as Sym;
        self.strings.push(s.into());
        self.ids.insert(s.into(), id);
        id
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
    }
}
