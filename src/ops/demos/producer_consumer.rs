//! Two host threads, two streams: the producer thread enqueues `randn` into `x` on its stream
//! and hands `x` to the consumer thread through a channel; the consumer enqueues `sum` of `x`
//! on its own stream.
//!
//! The channel orders the *enqueues* (the consumer's `sum` is enqueued after the producer's
//! `randn`) but not the *execution*: the two streams run independently, so `sum` can run
//! before `randn`. A `spin` kernel ahead of `randn` on the producer's stream makes it do so
//! every time: the sum is 0.
//!
//! - `fixed`: the producer records an event after `randn` and sends it with `x`; the consumer's
//!   stream waits on it before `sum`.
//! - `tracking`: cudarc's event tracking, on, makes the consumer's stream wait on `x`'s write
//!   event, which the producer's `randn` recorded before the hand-off: cudarc orders it. (It
//!   would not if the consumer could enqueue before the producer did: cudarc's waits follow
//!   the host's enqueue order, not the data flow.)
//!
//! `x` is freed by the consumer, after its blocking read of the result, on the producer's
//! stream (where it was allocated): stream order puts the free after `randn`, and the consumer
//! thread's synchronization puts it after `sum`.

use std::sync::mpsc;

use super::cli::Demo;
use super::{ExpectedRace, Outcome, SPIN_CYCLES, Site, Variant, next_line};
use crate::cuda::{Context, DeviceBuffer, Event, Stream};
use crate::ops::{self, Error, Kernels, compare::Tolerance, cpu};

pub const NAME: &str = "producer_consumer";
/// Elements of `x`.
pub const N: usize = 1 << 20;
pub const SEED: u64 = 99;

/// What the producer hands over: the buffer, and the event that says it is ready (`fixed`).
type Handoff = (DeviceBuffer<f32>, Option<Event>);

/// The producer thread: fills `x` after a spin, sends it. Returns the `randn` line.
fn produce(stream: &Stream, fixed: bool, tx: mpsc::Sender<Handoff>) -> Result<Site, Error> {
    let mut x = stream.alloc_zeros_named::<f32>("x", N)?;
    ops::spin(stream, SPIN_CYCLES)?; // delays randn: the race shows every time
    let write = next_line!();
    ops::randn(stream, &mut x, SEED)?;
    let ready = if fixed {
        Some(stream.record_event(None)?)
    } else {
        None
    };
    tx.send((x, ready))
        .map_err(|_| Error::Thread("the consumer stopped before receiving x"))?;
    Ok(write)
}

/// The consumer thread: receives `x`, sums it. Returns the `sum` line and the result.
fn consume(stream: &Stream, rx: mpsc::Receiver<Handoff>) -> Result<(Site, Vec<f32>), Error> {
    let (x, ready) = rx
        .recv()
        .map_err(|_| Error::Thread("the producer stopped before sending x"))?;
    if let Some(ready) = &ready {
        stream.wait(ready)?;
    }
    let mut total = stream.alloc_zeros_named::<f32>("total", 1)?;
    let read = next_line!();
    ops::sum(stream, &x, &mut total)?;
    let gpu = stream.clone_dtoh(&total)?; // blocking: the host has the result
    drop((x, total, ready));
    Ok((read, gpu))
}

/// The example: `examples/producer_consumer.rs`.
pub const DEMO: Demo = Demo {
    name: NAME,
    about: "a producer thread enqueues randn on its stream, a consumer thread enqueues sum of it on another.",
    racy_flag: None,
    run,
};

/// Runs the scenario on `ctx`, which must be fresh (no stream made yet).
pub fn run(ctx: &Context, v: Variant) -> Result<Outcome, Error> {
    Kernels::get(ctx)?;
    super::set_tracking(ctx, v);
    let producer = ctx.new_stream_named("producer")?;
    let consumer = ctx.new_stream_named("consumer")?;
    let (tx, rx) = mpsc::channel();
    let (write, consumed) = std::thread::scope(|s| {
        let p = s.spawn(|| produce(&producer, v.fixed, tx));
        let c = s.spawn(|| consume(&consumer, rx));
        let write = p.join().expect("the producer thread panicked");
        let consumed = c.join().expect("the consumer thread panicked");
        (write, consumed)
    });
    let (write, (read, gpu)) = (write?, consumed?);

    // The producer's stream may still be spinning (racy variant).
    ctx.synchronize()?;
    drop((producer, consumer));

    let samples = cpu::randn(SEED, N);
    let (sanitized, findings) = super::findings(ctx);
    Ok(Outcome {
        example: NAME,
        variant: v,
        gpu,
        reference: vec![cpu::sum(&samples)],
        tolerance: Tolerance::for_sum(&samples),
        sanitized,
        findings,
        expected: ExpectedRace::sum_reads_randn_output(read, write),
        notes: Vec::new(),
    })
}
