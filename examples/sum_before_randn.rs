//! `randn` on the default stream, `sum` on a side stream, no wait in between: the sum is 0
//! instead of the sum of a million normal samples. The scenario, and why it turns cudarc's
//! event tracking off, is `streamsan::ops::demos::sum_before_randn`.
//!
//! ```text
//! cargo run --example sum_before_randn                 # racy: wrong sum, exit status 1
//! cargo run --example sum_before_randn -- --fixed      # event record + wait: right sum, 0
//! cargo run --example sum_before_randn -- --tracking   # cudarc's tracking inserts the wait: 0
//! STREAMSAN=1 STREAMSAN_OPTIONS=trace=sum_before_randn.jsonl \
//!     cargo run --example sum_before_randn             # the race, reported at the sum's line
//! ```

fn main() -> std::process::ExitCode {
    streamsan::ops::demos::sum_before_randn::DEMO.main()
}
