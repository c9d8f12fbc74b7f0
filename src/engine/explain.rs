//! Turning what the engine noticed into findings (the cold path): a conflict becomes a
//! [`Race`] with both sites resolved and the fact of what was missing ([`Unordered`]); a
//! warning becomes a [`Warning`] with its data. No sentences here: `report` words them.

use super::clocks::{ActorKind, Maker};
use super::finding::{
    AccessKind, BufferInfo, Finding, GraphSite, Race, RaceKind, Reuse, Site, Unordered, Warning,
    WarningFact,
};
use super::shadow::{Conflict, SiteRef, Stamp};
use super::{Engine, Out};

/// How many leaked buffers a leak warning names (it counts all of them).
pub const LEAKS_NAMED: usize = 5;

impl Engine {
    #[cold]
    pub(super) fn report(
        &mut self,
        out: &mut Out<'_>,
        buffer: &BufferInfo,
        c: Conflict,
        current: Stamp,
    ) {
        let freeing = self.sites.of(&current.site).access == AccessKind::Free;
        let kind = if freeing && c.kind != RaceKind::UseAfterFree {
            RaceKind::FreeWhileInUse
        } else {
            c.kind
        };
        let race = Race {
            kind,
            buffer: buffer.clone(),
            range: (c.start, c.end),
            current: self.site(&current),
            previous: self.site(&c.previous),
            why: self.unordered(kind, &current, &c.previous),
            reused: self.reuse_of(buffer, &c.previous.site),
        };
        self.stats.races += 1;
        out(Finding::Race(Box::new(race)));
    }

    /// The earlier caching block the previous access was to, when it is not `buffer`.
    fn reuse_of(&self, buffer: &BufferInfo, previous: &SiteRef) -> Option<Reuse> {
        if previous.buffer.get() == buffer.ordinal {
            return None;
        }
        let r = self.retired.get(&previous.buffer.get())?;
        let freed = self.sites.of(&r.freed.site);
        Some(Reuse {
            buffer: (*r.info).clone(),
            freed_line: freed.record_line(&r.freed.site),
            freed_at: self.symbols.resolve(freed.at),
        })
    }

    /// What was missing between the previous access and the current one.
    fn unordered(&self, kind: RaceKind, current: &Stamp, previous: &Stamp) -> Unordered {
        if kind == RaceKind::UseAfterFree {
            return Unordered::Freed;
        }
        // When it ran: for a node, its launch, not where it was captured.
        let ran = previous.site.line;
        match self
            .actors
            .learned(current.epoch.actor, previous.epoch.actor)
        {
            None => Unordered::NeverSynchronized,
            Some(sync) if sync.line < ran => Unordered::SyncBefore(sync),
            Some(sync) => Unordered::SyncNotCovering(sync),
        }
    }

    fn site(&self, stamp: &Stamp) -> Site {
        let key = self.sites.of(&stamp.site);
        let launch = key.launch_line(&stamp.site);
        let info = |id| self.stream_or_ended(id).map(|(_, info)| info.clone());
        let actor = stamp.epoch.actor;
        // A stamp may be older than its slot's actor now (a free outlives its stream, R20).
        let (kind, former) = match self.actors.maker(stamp.epoch) {
            Some(Maker::Now(kind)) => (Some(kind), None),
            Some(Maker::Former { kind, stream }) => (Some(kind), Some(stream.cloned())),
            None => (None, Some(None)),
        };
        let (stream, graph) = match (key.on_stream, kind) {
            (true, Some(ActorKind::Stream(id))) => match former {
                Some(stream) => (stream, None),
                None => (self.stream_of(actor, id).cloned(), None),
            },
            (true, Some(ActorKind::Lane { graph, stream })) => {
                let site = GraphSite {
                    graph,
                    ordinal: self.graphs.get(&graph).map_or(0, |g| g.ordinal),
                    launch,
                    launch_stream: self.launch_stream(graph, launch).and_then(info),
                };
                (info(stream), Some(site))
            }
            _ => (None, None),
        };
        Site {
            line: key.record_line(&stamp.site),
            stream,
            thread: match self.actors.kind(key.host) {
                ActorKind::Host(t) => t,
                _ => 0,
            },
            graph,
            op: key.op,
            name: self.symbols.resolve(key.name),
            access: key.access,
            arg: self.symbols.resolve(key.arg),
            at: self.symbols.resolve(key.at),
        }
    }

    /// A warning about the current record.
    pub(super) fn warn(&mut self, out: &mut Out<'_>, fact: WarningFact) {
        let line = self.current.line;
        self.warn_at(out, line, fact);
    }

    fn warn_at(&mut self, out: &mut Out<'_>, line: u64, fact: WarningFact) {
        self.stats.warnings += 1;
        out(Finding::Warning(Warning { line, fact }));
    }

    /// One warning for every buffer still allocated, at the first one's allocation. A caching
    /// allocator's block is not counted: the pool holds blocks until the process ends, and a
    /// tensor alive at exit (a global, a cache) is no leak of the program's. Nor is ordinary
    /// host memory (`space: "host"`): CUDA neither allocates nor frees it, and a stack array or
    /// a global lives to the end (`streamsan run` declares all pageable memory as one buffer).
    pub(super) fn warn_leaks(&mut self, out: &mut Out<'_>) {
        let mut leaked: Vec<&BufferInfo> = self
            .buffers
            .values()
            .filter(|b| {
                b.freed.is_none()
                    && b.info.pool != crate::trace::record::Pool::Caching
                    && b.info.space != crate::trace::record::MemSpace::Host
                    && !self.never_allocated(b.ordinal)
            })
            .map(|b| &*b.info)
            .collect();
        if leaked.is_empty() {
            return;
        }
        leaked.sort_by_key(|b| b.ordinal);
        let line = leaked[0].alloc_line;
        let fact = WarningFact::Leak {
            first: leaked
                .iter()
                .take(LEAKS_NAMED)
                .map(|&b| b.clone())
                .collect(),
            count: leaked.len() as u64,
        };
        self.warn_at(out, line, fact);
    }
}
