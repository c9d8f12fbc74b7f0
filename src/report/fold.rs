//! The identity of a race independent of when it happened: what folds repeats into one report
//! entry ([`super::Collector`]) and what a baseline remembers ([`crate::suppress::Baseline`]).
//! One key for both, built from a [`Race`] or from its JSON form, so a race the report folds
//! together is exactly a race a baseline accepts together.
//!
//! The key: the race kind; the buffer's name, or its trace id when it has none (so a buffer
//! allocated afresh in each iteration of a loop still folds); and for each side what the code
//! did: the trace `op`, the `name` (kernel), the kernel argument, the access as the JSON report
//! spells it, the stream's trace id (or host code, from any thread), and the source location
//! `at`. Trace lines, byte ranges, host thread ids and counts are not part of it, so the
//! iterations of a loop fold even when the trace carries no source locations.

use super::json::{JsonRace, JsonSite};
use crate::engine::finding::{Race, RaceKind, Site};
use crate::trace::record::{BufId, OpKind, StreamId};

/// See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RaceKey {
    kind: RaceKind,
    buffer: BufferKey,
    current: SiteKey,
    previous: SiteKey,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum BufferKey {
    Name(String),
    Id(BufId),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SiteKey {
    op: OpKind,
    name: Option<String>,
    arg: Option<String>,
    /// As the JSON report spells it (an allocation is a `write`).
    access: &'static str,
    /// `None` for host code.
    stream: Option<StreamId>,
    at: Option<String>,
}

impl RaceKey {
    /// The key of a race as the engine found it.
    pub fn of(race: &Race) -> RaceKey {
        fn site(s: &Site) -> SiteKey {
            SiteKey {
                op: s.op,
                name: s.name.clone(),
                arg: s.arg.clone(),
                access: s.access.as_str(),
                stream: s.stream.as_ref().map(|st| st.id),
                at: s.at.clone(),
            }
        }
        RaceKey {
            kind: race.kind,
            buffer: match &race.buffer.name {
                Some(name) => BufferKey::Name(name.clone()),
                None => BufferKey::Id(race.buffer.id),
            },
            current: site(&race.current),
            previous: site(&race.previous),
        }
    }

    /// A 128-bit fingerprint of the key (two independent 64-bit hashes): what the collector
    /// remembers of each distinct race it counts, so that counting stays exact without keeping
    /// the key's strings.
    pub fn fingerprint(&self) -> u128 {
        use std::hash::{Hash, Hasher};
        let mut fx = rustc_hash::FxHasher::default();
        self.hash(&mut fx);
        let mut sip = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut sip);
        (u128::from(fx.finish()) << 64) | u128::from(sip.finish())
    }

    /// The key of a race as a JSON report lists it; an error names the value this reader
    /// does not know.
    pub fn of_json(race: JsonRace) -> Result<RaceKey, String> {
        fn site(s: JsonSite, side: &str) -> Result<SiteKey, String> {
            let op = OpKind::parse(&s.op)
                .ok_or_else(|| format!("unknown op {:?} in `{side}.op`", s.op))?;
            let access = ["read", "write", "free"]
                .into_iter()
                .find(|a| *a == s.access)
                .ok_or_else(|| {
                    format!(
                        "unknown access {:?} in `{side}.access` (expected \"read\", \"write\" \
                         or \"free\")",
                        s.access
                    )
                })?;
            Ok(SiteKey {
                op,
                name: s.name,
                arg: s.arg,
                access,
                stream: s.stream,
                at: s.at,
            })
        }
        let kind = RaceKind::ALL
            .into_iter()
            .find(|k| k.as_str() == race.kind)
            .ok_or_else(|| format!("unknown race kind {:?} in `kind`", race.kind))?;
        Ok(RaceKey {
            kind,
            buffer: match race.buffer_name {
                Some(name) => BufferKey::Name(name),
                None => BufferKey::Id(race.buffer),
            },
            current: site(race.current, "current")?,
            previous: site(race.previous, "previous")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Api;
    use crate::report::fixtures::*;

    #[test]
    fn a_race_and_its_json_have_one_key() {
        for race in [
            stream_stream_never_synced(),
            host_reader_after_device_write(),
            free_while_in_use_host_free(),
            use_after_free(),
            stream_ordered_alloc_on_other_stream(),
        ] {
            let json = JsonRace::of(&race, 1, Api::Cuda);
            assert_eq!(RaceKey::of_json(json).unwrap(), RaceKey::of(&race));
        }
    }

    #[test]
    fn unknown_spellings_are_errors() {
        let mut json = JsonRace::of(&stream_stream_never_synced(), 1, Api::Cuda);
        json.current.op = "lunch".into();
        assert_eq!(
            RaceKey::of_json(json).unwrap_err(),
            "unknown op \"lunch\" in `current.op`"
        );
        let mut json = JsonRace::of(&stream_stream_never_synced(), 1, Api::Cuda);
        json.kind = "read-after-read".into();
        assert!(RaceKey::of_json(json).unwrap_err().ends_with("in `kind`"));
    }
}
