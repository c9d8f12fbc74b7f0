//! Turns Sanitizer API callbacks into trace v1 records.
//!
//! Which callback gives what (checked on an H100, CUDA 13.0, driver 580; see
//! docs/design/sanitizer-api-notes.md): allocations, streams and modules from the RESOURCE
//! domain; copies and sets from MEMCPY / MEMSET (exact addresses and shapes); kernels from
//! LAUNCH begin/end; event create/record/wait/destroy from EVENTS; graph launches node by node
//! from GRAPHS. Syncs and queries come from the API domains, where the call and its result are
//! known: the SYNCHRONIZE domain also fires when a stream query succeeds, and the trace must say
//! which call the program made. A runtime call runs driver calls inside it: a driver callback
//! on a thread that is inside a runtime call the tool listens to is the same call, not another.

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use streamsan::trace::record::{Access, MemSpace, Op, StreamId};

use crate::device::{DeviceCapture, Log};
use crate::fold::{Folded, fold};
use crate::ids::Ids;
use crate::sink::Sink;
use crate::site::{Sites, demangle};
use crate::sys::{self, cbid::Call, domain, memflag, resource};

thread_local! {
    /// Depth of runtime calls the tool listens to, on this thread.
    static RUNTIME_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Small id of this host thread in the trace.
    static THREAD: Cell<u64> = const { Cell::new(u64::MAX) };
    /// The graph launch in progress on this thread.
    static GRAPH: std::cell::RefCell<Option<GraphLaunch>> = const { std::cell::RefCell::new(None) };
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(0);

fn thread() -> u64 {
    THREAD.with(|t| {
        if t.get() == u64::MAX {
            t.set(NEXT_THREAD.fetch_add(1, Relaxed));
        }
        t.get()
    })
}

/// Rows of a 2D copy or set recorded one by one; past this, the rest go unchecked.
const MAX_ROWS: u64 = 4096;

/// Counts for the run's summary (what was checked, what could not be).
#[derive(Default)]
pub struct Counts {
    pub launches: AtomicU64,
    pub launches_instrumented: AtomicU64,
    pub launches_not_instrumented: AtomicU64,
    pub log_entries_dropped: AtomicU64,
    pub launches_with_dropped_entries: AtomicU64,
    pub unattributed_bytes: AtomicU64,
    pub copies_unattributed: AtomicU64,
    pub rows_unchecked: AtomicU64,
    pub graph_launches: AtomicU64,
    pub graph_kernel_nodes: AtomicU64,
    pub tool_errors: AtomicU64,
    /// Pinned and managed allocations: memory host code could touch unseen.
    pub host_visible_allocations: AtomicU64,
}

/// One kernel launch between its begin and end callbacks.
struct PendingLaunch {
    handle: usize,
    stream: StreamId,
    thread: u64,
    name: String,
    at: Option<String>,
    log: Option<Log>,
}

/// A node of a graph launch, recorded when the launch ends.
enum Node {
    Kernel { name: String, log: Option<Log> },
    Op(Option<String>, Op),
}

struct GraphLaunch {
    /// The executable graph (`CUgraphExec`).
    exec: usize,
    stream: StreamId,
    h_stream: usize,
    at: Option<String>,
    nodes: Vec<Node>,
}

pub struct Recorder {
    api: &'static sys::Api,
    device: Option<DeviceCapture>,
    sites: Sites,
    /// The sink's counts of checking as the program runs.
    live: std::sync::Arc<crate::sink::LiveCounts>,
    state: Mutex<State>,
    pending: Mutex<Vec<PendingLaunch>>,
    pub counts: Counts,
    pub errors: Mutex<Vec<String>>,
}

struct State {
    ids: Ids,
    sink: Sink,
}

/// Records about to be written: (name, op).
type Out = Vec<(Option<String>, Op)>;

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The first pointer-sized parameter of an API call (the stream or event of every call the
/// tool listens to); 0 for a call without parameters (`cudaDeviceSynchronize`), whose
/// parameter block is null.
unsafe fn first_param(data: &sys::CallbackData) -> usize {
    if data.function_params.is_null() {
        return 0;
    }
    unsafe { *(data.function_params as *const usize) }
}

impl Recorder {
    pub fn new(
        api: &'static sys::Api,
        device: Option<DeviceCapture>,
        sink: Sink,
        sites: Sites,
    ) -> Recorder {
        Recorder {
            api,
            device,
            sites,
            live: sink.live_counts(),
            state: Mutex::new(State {
                ids: Ids::default(),
                sink,
            }),
            pending: Mutex::new(Vec::new()),
            counts: Counts::default(),
            errors: Mutex::new(Vec::new()),
        }
    }

    pub fn instrumented(&self) -> bool {
        self.device.is_some()
    }

    fn error(&self, message: String) {
        self.counts.tool_errors.fetch_add(1, Relaxed);
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.len() < 20 {
            errors.push(message);
        }
    }

    /// Runs `f` on the state and writes what it emitted, all under one lock so that records
    /// keep the order of the calls.
    fn emit(&self, at: Option<String>, f: impl FnOnce(&mut Ids, &mut Out)) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Out::new();
        f(&mut state.ids, &mut out);
        let thread = thread();
        for (name, op) in out {
            // Declarations carry no site; the operation does.
            let site = if is_declaration(&op) {
                None
            } else {
                at.clone()
            };
            if let Err(e) = state.sink.write(thread, site, name, op) {
                drop(state);
                self.error(format!("writing the trace: {e}"));
                return;
            }
        }
    }

    /// What checking as the program ran did (races, records checked, stopped early); `None`
    /// when it was off. Takes no lock: `--halt-on-error` asks from inside a write.
    pub fn live_counts(&self) -> Option<(u64, u64, bool)> {
        self.live.get()
    }

    /// Every callback of every enabled domain.
    pub fn on_callback(&self, dom: u32, id: u32, data: *const c_void) {
        match dom {
            domain::RUNTIME_API | domain::DRIVER_API => {
                self.on_api(dom == domain::RUNTIME_API, id, unsafe {
                    &*(data as *const sys::CallbackData)
                })
            }
            domain::RESOURCE => self.on_resource(id, data),
            domain::LAUNCH => self.on_launch(id, unsafe { &*(data as *const sys::LaunchData) }),
            domain::MEMCPY => {
                let m = unsafe { &*(data as *const sys::MemcpyData) };
                let at = self.sites.here(None);
                self.emit(at, |ids, out| {
                    let key = ids.key_from_data(
                        ctx_of_copy(m),
                        m.api_stream as usize,
                        m.h_api_stream as usize,
                        thread(),
                    );
                    let stream = ids.stream(key, out);
                    self.copy_ops(ids, out, stream, m, m.is_async == 0);
                })
            }
            domain::MEMSET => {
                let m = unsafe { &*(data as *const sys::MemsetData) };
                let at = self.sites.here(None);
                self.emit(at, |ids, out| {
                    let stream = ids.data_stream(
                        (m.context as usize, m.stream as usize, m.h_stream as usize),
                        thread(),
                        out,
                    );
                    self.set_ops(ids, out, stream, m, m.is_async == 0);
                })
            }
            domain::EVENTS => self.on_event(id, unsafe { &*(data as *const sys::EventData) }),
            domain::GRAPHS => self.on_graph(id, data),
            _ => {}
        }
    }

    fn on_api(&self, runtime: bool, id: u32, data: &sys::CallbackData) {
        let Some((call, ptsz)) = sys::cbid::lookup(runtime, id) else {
            return;
        };
        let enter = data.callback_site == sys::API_ENTER;
        if runtime {
            RUNTIME_DEPTH.with(|d| {
                d.set(if enter {
                    d.get() + 1
                } else {
                    d.get().saturating_sub(1)
                })
            });
        } else if RUNTIME_DEPTH.with(Cell::get) > 0 {
            return; // the driver half of a runtime call already seen
        }
        if enter || data.function_return_value.is_null() {
            return;
        }
        let ret = unsafe { *(data.function_return_value as *const i32) };
        let ctx = data.context as usize;
        let first = unsafe { first_param(data) };
        if call == Call::EndCapture {
            // Even a failed end (an invalidated capture) ends the capture.
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let key = state.ids.key_from_call(ctx, first, ptsz, thread());
            state.ids.end_capture(key);
            return;
        }
        const NOT_READY: i32 = 600; // cudaErrorNotReady and CUDA_ERROR_NOT_READY
        let done = match ret {
            0 => true,
            NOT_READY if matches!(call, Call::StreamQuery | Call::EventQuery) => false,
            _ => return, // a failed call did nothing
        };
        match call {
            Call::StreamCreate { .. } if first == 0 => {}
            Call::StreamCreate { has_flags } => {
                let public = unsafe { *(first as *const usize) };
                let flags = if has_flags {
                    unsafe { *((data.function_params as *const u8).add(8) as *const u32) }
                } else {
                    0
                };
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.ids.stream_flags(public, flags & 1 != 0);
            }
            Call::BeginCapture => {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let key = state.ids.key_from_call(ctx, first, ptsz, thread());
                state.ids.capturing.insert(key, key);
            }
            Call::EndCapture => {} // handled above
            Call::StreamSync | Call::StreamQuery | Call::HostFunc => {
                let at = self.sites.here(None);
                self.emit(at, |ids, out| {
                    let key = ids.key_from_call(ctx, first, ptsz, thread());
                    if call == Call::HostFunc && ids.capturing.contains_key(&key) {
                        return; // a node of the graph: recorded when the graph runs
                    }
                    let stream = ids.stream(key, out);
                    out.push(match call {
                        Call::StreamSync => (None, Op::StreamSync { stream }),
                        Call::StreamQuery => (None, Op::StreamQuery { stream, done }),
                        _ => (
                            None,
                            Op::HostFunc {
                                stream,
                                reads: vec![],
                                writes: vec![],
                            },
                        ),
                    });
                })
            }
            Call::EventSync | Call::EventQuery => {
                let at = self.sites.here(None);
                self.emit(at, |ids, out| {
                    let event = ids.event(first, out);
                    if ids.captured_events.contains_key(&event) {
                        return;
                    }
                    out.push(match call {
                        Call::EventSync => (None, Op::EventSync { event }),
                        _ => (None, Op::EventQuery { event, done }),
                    });
                })
            }
            Call::DeviceSync => {
                let at = self.sites.here(None);
                self.emit(at, |ids, out| {
                    out.push((
                        None,
                        Op::DeviceSync {
                            device: ids.device_of(ctx),
                        },
                    ));
                })
            }
        }
    }

    fn on_resource(&self, id: u32, data: *const c_void) {
        match id {
            resource::CONTEXT_CREATION_STARTING => {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.ids.context_creation_starting(thread());
            }
            resource::CONTEXT_CREATION_FINISHED => {
                let c = unsafe { &*(data as *const sys::ResourceContextData) };
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state
                    .ids
                    .context_created(c.context as usize, c.device, thread());
            }
            resource::CONTEXT_DESTROY_STARTING => {
                // A context created later may reuse this one's handle: it needs the patches
                // loaded again, and has streams of its own.
                let c = unsafe { &*(data as *const sys::ResourceContextData) };
                if let Some(device) = &self.device {
                    device.context_destroyed(c.context);
                }
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.ids.context_destroyed(c.context as usize);
            }
            resource::STREAM_CREATED => {
                let s = unsafe { &*(data as *const sys::ResourceStreamData) };
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.ids.stream_created(
                    s.context as usize,
                    s.stream as usize,
                    s.h_stream as usize,
                    thread(),
                );
            }
            resource::STREAM_DESTROY_STARTING => {
                // Written before the id is dropped: a stream created later at the same handle
                // is declared again, as a new stream.
                let s = unsafe { &*(data as *const sys::ResourceStreamData) };
                // Only a created stream (a public handle) is destroyed in the trace.
                let at = (!s.stream.is_null())
                    .then(|| self.sites.here(None))
                    .flatten();
                self.emit(at, |ids, out| {
                    if let Some(id) = ids.stream_destroyed(s.stream as usize, s.h_stream as usize) {
                        out.push((None, Op::StreamDestroy { id }));
                    }
                });
            }
            resource::MODULE_LOADED => {
                if let Some(device) = &self.device {
                    let m = unsafe { &*(data as *const sys::ResourceModuleData) };
                    if let Err(e) = guarded(|| device.module_loaded(m.context, m.module)) {
                        self.error(e);
                    }
                }
            }
            resource::DEVICE_MEMORY_ALLOC
            | resource::HOST_MEMORY_ALLOC
            | resource::MEMORY_ALLOC_ASYNC => {
                let m = unsafe { &*(data as *const sys::ResourceMemoryData) };
                // CUDA's own memory (cooperative-groups runtime, device-side launches).
                if m.flags & (memflag::CG_RUNTIME | memflag::CNP) != 0 || m.size == 0 {
                    return;
                }
                let space = if id == resource::HOST_MEMORY_ALLOC {
                    MemSpace::Pinned
                } else if m.flags & memflag::MANAGED != 0 {
                    MemSpace::Managed
                } else {
                    MemSpace::Device
                };
                if space != MemSpace::Device {
                    self.counts.host_visible_allocations.fetch_add(1, Relaxed);
                }
                let name =
                    (m.flags & memflag::MODULE != 0).then(|| "__device__ variable".to_owned());
                let at = if name.is_some() {
                    None
                } else {
                    self.sites.here(None)
                };
                self.emit(at, |ids, out| {
                    let stream = (id == resource::MEMORY_ALLOC_ASYNC).then(|| {
                        ids.data_stream(
                            (m.context as usize, m.stream as usize, m.h_stream as usize),
                            thread(),
                            out,
                        )
                    });
                    let device = m.device.max(0) as u32;
                    let op = ids.alloc(m.address, m.size, device, space, stream);
                    out.push((name, op));
                })
            }
            resource::DEVICE_MEMORY_FREE
            | resource::HOST_MEMORY_FREE
            | resource::MEMORY_FREE_ASYNC => {
                let m = unsafe { &*(data as *const sys::ResourceMemoryData) };
                let at = self.sites.here(None);
                self.emit(at, |ids, out| {
                    let Some(buf) = ids.free(m.address) else {
                        return;
                    };
                    let stream = (id == resource::MEMORY_FREE_ASYNC).then(|| {
                        ids.data_stream(
                            (m.context as usize, m.stream as usize, m.h_stream as usize),
                            thread(),
                            out,
                        )
                    });
                    out.push((None, Op::Free { buf, stream }));
                })
            }
            _ => {}
        }
    }

    fn on_launch(&self, id: u32, l: &sys::LaunchData) {
        match id {
            sys::LAUNCH_BEGIN => {
                self.counts.launches.fetch_add(1, Relaxed);
                let name = demangle(&cstr(l.function_name));
                let at = self.sites.here(Some(&name));
                let stream = self.declare_stream(l.context, l.stream, l.h_stream);
                let log = self.arm(l);
                let p = PendingLaunch {
                    handle: l.h_launch as usize,
                    stream,
                    thread: thread(),
                    name,
                    at,
                    log,
                };
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(p);
            }
            sys::LAUNCH_END => {
                let p = {
                    let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                    let i = pending
                        .iter()
                        .rposition(|p| p.handle == l.h_launch as usize && p.thread == thread());
                    i.map(|i| pending.swap_remove(i))
                };
                let Some(p) = p else { return };
                let folded = self.collect(p.log, l.h_stream);
                self.emit(p.at, |_, out| {
                    out.push((
                        Some(p.name),
                        Op::Launch {
                            stream: p.stream,
                            reads: folded.reads,
                            writes: folded.writes,
                            atomics: folded.atomics,
                        },
                    ));
                });
            }
            _ => {}
        }
    }

    /// The id of the stream a callback's data names (context, public and Sanitizer handles),
    /// its declaration written now if it is new: the operation itself is written later.
    fn declare_stream(
        &self,
        ctx: sys::Handle,
        public: sys::Handle,
        handle: sys::Handle,
    ) -> StreamId {
        let mut id = 0;
        self.emit(None, |ids, out| {
            id = ids.data_stream(
                (ctx as usize, public as usize, handle as usize),
                thread(),
                out,
            );
        });
        id
    }

    /// A log for one launch, when kernels are instrumented.
    fn arm(&self, l: &sys::LaunchData) -> Option<Log> {
        let device = self.device.as_ref()?;
        match guarded(|| device.arm(l)) {
            Ok(log) => {
                self.counts.launches_instrumented.fetch_add(1, Relaxed);
                Some(log)
            }
            Err(e) => {
                self.counts.launches_not_instrumented.fetch_add(1, Relaxed);
                self.error(e);
                None
            }
        }
    }

    /// Reads a launch's log and folds it against the live allocations.
    fn collect(&self, log: Option<Log>, stream: sys::Handle) -> Folded {
        let (Some(log), Some(device)) = (log, &self.device) else {
            return Folded::default();
        };
        let read = guarded(|| {
            device.read(log, stream, |entries, dropped| {
                if dropped > 0 {
                    self.counts.log_entries_dropped.fetch_add(dropped, Relaxed);
                    self.counts
                        .launches_with_dropped_entries
                        .fetch_add(1, Relaxed);
                }
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                fold(entries, &state.ids.live)
            })
        });
        match read {
            Ok(folded) => {
                self.counts
                    .unattributed_bytes
                    .fetch_add(folded.unattributed_bytes, Relaxed);
                folded
            }
            Err(e) => {
                self.error(e);
                Folded::default()
            }
        }
    }

    fn on_event(&self, id: u32, e: &sys::EventData) {
        let at = matches!(id, sys::EVENTS_RECORD | sys::EVENTS_STREAM_WAIT)
            .then(|| self.sites.here(None))
            .flatten();
        self.emit(at, |ids, out| match id {
            sys::EVENTS_CREATED => {
                ids.event(e.event as usize, out);
            }
            sys::EVENTS_DESTROYED => {
                if let Some(id) = ids.event_destroyed(e.event as usize) {
                    out.push((None, Op::EventDestroy { id }));
                }
            }
            sys::EVENTS_RECORD | sys::EVENTS_STREAM_WAIT => {
                let event = ids.event(e.event as usize, out);
                let key = ids.key_from_data(
                    e.context as usize,
                    e.stream as usize,
                    e.h_stream as usize,
                    thread(),
                );
                let capture = ids.capturing.get(&key).copied();
                if id == sys::EVENTS_RECORD {
                    if let Some(origin) = capture {
                        // A graph edge: it orders nothing until the graph runs.
                        ids.captured_events.insert(event, origin);
                        return;
                    }
                    ids.captured_events.remove(&event);
                } else if capture.is_some() {
                    return; // a wait inside the capture: an edge of the graph
                } else if ids.captured_events.contains_key(&event) {
                    // Waiting on an event recorded in a capture: the stream joins that capture.
                    if let Some(origin) = ids.capture_of_event(event) {
                        ids.capturing.insert(key, origin);
                    }
                    return;
                }
                let stream = ids.stream(key, out);
                out.push((
                    None,
                    if id == sys::EVENTS_RECORD {
                        Op::Record { event, stream }
                    } else {
                        Op::Wait { stream, event }
                    },
                ));
            }
            _ => {}
        })
    }

    /// Graph launches: every node runs in the order the API reports them, one after the other
    /// on the launching stream. Nodes the graph would let run concurrently are ordered here, so
    /// a race between two nodes of one graph is missed, never invented; work outside the graph
    /// is checked against each node.
    fn on_graph(&self, id: u32, data: *const c_void) {
        match id {
            sys::GRAPHS_LAUNCH_BEGIN => {
                let g = unsafe { &*(data as *const sys::GraphLaunchData) };
                if g.is_graph_upload != 0 {
                    return;
                }
                self.counts.graph_launches.fetch_add(1, Relaxed);
                let at = self.sites.here(None);
                let stream = self.declare_stream(g.context, g.stream, g.h_stream);
                GRAPH.with(|c| {
                    *c.borrow_mut() = Some(GraphLaunch {
                        exec: g.graph_exec as usize,
                        stream,
                        h_stream: g.h_stream as usize,
                        at,
                        nodes: vec![],
                    })
                });
            }
            sys::GRAPHS_NODE_LAUNCH_BEGIN => {
                let n = unsafe { &*(data as *const sys::GraphNodeLaunchData) };
                if n.is_graph_upload != 0 || GRAPH.with(|c| c.borrow().is_none()) {
                    return;
                }
                let node = match n.node_type {
                    sys::node::KERNEL => {
                        self.counts.graph_kernel_nodes.fetch_add(1, Relaxed);
                        let l = unsafe { &n.data.launch };
                        let name = demangle(&cstr(l.function_name));
                        let log = self.arm(l);
                        Node::Kernel { name, log }
                    }
                    sys::node::MEMCPY | sys::node::MEMSET => {
                        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                        let mut out = Out::new();
                        let stream = GRAPH
                            .with(|c| c.borrow().as_ref().map(|g| g.stream))
                            .unwrap_or(0);
                        if n.node_type == sys::node::MEMCPY {
                            self.copy_ops(
                                &mut state.ids,
                                &mut out,
                                stream,
                                unsafe { &n.data.memcpy },
                                false,
                            );
                        } else {
                            self.set_ops(
                                &mut state.ids,
                                &mut out,
                                stream,
                                unsafe { &n.data.memset },
                                false,
                            );
                        }
                        drop(state);
                        GRAPH.with(|c| {
                            if let Some(g) = c.borrow_mut().as_mut() {
                                g.nodes
                                    .extend(out.into_iter().map(|(n, op)| Node::Op(n, op)));
                            }
                        });
                        return;
                    }
                    sys::node::HOST => {
                        let stream = GRAPH
                            .with(|c| c.borrow().as_ref().map(|g| g.stream))
                            .unwrap_or(0);
                        Node::Op(
                            None,
                            Op::HostFunc {
                                stream,
                                reads: vec![],
                                writes: vec![],
                            },
                        )
                    }
                    _ => return,
                };
                GRAPH.with(|c| {
                    if let Some(g) = c.borrow_mut().as_mut() {
                        g.nodes.push(node);
                    }
                });
            }
            sys::GRAPHS_GRAPHEXEC_DESTROYING => {
                let g = unsafe { &*(data as *const sys::GraphExecData) };
                self.emit(None, |ids, out| {
                    if let Some(id) = ids.graph_exec_destroyed(g.graph_exec as usize) {
                        out.push((None, Op::EventDestroy { id }));
                    }
                });
            }
            sys::GRAPHS_LAUNCH_END => {
                let Some(g) = GRAPH.with(|c| c.borrow_mut().take()) else {
                    return;
                };
                let mut records = Vec::with_capacity(g.nodes.len());
                for node in g.nodes {
                    records.push(match node {
                        Node::Kernel { name, log } => {
                            let f = self.collect(log, g.h_stream as sys::Handle);
                            (
                                Some(name),
                                Op::Launch {
                                    stream: g.stream,
                                    reads: f.reads,
                                    writes: f.writes,
                                    atomics: f.atomics,
                                },
                            )
                        }
                        Node::Op(name, op) => (name, op),
                    });
                }
                let (exec, stream) = (g.exec, g.stream);
                self.emit(g.at, |ids, out| {
                    // cudaGraphLaunch: "each launch is ordered behind both any previous work in
                    // stream and any previous launches of graphExec". A synthetic event carries
                    // the previous launch's end to this one, whatever stream each used.
                    let (event, fresh) = ids.graph_exec_event(exec);
                    let label = || Some(format!("graph launch order {exec:#x}"));
                    if fresh {
                        out.push((label(), Op::Event { id: event }));
                    } else {
                        out.push((label(), Op::Wait { stream, event }));
                    }
                    out.extend(records);
                    out.push((label(), Op::Record { event, stream }));
                });
            }
            _ => {}
        }
    }

    /// The records of a copy: one per row of a 2D copy (up to [`MAX_ROWS`]).
    fn copy_ops(
        &self,
        ids: &mut Ids,
        out: &mut Out,
        stream: StreamId,
        m: &sys::MemcpyData,
        blocking: bool,
    ) {
        // A 3D copy's slice pitch is not in the callback data: only its first slice (rows at
        // the row pitch) is recorded, the other slices are counted as unchecked.
        let rows = m.height.max(1);
        let width = if rows > 1 || m.depth > 1 {
            m.width
        } else {
            m.size
        };
        let other_slices = m.depth.max(1) - 1;
        self.counts
            .rows_unchecked
            .fetch_add(other_slices.saturating_mul(rows), Relaxed);
        let src_host = matches!(
            m.direction,
            sys::direction::HOST_TO_DEVICE | sys::direction::HOST_TO_HOST
        );
        let dst_host = matches!(
            m.direction,
            sys::direction::DEVICE_TO_HOST | sys::direction::HOST_TO_HOST
        );
        for r in 0..rows.min(MAX_ROWS) {
            let (s, d) = (
                m.src_address + r * m.src_pitch,
                m.dst_address + r * m.dst_pitch,
            );
            let (Some(src), Some(dst)) = (
                self.access(ids, out, s, width, src_host),
                self.access(ids, out, d, width, dst_host),
            ) else {
                self.counts.copies_unattributed.fetch_add(1, Relaxed);
                return;
            };
            out.push((
                None,
                Op::Memcpy {
                    stream,
                    src,
                    dst,
                    blocking,
                },
            ));
        }
        self.counts
            .rows_unchecked
            .fetch_add(rows.saturating_sub(MAX_ROWS), Relaxed);
    }

    /// The records of a set: one per row (up to [`MAX_ROWS`]).
    fn set_ops(
        &self,
        ids: &mut Ids,
        out: &mut Out,
        stream: StreamId,
        m: &sys::MemsetData,
        blocking: bool,
    ) {
        let rows = m.height.max(1);
        let width = m.width * u64::from(m.element_size.max(1));
        for r in 0..rows.min(MAX_ROWS) {
            let Some(dst) = self.access(ids, out, m.address + r * m.pitch, width, false) else {
                self.counts.copies_unattributed.fetch_add(1, Relaxed);
                return;
            };
            out.push((
                None,
                Op::Memset {
                    stream,
                    dst,
                    blocking,
                },
            ));
        }
        self.counts
            .rows_unchecked
            .fetch_add(rows.saturating_sub(MAX_ROWS), Relaxed);
    }

    /// `bytes` from `addr`: in a known allocation, else (on the host side of a copy) in
    /// pageable host memory.
    fn access(
        &self,
        ids: &mut Ids,
        out: &mut Out,
        addr: u64,
        bytes: u64,
        host_side: bool,
    ) -> Option<Access> {
        match ids.find(addr) {
            Some((buf, off, left)) => Some(Access::bytes(buf, off, bytes.min(left))),
            None if host_side => Some(Access::bytes(ids.pageable(thread(), out), addr, bytes)),
            None => None,
        }
    }

    /// Enables the domains and API calls the recorder reads.
    pub fn enable(&self, subscriber: sys::Handle) -> Result<(), String> {
        let api = self.api;
        for d in [
            domain::RESOURCE,
            domain::LAUNCH,
            domain::MEMCPY,
            domain::MEMSET,
            domain::GRAPHS,
            domain::EVENTS,
        ] {
            let r = unsafe { (api.enable_domain)(1, subscriber, d) };
            if r != sys::SUCCESS {
                return Err(format!("enabling callback domain {d}: {}", api.describe(r)));
            }
        }
        for (d, table) in [
            (domain::RUNTIME_API, sys::cbid::RUNTIME),
            (domain::DRIVER_API, sys::cbid::DRIVER),
        ] {
            for (id, _, _) in table {
                let r = unsafe { (api.enable_callback)(1, subscriber, d, *id) };
                if r != sys::SUCCESS {
                    self.error(format!(
                        "enabling API callback {d}/{id}: {}",
                        api.describe(r)
                    ));
                }
            }
        }
        Ok(())
    }
}

fn is_declaration(op: &Op) -> bool {
    matches!(op, Op::Stream { .. } | Op::Event { .. })
}

/// The context a copy was asked in.
fn ctx_of_copy(m: &sys::MemcpyData) -> usize {
    [m.api_context, m.src_context, m.dst_context]
        .into_iter()
        .find(|c| !c.is_null())
        .unwrap_or(std::ptr::null_mut()) as usize
}

thread_local! {
    /// Set while the tool itself calls the Sanitizer API: callbacks that causes are ignored.
    pub static IN_TOOL: Cell<bool> = const { Cell::new(false) };
}

/// Runs a call into the Sanitizer API with [`IN_TOOL`] set.
fn guarded<T>(f: impl FnOnce() -> T) -> T {
    /// Clears the flag however `f` ends, a panic included: else the thread's later
    /// callbacks would all be taken for the tool's own.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_TOOL.with(|t| t.set(false));
        }
    }
    IN_TOOL.with(|t| t.set(true));
    let _reset = Reset;
    f()
}
