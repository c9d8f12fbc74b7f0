//! Two host threads: a producer enqueues `randn` on its stream and hands the buffer to a
//! consumer thread, which enqueues `sum` on another stream. The hand-off orders the enqueues,
//! not the GPU work: without an event, the sum runs first and is 0. The scenario is
//! `streamsan::ops::demos::producer_consumer`.
//!
//! ```text
//! cargo run --example producer_consumer                # racy: wrong sum, exit status 1
//! cargo run --example producer_consumer -- --fixed     # the event travels with the buffer: 0
//! cargo run --example producer_consumer -- --tracking  # cudarc's tracking waits for it: 0
//! STREAMSAN=1 STREAMSAN_OPTIONS=trace=producer_consumer.jsonl \
//!     cargo run --example producer_consumer            # the race, across threads
//! ```

fn main() -> std::process::ExitCode {
    streamsan::ops::demos::producer_consumer::DEMO.main()
}
