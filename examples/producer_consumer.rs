//! Two host threads, two streams: the producer thread enqueues `randn` into `x` on its stream
//! and hands `x` to the consumer thread through a channel; the consumer enqueues `sum` of `x` on
//! its own stream. The channel orders the *enqueues*, not the GPU work: the two streams run
//! independently, and with a `spin` kernel ahead of `randn` the sum runs first every time and
//! is 0.
//!
//! streamsan reports a read-after-write on `x` between the consumer thread's `sum` and the
//! producer thread's `randn`. The fix sends an event recorded after `randn` along with `x`, and
//! the consumer's stream waits on it. With `--tracking`, cudarc makes the consumer's stream wait
//! on `x`'s write event, which `randn` recorded before the hand-off (cudarc follows the host's
//! enqueue order: had the consumer enqueued first, tracking would not have helped).
//!
//! ```text
//! cargo run --example producer_consumer                # racy: wrong sum, exit status 1
//! cargo run --example producer_consumer -- --fixed     # the event travels with the buffer: 0
//! cargo run --example producer_consumer -- --tracking  # cudarc's tracking waits for it: 0
//! STREAMSAN=1 cargo run --example producer_consumer    # the race, across threads
//! cargo run --example producer_consumer -- --streamsan # the same, and a trace to replay
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::mpsc;

use streamsan::cuda::{CudaContext, CudaEvent, CudaSlice, CudaStream};
use streamsan_demos::{self as demos, Error, Kernels, Outcome, SPIN_CYCLES, Variant};
use streamsan_demos::{cpu, ops};

const USAGE: &str = "usage: producer_consumer [--fixed] [--tracking] [--streamsan]";
pub const N: usize = 1 << 20; // elements of x
pub const SEED: u64 = 99;

/// What the producer hands over: `x`, and (fixed) an event recorded after `randn`.
type Handoff = (CudaSlice<f32>, Option<CudaEvent>);

/// The producer thread: fills `x` after a spin, and sends it.
fn produce(stream: &Arc<CudaStream>, fixed: bool, tx: mpsc::Sender<Handoff>) -> Result<(), Error> {
    let mut x = stream.alloc_zeros_named::<f32>("x", N)?;
    ops::spin(stream, SPIN_CYCLES)?; // delays randn: the race shows every time
    ops::randn(stream, &mut x, SEED)?; // race: the write
    let ready = fixed.then(|| stream.record_event(None)).transpose()?; // the fix, part 1
    tx.send((x, ready))
        .map_err(|_| Error::Thread("the consumer stopped before receiving x"))
}

/// The consumer thread: receives `x`, and sums it.
fn consume(stream: &Arc<CudaStream>, rx: mpsc::Receiver<Handoff>) -> Result<Vec<f32>, Error> {
    let (x, ready) = rx
        .recv()
        .map_err(|_| Error::Thread("the producer stopped before sending x"))?;
    if let Some(ready) = &ready {
        stream.wait(ready)?; // the fix, part 2: the consumer's stream waits for randn
    }
    let mut total = stream.alloc_zeros_named::<f32>("total", 1)?;
    ops::sum(stream, &x, &mut total)?; // race: the read
    Ok(stream.clone_dtoh(&total)?) // blocking; then x is freed, in order after randn and sum
}

/// Runs the program on `ctx`, a fresh context (no stream made yet).
pub fn run(ctx: &Arc<CudaContext>, variant: Variant) -> Result<Outcome, Error> {
    Kernels::get(ctx)?; // compile and load the kernels now, not between the racing calls
    if !variant.tracking {
        // SAFETY: the program orders its streams itself (or, racy, fails to).
        unsafe { ctx.disable_event_tracking() };
    }
    let producer = ctx.new_stream_named("producer")?;
    let consumer = ctx.new_stream_named("consumer")?;
    let (tx, rx) = mpsc::channel();
    let (produced, consumed) = std::thread::scope(|s| {
        let p = s.spawn(|| produce(&producer, variant.fixed, tx));
        let c = s.spawn(|| consume(&consumer, rx));
        (p.join(), c.join())
    });
    produced.expect("the producer panicked")?;
    let gpu = consumed.expect("the consumer panicked")?;

    ctx.synchronize()?; // the producer's stream may still be spinning
    drop((producer, consumer));
    Ok(Outcome::sum(ctx, gpu, &cpu::randn(SEED, N))) // vs the sum on the CPU
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let variant = Variant::new(flag("--fixed"), flag("--tracking"));
    demos::main("producer_consumer", USAGE, &args, variant, run)
}
