//! What the benchmarks print of the machine they ran on.

/// The CPU's model name and how many logical CPUs there are.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    format!(
        "{cpu}, {} logical cpus",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )
}
