//! The recorder without a GPU: callback sequences shaped as the H100 probe saw them
//! (docs/design/sanitizer-api-notes.md §6) are fed to a [`Recorder`] whose Sanitizer API is a
//! stand-in, and the trace it writes is checked by the engine. Kernels are not instrumented
//! here (no device), so the races are between copies and sets, whose ranges come from the
//! callbacks themselves.

use std::ffi::{CString, c_char, c_void};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use crate::recorder::Recorder;
use crate::sink::{LiveOptions, Sink, trace_path};
use crate::site::Sites;
use crate::sys::{self, Handle, SanitizerResult, domain, resource};

unsafe extern "C" fn ok0(_: *mut Handle, _: sys::Callback, _: *mut c_void) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok1(_: u32, _: Handle, _: u32) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok2(_: u32, _: Handle, _: u32, _: u32) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok3(_: *const c_void, _: Handle) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok4(_: u32, _: Handle, _: *const c_char) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok5(_: Handle) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok6(_: Handle, _: Handle, _: Handle, _: *const c_void) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok7(_: Handle, _: *mut *mut c_void, _: usize) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok8(_: *mut c_void, _: *const c_void, _: usize, _: Handle) -> SanitizerResult {
    0
}
unsafe extern "C" fn ok9(_: SanitizerResult, _: *mut *const c_char) -> SanitizerResult {
    1
}

static API: sys::Api = sys::Api {
    subscribe: ok0,
    enable_domain: ok1,
    enable_callback: ok2,
    add_patches: ok3,
    patch_instructions: ok4,
    patch_module: ok5,
    set_launch_callback_data: ok6,
    alloc: ok7,
    alloc_host: ok7,
    memcpy_h2d_async: ok8,
    memcpy_d2h: ok8,
    stream_synchronize: ok5,
    result_string: ok9,
};

fn h(v: usize) -> Handle {
    v as Handle
}

const CTX: usize = 0xc000;
const S1: usize = 0x5100; // public handles of two created non-blocking streams
const S2: usize = 0x5200;

/// A recorder writing into a fresh directory, with a context and two non-blocking streams
/// created as CUDA 13 reports them.
struct Program {
    r: Recorder,
    dir: PathBuf,
}

/// What a live check printed.
#[derive(Clone, Default)]
struct Printed(Arc<Mutex<Vec<u8>>>);

impl Write for Printed {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Printed {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Program {
    fn new(name: &str) -> Program {
        Program::with_sink(name, |_| {})
    }

    /// A program whose records are also checked as they are written, printing into the
    /// returned buffer and calling `halt` at each racing record.
    fn live(name: &str, halt: fn()) -> (Program, Printed) {
        let printed = Printed::default();
        let report = printed.clone();
        let p = Program::with_sink(name, move |sink| {
            sink.check_live(LiveOptions {
                report: Box::new(report),
                filters: None,
                halt: Some(halt),
            })
            .unwrap()
        });
        (p, printed)
    }

