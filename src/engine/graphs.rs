//! CUDA graphs made by stream capture (trace v1 minor 1): capture records operations as nodes
//! instead of running them; a launch runs every node.
//!
//! The rules, from the CUDA C++ Programming Guide ("CUDA Graphs", "Stream Capture"):
//! - "When a stream is in capture mode, all operations pushed into the stream will not be
//!   executed, but will instead be captured into a graph" (`cuStreamBeginCapture`); capture
//!   "may not be initiated if stream is CU_STREAM_LEGACY".
//! - "Cross-stream Dependencies and Events": an event recorded in a capturing stream is a
//!   captured event, a set of nodes; a stream that waits on it joins the capture, and its next
//!   node depends on those nodes. A capturing stream may wait only on an event captured into the
//!   same graph. Every stream that joined must be joined back into the origin stream before
//!   `cudaStreamEndCapture`, else the capture fails (`cudaErrorStreamCaptureUnjoined`).
//! - "Prohibited and Unhandled Operations": it is invalid to synchronize or query a capturing
//!   stream or a captured event, or a device while one of its streams is capturing, or to use
//!   the legacy stream while a blocking stream of its context is capturing.
//! - `cudaGraphLaunch`: "Each launch is ordered behind both any previous work in stream and any
//!   previous launches of graphExec"; work enqueued after it on the stream is ordered after the
//!   whole graph.
//!
//! The model: each captured stream is a *lane* of the graph; at a launch every lane runs on an
//! actor of its own, after what the launching stream knew and after the previous launch of the
//! graph; nodes of a lane run in capture order, and a node also waits for the nodes its captured
//! waits named. Nothing else orders nodes of different lanes. The launching stream then learns
//! everything the lanes did. Nodes are checked when the graph is launched, in capture order;
//! a graph never launched races with nothing.

use smallvec::SmallVec;

use super::clocks::ActorKind;
use super::finding::AccessKind;
use super::objects::{CapturedRecord, GraphState, Lane, LastRecord, Node};
use super::vclock::VClock;
use super::{Current, Engine, InputError, InputErrorKind, Out, Performer};
use crate::trace::record::{
    Access, AccessRole, BufId, EventId, GraphId, Op, Record, StreamId, StreamKind,
};

/// How many launches of a graph remember their stream (for reports about its nodes).
const LAUNCHES_KEPT: usize = 256;

/// The ordinal a node keeps for an access to a buffer forgotten at capture (allocation
/// ordinals start at 1): no launch checks that access.
const FORGOTTEN_ORDINAL: u32 = 0;

impl Engine {
    /// `graph_begin`: `stream` starts capturing `graph`.
    pub(super) fn graph_begin(
        &mut self,
        graph: GraphId,
        stream: StreamId,
    ) -> Result<(), InputErrorKind> {
        let s = self.stream(stream)?;
        if s.info.kind == StreamKind::LegacyDefault {
            return Err(InputErrorKind::Capture(
                "capture cannot begin on a legacy default stream (cuStreamBeginCapture)".into(),
            ));
        }
        if let Some((other, _)) = s.capture {
            return Err(InputErrorKind::Capture(format!(
                "stream {stream} is already being captured into graph {other}"
            )));
        }
        if let Some(g) = self.graphs.get(&graph) {
            return Err(InputErrorKind::GraphRedeclared {
                id: graph,
                first: g.begin_line,
            });
        }
        self.mark_used(stream);
        self.note_stream(stream);
        self.next_graph_ordinal += 1;
        self.graphs_capturing += 1;
        self.stats.graphs += 1;
        self.graphs.insert(
            graph,
            GraphState {
                begin_line: self.current.line,
                origin: stream,
                capturing: true,
                lanes: vec![Lane {
                    stream,
                    last: None,
                    pending: SmallVec::new(),
                }],
                nodes: Vec::new(),
                lane_actors: Vec::new(),
                done: None,
                ordinal: self.next_graph_ordinal,
                launches: Default::default(),
                allocations: Vec::new(),
            },
        );
        self.streams.get_mut(&stream).expect("checked").capture = Some((graph, 0));
        self.note_graph(graph);
        Ok(())
    }

