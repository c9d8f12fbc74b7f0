//! Streams: declarations, the enqueue rule (R1), the legacy default stream's barriers (R6),
//! per-thread default streams (R7), and the host synchronizations that wait for streams (R5).

use super::clocks::{ActorKind, EndedStream, needs_join};
use super::finding::{StreamInfo, WarningFact};
use super::objects::StreamState;
use super::resolved::EdgeKind;
use super::vclock::ActorIdx;
use super::{Engine, InputError, InputErrorKind, Out, Performer};
use crate::trace::record::{
    DeviceId, LEGACY_STREAM_DEVICE0, Record, StreamFlags, StreamId, StreamKind, ThreadId,
};

impl Engine {
    pub(super) fn declare_stream(
        &mut self,
        record: &Record,
        id: StreamId,
        device: DeviceId,
        kind: StreamKind,
        flags: StreamFlags,
    ) -> Result<(), InputErrorKind> {
        if kind == StreamKind::LegacyDefault && flags == StreamFlags::NonBlocking {
            return Err(InputErrorKind::Invalid(
                "the legacy default stream cannot be non_blocking".into(),
            ));
        }
        if id == LEGACY_STREAM_DEVICE0 {
            // Stream 0 exists implicitly; declaring it names it, and counts it as declared.
            if kind != StreamKind::LegacyDefault || device != 0 {
                return Err(InputErrorKind::BadStreamZero(format!(
                    "a {} stream of device {device}",
                    kind.as_str()
                )));
            }
            let s = self.streams.get_mut(&id).expect("stream 0 always exists");
            if s.declared_line != 0 {
                return Err(InputErrorKind::StreamRedeclared {
                    id,
                    first: s.declared_line,
                });
            }
            s.declared_line = record.line;
            s.info.name = record.name.clone();
            self.mark_used(id);
            self.note_stream(id);
            return Ok(());
        }
        if let Some(s) = self.streams.get(&id) {
            return Err(InputErrorKind::StreamRedeclared {
                id,
                first: s.declared_line,
            });
        }
        match (kind, flags) {
            (StreamKind::PerThreadDefault, StreamFlags::NonBlocking) => {
                return Err(InputErrorKind::Invalid(
                    "a per-thread default stream is blocking: it synchronizes with the legacy default stream (expected flags \"blocking\" or none)".into(),
                ));
            }
            (StreamKind::LegacyDefault, _) => {
                if let Some(existing) = self.legacy.get(&device) {
                    return Err(InputErrorKind::Invalid(format!(
                        "device {device} already has a legacy default stream (stream {existing})"
                    )));
                }
            }
            _ => {}
        }
        self.add_stream(id, device, kind, flags, record.name.clone(), record.thread);
        self.streams.get_mut(&id).expect("just added").declared_line = record.line;
        self.stats.streams += 1;
        self.note_stream(id);
        Ok(())
    }

    pub(super) fn add_stream(
        &mut self,
        id: StreamId,
        device: DeviceId,
        kind: StreamKind,
        flags: StreamFlags,
        name: Option<String>,
        owner: ThreadId,
    ) {
        let actor = self.actors.add(ActorKind::Stream(id));
        let ordinal = self.next_stream_ordinal;
        self.next_stream_ordinal += 1;
        if kind == StreamKind::LegacyDefault {
            self.legacy.insert(device, id);
        }
        self.device_streams.entry(device).or_default().push(id);
        self.streams.insert(
            id,
            StreamState {
                info: StreamInfo {
                    id,
                    ordinal,
                    device,
                    kind,
                    flags,
                    name,
                },
                actor,
                owner,
                blocking: flags == StreamFlags::Blocking && kind != StreamKind::LegacyDefault,
                legacy: None,
                declared_line: 0,
                used: id != LEGACY_STREAM_DEVICE0,
                joined: Vec::new(),
                capture: None,
            },
        );
    }

    /// The declared stream `id`.
    pub(super) fn stream(&self, id: StreamId) -> Result<&StreamState, InputErrorKind> {
        self.streams
            .get(&id)
            .ok_or(InputErrorKind::UndeclaredStream(id))
    }

    /// Counts the implicit stream 0 the first time a record declares or uses it.
    pub(super) fn mark_used(&mut self, id: StreamId) {
        let s = self.streams.get_mut(&id).expect("checked");
        if !s.used {
            s.used = true;
            self.stats.streams += 1;
        }
    }

