//! The parts of an access's site that repeat: who issued it, what kind of call, the kernel,
//! the argument and the source location. Interned once per distinct combination (about one
//! per call site and access kind), so a stamp in shadow state carries a 4-byte key instead of
//! them and a buffer's state stays small enough for the cache.

use rustc_hash::FxHashMap;

use super::finding::AccessKind;
use super::shadow::{SiteRef, Sym};
use super::vclock::ActorIdx;
use crate::trace::record::{OpKind, ThreadId};

/// The interned part of a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SiteKey {
    /// For a graph node, the line where it was captured (its stamp's line is the launch's).
    /// Part of the key, so keys grow with the nodes ever captured (not with launches): a
    /// program that captures anew in a loop grows this table by its nodes' accesses each time.
    pub captured: Option<u64>,
    /// The host thread's actor that issued the call.
    pub host: ActorIdx,
    /// False when a host thread performed the access (host code, a host free, the host-side
    /// read of a synchronous pageable copy).
    pub on_stream: bool,
    pub op: OpKind,
    pub access: AccessKind,
    pub name: Sym,
    pub arg: Sym,
    pub at: Sym,
}

impl SiteKey {
    /// The line of the record that made the access (for a node: its capture).
    pub fn record_line(&self, site: &SiteRef) -> u64 {
        self.captured.unwrap_or(site.line)
    }

    /// The `graph_launch` line that ran a node's access; 0 for any other access.
    pub fn launch_line(&self, site: &SiteRef) -> u64 {
        if self.captured.is_some() {
            site.line
        } else {
            0
        }
    }
}

/// Interned [`SiteKey`]s.
#[derive(Debug, Default)]
pub struct Sites {
    ids: FxHashMap<SiteKey, u32>,
    keys: Vec<SiteKey>,
    /// The site of each (access kind, on a stream) without an argument name, per kind of
    /// record: records that share the kernel, location, op and thread share these sites, so a
    /// program that calls the same kernels over and over finds them without hashing a key.
    by_record: FxHashMap<RecordKey, u32>,
    record_sites: Vec<RecordSites>,
}

/// What a record's accesses share, apart from the kind of access and the argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordKey {
    pub name: Sym,
    pub at: Sym,
    pub op: OpKind,
    pub thread: ThreadId,
}

/// The sites of one [`RecordKey`], by `access kind * 2 + on_stream`; [`NO_SITE`] until made.
pub type RecordSites = [u32; AccessKind::COUNT * 2];

/// No site made yet (in [`RecordSites`]).
pub const NO_SITE: u32 = u32::MAX;

impl Sites {
    /// The index of `key`.
    #[inline]
    pub fn intern(&mut self, key: SiteKey) -> u32 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = u32::try_from(self.keys.len()).expect("fewer than 2^32 call sites");
        self.keys.push(key);
        self.ids.insert(key, id);
        id
    }

    /// The memo of sites for records like `key` (made empty on first use), and what it holds.
    #[inline]
    pub fn of_record(&mut self, key: RecordKey) -> (u32, RecordSites) {
        let next = self.record_sites.len() as u32;
        let memo = *self.by_record.entry(key).or_insert(next);
        if memo == next {
            self.record_sites.push([NO_SITE; AccessKind::COUNT * 2]);
        }
        (memo, self.record_sites[memo as usize])
    }

    /// The sites memo `memo` holds.
    #[inline]
    pub fn of_memo(&self, memo: u32) -> RecordSites {
        self.record_sites[memo as usize]
    }

    /// Remembers site `site` for slot `slot` of the records of memo `memo`.
    #[inline]
    pub fn remember(&mut self, memo: u32, slot: usize, site: u32) {
        self.record_sites[memo as usize][slot] = site;
    }

    /// The key of an index from [`Sites::intern`].
    #[inline]
    pub fn key(&self, id: u32) -> &SiteKey {
        &self.keys[id as usize]
    }

    /// The key of a site.
    #[inline]
    pub fn of(&self, site: &SiteRef) -> &SiteKey {
        self.key(site.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(access: AccessKind, arg: Sym) -> SiteKey {
        SiteKey {
            captured: None,
            host: ActorIdx(1),
            on_stream: true,
            op: OpKind::Launch,
            access,
            name: 3,
            arg,
            at: 4,
        }
    }

    #[test]
    fn equal_keys_share_an_index() {
        let mut sites = Sites::default();
        let a = sites.intern(key(AccessKind::Read, 0));
        let b = sites.intern(key(AccessKind::Write, 0));
        assert_ne!(a, b);
        for arg in 1..=4 {
            sites.intern(key(AccessKind::Read, arg));
        }
        assert_eq!(sites.intern(key(AccessKind::Read, 0)), a);
        assert_eq!(sites.key(b).access, AccessKind::Write);
    }

    #[test]
    fn a_node_site_keeps_its_capture_line_and_its_launch() {
        let k = SiteKey {
            captured: Some(7),
            ..key(AccessKind::Read, 0)
        };
        let site = SiteRef {
            line: 20,
            buffer: std::num::NonZeroU32::MIN,
            key: 0,
        };
        assert_eq!((k.record_line(&site), k.launch_line(&site)), (7, 20));
        let plain = key(AccessKind::Read, 0);
        assert_eq!(
            (plain.record_line(&site), plain.launch_line(&site)),
            (20, 0)
        );
        // Records built in code may all carry line 0: a node captured there is still a node.
        let at_zero = SiteKey {
            captured: Some(0),
            ..plain
        };
        assert_eq!(
            (at_zero.record_line(&site), at_zero.launch_line(&site)),
            (0, 20)
        );
    }
}