    /// `graph_end`: the capture of `graph` ends; every stream that joined it must have been
    /// joined back into the origin stream.
    pub(super) fn graph_end(
        &mut self,
        graph: GraphId,
        stream: StreamId,
    ) -> Result<(), InputErrorKind> {
        self.stream(stream)?;
        let g = self.graph(graph)?;
        if !g.capturing {
            return Err(InputErrorKind::Capture(format!(
                "graph {graph} is not being captured (its capture ended already)"
            )));
        }
        if g.origin != stream {
            return Err(InputErrorKind::Capture(format!(
                "the capture of graph {graph} began on stream {} and must end there, not on \
                 stream {stream}",
                g.origin
            )));
        }
        let origin = frontier(&g.lanes[0]);
        for lane in &g.lanes[1..] {
            let unjoined = frontier(lane)
                .into_iter()
                .find(|&n| !origin.iter().any(|&o| reaches(&g.nodes, &g.lanes, o, n)));
            if let Some(node) = unjoined {
                return Err(InputErrorKind::Capture(format!(
                    "stream {} joined the capture of graph {graph} and was not joined back into \
                     the origin stream {stream}: nothing captured on stream {stream} waits for \
                     line {} (record an event on stream {} and wait on it in stream {stream} \
                     before the end of the capture; CUDA fails this capture with \
                     cudaErrorStreamCaptureUnjoined)",
                    lane.stream, g.nodes[node as usize].record.line, lane.stream
                )));
            }
        }
        let g = self.graphs.get_mut(&graph).expect("checked");
        g.capturing = false;
        self.graphs_capturing -= 1;
        for lane in &g.lanes {
            // A lane's stream may have been destroyed, its id declared again (R20).
            if let Some(s) = self.streams.get_mut(&lane.stream)
                && s.capture.is_some_and(|(g, _)| g == graph)
            {
                s.capture = None;
            }
        }
        self.note_stream(stream);
        self.note_graph(graph);
        Ok(())
    }

    /// `graph_destroy`.
    pub(super) fn graph_destroy(&mut self, graph: GraphId) -> Result<(), InputErrorKind> {
        self.note_graph(graph);
        if self.graph(graph)?.capturing {
            return Err(InputErrorKind::Capture(format!(
                "graph {graph} is destroyed while it is being captured"
            )));
        }
        if let Some(g) = self.graphs.remove(&graph) {
            // The lanes run nothing more; their slots go to new actors once every host thread
            // knows what they ran (R20).
            for &lane in &g.lane_actors {
                self.actors.end(lane, None);
            }
            for o in g.nodes.iter().flat_map(|n| n.ordinals.iter()) {
                if let Some(n) = self.graph_refs.get_mut(o) {
                    *n -= 1;
                    if *n == 0 {
                        self.graph_refs.remove(o);
                        self.retired.remove(o);
                    }
                }
            }
            self.forget_graph_allocations();
        }
        Ok(())
    }

    /// The live graph `graph`.
    fn graph(&self, graph: GraphId) -> Result<&GraphState, InputErrorKind> {
        self.graphs
            .get(&graph)
            .ok_or(InputErrorKind::UndeclaredGraph(graph))
    }

    /// The graph and lane `stream` is being captured into, if it is.
    #[inline]
    pub(super) fn capturing(&self, stream: StreamId) -> Option<(GraphId, u32)> {
        if self.graphs_capturing == 0 {
            return None;
        }
        self.streams.get(&stream).and_then(|s| s.capture)
    }

    /// Rejects a host synchronization or query of a capturing stream (invalid in CUDA).
    pub(super) fn check_not_capturing(&self, stream: StreamId) -> Result<(), InputErrorKind> {
        match self.capturing(stream) {
            Some((graph, _)) => Err(InputErrorKind::Capture(format!(
                "`{}` of stream {stream} while it is being captured into graph {graph} (CUDA \
                 does not allow synchronizing or querying a capturing stream)",
                self.current.op
            ))),
            None => Ok(()),
        }
    }

