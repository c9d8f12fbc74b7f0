//! Graph memory nodes: `cudaMallocAsync` and `cudaFreeAsync` on a stream being captured.
//!
//! "During stream capture, this function results in the creation of an allocation node. In this
//! case, the allocation is owned by the graph instead of the memory pool" (`cudaMallocAsync`);
//! "During stream capture, this function results in the creation of a free node and must
//! therefore be passed the address of a graph allocation" (`cudaFreeAsync`; CUDA Runtime API,
//! "Stream Ordered Memory Allocator"). The CUDA C++ Programming Guide, "Graph Memory Nodes":
//! "Graph allocations are considered recreated every time a graph runs. A graph allocation's
//! lifetime ... begins when GPU execution reaches the allocating graph node and ends when one of
//! the following occurs: GPU execution reaches the freeing graph node; GPU execution reaches the
//! freeing cudaFreeAsync() stream call; immediately upon the freeing call to cudaFree()".
//!
//! So a captured allocation declares its buffer at once (later records name it) but is born
//! only when its node runs, at every launch: a birth write by the node's lane, after which a
//! use must be ordered (as for any stream-ordered allocation). A captured free is a death write
//! when its node runs, leaving the tombstone that makes later uses a use after free; the next
//! launch's allocation node makes the buffer live again. Before the graph's first launch the
//! buffer is declared with nothing written; an access to it then is not reported (CUDA would
//! let the program hold an address that is not yet backed).

use smallvec::{SmallVec, smallvec};

use super::finding::AccessKind;
use super::{Engine, InputError, InputErrorKind, Out, Performer, memory};
use crate::trace::record::{Access, BufId, GraphId, Op, Pool, Record};

impl Engine {
    /// The graph and lane `op` is captured into when it is a stream-ordered allocation or free
    /// on a stream being captured: it becomes a memory node. A caching block's `alloc` and
    /// `free` are its allocator's bookkeeping (minor 1), never nodes.
    pub(super) fn memory_node_lane(&self, op: &Op) -> Option<(GraphId, u32)> {
        let stream = match *op {
            Op::Alloc {
                stream: Some(stream),
                pool: Pool::Driver,
                ..
            } => stream,
            Op::Free {
                buf,
                stream: Some(stream),
            } if self
                .buffers
                .get(&buf)
                .is_some_and(|b| b.info.pool != Pool::Caching) =>
            {
                stream
            }
            _ => return None,
        };
        self.capturing(stream)
    }

    /// A stream-ordered allocation or free captured into `graph` on `lane` (see
    /// [`Engine::memory_node_lane`]): an allocation declares its buffer now; both become nodes.
    pub(super) fn capture_memory_node(
        &mut self,
        record: &Record,
        graph: GraphId,
        lane: u32,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        let capture = self.graphs[&graph].begin_line;
        let ordinal = match record.op {
            Op::Alloc { buf, bytes, .. } => {
                let place = memory::Placement::of(&record.op).expect("an alloc");
                self.alloc(record, buf, bytes, place, true, out)?;
                let ordinal = self.buffers[&buf].info.ordinal;
                self.graph_allocations.insert(
                    ordinal,
                    GraphAllocation {
                        buf,
                        owner: (graph, capture),
                        freed_in_owner: false,
                        freed_elsewhere: false,
                        ran: false,
                    },
                );
                let g = self.graphs.get_mut(&graph).expect("capturing");
                g.allocations.push((buf, ordinal));
                ordinal
            }
            Op::Free { buf, .. } => {
                // Whether the allocation is live matters when the node runs, not now: a graph
                // allocation is freed and allocated again by launches.
                let ordinal = self.buffers[&buf].info.ordinal;
                let kind = self.check_graph_free(buf, ordinal, (graph, capture));
                if let Some(kind) = kind {
                    return Err(self.input_error(kind));
                }
                ordinal
            }
            _ => unreachable!("only allocations and frees become memory nodes"),
        };
        self.push_node(record, graph, lane, smallvec![ordinal]);
        Ok(())
    }

    /// Why buffer `buf` (allocation `ordinal`) may not be freed by a node of the graph being
    /// captured as `this` (its id and capture line), if it may not; notes the free node when
    /// it may.
    fn check_graph_free(
        &mut self,
        buf: BufId,
        ordinal: u32,
        this: (GraphId, u64),
    ) -> Option<InputErrorKind> {
        let Some(a) = self.graph_allocations.get_mut(&ordinal) else {
            return Some(InputErrorKind::Capture(format!(
                "buffer {buf} is freed on a stream being captured, which makes a free node, but \
                 it is not a graph allocation (not allocated during a capture, or freed for good \
                 after its graph was destroyed; cudaFreeAsync: \"During stream capture, this \
                 function results in the creation of a free node and must therefore be passed \
                 the address of a graph allocation\")"
            )));
        };
        let owned = a.owner == this;
        if a.freed_in_owner || (owned && a.freed_elsewhere) {
            return Some(InputErrorKind::Capture(format!(
                "buffer {buf}, allocated in the capture of graph {}, is freed by a second free \
                 node ({OWNER_FREES})",
                a.owner.0
            )));
        }
        if owned {
            a.freed_in_owner = true;
        } else {
            a.freed_elsewhere = true;
        }
        None
    }