    fn with_sink(name: &str, setup: impl FnOnce(&mut Sink)) -> Program {
        let dir =
            std::env::temp_dir().join(format!("streamsan-replay-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut sink = Sink::create(&dir, 1, false).unwrap();
        setup(&mut sink);
        let p = Program {
            r: Recorder::new(&API, None, sink, Sites::new(true)),
            dir,
        };
        p.resource(
            resource::CONTEXT_CREATION_STARTING,
            &sys::ResourceContextData {
                context: h(CTX),
                device: 0,
            },
        );
        // The legacy stream and CUDA's own: null public handles, made during the creation.
        p.stream_created(0, 0x10);
        p.resource(
            resource::CONTEXT_CREATION_FINISHED,
            &sys::ResourceContextData {
                context: h(CTX),
                device: 0,
            },
        );
        for (s, hs) in [(S1, 0x11), (S2, 0x12)] {
            p.stream_created(s, hs);
            // cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), seen at its exit.
            let out = s;
            p.api(true, 198, &[&out as *const usize as usize, 1], 0);
        }
        p
    }

    fn resource<T>(&self, id: u32, data: &T) {
        self.r
            .on_callback(domain::RESOURCE, id, (data as *const T).cast());
    }

    fn stream_created(&self, public: usize, handle: usize) {
        let d = sys::ResourceStreamData {
            context: h(CTX),
            stream: h(public),
            h_stream: h(handle),
        };
        self.resource(resource::STREAM_CREATED, &d);
    }

    fn stream_destroy_starting(&self, public: usize, handle: usize) {
        let d = sys::ResourceStreamData {
            context: h(CTX),
            stream: h(public),
            h_stream: h(handle),
        };
        self.resource(resource::STREAM_DESTROY_STARTING, &d);
    }

    fn alloc(&self, addr: u64, size: u64) {
        self.resource(resource::DEVICE_MEMORY_ALLOC, &memory(addr, size, (0, 0)));
    }

    /// An async copy on s1 that writes buffer A (from B).
    fn write_a_on_s1(&self) {
        self.copy((S1, 0x11), B, A, N);
    }

    /// An async copy on s2 that reads buffer A (into B): it races with
    /// [`Program::write_a_on_s1`] unless something orders s2 after s1 in between.
    fn read_a_on_s2(&self) {
        self.copy((S2, 0x12), A, B, N);
    }

    /// [`Program::write_a_on_s1`], an event ordering s2 after s1 when `ordered`, then
    /// [`Program::read_a_on_s2`].
    fn copies_across_streams(&self, ordered: bool) {
        self.write_a_on_s1();
        if ordered {
            self.order_s2_after_s1();
        }
        self.read_a_on_s2();
    }

    /// `cudaEventRecord(e, s1)` then `cudaStreamWaitEvent(s2, e)`: s2 after s1's work so far.
    fn order_s2_after_s1(&self) {
        self.event(sys::EVENTS_RECORD, 0xe1, (S1, 0x11));
        self.event(sys::EVENTS_STREAM_WAIT, 0xe1, (S2, 0x12));
    }

    /// `cudaStreamBeginCapture(stream)`.
    fn begin_capture(&self, stream: usize) {
        self.api(true, 315, &[stream, 0], 0);
    }

    /// `cudaStreamEndCapture(stream, &g)`, returning `ret`.
    fn end_capture(&self, stream: usize, ret: i32) {
        let graph: usize = 0;
        self.api(true, 319, &[stream, &graph as *const usize as usize], ret);
    }

    /// An API call of `runtime` or driver domain, `params` as its parameter block, returning
    /// `ret`: the enter and exit callbacks.
    fn api(&self, runtime: bool, cbid: u32, params: &[usize], ret: i32) {
        let name = CString::new("call").unwrap();
        let dom = if runtime {
            domain::RUNTIME_API
        } else {
            domain::DRIVER_API
        };
        for site in [sys::API_ENTER, sys::API_EXIT] {
            let d = sys::CallbackData {
                callback_site: site,
                function_name: name.as_ptr(),
                function_params: params.as_ptr().cast(),
                function_return_value: (&ret as *const i32).cast(),
                symbol_name: std::ptr::null(),
                context: h(CTX),
            };
            self.r
                .on_callback(dom, cbid, (&d as *const sys::CallbackData).cast());
        }
    }

    /// An async device-to-device copy of `bytes` from `src` to `dst` on `stream`.
    fn copy(&self, stream: (usize, usize), src: u64, dst: u64, bytes: u64) {
        let d = sys::MemcpyData {
            src_context: h(CTX),
            dst_context: h(CTX),
            src_stream: h(stream.0),
            h_src_stream: h(stream.1),
            dst_stream: h(stream.0),
            h_dst_stream: h(stream.1),
            src_address: src,
            dst_address: dst,
            size: bytes,
            width: bytes,
            height: 1,
            depth: 1,
            src_pitch: 0,
            dst_pitch: 0,
            is_async: 1,
            direction: 4,
            api_context: h(CTX),
            api_stream: h(stream.0),
            h_api_stream: h(stream.1),
        };
        self.r
            .on_callback(domain::MEMCPY, 1, (&d as *const sys::MemcpyData).cast());
    }

    fn event(&self, id: u32, event: usize, stream: (usize, usize)) {
        let d = sys::EventData {
            event: h(event),
            context: h(CTX),
            stream: h(stream.0),
            h_stream: h(stream.1),
        };
        self.r
            .on_callback(domain::EVENTS, id, (&d as *const sys::EventData).cast());
    }

    /// The graph `exec` launched on `stream`, its one node a 1D memset of `bytes` at `addr`.
    fn graph_launch(&self, exec: usize, stream: (usize, usize), addr: u64, bytes: u64) {
        let g = sys::GraphLaunchData {
            context: h(CTX),
            stream: h(stream.0),
            h_stream: h(stream.1),
            graph_exec: h(exec),
            is_graph_upload: 0,
        };
        self.r.on_callback(
            domain::GRAPHS,
            sys::GRAPHS_LAUNCH_BEGIN,
            (&g as *const sys::GraphLaunchData).cast(),
        );
        let mut n: sys::GraphNodeLaunchData = unsafe { std::mem::zeroed() };
        n.graph_exec = h(exec);
        n.node_type = sys::node::MEMSET;
        n.data.memset = std::mem::ManuallyDrop::new(sys::MemsetData {
            context: h(CTX),
            stream: h(stream.0),
            h_stream: h(stream.1),
            address: addr,
            width: bytes,
            height: 1,
            pitch: 0,
            element_size: 1,
            value: 0,
            is_async: 1,
        });
        self.r.on_callback(
            domain::GRAPHS,
            sys::GRAPHS_NODE_LAUNCH_BEGIN,
            (&n as *const sys::GraphNodeLaunchData).cast(),
        );
        self.r.on_callback(
            domain::GRAPHS,
            sys::GRAPHS_LAUNCH_END,
            (&g as *const sys::GraphLaunchData).cast(),
        );
    }

    /// The races `streamsan check` finds in the trace written so far.
    fn races(&self) -> u64 {
        self.checked().report.summary.races
    }

    fn checked(&self) -> streamsan::check::Checked {
        let path = trace_path(&self.dir, 1);
        streamsan::check::check_path(path.to_str().unwrap()).expect("a valid trace")
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A memory callback's data: `size` bytes at `addr`, on `stream` (public, Sanitizer handle;
/// null for an allocation that is not stream-ordered).
fn memory(addr: u64, size: u64, stream: (usize, usize)) -> sys::ResourceMemoryData {
    sys::ResourceMemoryData {
        address: addr,
        size,
        context: h(CTX),
        device: 0,
        stream: h(stream.0),
        h_stream: h(stream.1),
        memory_pool: h(if stream.0 == 0 { 0 } else { 0x77 }),
        flags: 0,
        permissions: 7,
        visibility: 1,
        source_device: 0,
    }
}

const A: u64 = 0x7000_0000;
const B: u64 = 0x7010_0000;
const N: u64 = 4096;

/// `streamsan run` checks each record as the program runs: a race prints at once (the block
/// `streamsan check` prints for the trace, at the same trace lines), and `--halt-on-error`'s
/// hook runs at the racing record.
#[test]
fn races_are_found_as_the_program_runs_and_can_halt_it() {
    static HALTS: AtomicUsize = AtomicUsize::new(0);
    fn halt() {
        HALTS.fetch_add(1, SeqCst);
    }
    for fixed in [false, true] {
        let (p, printed) = Program::live(&format!("live-{fixed}"), halt);
        p.alloc(A, N);
        p.alloc(B, N);
        p.write_a_on_s1();
        if fixed {
            p.order_s2_after_s1();
        }
        let before = HALTS.load(SeqCst);
        p.read_a_on_s2();
        let halted = HALTS.load(SeqCst) - before;
        let text = printed.text();
        if fixed {
            assert_eq!((halted, text.as_str()), (0, ""), "fixed");
            assert!(matches!(p.r.live_counts(), Some((0, _, false))));
            assert_eq!(p.races(), 0);
            continue;
        }
        assert_eq!(halted, 1, "the racing record halts once");
        let (races, records, stopped) = p.r.live_counts().unwrap();
        assert_eq!((races, stopped), (1, false), "one record raced");
        assert_eq!(
            records,
            p.checked().report.summary.records,
            "every record checked"
        );
        let offline = streamsan::report::render_text(
            &p.checked().report,
            &streamsan::report::RenderOptions::default(),
        );
        let blocks: Vec<&str> = text.lines().filter(|l| l.starts_with("RACE")).collect();
        assert_eq!(blocks.len(), 2, "{text}");
        for line in text.lines().filter(|l| l.contains("trace line")) {
            assert!(offline.contains(line), "{line}\nnot in\n{offline}");
        }
    }
}

#[test]
fn copies_on_two_streams_race_unless_an_event_orders_them() {
    for fixed in [false, true] {
        let p = Program::new(&format!("copies-{fixed}"));
        p.alloc(A, N);
        p.alloc(B, N);
        p.copies_across_streams(fixed);
        // Racy: s2 reads A while s1 writes it, and writes B while s1 reads it.
        assert_eq!(p.races(), if fixed { 0 } else { 2 }, "fixed: {fixed}");
    }
}

#[test]
fn an_event_used_in_a_capture_orders_again_once_recorded_outside_it() {
    let p = Program::new("capture-event");
    p.alloc(A, N);
    p.alloc(B, N);
    // cudaStreamBeginCapture(s1); cudaEventRecord(e, s1) inside it; cudaStreamEndCapture.
    p.begin_capture(S1);
    p.event(sys::EVENTS_RECORD, 0xe1, (S1, 0x11));
    p.end_capture(S1, 0);
    // The same event, used outside any capture: it orders the copies.
    p.copies_across_streams(true);
    assert_eq!(p.races(), 0);
}

#[test]
fn a_failed_end_of_capture_still_ends_it() {
    let p = Program::new("capture-failed");
    p.alloc(A, N);
    p.alloc(B, N);
    p.begin_capture(S1);
    p.end_capture(S1, 901); // capture invalidated
    // s1 is not capturing any more: its record and the wait are real.
    p.copies_across_streams(true);
    assert_eq!(p.races(), 0);
}

#[test]
fn launches_of_one_graph_are_ordered_whatever_their_streams() {
    // cudaGraphLaunch: "each launch is ordered behind ... any previous launches of graphExec".
    let p = Program::new("graph-order");
    p.alloc(A, N);
    p.graph_launch(0x9e, (S1, 0x11), A, N);
    p.graph_launch(0x9e, (S2, 0x12), A, N);
    assert_eq!(p.races(), 0);
    // Two different graphs writing the same bytes on two streams do race.
    p.graph_launch(0x9f, (S1, 0x11), A, N);
    assert_eq!(p.races(), 1);
}

#[test]
fn a_query_that_was_not_done_orders_nothing_and_one_that_was_does() {
    for done in [false, true] {
        let p = Program::new(&format!("query-{done}"));
        p.alloc(A, N);
        p.alloc(B, N);
        p.write_a_on_s1();
        // cudaStreamQuery(s1): cudaSuccess, or cudaErrorNotReady (600).
        p.api(true, 132, &[S1], if done { 0 } else { 600 });
        p.read_a_on_s2();
        assert_eq!(p.races(), if done { 0 } else { 2 }, "done: {done}");
    }
}

#[test]
fn the_driver_half_of_a_runtime_call_is_not_a_second_call() {
    // cudaStreamSynchronize runs cuStreamSynchronize inside it: one stream_sync, not two.
    let p = Program::new("nested");
    let name = CString::new("call").unwrap();
    let ret = 0i32;
    let params = [S1];
    let cb = |dom, cbid, site| {
        let d = sys::CallbackData {
            callback_site: site,
            function_name: name.as_ptr(),
            function_params: params.as_ptr().cast(),
            function_return_value: (&ret as *const i32).cast(),
            symbol_name: std::ptr::null(),
            context: h(CTX),
        };
        p.r.on_callback(dom, cbid, (&d as *const sys::CallbackData).cast());
    };
    cb(domain::RUNTIME_API, 131, sys::API_ENTER);
    cb(domain::DRIVER_API, 126, sys::API_ENTER);
    cb(domain::DRIVER_API, 126, sys::API_EXIT);
    cb(domain::RUNTIME_API, 131, sys::API_EXIT);
    let text = std::fs::read_to_string(trace_path(&p.dir, 1)).unwrap();
    assert_eq!(text.matches("\"op\":\"stream_sync\"").count(), 1, "{text}");
}

impl Program {
    /// An async 2D memset on `stream`: `rows` rows of `width` bytes, `pitch` apart.
    fn memset_2d(&self, stream: (usize, usize), addr: u64, width: u64, rows: u64, pitch: u64) {
        let d = sys::MemsetData {
            context: h(CTX),
            stream: h(stream.0),
            h_stream: h(stream.1),
            address: addr,
            width,
            height: rows,
            pitch,
            element_size: 1,
            value: 0,
            is_async: 1,
        };
        self.r
            .on_callback(domain::MEMSET, 1, (&d as *const sys::MemsetData).cast());
    }
}

#[test]
fn a_2d_set_touches_its_rows_only() {
    // cudaMemset2DAsync(A, 256, 0, 64, 4) on s1 (as the probe saw it: width 64, height 4,
    // pitch 256, element size 1), then a copy on s2 of bytes between its rows or inside one.
    for (offset, racy) in [(64, false), (256 + 8, true)] {
        let p = Program::new(&format!("set2d-{offset}"));
        p.alloc(A, N);
        p.alloc(B, N);
        p.memset_2d((S1, 0x11), A, 64, 4, 256);
        p.copy((S2, 0x12), A + offset, B, 32);
        assert_eq!(p.races(), u64::from(racy), "offset {offset}");
    }
}

#[test]
fn a_stream_ordered_allocation_must_be_ordered_before_its_use_elsewhere() {
    for fixed in [false, true] {
        let p = Program::new(&format!("async-alloc-{fixed}"));
        p.alloc(B, N);
        // cudaMallocAsync(&a, N, s1): the allocation belongs to s1's order.
        p.resource(resource::MEMORY_ALLOC_ASYNC, &memory(A, N, (S1, 0x11)));
        if fixed {
            p.order_s2_after_s1();
        }
        p.copy((S2, 0x12), B, A, N);
        assert_eq!(p.races() > 0, !fixed, "fixed: {fixed}");
    }
}

/// cudaStreamDestroy(s1) writes a `stream_destroy` of s1's id on the calling thread; a stream
/// never named in the trace writes none; a stream created later at s1's handle is declared
/// again under a new id. The header declares the minor that has `stream_destroy`.
#[test]
fn a_destroyed_stream_is_written_and_its_handle_declared_again() {
    use streamsan::trace::TraceReader;
    use streamsan::trace::record::{Op, OpKind, Record};

    let p = Program::new("stream-destroy");
    p.alloc(A, N);
    p.alloc(B, N);
    p.write_a_on_s1();
    p.stream_destroy_starting(S1, 0x11);
    p.stream_destroy_starting(S2, 0x12); // created, never used
    p.stream_created(S1, 0x13);
    p.copy((S1, 0x13), B, A, N);

    let path = trace_path(&p.dir, 1);
    let mut reader = TraceReader::open(path.to_str().unwrap()).unwrap();
    assert_eq!(reader.minor(), streamsan::trace::FORMAT_MINOR);
    assert!(OpKind::StreamDestroy.minor() <= reader.minor());
    let records: Vec<Record> = reader.by_ref().collect::<Result<_, _>>().unwrap();
    let s1 = format!("stream {S1:#x}");
    let declared: Vec<u64> = records
        .iter()
        .filter_map(|r| match r.op {
            Op::Stream { id, .. } if r.name.as_deref() == Some(s1.as_str()) => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(declared.len(), 2, "{records:#?}");
    assert_ne!(declared[0], declared[1]);
    let destroys: Vec<&Record> = records
        .iter()
        .filter(|r| matches!(r.op, Op::StreamDestroy { .. }))
        .collect();
    assert_eq!(destroys.len(), 1, "{records:#?}");
    let copy = records
        .iter()
        .find(|r| matches!(r.op, Op::Memcpy { .. }))
        .unwrap();
    assert_eq!(destroys[0].op, Op::StreamDestroy { id: declared[0] });
    assert_eq!(destroys[0].thread, copy.thread);
    // Between the two declarations, before the copy on the new stream.
    let line = |id| {
        records
            .iter()
            .find(|r| matches!(r.op, Op::Stream { id: i, .. } if i == id))
            .unwrap()
            .line
    };
    assert!(line(declared[0]) < destroys[0].line && destroys[0].line < line(declared[1]));
}