    /// Rejects a device synchronization, or a use of the legacy stream, while a stream of the
    /// device that takes part in it is capturing.
    pub(super) fn check_device_not_capturing(
        &self,
        device: crate::trace::record::DeviceId,
        blocking_only: bool,
        what: &str,
    ) -> Result<(), InputErrorKind> {
        let Some(ids) = self.device_streams.get(&device) else {
            return Ok(());
        };
        for id in ids {
            let s = &self.streams[id];
            if let Some((graph, _)) = s.capture
                && (!blocking_only || s.blocking)
            {
                return Err(InputErrorKind::Capture(format!(
                    "{what} while stream {id} is being captured into graph {graph} (CUDA \
                     Programming Guide, \"Prohibited and Unhandled Operations\")"
                )));
            }
        }
        Ok(())
    }

    /// An operation on a capturing stream becomes a node of its graph. `record` is a launch,
    /// copy, memset or host function (records and waits are edges, handled apart).
    pub(super) fn capture_node(
        &mut self,
        record: &Record,
        graph: GraphId,
        lane: u32,
        accesses: &[&Access],
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        if let Some(stream) = node_stream(&record.op) {
            self.stream(stream).map_err(|kind| self.input_error(kind))?;
        }
        let mut ordinals = SmallVec::new();
        let mut forgotten: SmallVec<[BufId; 1]> = SmallVec::new();
        for a in accesses {
            let Some(b) = self.buffers.get(&a.buf) else {
                if self.forgotten.contains(a.buf) {
                    // Freed so long ago that only its id is left: the node's access to it is
                    // warned about now and checked at no launch.
                    forgotten.push(a.buf);
                    ordinals.push(FORGOTTEN_ORDINAL);
                    continue;
                }
                return Err(self.input_error(InputErrorKind::UndeclaredBuffer(a.buf)));
            };
            super::memory::byte_range(a, b.bytes).map_err(|kind| self.input_error(kind))?;
            ordinals.push(b.info.ordinal);
        }
        for buf in forgotten {
            self.warn_forgotten(out, buf);
        }
        self.push_node(record, graph, lane, ordinals);
        Ok(())
    }

    /// Adds `record`, captured on `lane` of `graph`, as the graph's next node, naming the
    /// allocations it touches by `ordinals` (each counted as referred to by a live graph).
    pub(super) fn push_node(
        &mut self,
        record: &Record,
        graph: GraphId,
        lane: u32,
        ordinals: SmallVec<[u32; 4]>,
    ) {
        for &o in ordinals.iter().filter(|&&o| o != FORGOTTEN_ORDINAL) {
            *self.graph_refs.entry(o).or_default() += 1;
        }
        let g = self
            .graphs
            .get_mut(&graph)
            .expect("a capturing stream's graph exists");
        let index = g.nodes.len() as u32;
        let l = &mut g.lanes[lane as usize];
        let deps = std::mem::take(&mut l.pending);
        l.last = Some(index);
        g.nodes.push(Node {
            record: record.clone(),
            lane,
            deps,
            ordinals,
        });
        let stream = g.lanes[lane as usize].stream;
        self.note_stream(stream);
        self.note_graph(graph);
    }

    /// `record` on a capturing stream: the event now stands for the lane's position.
    pub(super) fn capture_record(&mut self, event: EventId, graph: GraphId, lane: u32) {
        let g = &self.graphs[&graph];
        let l = &g.lanes[lane as usize];
        let captured = CapturedRecord {
            graph,
            capture: g.begin_line,
            nodes: frontier(l),
            stream: l.stream,
            line: self.current.line,
        };
        let stream = l.stream;
        if let Some(e) = self.events.get_mut(&event) {
            e.last = Some(LastRecord::Captured(captured));
        }
        self.note_stream(stream);
        self.note_graph(graph);
    }

