//! Copy/compute overlap over two streams with pinned host buffers and events; with
//! `--readback-race` the host reads the pinned results without waiting for the last
//! download, and sees the NaNs it wrote before. The scenario is
//! `streamsan::ops::demos::pipeline`.
//!
//! ```text
//! cargo run --example pipeline                         # right numbers, exit status 0
//! cargo run --example pipeline -- --readback-race      # the last chunk is NaN, exit status 1
//! cargo run --example pipeline -- --readback-race --tracking   # cudarc's pinned-buffer event
//!                                                      # makes the read wait: right, 0
//! STREAMSAN=1 STREAMSAN_OPTIONS=trace=pipeline.jsonl \
//!     cargo run --example pipeline -- --readback-race  # host read races with the download
//! ```

fn main() -> std::process::ExitCode {
    streamsan::ops::demos::pipeline::DEMO.main()
}
