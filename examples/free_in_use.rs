//! A buffer freed while a kernel on another stream still reads it. The sanitizer's report is
//! the point: wrong numbers also need the memory pool to hand the freed memory to the next
//! allocation before the delayed kernel runs, which pools do in practice but do not promise
//! (the example says whether it happened). The scenario is
//! `streamsan::ops::demos::free_in_use`.
//!
//! ```text
//! cargo run --example free_in_use                      # racy: usually sums sevens, exit 1
//! cargo run --example free_in_use -- --fixed           # synchronize before freeing: 0
//! cargo run --example free_in_use -- --tracking        # cudarc's drop waits for the reader: 0
//! STREAMSAN=1 STREAMSAN_OPTIONS=trace=free_in_use.jsonl \
//!     cargo run --example free_in_use                  # free-while-in-use, at the free's line
//! ```

fn main() -> std::process::ExitCode {
    streamsan::ops::demos::free_in_use::DEMO.main()
}