    /// Starts an operation on `stream`: R6's barrier-in on the legacy stream, R1's join of the
    /// issuing host thread's clock, then a tick of the stream. What only a default stream or a
    /// join needs is out of line: most operations go to created streams whose clocks already
    /// hold the host's.
    pub(super) fn begin_op(
        &mut self,
        stream: StreamId,
        out: &mut Out<'_>,
    ) -> Result<Performer, InputError> {
        let host = self.host();
        let host_version = self.actors.version(host);
        // Looked up once: the slot stays valid, as nothing below declares a stream.
        let Some(slot) = self.streams.slot(stream) else {
            return Err(self.input_error(InputErrorKind::UndeclaredStream(stream)));
        };
        let s = self.streams.at_mut(slot);
        let (actor, kind, device, blocking) = (s.actor, s.info.kind, s.info.device, s.blocking);
        if kind != StreamKind::Created {
            self.begin_on_default_stream(slot, out)?;
        }
        self.note_stream(stream);
        let s = self.streams.at_mut(slot);
        // R1: join the issuing thread's clock, unless this stream already holds this version.
        let join_host = needs_join(&mut s.joined, host, host_version);
        if kind == StreamKind::LegacyDefault {
            self.legacy_barrier_in(actor, device);
        } else if blocking {
            // R6: an operation on a blocking stream waits for the legacy stream's earlier work.
            // (Only operations enqueued after it: a sync of the blocking stream alone does not
            // cover legacy work, as nothing in that stream waits for it.)
            let legacy = match s.legacy {
                Some(legacy) => Some(legacy),
                None => self.find_legacy(slot, device),
            };
            if let Some(legacy) = legacy {
                let version = self.actors.version(legacy);
                let s = self.streams.at_mut(slot);
                if needs_join(&mut s.joined, legacy, version) {
                    self.join_noted(actor, legacy, EdgeKind::LegacyBarrier);
                }
            }
        }
        if join_host {
            self.join_host(actor, host);
        }
        self.actors.tick(actor, self.current.line);
        Ok(Performer {
            actor,
            on_stream: true,
        })
    }

    /// [`Engine::begin_op`]'s part for a default stream (in `slot`), before the stream is
    /// noted: the legacy stream may not be used while a blocking stream of its device is being
    /// captured, stream 0 counts once used, and a per-thread stream used by another thread is
    /// warned about. Out of line, not cold: a PyTorch program runs most of its work on the
    /// legacy stream.
    #[inline(never)]
    fn begin_on_default_stream(
        &mut self,
        slot: usize,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        let thread = self.current.thread;
        let s = self.streams.at_mut(slot);
        let (stream, kind, owner, device) = (s.info.id, s.info.kind, s.owner, s.info.device);
        if kind == StreamKind::LegacyDefault {
            self.check_device_not_capturing(device, true, "the legacy default stream is used")
                .map_err(|kind| self.input_error(kind))?;
        }
        let s = self.streams.at_mut(slot);
        if !s.used {
            s.used = true;
            self.stats.streams += 1;
        }
        if kind == StreamKind::PerThreadDefault
            && owner != thread
            && self.foreign_warned.insert((stream, thread))
        {
            self.warn(
                out,
                WarningFact::ForeignPerThreadStream {
                    stream,
                    thread,
                    owner,
                },
            );
        }
        Ok(())
    }

    /// R6: the legacy stream (`actor`) first waits for all work on `device`'s blocking streams.
    #[inline(never)]
    fn legacy_barrier_in(&mut self, actor: ActorIdx, device: DeviceId) {
        for b in self.blocking_streams(device) {
            self.join_noted(actor, b, EdgeKind::LegacyBarrier);
        }
    }

    /// R1: the stream (`actor`) learns what the issuing host thread knows. Not drawn: the
    /// enqueue is the record itself. Out of line: a stream joins a host thread's clock only
    /// when it changed since the stream's last join (the host thread ticks on its own accesses
    /// and frees, and learns on synchronizations), not at every launch.
    #[cold]
    #[inline(never)]
    fn join_host(&mut self, actor: ActorIdx, host: ActorIdx) {
        self.actors.join(actor, host, self.via());
    }

    /// The actor of `device`'s legacy stream, if declared, kept in the blocking stream in
    /// `slot` for its next operations.
    #[cold]
    #[inline(never)]
    fn find_legacy(&mut self, slot: usize, device: DeviceId) -> Option<ActorIdx> {
        let legacy = self.legacy.get(&device).map(|id| self.streams[id].actor);
        self.streams.at_mut(slot).legacy = legacy;
        legacy
    }

    /// R5/R8: the calling host thread learns everything `stream` has done so far. With
    /// `legacy_covers_blocking`, synchronizing the legacy stream also covers the blocking
    /// streams' work (R6).
    pub(super) fn host_joins_stream(&mut self, stream: StreamId, legacy_covers_blocking: bool) {
        let host = self.host();
        let s = &self.streams[&stream];
        let (actor, kind, device) = (s.actor, s.info.kind, s.info.device);
        let call = EdgeKind::Call(self.current.op);
        self.join_noted(host, actor, call);
        if legacy_covers_blocking && kind == StreamKind::LegacyDefault {
            for b in self.blocking_streams(device) {
                self.join_noted(host, b, call);
            }
        }
    }