    /// `wait` on `stream` for an event whose latest record was captured into a graph: a
    /// capturing stream of the same graph gets a dependency; a stream not capturing joins the
    /// capture (a fork). Returns false when the event's capture is over (the wait then orders
    /// nothing: the record never ran as such).
    pub(super) fn capture_wait(
        &mut self,
        stream: StreamId,
        captured: CapturedRecord,
    ) -> Result<bool, InputErrorKind> {
        let Some(g) = self.graphs.get(&captured.graph) else {
            return Ok(false);
        };
        if !g.capturing || g.begin_line != captured.capture {
            return Ok(false);
        }
        let lane = match self.capturing(stream) {
            Some((graph, lane)) if graph == captured.graph => lane,
            Some((graph, _)) => {
                return Err(InputErrorKind::Capture(format!(
                    "stream {stream}, captured into graph {graph}, waits on an event recorded in \
                     the capture of graph {} (CUDA does not allow merging two captures)",
                    captured.graph
                )));
            }
            None => {
                let g = self.graphs.get_mut(&captured.graph).expect("checked");
                g.lanes.push(Lane {
                    stream,
                    last: None,
                    pending: SmallVec::new(),
                });
                let lane = (g.lanes.len() - 1) as u32;
                self.mark_used(stream);
                self.streams.get_mut(&stream).expect("checked").capture =
                    Some((captured.graph, lane));
                lane
            }
        };
        let g = self.graphs.get_mut(&captured.graph).expect("checked");
        let l = &mut g.lanes[lane as usize];
        for &node in &captured.nodes {
            if l.last != Some(node) && !l.pending.contains(&node) {
                l.pending.push(node);
            }
        }
        if !captured.nodes.is_empty() {
            self.note_captured_edge(captured.stream, captured.line, stream);
        }
        self.note_stream(stream);
        self.note_graph(captured.graph);
        Ok(true)
    }

    /// `graph_launch`: runs every node of `graph` after the stream's earlier work and the
    /// graph's previous launch; later work on the stream is ordered after all of them.
    pub(super) fn graph_launch(
        &mut self,
        graph: GraphId,
        stream: StreamId,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        let check = match self.graph(graph) {
            Ok(g) if g.capturing => Err(InputErrorKind::Capture(format!(
                "graph {graph} is launched before its capture ended"
            ))),
            Ok(_) => Ok(()),
            Err(kind) => Err(kind),
        }
        .and_then(|()| match self.capturing(stream) {
            Some((other, _)) => Err(InputErrorKind::Capture(format!(
                "graph {graph} is launched on stream {stream}, which is being captured into \
                 graph {other} (child graphs are not modelled)"
            ))),
            None => Ok(()),
        });
        check.map_err(|kind| self.input_error(kind))?;
        self.stats.graph_launches += 1;
        self.note_graph(graph);
        let on = self.begin_op(stream, out)?;
        self.free_before_relaunch(graph, on, out)?;
        let launch_line = self.current.line;
        // The lanes' actors, made at the first launch.
        let lanes = self.graphs[&graph].lanes.len();
        while self.graphs[&graph].lane_actors.len() < lanes {
            let lane_stream = {
                let g = &self.graphs[&graph];
                g.lanes[g.lane_actors.len()].stream
            };
            let actor = self.actors.add(ActorKind::Lane {
                graph,
                stream: lane_stream,
            });
            self.graphs
                .get_mut(&graph)
                .expect("checked")
                .lane_actors
                .push(actor);
        }
        let (actors, done) = {
            let g = self.graphs.get_mut(&graph).expect("checked");
            if g.launches.len() == LAUNCHES_KEPT {
                g.launches.pop_front();
            }
            g.launches.push_back((launch_line, stream));
            (g.lane_actors.clone(), g.done.take())
        };
        // Every lane starts after what the launching stream knew, and after the previous
        // launch of the graph.
        let base = self.actors.clock(on.actor).clone();
        let via = self.via();
        for &a in &actors {
            self.actors.join_clock(a, &base, via);
            if let Some(done) = &done {
                self.actors.join_clock(a, done, via);
            }
        }
        let launch = self.current;
        let result = self.run_nodes(graph, &actors, launch_line, out);
        self.current = launch;
        result?;
        // Later work on the stream comes after every node.
        for &a in &actors {
            self.actors.join(on.actor, a, self.via());
        }
        let done = self.actors.clock(on.actor).clone();
        self.graphs.get_mut(&graph).expect("checked").done = Some(done);
        Ok(())
    }

