//! Real cudarc programs we did not write — cudarc 0.19.10's own examples, taken from the cargo
//! registry where the build left them — checked with only their `cudarc::driver` paths changed
//! to `streamsan::cuda` (`docs/migrating-from-cudarc.md`).
//!
//! - `ported_programs_build` (CPU, in CI): writes a scratch crate under
//!   `target/cudarc-programs/` holding each example twice, as cudarc ships it and ported, and
//!   builds them all (`cargo check`; `cargo build --release` with `CUDARC_PROGRAMS_RELEASE=1`,
//!   which also copies the binaries to `target/cudarc-programs/bin/` for the GPU machine).
//! - `ported_programs_behave_as_under_cudarc` (GPU, ignored elsewhere): runs each pair from
//!   `target/cudarc-programs/bin/`: the ported program prints what cudarc's prints, sanitizing
//!   off and with `STREAMSAN=1`, where it reports no race and its trace holds its calls.

use std::path::{Path, PathBuf};
use std::process::Command;

/// cudarc's examples that need only the driver and NVRTC (not cuPTI, cuFile), with the files
/// they read at build or run time, and whether they make a call the sanitizer records
/// (`10-function-attributes` only loads a module and reads its kernels' attributes).
const PROGRAMS: &[(&str, &[&str], bool)] = &[
    ("01-allocate", &[], true),
    ("02-copy", &[], true),
    ("03-launch-kernel", &["sin.ptx"], true),
    ("04-streams", &["sin.ptx"], true),
    ("05-device-repr", &[], true),
    ("06-threading", &[], true),
    ("09-constant-memory", &["constant_memory.cu"], true),
    ("10-function-attributes", &["sin.ptx"], false),
    ("12-context-config", &[], true),
    ("13-copy-multi-gpu", &[], true),
    ("matmul-kernel", &[], true),
];

