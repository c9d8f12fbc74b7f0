//! Events: declaration, record (R2: a snapshot of the stream's clock), wait (R3: join the
//! latest snapshot before the call), host sync and query (R5), and never-recorded events
//! (R4: they order nothing). A record on a capturing stream is a position in a graph instead
//! (`graphs`).

use super::objects::{EventState, LastRecord, Snapshot};
use super::{Engine, InputError, InputErrorKind, Out, WarningFact};
use crate::trace::record::{EventId, StreamId};

impl Engine {
    pub(super) fn declare_event(&mut self, id: EventId) -> Result<(), InputErrorKind> {
        if let Some(e) = self.events.get(&id) {
            return Err(InputErrorKind::EventRedeclared {
                id,
                first: e.declared_line,
            });
        }
        self.stats.events += 1;
        self.events.insert(
            id,
            EventState {
                declared_line: self.current.line,
                last: None,
            },
        );
        Ok(())
    }

    pub(super) fn destroy_event(&mut self, id: EventId) -> Result<(), InputErrorKind> {
        self.events
            .remove(id)
            .map(drop)
            .ok_or(InputErrorKind::UndeclaredEvent(id))
    }

    /// `record`: the event captures the stream's clock at the call (R2).
    pub(super) fn record_event(
        &mut self,
        event: EventId,
        stream: StreamId,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        self.stats.syncs += 1;
        if self.events.slot(event).is_none() {
            return Err(self.input_error(InputErrorKind::UndeclaredEvent(event)));
        }
        if let Some((graph, lane)) = self.capturing(stream) {
            self.capture_record(event, graph, lane);
            return Ok(());
        }
        let on = self.begin_op(stream, out)?;
        let (clock, line) = (self.actors.clock(on.actor), self.current.line);
        let e = self.events.get_mut(&event).expect("checked above");
        match &mut e.last {
            // Recorded again (cudarc records each buffer's events on every use): the snapshot
            // is taken in place, without a new allocation.
            Some(LastRecord::Snapshot(s)) => {
                s.clock.clone_from(clock);
                (s.actor, s.line) = (on.actor, line);
            }
            last => {
                *last = Some(LastRecord::Snapshot(Snapshot {
                    clock: clock.clone(),
                    actor: on.actor,
                    line,
                }))
            }
        }
        Ok(())
    }

    /// `wait`: the stream joins the snapshot of the latest record before this call (R3); a
    /// never-recorded event orders nothing (R4).
    pub(super) fn wait_event(
        &mut self,
        stream: StreamId,
        event: EventId,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        self.stats.syncs += 1;
        if self.events.slot(event).is_none() {
            return Err(self.input_error(InputErrorKind::UndeclaredEvent(event)));
        }
        let actor = match self.stream(stream) {
            Ok(s) => s.actor,
            Err(kind) => return Err(self.input_error(kind)),
        };
        if let Some(LastRecord::Captured(captured)) = &self.events[&event].last {
            let captured = captured.clone();
            let line = captured.line;
            // A fork into, or an edge inside, a capture; or, once the capture is over, a record
            // that never ran as such: it orders nothing.
            match self.capture_wait(stream, captured) {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    self.warn_captured(out, event, line);
                    return self.begin_op(stream, out).map(drop);
                }
                Err(kind) => return Err(self.input_error(kind)),
            }
        }
        if let Some((graph, _)) = self.capturing(stream) {
            if self.events[&event].last.is_some() {
                return Err(self.input_error(InputErrorKind::Capture(format!(
                    "stream {stream}, captured into graph {graph}, waits on event {event}, \
                     which was not recorded in that capture (CUDA Programming Guide, \
                     \"Cross-stream Dependencies and Events\": the event waited on must be \
                     recorded into the same capture graph)"
                ))));
            }
            // Never recorded: it orders nothing, in a capture as outside one (and captures no
            // node), but it was still a call on the stream.
            self.warn_unrecorded(out, event);
            self.note_stream(stream);
            self.note_graph(graph);
            return Ok(());
        }
        self.join_snapshot(actor, event, out);
        self.begin_op(stream, out)?;
        Ok(())
    }

    /// `event_sync`, or an `event_query` that returned `done`: the host thread joins the
    /// snapshot (R5). Either, on a never-recorded event, orders nothing (R4).
    pub(super) fn host_waits_event(
        &mut self,
        event: EventId,
        done: bool,
        out: &mut Out<'_>,
    ) -> Result<(), InputErrorKind> {
        self.stats.syncs += 1;
        let e = self
            .events
            .get(&event)
            .ok_or(InputErrorKind::UndeclaredEvent(event))?;
        if let Some(LastRecord::Captured(c)) = &e.last {
            return Err(InputErrorKind::Capture(format!(
                "event {event} was recorded in the capture of graph {} (line {}); CUDA does not \
                     allow synchronizing or querying a captured event",
                c.graph, c.line
            )));
        }
        if e.last.is_some() && !done {
            return Ok(());
        }
        let host = self.host();
        self.join_snapshot(host, event, out);
        Ok(())
    }

    /// `actor` joins the latest snapshot of `event` (which exists); warns when it was never
    /// recorded.
    fn join_snapshot(&mut self, actor: super::vclock::ActorIdx, event: EventId, out: &mut Out<'_>) {
        let e = self.events.get_mut(&event).expect("checked by the caller");
        let Some(LastRecord::Snapshot(snapshot)) = e.last.take() else {
            self.warn_unrecorded(out, event);
            return;
        };
        self.join_snapshot_noted(actor, &snapshot.clock, snapshot.actor, snapshot.line);
        self.events.get_mut(&event).expect("still there").last =
            Some(LastRecord::Snapshot(snapshot));
    }

    pub(super) fn warn_unrecorded(&mut self, out: &mut Out<'_>, event: EventId) {
        let call = self.current.op;
        let fact = WarningFact::UnrecordedEvent {
            event,
            call,
            captured: None,
        };
        self.warn(out, fact);
    }

    /// A wait, after its capture, on an event last recorded inside a capture (at `line`).
    fn warn_captured(&mut self, out: &mut Out<'_>, event: EventId, line: u64) {
        let call = self.current.op;
        let fact = WarningFact::UnrecordedEvent {
            event,
            call,
            captured: Some(line),
        };
        self.warn(out, fact);
    }
}