    /// `stream_sync`, or a `stream_query` that returned `done` (R5).
    pub(super) fn host_waits_stream(
        &mut self,
        stream: StreamId,
        done: bool,
    ) -> Result<(), InputErrorKind> {
        self.stats.syncs += 1;
        let s = self.stream(stream)?;
        let (kind, device) = (s.info.kind, s.info.device);
        self.check_not_capturing(stream)?;
        if kind == StreamKind::LegacyDefault {
            self.check_device_not_capturing(
                device,
                true,
                "the legacy default stream is synchronized",
            )?;
        }
        self.mark_used(stream);
        self.note_stream(stream);
        if done {
            self.host_joins_stream(stream, true);
        }
        Ok(())
    }

    /// R5: cudaDeviceSynchronize waits for every stream of the device, and for the work of
    /// its destroyed streams (R20).
    pub(super) fn device_sync(&mut self, device: DeviceId) -> Result<(), InputErrorKind> {
        self.stats.syncs += 1;
        self.check_device_not_capturing(device, false, "the device is synchronized")?;
        let host = self.host();
        let mut actors: Vec<ActorIdx> = self
            .device_streams
            .get(&device)
            .into_iter()
            .flatten()
            .map(|s| self.streams[s].actor)
            .collect();
        actors.extend(
            self.actors
                .ended_streams()
                .filter(|(_, s)| s.info.device == device)
                .map(|(actor, _)| actor),
        );
        for actor in actors {
            self.join_noted(host, actor, EdgeKind::Call(self.current.op));
        }
        Ok(())
    }

    /// The actors of the device's blocking streams (R6), destroyed ones included: their work
    /// may still be running (R20).
    fn blocking_streams(&self, device: DeviceId) -> Vec<ActorIdx> {
        let live = self.device_streams.get(&device).into_iter().flatten();
        let live = live.map(|id| &self.streams[id]).filter(|s| s.blocking);
        let ended = self.actors.ended_streams();
        let ended = ended.filter(|(_, s)| s.blocking && s.info.device == device);
        live.map(|s| s.actor).chain(ended.map(|(a, _)| a)).collect()
    }

    /// The streams declared under `id` whose work may still run: the declared one, then the
    /// destroyed ones whose slots are not reused yet (after that every host thread knows
    /// their work).
    fn streams_under(&self, id: StreamId) -> impl Iterator<Item = (ActorIdx, &StreamInfo)> {
        let live = self.streams.get(&id).map(|s| (s.actor, &s.info));
        let ended = self.actors.ended_streams().map(|(a, s)| (a, &s.info));
        live.into_iter()
            .chain(ended.filter(move |(_, s)| s.id == id))
    }

    /// Stream `id` as reports name it: the latest declared of [`Engine::streams_under`].
    pub(super) fn stream_or_ended(&self, id: StreamId) -> Option<(ActorIdx, &StreamInfo)> {
        self.streams_under(id).max_by_key(|(_, s)| s.ordinal)
    }

    /// The actor of the stream declared as `ordinal` under `id`, while its work may still run.
    pub(super) fn stream_actor(&self, id: StreamId, ordinal: u32) -> Option<ActorIdx> {
        let mut under = self.streams_under(id);
        under.find(|(_, s)| s.ordinal == ordinal).map(|(a, _)| a)
    }

    /// The stream under `id` whose actor is `actor`.
    pub(super) fn stream_of(&self, actor: ActorIdx, id: StreamId) -> Option<&StreamInfo> {
        let mut under = self.streams_under(id);
        under.find(|(a, _)| *a == actor).map(|(_, s)| s)
    }

    /// `stream_destroy` (R20): the id is undeclared from here on; the stream's work still runs,
    /// ordered with nothing new, and a device synchronization still waits for it.
    pub(super) fn destroy_stream(&mut self, id: StreamId) -> Result<(), InputErrorKind> {
        let s = self.stream(id)?;
        if s.info.kind != StreamKind::Created {
            return Err(InputErrorKind::Invalid(format!(
                "only a created stream can be destroyed; stream {id} is the {} stream \
                 (cudaStreamDestroy fails on it)",
                s.info.kind.as_str()
            )));
        }
        // CUDA lets a stream that joined a capture be destroyed before the capture ends (its
        // nodes stay in the graph); the stream the capture began on must end it.
        if let Some((graph, 0)) = self.capturing(id) {
            return Err(InputErrorKind::Capture(format!(
                "stream {id} is destroyed while the capture of graph {graph} it began is going \
                 on: the capture can then not be ended (cudaStreamEndCapture takes that stream)"
            )));
        }
        self.note_stream(id);
        let s = self.streams.remove(id).expect("looked up above");
        if let Some(ids) = self.device_streams.get_mut(&s.info.device) {
            ids.retain(|&x| x != id);
        }
        let ended = EndedStream {
            info: s.info,
            blocking: s.blocking,
        };
        self.actors.end(s.actor, Some(ended));
        Ok(())
    }
}
