//! Where a sanitizer's trace lines go, so that a crash of the host program loses at most the
//! call in progress.
//!
//! A trace file is written through a shared memory mapping on Linux ([`Mapped`]): the lines of
//! a call are copied into the mapped file, which puts them in the kernel's page cache at once.
//! A mapped page belongs to the file, not to the process, so whatever ends the process — a
//! panic, `abort`, `exit`, SIGKILL — every line copied is in the file; only a crash of the
//! machine itself can lose what the kernel has not written back yet, as with `write`. This
//! costs a copy per call instead of a system call per call (about a microsecond in a VM).
//! Ahead of the lines, the file is extended in chunks by writing spaces (so its blocks are
//! allocated: a full disk is an error here rather than a `SIGBUS` on a later copy), and only
//! then mapped: the file only ever grows by spaces, so a file left by a crash, even one in
//! the middle of an extension, ends in one unterminated blank line, which the trace reader
//! skips. A clean end cuts the file at its last line. The file grows in consecutive windows,
//! each prepared by a thread of its own ([`ahead`]) while the program fills the one before:
//! growing the file on the program's thread took about 0.2 µs per launch with a trace.
//!
//! Anywhere else, and for the sinks of [`super::Sanitizer::with_outputs`], each call's lines
//! go out in one `write_all` on the unbuffered writer (one `write` system call for a `File`,
//! which a signal does not split in practice).

use std::fs::File;
use std::io::{self, Write};
#[cfg(target_os = "linux")]
use std::sync::Arc;

#[cfg(target_os = "linux")]
mod ahead;
#[cfg(target_os = "linux")]
mod window;

#[cfg(target_os = "linux")]
use ahead::Ahead;
#[cfg(target_os = "linux")]
use window::Window;

