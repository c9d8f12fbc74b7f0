use std::time::Instant;
use streamsan::engine::{Engine, Finding};
use streamsan::synth::{SynthConfig, records};
fn main() {
    let recs: Vec<_> = records(SynthConfig::default())
        .take(
            std::env::var("N")
                .map(|n| n.parse().unwrap())
                .unwrap_or(1_000_000),
        )
        .collect();
    for _ in 0..3 {
        let mut e = Engine::new();
        let mut races = 0u64;
        let t = Instant::now();
        for r in &recs {
            e.apply(r, &mut |f| {
                if let Finding::Race(_) = f {
                    races += 1
                }
            })
            .unwrap();
        }
        let dt = t.elapsed().as_secs_f64();
        println!(
            "{:.2} M rec/s, races {races}, warnings {}",
            recs.len() as f64 / dt / 1e6,
            e.stats().warnings
        );
    }
}
