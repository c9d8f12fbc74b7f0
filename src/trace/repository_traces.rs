//! The trace files this repository holds (the corpus, the GPU fixtures, the CLI's cases, the
//! examples), for tests that hold a property over every real trace.

use std::path::{Path, PathBuf};

/// Every `.jsonl` file under `tests/` and `examples/`, in path order.
pub(crate) fn repository_traces() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    traces_under(&root.join("tests"), &mut files);
    traces_under(&root.join("examples"), &mut files);
    files.sort();
    files
}

/// Every `.jsonl` file under `dir`, recursively.
fn traces_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            traces_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            out.push(path);
        }
    }
}
