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
//! skips. A clean end cuts the file at its last line.
//!
//! Anywhere else, and for the sinks of [`super::Sanitizer::with_outputs`], each call's lines
//! go out in one `write_all` on the unbuffered writer (one `write` system call for a `File`,
//! which a signal does not split in practice).

use std::fs::File;
use std::io::{self, Write};

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

#[cfg(target_os = "linux")]
mod sys {
    //! The two libc calls the mapping needs (libc is linked by std on Linux).
    use std::ffi::c_void;

    pub const PROT_READ: i32 = 1;
    pub const PROT_WRITE: i32 = 2;
    pub const MAP_SHARED: i32 = 1;
    pub const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
    /// Linux 5.14 and later; older kernels refuse it (`EINVAL`), which changes nothing.
    pub const MADV_POPULATE_WRITE: i32 = 23;

    unsafe extern "C" {
        pub fn mmap(
            addr: *mut c_void,
            len: usize,
            prot: i32,
            flags: i32,
            fd: i32,
            offset: i64,
        ) -> *mut c_void;
        pub fn munmap(addr: *mut c_void, len: usize) -> i32;
        pub fn madvise(addr: *mut c_void, len: usize, advice: i32) -> i32;
    }
}

/// A file written through a shared mapping of its tail. See the module docs.
#[cfg(target_os = "linux")]
pub(crate) struct Mapped {
    file: File,
    /// Growth step.
    chunk: usize,
    /// The file offset of the mapping's first byte (a multiple of [`ALIGN`]).
    base: u64,
    /// The mapping (null when none).
    ptr: *mut u8,
    len: usize,
    /// Bytes of the mapping holding lines; the rest are spaces.
    used: usize,
    closed: bool,
}

// SAFETY: the mapping is owned by this value and only touched through `&mut self`.
#[cfg(target_os = "linux")]
unsafe impl Send for Mapped {}

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
        match map(&file, base, len, head) {
            Ok(ptr) => Ok(Mapped {
                file,
                chunk,
                base,
                ptr,
                len,
                used: head,
                closed: false,
            }),
            Err(e) => {
                let _ = file.set_len(end);
                Err((file, e))
            }
        }
    }

    /// The file offset after the last line.
    fn end(&self) -> u64 {
        self.base + self.used as u64
    }

    fn unmap(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` / `len` are a mapping made by `map` and not unmapped since.
            unsafe { sys::munmap(self.ptr.cast(), self.len) };
            self.ptr = std::ptr::null_mut();
            self.len = 0;
        }
    }

    /// Maps a new window from the last line's [`ALIGN`] block, with room for `need` more bytes.
    fn remap(&mut self, need: usize) -> io::Result<()> {
        let end = self.end();
        let base = end - end % ALIGN;
        let head = (end - base) as usize;
        let len = (head + need + 1).next_multiple_of(self.chunk);
        self.unmap();
        self.ptr = map(&self.file, base, len, head)?;
        self.len = len;
        self.base = base;
        self.used = head;
        Ok(())
    }

    /// Copies `bytes` (whole lines) after the last line.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.closed {
            return Err(io::Error::other("the trace is closed"));
        }
        if self.len - self.used < bytes.len() {
            self.remap(bytes.len())?;
        }
        // SAFETY: `[used, used + bytes.len())` lies inside the mapping (checked above), which
        // does not overlap `bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(self.used), bytes.len())
        };
        self.used += bytes.len();
        Ok(())
    }

    /// Unmaps the file and cuts it after the last line.
    pub(crate) fn close(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let end = self.end();
        self.unmap();
        self.file.set_len(end)
    }
}

/// Fills bytes `[base + head, base + len)` of `file` with spaces (extending it), then maps
/// `[base, base + len)` shared. Writing the spaces before the mapping, rather than extending
/// the file and filling the mapping, means no moment in which the file ends in zeros, which
/// a kill at that moment would leave.
#[cfg(target_os = "linux")]
fn map(file: &File, base: u64, len: usize, head: usize) -> io::Result<*mut u8> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    static SPACES: [u8; 1 << 16] = [b' '; 1 << 16];
    let mut at = head;
    while at < len {
        let n = (len - at).min(SPACES.len());
        file.write_all_at(&SPACES[..n], base + at as u64)?;
        at += n;
    }
    // SAFETY: a new shared mapping of written bytes of the file; the result is checked.
    let ptr = unsafe {
        sys::mmap(
            std::ptr::null_mut(),
            len,
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_SHARED,
            file.as_raw_fd(),
            base as i64,
        )
    };
    if ptr == sys::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // Map every page writable now, in one call, rather than at each page's first copy on the
    // program's thread (a write fault per page: copies took three times as long in a VM).
    // Where the kernel does not know the advice, pages are mapped at first write as before.
    // SAFETY: advice on the mapping just made; it changes no byte of it.
    unsafe { sys::madvise(ptr, len, sys::MADV_POPULATE_WRITE) };
    Ok(ptr.cast::<u8>())
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
        let path = temp("clean");
        let mut file = create(&path).unwrap();
        file.write_all(b"{\"streamsan_trace\":1}\n").unwrap();
        let mut mapped = Mapped::new(file, 1 << 16).map_err(|e| e.1).unwrap();
        let mut expected = b"{\"streamsan_trace\":1}\n".to_vec();
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
    fn a_file_left_by_a_crash_ends_in_blank_space_the_reader_skips() {
        let path = temp("crash");
        let mut file = create(&path).unwrap();
        file.write_all(b"{\"streamsan_trace\":1}\n").unwrap();
        let mut mapped = Mapped::new(file, 1 << 16).map_err(|e| e.1).unwrap();
        for line in lines(100) {
            mapped.append(&line).unwrap();
        }
        // No close, no drop: as if the process died here.
        std::mem::forget(mapped);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 1 << 16);
        let lines_end = bytes.iter().rposition(|&b| b == b'\n').unwrap() + 1;
        assert!(bytes[lines_end..].iter().all(|&b| b == b' '));
        assert!(bytes[..lines_end].ends_with(b"}\n"));
        let records: Vec<_> = crate::trace::TraceReader::open(path.to_str().unwrap())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records.len(), 100);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_sink_for_a_file_maps_it() {
        let path = temp("sink");
        let mut file = create(&path).unwrap();
        file.write_all(b"{\"streamsan_trace\":1}\n").unwrap();
        let mut sink = TraceSink::file(file);
        assert!(matches!(sink, TraceSink::Mapped(_)));
        sink.append(b"{\"op\":\"device_sync\"}\n").unwrap();
        sink.close().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"streamsan_trace\":1}\n{\"op\":\"device_sync\"}\n"
        );
        let _ = std::fs::remove_file(path);
    }
}
