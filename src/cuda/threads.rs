//! Small, stable host thread ids for `Record::thread`: 0, 1, 2, ... in the order threads first
//! make a sanitized call, per sanitizer, so traces and reports do not depend on the OS.

use rustc_hash::FxHashMap;

/// The id map of one sanitizer.
#[derive(Debug, Default)]
pub(crate) struct ThreadIds {
    ids: FxHashMap<std::thread::ThreadId, u64>,
}

impl ThreadIds {
    /// The id of `thread`, assigning the next one on first use.
    pub(crate) fn id_of(&mut self, thread: std::thread::ThreadId) -> u64 {
        let next = self.ids.len() as u64;
        *self.ids.entry(thread).or_insert(next)
    }

    /// The id of the calling thread.
    pub(crate) fn current(&mut self) -> u64 {
        self.id_of(std::thread::current().id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_use_order_and_stable() {
        let mut ids = ThreadIds::default();
        assert_eq!(ids.current(), 0);
        let other = std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap();
        let third = std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap();
        assert_eq!(ids.id_of(third), 1);
        assert_eq!(ids.id_of(other), 2);
        assert_eq!(ids.current(), 0);
        assert_eq!(ids.id_of(third), 1);
    }
}