    /// Why the program may not free buffer `buf` (allocation `ordinal`) itself, if it may not:
    /// a graph allocation that its own graph frees, or that no launch has allocated yet.
    pub(super) fn check_program_free(&self, buf: BufId, ordinal: u32) -> Option<InputErrorKind> {
        let a = self.graph_allocations.get(&ordinal)?;
        if a.freed_in_owner {
            return Some(InputErrorKind::Invalid(format!(
                "buffer {buf} is freed by the program, but graph {} frees it ({OWNER_FREES})",
                a.owner.0
            )));
        }
        if !a.ran {
            return Some(InputErrorKind::Invalid(format!(
                "buffer {buf} is freed before any launch of graph {} allocated it (a graph \
                 allocation's lifetime \"begins when GPU execution reaches the allocating graph \
                 node\", CUDA Programming Guide, \"Graph Memory Nodes\")",
                a.owner.0
            )));
        }
        None
    }

    /// `graph` is launched by `on` while an allocation its previous launch made is not freed:
    /// it is freed first, on the launching stream. CUDA fails such a launch ("If any
    /// allocations created by graphExec remain unfreed (from a previous launch) ... the launch
    /// will fail", `cudaGraphLaunch`) unless the graph was instantiated with
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`, "which configures a graph containing
    /// memory allocation nodes to automatically free any unfreed memory allocations before the
    /// graph is relaunched" (`cuGraphInstantiate`); a trace records the launches that ran.
    pub(super) fn free_before_relaunch(
        &mut self,
        graph: GraphId,
        on: Performer,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        let unfreed: SmallVec<[BufId; 2]> = self.graphs[&graph]
            .allocations
            .iter()
            .filter(|&&(buf, ordinal)| {
                self.is_live(buf, ordinal)
                    && self.graph_allocations.get(&ordinal).is_some_and(|a| a.ran)
            })
            .map(|&(buf, _)| buf)
            .collect();
        if unfreed.is_empty() {
            return Ok(());
        }
        // Part of the relaunch, which "is ordered behind ... any previous launches of
        // graphExec" (`cudaGraphLaunch`): after everything the previous launch's nodes did.
        if let Some(done) = self.graphs[&graph].done.clone() {
            self.actors.join_clock(on.actor, &done, self.via());
        }
        for buf in unfreed {
            self.free_by(buf, on, out)?;
        }
        Ok(())
    }

    /// Why buffer id `buf`, now a tombstone of allocation `ordinal`, may not be allocated
    /// anew, if it may not: it is a graph allocation whose graph still exists, and allocates
    /// it again at each launch ("CUDA assigns virtual addresses for the graph allocation at
    /// node creation time. While these virtual addresses are fixed for the lifetime of the
    /// allocation node ...", "Graph Memory Nodes").
    pub(super) fn check_id_reuse(&self, buf: BufId, ordinal: u32) -> Option<InputErrorKind> {
        let a = self.graph_allocations.get(&ordinal)?;
        self.owner_exists(a).then(|| {
            InputErrorKind::Invalid(format!(
                "buffer {buf} is allocated again, but it is an allocation of graph {}, whose \
                 launches allocate it (a graph allocation's address is its allocation node's \
                 for the node's lifetime: destroy the graph first)",
                a.owner.0
            ))
        })
    }

    /// Whether the tombstone of allocation `ordinal` must stay past `keep_freed`: a graph
    /// allocation whose graph still exists, which a launch will allocate again.
    pub(super) fn keeps_tombstone(&self, ordinal: u32) -> bool {
        self.graph_allocations
            .get(&ordinal)
            .is_some_and(|a| self.owner_exists(a))
    }

    /// Whether buffer id `buf` holds allocation `ordinal`, live.
    fn is_live(&self, buf: BufId, ordinal: u32) -> bool {
        self.buffers
            .get(&buf)
            .is_some_and(|b| b.info.ordinal == ordinal && b.freed.is_none())
    }

    /// Whether the graph that captured allocation `a` still exists.
    fn owner_exists(&self, a: &GraphAllocation) -> bool {
        let (graph, capture) = a.owner;
        self.graphs
            .get(&graph)
            .is_some_and(|g| g.begin_line == capture)
    }

    /// Allocation `ordinal` was just freed: once its graph is gone too, nothing can allocate it
    /// again, and it is no longer kept as a graph allocation.
    pub(super) fn forget_freed_graph_allocation(&mut self, ordinal: u32) {
        if let Some(a) = self.graph_allocations.get(&ordinal)
            && !self.owner_exists(a)
        {
            self.graph_allocations.remove(&ordinal);
        }
    }

    /// An allocation node runs: the allocation `ordinal` of buffer `buf` begins (again) with a
    /// birth write by the node's lane.
    pub(super) fn run_alloc_node(
        &mut self,
        buf: BufId,
        ordinal: u32,
        by: Performer,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        if let Some(a) = self.graph_allocations.get_mut(&ordinal) {
            a.ran = true;
        }
        match self.buffers.get(&buf) {
            Some(b) if b.info.ordinal == ordinal && b.freed.is_none() => {
                // The first launch (a later one finds it freed, `free_before_relaunch`): a
                // birth write over the bytes as they are, so that an access made before it and
                // not ordered before it races with it.
                let bytes = b.info.bytes;
                self.touch(by, &Access::bytes(buf, 0, bytes), AccessKind::Allocate, out)?;
            }
            Some(b) if b.info.ordinal == ordinal => {
                // Freed by the previous launch's free node, or by the program since: recreated.
                let bytes = b.bytes;
                let shadow = self.born(by, ordinal, bytes);
                let b = self.buffers.get_mut(&buf).expect("checked");
                b.freed = None;
                b.shadow = shadow;
                let info = b.info.clone();
                self.live_buffers += 1;
                self.note_buffer(&info);
            }
            // Not reached while the graph exists: its allocation's tombstone is kept and its id
            // is not allocated anew (`check_id_reuse`, `keeps_tombstone`).
            _ => {}
        }
        Ok(())
    }

    /// A free node runs: the allocation `ordinal` of buffer `buf` ends with a death write by
    /// the node's lane. Freed already (by the program, since it was last allocated), it is
    /// freed twice: an input error at the launch.
    pub(super) fn run_free_node(
        &mut self,
        buf: BufId,
        ordinal: u32,
        by: Performer,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        if let Some(a) = self.graph_allocations.get(&ordinal)
            && !a.ran
        {
            return Err(InputError {
                line: self.current.runs_at(),
                kind: InputErrorKind::Invalid(format!(
                    "a free node of buffer {buf} runs before any launch of graph {} allocated \
                     it (launch the graph that allocates it first)",
                    a.owner.0
                )),
            });
        }
        match self.buffers.get(&buf) {
            Some(b) if b.info.ordinal == ordinal => match b.freed.as_deref() {
                None => self.free_by(buf, by, out),
                Some(f) => {
                    // The error is the launch's, which frees the buffer again.
                    let first = self.sites.of(&f.site).record_line(&f.site);
                    Err(InputError {
                        line: self.current.runs_at(),
                        kind: InputErrorKind::DoubleFree { id: buf, first },
                    })
                }
            },
            _ => Ok(()),
        }
    }

    /// A graph was destroyed (and its nodes' references to buffers let go): the allocations
    /// of graphs that no longer exist are swept. One that is not live (freed, or its tombstone
    /// let go) can never be allocated again and is forgotten; one never allocated (no launch
    /// ran) goes entirely once no live graph's node names it (until then another graph's free
    /// node or use of it is checked as of a buffer no launch allocated); a live one stays a
    /// graph allocation, which another graph's free node or the program may free ("Graph
    /// destruction does not automatically free any live graph-allocated memory", "Graph Memory
    /// Nodes").
    pub(super) fn forget_graph_allocations(&mut self) {
        let orphans: SmallVec<[(u32, BufId, bool); 4]> = self
            .graph_allocations
            .iter()
            .filter(|(_, a)| !self.owner_exists(a))
            .map(|(&ordinal, a)| (ordinal, a.buf, a.ran))
            .collect();
        for (ordinal, buf, ran) in orphans {
            let live = self.is_live(buf, ordinal);
            if live && !ran {
                if self.graph_refs.contains_key(&ordinal) {
                    continue;
                }
                // Declared at the capture, never allocated: nothing is left of it.
                self.buffers.remove(buf);
                self.live_buffers -= 1;
                self.stats.buffers -= 1;
            }
            if !live || !ran {
                self.graph_allocations.remove(&ordinal);
            }
        }
    }

    /// Whether allocation `ordinal` was captured into a graph whose allocation node has not
    /// run yet: it was never allocated, so it cannot leak.
    pub(super) fn never_allocated(&self, ordinal: u32) -> bool {
        self.graph_allocations.get(&ordinal).is_some_and(|a| !a.ran)
    }
}

/// What `cuGraphAddMemAllocNode` says of an allocation its own graph frees.
const OWNER_FREES: &str = "cuGraphAddMemAllocNode: allocations freed in the same graph \
                           \"cannot be freed outside the owning graph, and they can only be freed \
                           once in the owning graph\"";

/// An allocation captured into a graph.
#[derive(Debug)]
pub(super) struct GraphAllocation {
    /// Its buffer id.
    buf: BufId,
    /// The graph that allocates it, with the line its capture began on (an id may be captured
    /// again after `graph_destroy`).
    owner: (GraphId, u64),
    /// Whether a node of its owner frees it.
    freed_in_owner: bool,
    /// Whether a node of another graph frees it.
    freed_elsewhere: bool,
    /// Whether its allocation node has run.
    ran: bool,
}
