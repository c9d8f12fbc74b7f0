//! CUDA graphs captured from a stream: `begin_capture` / `end_capture` and [`CudaGraph`], as
//! cudarc has them, recorded as trace v1 minor 1's `graph_begin`, `graph_end`, `graph_launch`
//! and `graph_destroy`.
//!
//! Between `begin_capture` and `end_capture`, the wrappers record each call as usual; the
//! engine makes the operations on capturing streams graph nodes (ordering model R17), and a
//! launch runs them (R18). cudarc's own event tracking keeps working inside a capture, with
//! what CUDA makes of it (seen on an H100, driver 580): a wait on an event recorded before the
//! capture invalidates it (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`: the call fails and records
//! nothing), and a wait, after the capture, on an event last recorded inside it fails too
//! (`CUDA_ERROR_INVALID_VALUE`, kept by cudarc and returned by its next call): recorded, the
//! engine lets that wait order nothing and warns `unrecorded-event`. `docs/online.md` has the
//! whole account.

use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{DriverError, sys};

use super::sanitizer::Sanitizer;
use super::step::Step;
use super::stream::CudaStream;
use crate::trace::record::{GraphId, Op};

/// A captured, instantiated graph, launched on the stream it was captured from. Made by
/// [`CudaStream::end_capture`]. As cudarc's, not thread safe (CUDA's graphs are not).
pub struct CudaGraph {
    cuda: cudarc::driver::CudaGraph,
    stream: Arc<CudaStream>,
    meta: Option<(Arc<Sanitizer>, GraphId)>,
}

impl std::fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGraph")
            .field("graph", &self.meta.as_ref().map(|m| m.1))
            .finish_non_exhaustive()
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        if let Some((san, graph)) = &self.meta {
            let mut call = san.begin(None);
            call.push(Step::op(Op::GraphDestroy { graph: *graph }, None));
            call.finish();
        }
    }
}

impl CudaStream {
    /// `CudaStream::begin_capture`: work enqueued on this stream from now on, and on streams
    /// that wait on events recorded in the capture, is captured into a graph instead of run.
    #[track_caller]
    pub fn begin_capture(&self, mode: sys::CUstreamCaptureMode) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().begin_capture(mode);
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        self.cudarc().begin_capture(mode)?;
        let graph = call.begin_capture(stream);
        call.push(Step::op(Op::GraphBegin { graph, stream }, None));
        call.finish();
        Ok(())
    }

    /// `CudaStream::end_capture`: ends the capture begun on this stream and instantiates the
    /// graph with `flags`. The capture ends even when this fails (CUDA invalidates it): the
    /// sanitizer then records the end and the graph's destruction.
    #[track_caller]
    pub fn end_capture(
        self: &Arc<Self>,
        flags: sys::CUgraphInstantiate_flags,
    ) -> Result<Option<CudaGraph>, DriverError> {
        let Some(san) = self.san() else {
            return Ok(self.cudarc().end_capture(flags)?.map(|cuda| CudaGraph {
                cuda,
                stream: self.clone(),
                meta: None,
            }));
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        let result = self.cudarc().end_capture(flags);
        let Some(graph) = call.end_capture(stream) else {
            // Begun through cudarc directly: nothing of it is in the trace.
            return Ok(result?.map(|cuda| CudaGraph {
                cuda,
                stream: self.clone(),
                meta: None,
            }));
        };
        call.push(Step::op(Op::GraphEnd { graph, stream }, None));
        let made = match result {
            Ok(Some(cuda)) => Ok(Some(cuda)),
            other => {
                call.push(Step::op(Op::GraphDestroy { graph }, None));
                other.map(|_| None)
            }
        };
        call.finish();
        Ok(made?.map(|cuda| CudaGraph {
            cuda,
            stream: self.clone(),
            meta: Some((san.clone(), graph)),
        }))
    }

    /// `CudaStream::capture_status` (`cuStreamIsCapturing`). Not recorded: it orders nothing.
    pub fn capture_status(&self) -> Result<sys::CUstreamCaptureStatus, DriverError> {
        self.cudarc().capture_status()
    }
}

impl CudaGraph {
    /// `CudaGraph::launch`: runs every node, on the stream it was captured from, after that
    /// stream's earlier work and the graph's earlier launches.
    #[track_caller]
    pub fn launch(&self) -> Result<(), DriverError> {
        let Some((san, graph)) = &self.meta else {
            return self.cuda.launch();
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.stream.id_in(&mut call);
        self.cuda.launch()?;
        call.push(Step::op(
            Op::GraphLaunch {
                graph: *graph,
                stream,
            },
            None,
        ));
        call.finish();
        Ok(())
    }

    /// `CudaGraph::upload`: loads the graph's resources ahead of the first launch. It runs no
    /// node: not recorded.
    pub fn upload(&self) -> Result<(), DriverError> {
        self.cuda.upload()
    }

    /// The graph's id in the trace, when sanitized. Not in cudarc.
    pub fn id(&self) -> Option<GraphId> {
        self.meta.as_ref().map(|m| m.1)
    }

    /// `CudaGraph::cu_graph`.
    pub fn cu_graph(&self) -> sys::CUgraph {
        self.cuda.cu_graph()
    }

    /// `CudaGraph::cu_graph_exec`: launches made with it directly are not recorded.
    pub fn cu_graph_exec(&self) -> sys::CUgraphExec {
        self.cuda.cu_graph_exec()
    }
}
