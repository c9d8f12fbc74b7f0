//! A window of a trace file mapped shared, and how one is made: the file is first extended
//! with spaces over the window's bytes, then mapped (see the parent module's docs).

use std::fs::File;
use std::io;

mod sys {
    //! The libc calls a mapping needs (libc is linked by std on Linux).
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

/// Bytes `[base, base + len)` of a file, mapped shared and writable; unmapped when dropped.
#[derive(Debug)]
pub(super) struct Window {
    /// The file offset of the first byte (page aligned).
    pub(super) base: u64,
    ptr: *mut u8,
    pub(super) len: usize,
}

// SAFETY: the mapping is owned by this value alone; it is written only through `&mut self`,
// and unmapping it from another thread (the one that prepares windows) is allowed.
unsafe impl Send for Window {}

impl Window {
    /// Fills bytes `[base + head, base + len)` of `file` with spaces (extending it), then maps
    /// `[base, base + len)`. Writing the spaces before the mapping, rather than extending the
    /// file and filling the mapping, means no moment in which the file ends in zeros, which a
    /// kill at that moment would leave.
    pub(super) fn map(file: &File, base: u64, len: usize, head: usize) -> io::Result<Window> {
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
        // Map every page writable now, in one call, rather than at each page's first copy on
        // the program's thread (a write fault per page: copies took three times as long in a
        // VM). Where the kernel does not know the advice, pages are mapped at first write.
        // SAFETY: advice on the mapping just made; it changes no byte of it.
        unsafe { sys::madvise(ptr, len, sys::MADV_POPULATE_WRITE) };
        Ok(Window {
            base,
            ptr: ptr.cast::<u8>(),
            len,
        })
    }

    /// The file offset just past the window.
    pub(super) fn end(&self) -> u64 {
        self.base + self.len as u64
    }

    /// Copies `bytes` to offset `at` of the window.
    pub(super) fn copy_at(&mut self, at: usize, bytes: &[u8]) {
        assert!(
            at.checked_add(bytes.len())
                .is_some_and(|end| end <= self.len),
            "a copy inside the window"
        );
        // SAFETY: `[at, at + bytes.len())` lies inside the mapping (checked above), which does
        // not overlap `bytes` (a slice of this process's heap or stack, not of the mapping).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(at), bytes.len()) };
    }

    /// Asks the CPU for the cache lines of bytes `[from, to)` of the window (as far as it
    /// reaches) to write them ([`crate::cuda::prefetch`]), and gives where the lines asked for
    /// end. Later calls' lines are copied there: without this, each copy waited for its lines
    /// to come from memory, and the next atomic operation (the sanitizer's unlock) waited for
    /// the copy's stores.
    #[inline]
    pub(super) fn prefetch_for_write(&self, from: usize, to: usize) -> usize {
        let to = to.min(self.len);
        if from < to {
            // `[from, to)` lies inside the mapping.
            crate::cuda::prefetch::for_write(self.ptr.wrapping_add(from), to - from);
        }
        to.max(from)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: `ptr` / `len` are the mapping `map` made, unmapped only here.
        unsafe { sys::munmap(self.ptr.cast(), self.len) };
    }
}