/// Creates (or truncates) a trace file, open for reading too, as a shared writable mapping
/// needs.
pub(crate) fn create(path: &std::path::Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

/// A trace's destination.
pub(crate) enum TraceSink {
    /// Any writer: one `write_all` (and a `flush`) per call.
    Writer(Box<dyn Write + Send>),
    /// A file mapped in memory.
    #[cfg(target_os = "linux")]
    Mapped(Mapped),
}

impl TraceSink {
    /// The sink for a trace file whose header is written: mapped where that works.
    pub(crate) fn file(file: File) -> TraceSink {
        #[cfg(target_os = "linux")]
        {
            match Mapped::new(file, CHUNK) {
                Ok(mapped) => TraceSink::Mapped(mapped),
                Err((file, e)) => {
                    tracing::debug!("trace file not mapped ({e}); writing it instead");
                    TraceSink::Writer(Box::new(file))
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            TraceSink::Writer(Box::new(file))
        }
    }

    /// Appends whole lines.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            TraceSink::Writer(w) => w.write_all(bytes).and_then(|()| w.flush()),
            #[cfg(target_os = "linux")]
            TraceSink::Mapped(m) => m.append(bytes),
        }
    }

    /// Ends the trace: a mapped file is cut at its last line.
    pub(crate) fn close(&mut self) -> io::Result<()> {
        match self {
            TraceSink::Writer(w) => w.flush(),
            #[cfg(target_os = "linux")]
            TraceSink::Mapped(m) => m.close(),
        }
    }
}

/// How much the mapped file grows at a time.
#[cfg(target_os = "linux")]
const CHUNK: usize = 8 << 20;

/// Mapping offsets are multiples of this (a multiple of every page size Linux uses).
#[cfg(target_os = "linux")]
const ALIGN: u64 = 1 << 16;

/// A file written through shared mappings of consecutive windows of it, the next window
/// prepared by [`Ahead`] while the program fills the current one. See the module docs.
#[cfg(target_os = "linux")]
pub(crate) struct Mapped {
    file: Arc<File>,
    /// The window being filled; none after an error, or once closed.
    window: Option<Window>,
    /// The file offset of that window (kept after an error: the lines end at `base + used`).
    base: u64,
    /// Bytes of the window holding lines; the rest are spaces.
    used: usize,
    /// Where appends leave the fast path: half the window, until the next window is asked
    /// for, then the window's end.
    limit: usize,
    ahead: Ahead,
    closed: bool,
    /// Where the window's lines asked for with intent to write end ([`PREFETCH`]).
    prefetched: usize,
}

/// How far past the last line the window's cache lines are asked for ahead of the copies, so
/// that a copy finds them in the cache: about two launches' lines with cudarc's tracking on
/// (five lines, about 520 bytes).
#[cfg(target_os = "linux")]
const PREFETCH: usize = 1024;

#[cfg(target_os = "linux")]
impl Mapped {
    /// Maps the end of `file` (written so far with `write`), growing `chunk` bytes at a time.
    /// Gives the file back when it cannot be mapped.
    pub(crate) fn new(file: File, chunk: usize) -> Result<Mapped, (File, io::Error)> {
        let end = match file.metadata() {
            Ok(m) => m.len(),
            Err(e) => return Err((file, e)),
        };
        let chunk = chunk.next_multiple_of(ALIGN as usize);
        let base = end - end % ALIGN;
        let head = (end - base) as usize;
        let len = (head + 1).next_multiple_of(chunk);
        match Window::map(&file, base, len, head) {
            Ok(window) => {
                let file = Arc::new(file);
                let ahead = Ahead::start(Arc::clone(&file), chunk);
                Ok(Mapped {
                    file,
                    limit: window.len / 2,
                    window: Some(window),
                    base,
                    used: head,
                    ahead,
                    closed: false,
                    prefetched: head,
                })
            }
            Err(e) => {
                let _ = file.set_len(end);
                Err((file, e))
            }
        }
    }

    /// Copies `bytes` (whole lines) after the last line: into the current window, and the
    /// next ones where they do not fit (a kill between two copies cuts the last line short,
    /// as a kill during one copy would). The next window is there before anything is copied,
    /// so a file that cannot grow keeps whole lines.
    pub(crate) fn append(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        if self.ahead.forked() {
            return Err(ahead::forked_error());
        }
        if self.closed {
            return Err(io::Error::other("the trace is closed"));
        }
        // Where the call's lines start: the file is cut there if it cannot grow.
        let start = (self.base, self.used);
        loop {
            let Some(window) = &mut self.window else {
                return Err(io::Error::other("the trace file could not grow earlier"));
            };
            if self.used + bytes.len() <= self.limit {
                window.copy_at(self.used, bytes);
                self.used += bytes.len();
                self.prefetched =
                    window.prefetch_for_write(self.prefetched.max(self.used), self.used + PREFETCH);
                return Ok(());
            }
            if self.limit < window.len {
                // Half full: the next window starts being prepared.
                self.ahead.ask(window.end());
                self.limit = window.len;
                continue;
            }
            let room = window.len - self.used;
            let next = match self.ahead.next(window.end()) {
                Ok(next) => next,
                Err(e) => {
                    // A call longer than a window may have copied part of its lines already.
                    self.window = None;
                    (self.base, self.used) = start;
                    return Err(e);
                }
            };
            window.copy_at(self.used, &bytes[..room]);
            bytes = &bytes[room..];
            let half = next.len / 2;
            let done = std::mem::replace(window, next);
            (self.base, self.used, self.limit, self.prefetched) = (done.end(), 0, half, 0);
            self.ahead.retire(done);
        }
    }

    /// Unmaps the file and cuts it after the last line.
    pub(crate) fn close(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if self.ahead.forked() {
            // The parent's file: cutting it would take the parent's mapped pages away.
            self.window = None;
            return Ok(());
        }
        // After the helper thread: it may still be growing the file.
        self.ahead.stop();
        self.window = None;
        self.file.set_len(self.base + self.used as u64)
    }
}

#[cfg(target_os = "linux")]
impl Drop for Mapped {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    const HEADER: &[u8] = b"{\"streamsan_trace\":1}\n";
    const SYNC: &[u8] = b"{\"op\":\"device_sync\"}\n";

    /// A new trace file holding [`HEADER`], mapped in windows of 64 KiB.
    fn mapped(name: &str) -> (std::path::PathBuf, Mapped) {
        let path = temp(name);
        let mut file = create(&path).unwrap();
        file.write_all(HEADER).unwrap();
        let mapped = Mapped::new(file, 1 << 16).map_err(|e| e.1).unwrap();
        (path, mapped)
    }

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("streamsan-mapped-{name}-{}", std::process::id()))
    }

    fn lines(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{{\"op\":\"device_sync\",\"device\":{i}}}\n").into_bytes())
            .collect()
    }

    #[test]
    fn lines_cross_chunks_and_a_clean_end_cuts_the_file() {
        let (path, mut mapped) = mapped("clean");
        let mut expected = HEADER.to_vec();
        // About 200 KiB: several chunks of 64 KiB, lines straddling their boundaries.
        for line in lines(6000) {
            mapped.append(&line).unwrap();
            expected.extend_from_slice(&line);
        }
        // One append larger than a chunk.
        let big: Vec<u8> = lines(3000).concat();
        mapped.append(&big).unwrap();
        expected.extend_from_slice(&big);
        mapped.close().unwrap();
        assert!(mapped.append(b"x\n").is_err());
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn the_bytes_after_the_last_line_are_asked_for_within_the_window() {
        let (path, mut mapped) = mapped("prefetch");
        // About 200 KiB: several windows of 64 KiB, the frontier reset at each.
        for line in lines(6000) {
            mapped.append(&line).unwrap();
            let len = mapped.window.as_ref().unwrap().len;
            assert_eq!(mapped.prefetched, (mapped.used + PREFETCH).min(len));
        }
        mapped.close().unwrap();
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_file_left_by_a_crash_ends_in_blank_space_the_reader_skips() {
        let (path, mut mapped) = mapped("crash");
        // Past the first window: the second is the one prepared ahead.
        for line in lines(3000) {
            mapped.append(&line).unwrap();
        }
        // No close, no drop: as if the process died here (the helper thread may still be
        // growing the file: by spaces only).
        std::mem::forget(mapped);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.len() >= 2 << 16, "{}", bytes.len());
        let lines_end = bytes.iter().rposition(|&b| b == b'\n').unwrap() + 1;
        assert!(bytes[lines_end..].iter().all(|&b| b == b' '));
        assert!(bytes[..lines_end].ends_with(b"}\n"));
        let records: Vec<_> = crate::trace::TraceReader::open(path.to_str().unwrap())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records.len(), 3000);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn the_next_window_is_prepared_once_the_current_one_is_half_full() {
        let (path, mut mapped) = mapped("ahead");
        let size = || std::fs::metadata(&path).unwrap().len();
        let mut expected = HEADER.to_vec();
        // Up to half the window: nothing asked for, the file is one window long.
        while expected.len() + SYNC.len() <= 1 << 15 {
            mapped.append(SYNC).unwrap();
            expected.extend_from_slice(SYNC);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(size(), 1 << 16);
        // Past half: the helper thread extends the file by the second window, in spaces.
        mapped.append(SYNC).unwrap();
        expected.extend_from_slice(SYNC);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while size() < 2 << 16 {
            assert!(std::time::Instant::now() < deadline, "no second window");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..expected.len()], &expected[..]);
        assert!(bytes[expected.len()..].iter().all(|&b| b == b' '));
        mapped.close().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_child_made_by_fork_neither_writes_nor_cuts_its_parents_file() {
        let (path, mut mapped) = mapped("forked");
        mapped.append(SYNC).unwrap();
        // As in a child: forks counted since the file was opened.
        mapped.ahead.pretend_forked();
        let err = mapped.append(SYNC).unwrap_err();
        assert!(err.to_string().contains("fork"), "{err}");
        // The child's end leaves the file as the parent has it: one window, not cut.
        mapped.close().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 1 << 16);
        let lines = [HEADER, SYNC].concat();
        assert!(bytes.starts_with(&lines));
        assert!(bytes[lines.len()..].iter().all(|&b| b == b' '));
        let _ = std::fs::remove_file(path);
    }

    /// A file that cannot grow after `windows` more windows, given lines up to `bytes_before`
    /// bytes, then one call of `call` lines: the call fails, the trace stops, and a clean end
    /// cuts the file after the lines before the call.
    fn growth_fails(windows: usize, bytes_before: usize, call: usize) {
        let (path, mut mapped) = mapped(&format!("full-{windows}-{bytes_before}-{call}"));
        mapped.ahead.fail_after = Some(windows);
        let mut expected = HEADER.to_vec();
        for line in lines(bytes_before / 30) {
            if expected.len() + line.len() > bytes_before {
                break;
            }
            mapped.append(&line).unwrap();
            expected.extend_from_slice(&line);
        }
        let call = lines(call).concat();
        assert!(
            expected.len() + call.len() > (windows + 1) << 16,
            "the call needs a window more"
        );
        let err = mapped.append(&call).unwrap_err();
        assert!(err.to_string().contains("no space"), "{err}");
        assert!(mapped.append(b"{}\n").is_err(), "the trace stops");
        mapped.close().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_file_that_cannot_grow_keeps_whole_lines() {
        // Lines of 31 to 35 bytes, windows of 64 KiB. A call across the end of the first
        // window, when the second cannot be made:
        growth_fails(0, (1 << 16) - 1000, 100);
        // A call longer than a window, when the second can be made and the third cannot
        // (part of the call is copied by then):
        growth_fails(1, 3000, 5000);
    }

    #[test]
    fn a_sink_for_a_file_maps_it() {
        let path = temp("sink");
        let mut file = create(&path).unwrap();
        file.write_all(HEADER).unwrap();
        let mut sink = TraceSink::file(file);
        assert!(matches!(sink, TraceSink::Mapped(_)));
        sink.append(SYNC).unwrap();
        sink.close().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), [HEADER, SYNC].concat());
        let _ = std::fs::remove_file(path);
    }
}