    /// Replays the nodes of `graph` in capture order on the lanes' `actors`.
    fn run_nodes(
        &mut self,
        graph: GraphId,
        actors: &[super::vclock::ActorIdx],
        launch_line: u64,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        // The nodes are taken out while they run (the graph stays, for reports).
        let nodes = std::mem::take(&mut self.graphs.get_mut(&graph).expect("checked").nodes);
        // What each node had done once it ran, for the nodes that others depend on.
        let mut after: Vec<Option<VClock>> = vec![None; nodes.len()];
        let mut needed = vec![false; nodes.len()];
        for n in &nodes {
            for &d in &n.deps {
                needed[d as usize] = true;
            }
        }
        let mut result = Ok(());
        for (i, node) in nodes.iter().enumerate() {
            let actor = actors[node.lane as usize];
            for &d in &node.deps {
                if let Some(clock) = &after[d as usize] {
                    self.actors.join_clock(actor, clock, self.via());
                }
            }
            let r = &node.record;
            self.current = Current::new(
                r.line,
                r.thread,
                r.op.kind(),
                self.symbols.intern(r.name.as_deref()),
                self.symbols.intern(r.at.as_deref()),
                launch_line,
            );
            self.actors.tick(actor, launch_line);
            let by = Performer {
                actor,
                on_stream: true,
            };
            result = self.run_node(node, by, out);
            if result.is_err() {
                break;
            }
            if needed[i] {
                after[i] = Some(self.actors.clock(actor).clone());
            }
        }
        self.graphs.get_mut(&graph).expect("checked").nodes = nodes;
        result
    }

    /// One node's accesses, as its captured op makes them; a memory node allocates or frees.
    fn run_node(
        &mut self,
        node: &Node,
        by: Performer,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        match node.record.op {
            Op::Alloc { buf, .. } => return self.run_alloc_node(buf, node.ordinals[0], by, out),
            Op::Free { buf, .. } => return self.run_free_node(buf, node.ordinals[0], by, out),
            _ => {}
        }
        let mut ordinals = node.ordinals.iter().copied();
        node.record.op.try_for_each_access(|a, role| {
            let kind = match role {
                AccessRole::Read => AccessKind::Read,
                AccessRole::Write => AccessKind::Write,
                AccessRole::Atomic => AccessKind::Atomic,
            };
            let ordinal = ordinals.next().unwrap_or(0);
            self.touch_captured(by, a, kind, ordinal, out)
        })
    }

    /// The stream a launch of `graph` at `launch_line` ran on, if still remembered.
    pub(super) fn launch_stream(&self, graph: GraphId, launch_line: u64) -> Option<StreamId> {
        self.graphs
            .get(&graph)?
            .launches
            .iter()
            .find(|(line, _)| *line == launch_line)
            .map(|(_, s)| *s)
    }
}

/// The nodes a lane's next operation would depend on: its last node, or else what it waited
/// for.
fn frontier(lane: &Lane) -> SmallVec<[u32; 2]> {
    let mut out = SmallVec::new();
    if let Some(last) = lane.last {
        out.push(last);
    }
    out.extend(lane.pending.iter().copied());
    out
}

/// Whether node `to` happens before (or is) node `from` in the captured graph: `from` reaches
/// `to` through lane order and captured dependencies.
fn reaches(nodes: &[Node], lanes: &[Lane], from: u32, to: u32) -> bool {
    let _ = lanes;
    let mut stack = vec![from];
    let mut seen = vec![false; nodes.len()];
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if std::mem::replace(&mut seen[n as usize], true) {
            continue;
        }
        let node = &nodes[n as usize];
        stack.extend(node.deps.iter().copied());
        // The previous node of the same lane.
        if let Some(prev) = (0..n).rev().find(|&p| nodes[p as usize].lane == node.lane) {
            stack.push(prev);
        }
    }
    false
}

/// The stream of an op that becomes a node of a graph when its stream is being captured.
pub fn node_stream(op: &Op) -> Option<StreamId> {
    match op {
        Op::Launch { stream, .. }
        | Op::Memcpy { stream, .. }
        | Op::Memset { stream, .. }
        | Op::HostFunc { stream, .. } => Some(*stream),
        _ => None,
    }
}

/// A node op's accesses, in the order a launch replays them.
pub(super) fn node_accesses(op: &Op) -> SmallVec<[&Access; 4]> {
    let mut accesses = SmallVec::new();
    let _ = op.try_for_each_access(|a, _| {
        accesses.push(a);
        Ok::<(), std::convert::Infallible>(())
    });
    accesses
}