/// The one change a user makes: the path `cudarc::driver` becomes `streamsan::cuda`. A nested
/// `use cudarc::{driver::{..}, nvrtc::..};` is split so that its `driver` part can change.
fn port(source: &str) -> String {
    let mut out = String::new();
    let mut rest = source;
    while let Some(at) = rest.find("use cudarc::{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "use cudarc::{".len()..];
        let Some(end) = closing_brace(after) else {
            break;
        };
        let (ours, theirs): (Vec<&str>, Vec<&str>) = split_top(&after[..end])
            .into_iter()
            .partition(|item| item == &"driver" || item.starts_with("driver::"));
        let mut lines = Vec::new();
        for item in ours {
            let tail = item.strip_prefix("driver").unwrap_or(item);
            let tail = tail.strip_prefix("::").unwrap_or("self");
            lines.push(format!("use streamsan::cuda::{tail};"));
        }
        if !theirs.is_empty() {
            lines.push(format!("use cudarc::{{{}}};", theirs.join(", ")));
        }
        out.push_str(&lines.join("\n"));
        rest = after[end + 1..]
            .strip_prefix(';')
            .unwrap_or(&after[end + 1..]);
    }
    out.push_str(rest);
    out.replace("cudarc::driver", "streamsan::cuda")
}

/// The index of the `}` closing the group that starts right before `text`.
fn closing_brace(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The comma-separated items of a `use` group, nested groups kept whole, trimmed.
fn split_top(group: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(group[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(group[start..].trim());
    items.retain(|i| !i.is_empty());
    items
}

#[test]
fn porting_changes_only_the_driver_path() {
    let nested = "use cudarc::{\n    driver::{CudaContext, DriverError},\n    nvrtc::Ptx,\n};\nfn main() {}\n";
    assert_eq!(
        port(nested),
        "use streamsan::cuda::{CudaContext, DriverError};\nuse cudarc::{nvrtc::Ptx};\nfn main() {}\n"
    );
    assert_eq!(
        port("use cudarc::{driver::*, nvrtc::compile_ptx};"),
        "use streamsan::cuda::*;\nuse cudarc::{nvrtc::compile_ptx};"
    );
    assert_eq!(
        port("use cudarc::driver::{sys, CudaContext};\nlet n = cudarc::driver::result::init();"),
        "use streamsan::cuda::{sys, CudaContext};\nlet n = streamsan::cuda::result::init();"
    );
    assert_eq!(
        port("use cudarc::nvrtc::Ptx;"),
        "use cudarc::nvrtc::Ptx;",
        "the rest of cudarc stays"
    );
}

/// This repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the scratch crate lives, and its binaries for the GPU machine.
fn scratch() -> PathBuf {
    root().join("target").join("cudarc-programs")
}

/// The version of cudarc this repository builds with (Cargo.lock pins it).
const CUDARC: &str = "cudarc-0.19.10";

/// cudarc's source directory, where the build of this crate unpacked it
/// (`$CARGO_HOME/registry/src/<index>/cudarc-0.19.10`).
fn cudarc_dir() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let src = home.join("registry").join("src");
    std::fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .filter_map(|index| Some(index.ok()?.path().join(CUDARC)))
        .find(|dir| dir.join("examples").is_dir())
        .unwrap_or_else(|| panic!("no {CUDARC} with its examples under {}", src.display()))
}

/// Writes the scratch crate: `cudarc_<name>` is the example as shipped, `streamsan_<name>`
/// the same file ported.
fn write_crate(dir: &Path) {
    let examples = cudarc_dir().join("examples");
    let ex = dir.join("examples");
    std::fs::create_dir_all(&ex).unwrap();
    let mut manifest = format!(
        "[package]\nname = \"cudarc-programs\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [workspace]\n\n[dependencies]\n\
         cudarc = {{ version = \"=0.19.10\", default-features = false, features = [\"std\", \"driver\", \"nvrtc\", \"dynamic-loading\", \"cuda-12080\"] }}\n\
         streamsan = {{ path = {:?} }}\n",
        root().display().to_string()
    );
    for (name, files, _) in PROGRAMS {
        let source = std::fs::read_to_string(examples.join(format!("{name}.rs")))
            .unwrap_or_else(|e| panic!("cudarc's example {name}: {e}"));
        for (prefix, text) in [("cudarc", source.clone()), ("streamsan", port(&source))] {
            let file = format!("{prefix}_{name}.rs");
            std::fs::write(ex.join(&file), text).unwrap();
            manifest.push_str(&format!(
                "\n[[example]]\nname = \"{prefix}_{name}\"\npath = \"examples/{file}\"\n"
            ));
        }
        for f in *files {
            std::fs::copy(examples.join(f), ex.join(f)).unwrap();
        }
    }
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    // The versions this repository builds with, so nothing is resolved anew (and offline).
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
}

#[test]
fn ported_programs_build() {
    let dir = scratch();
    write_crate(&dir);
    let release = std::env::var_os("CUDARC_PROGRAMS_RELEASE").is_some();
    let mut cargo = Command::new(env!("CARGO"));
    if release {
        cargo.args(["build", "--release", "--examples", "--offline"]);
    } else {
        cargo.args(["check", "--examples", "--offline"]);
    }
    let status = cargo
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "the ported cudarc programs do not build");
    if release {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for (name, _, _) in PROGRAMS {
            for prefix in ["cudarc", "streamsan"] {
                let exe = format!("{prefix}_{name}");
                let from = dir.join("target/release/examples").join(&exe);
                std::fs::copy(&from, bin.join(&exe))
                    .unwrap_or_else(|e| panic!("{}: {e}", from.display()));
            }
        }
    }
}

/// What a run printed, line by line in sorted order (`06-threading`'s kernels print from ten
/// threads in any order), with durations masked (matmul prints its timings).
fn masked(text: &[u8]) -> String {
    let text = masked_durations(text);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines.join("\n")
}

/// The distinct lines of `text`, durations masked.
fn distinct(text: &[u8]) -> std::collections::BTreeSet<String> {
    masked_durations(text).lines().map(str::to_string).collect()
}

fn masked_durations(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let mut out = String::new();
    for word in text.split_inclusive(char::is_whitespace) {
        let w = word.trim_end();
        let is_duration = ["ns", "µs", "us", "ms", "s"].iter().any(|u| {
            w.strip_suffix(u)
                .is_some_and(|n| !n.is_empty() && n.parse::<f64>().is_ok())
        });
        if is_duration {
            out.push_str("<duration>");
            out.push_str(&word[w.len()..]);
        } else {
            out.push_str(word);
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA device"]
fn ported_programs_behave_as_under_cudarc() {
    let dir = scratch();
    let bin = dir.join("bin");
    let examples = dir.join("examples");
    assert!(
        bin.is_dir(),
        "no binaries in {}: build them with CUDARC_PROGRAMS_RELEASE=1 cargo test --test \
         cudarc_programs ported_programs_build",
        bin.display()
    );
    let devices = Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(1);
    let out_dir = std::env::var_os("OUT")
        .map_or_else(std::env::temp_dir, PathBuf::from)
        .join("cudarc-traces");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut failures = Vec::new();
    for &(name, _, records) in PROGRAMS {
        let run = |prefix: &str, env: &[(&str, String)]| {
            let mut cmd = Command::new(bin.join(format!("{prefix}_{name}")));
            // The examples read `./examples/...` at run time.
            cmd.current_dir(&dir)
                .env_remove("STREAMSAN")
                .env_remove("STREAMSAN_OPTIONS");
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd.output().expect("the program runs")
        };
        let cudarc = run("cudarc", &[]);
        let off = run("streamsan", &[]);
        let trace = out_dir.join(format!("cudarc-{name}.jsonl"));
        let on = run(
            "streamsan",
            &[
                ("STREAMSAN", "1".into()),
                ("STREAMSAN_OPTIONS", format!("trace={}", trace.display())),
            ],
        );
        let needs_two = name == "13-copy-multi-gpu" && devices < 2;
        println!(
            "{name}: cudarc exit {:?}, ported exit {:?} (off) {:?} (STREAMSAN=1){}",
            cudarc.status.code(),
            off.status.code(),
            on.status.code(),
            if needs_two { ", needs two GPUs" } else { "" }
        );
        let same = |a: &std::process::Output, b: &std::process::Output| {
            a.status.code() == b.status.code() && masked(&a.stdout) == masked(&b.stdout)
        };
        // A kernel's `printf` writes to a buffer of fixed size whose oldest output is
        // overwritten when it fills (CUDA C++ Programming Guide, "Formatted Output"): a program
        // printing more than fits loses lines, a different number each run. Where cudarc's own
        // build prints differently on a second run, the three are compared by the lines they
        // print, not how many times.
        let varies = || masked(&run("cudarc", &[]).stdout) != masked(&cudarc.stdout);
        let same_lines = |a: &std::process::Output, b: &std::process::Output| {
            a.status.code() == b.status.code() && distinct(&a.stdout) == distinct(&b.stdout)
        };
        let differ = !same(&cudarc, &off) || !same(&cudarc, &on);
        if differ && varies() && same_lines(&cudarc, &off) && same_lines(&cudarc, &on) {
            println!(
                "  its prints vary from run to run under cudarc too: compared by distinct lines"
            );
        } else if differ {
            failures.push(format!(
                "{name}: prints differ\n--- cudarc\n{}\n--- ported, off\n{}\n--- ported, STREAMSAN=1\n{}{}",
                masked(&cudarc.stdout),
                masked(&off.stdout),
                masked(&on.stdout),
                String::from_utf8_lossy(&on.stderr)
            ));
            continue;
        }
        if !cudarc.status.success() {
            // It fails under cudarc too (13-copy-multi-gpu on one GPU; 12-context-config where
            // the driver rejects a limit it queries): the same failure is the same behaviour.
            println!(
                "  fails under cudarc as ported: {}",
                String::from_utf8_lossy(&cudarc.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            continue;
        }
        let stderr = String::from_utf8_lossy(&on.stderr);
        if !stderr.contains("SUMMARY: no races") {
            failures.push(format!("{name}: STREAMSAN=1 reported:\n{stderr}"));
        }
        // The trace holds the program's calls, located in its source.
        let trace_text = std::fs::read_to_string(&trace).unwrap_or_default();
        let source = format!("streamsan_{name}.rs");
        let calls = trace_text.lines().filter(|l| l.contains(&source)).count();
        if records && calls == 0 {
            failures.push(format!("{name}: the trace holds no call of {source}"));
        }
        let check = Command::new(root().join(".gpu-bundle/bin/streamsan"))
            .arg("check")
            .arg(&trace)
            .output();
        if let Ok(check) = check
            && !check.status.success()
        {
            failures.push(format!(
                "{name}: streamsan check of its trace: {}",
                String::from_utf8_lossy(&check.stdout)
            ));
        }
        println!(
            "  {calls} records at its call sites; {}",
            examples.display()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
