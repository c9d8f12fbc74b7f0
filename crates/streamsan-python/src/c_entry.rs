//! A C entry into [`Session`] for the PyTorch front end's native recorder
//! (`python/streamsan/torch/_observer.cpp`): the three records it makes per operator (the new
//! output's `alloc`, the `launch`, the old output's `free`) with plain integers and borrowed
//! UTF-8, where the Python methods would build and parse a tuple per access and copy every
//! string twice. The records are the same; errors are the same Python exceptions.
//!
//! The module attribute `_c_api` is a capsule named `streamsan._native._c_api` holding a
//! [`CApi`]. Every function is called with the GIL held (the observer holds it), takes the
//! Session as a borrowed `PyObject*`, returns 0, or -1 with the Python error set.

use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use streamsan::trace::record::{Access, ByteRange, MemSpace, Op, Pool};

use crate::Session;
use crate::parts::Parts;

/// The capsule's name, as `PyCapsule_Import` finds it.
pub const CAPSULE: &CStr = c"streamsan._native._c_api";
/// Bumped when [`CApi`] changes; the observer refuses another.
pub const VERSION: u32 = 1;

/// One access: `buf`'s bytes `[off, off + len)`, its argument label (UTF-8, may be null).
#[repr(C)]
pub struct CAccess {
    pub buf: u64,
    pub off: u64,
    pub len: u64,
    pub label: *const c_char,
    pub label_len: usize,
}

/// A source line `at` (UTF-8, null for none) is passed as `(at, at_len)` everywhere.
#[repr(C)]
pub struct CApi {
    pub version: u32,
    /// `alloc` of a caching-allocator block of device memory (`space: "device"`, `pool:
    /// "caching"`, no name), in the pool of `stream`, at `addr`.
    pub alloc: unsafe extern "C" fn(
        session: *mut ffi::PyObject,
        buf: u64,
        bytes: u64,
        device: u32,
        stream: u64,
        addr: u64,
        thread: u64,
        at: *const c_char,
        at_len: usize,
    ) -> c_int,
    /// `launch` of kernel `name` on `stream`.
    pub launch: unsafe extern "C" fn(
        session: *mut ffi::PyObject,
        stream: u64,
        name: *const c_char,
        name_len: usize,
        reads: *const CAccess,
        n_reads: usize,
        writes: *const CAccess,
        n_writes: usize,
        thread: u64,
        at: *const c_char,
        at_len: usize,
    ) -> c_int,
    /// `free` of `buf` by the host (no stream).
    pub free: unsafe extern "C" fn(
        session: *mut ffi::PyObject,
        buf: u64,
        thread: u64,
        at: *const c_char,
        at_len: usize,
    ) -> c_int,
}

/// The capsule for the module attribute `_c_api`.
pub fn capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let api = CApi {
        version: VERSION,
        alloc: c_alloc,
        launch: c_launch,
        free: c_free,
    };
    PyCapsule::new(py, api, Some(CAPSULE.to_owned()))
}

/// An owned string from borrowed UTF-8 (`None` for null), in one of `parts`' strings.
///
/// # Safety
/// `ptr` is null or points to `len` bytes.
unsafe fn text(parts: &mut Parts, ptr: *const c_char, len: usize) -> PyResult<Option<String>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes `len` readable bytes at `ptr`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(Some(parts.string(s))),
        Err(e) => Err(PyTypeError::new_err(format!("not UTF-8: {e}"))),
    }
}

/// The accesses of a `(pointer, count)` array, in one of `parts`' lists.
///
/// # Safety
/// `list` points to `n` [`CAccess`] (or `n` is 0), each label as [`text`] requires.
unsafe fn accesses(parts: &mut Parts, list: *const CAccess, n: usize) -> PyResult<Vec<Access>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller passes `n` accesses at `list`.
    let list = unsafe { std::slice::from_raw_parts(list, n) };
    let mut out = parts.list(n);
    for a in list {
        out.push(Access {
            buf: a.buf,
            range: Some(ByteRange {
                off: a.off,
                len: a.len,
            }),
            // SAFETY: as the caller promises for each label.
            arg: unsafe { text(parts, a.label, a.label_len) }?,
        });
    }
    Ok(out)
}

/// Runs `f` on the Session behind `session`, with the GIL the caller holds; a Python error or
/// a panic becomes the Python error set and -1.
///
/// # Safety
/// The GIL is held and `session` is a valid borrowed reference.
unsafe fn with_session(
    session: *mut ffi::PyObject,
    f: impl FnOnce(&Session) -> PyResult<()>,
) -> c_int {
    // SAFETY: the caller holds the GIL.
    let py = unsafe { Python::assume_attached() };
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: a valid borrowed reference, as the caller promises.
        let object = unsafe { Bound::from_borrowed_ptr(py, session) };
        let session = object.cast::<Session>()?;
        f(&session.borrow())
    }));
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            e.restore(py);
            -1
        }
        Err(_) => {
            PyRuntimeError::new_err("streamsan: a panic in the C entry (a bug)").restore(py);
            -1
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn c_alloc(
    session: *mut ffi::PyObject,
    buf: u64,
    bytes: u64,
    device: u32,
    stream: u64,
    addr: u64,
    thread: u64,
    at: *const c_char,
    at_len: usize,
) -> c_int {
    // SAFETY: the observer's contract (module doc): GIL held, valid arguments.
    unsafe {
        with_session(session, |s| {
            let op = Op::Alloc {
                buf,
                bytes,
                device,
                space: MemSpace::Device,
                stream: Some(stream),
                addr: Some(addr),
                pool: Pool::Caching,
            };
            let at = text(&mut s.parts(), at, at_len)?;
            s.take(op, None, thread, at)
        })
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn c_launch(
    session: *mut ffi::PyObject,
    stream: u64,
    name: *const c_char,
    name_len: usize,
    reads: *const CAccess,
    n_reads: usize,
    writes: *const CAccess,
    n_writes: usize,
    thread: u64,
    at: *const c_char,
    at_len: usize,
) -> c_int {
    // SAFETY: the observer's contract (module doc): GIL held, valid arguments.
    unsafe {
        with_session(session, |s| {
            let (op, name, at) = {
                let parts = &mut s.parts();
                let op = Op::Launch {
                    stream,
                    reads: accesses(parts, reads, n_reads)?,
                    writes: accesses(parts, writes, n_writes)?,
                    atomics: Vec::new(),
                };
                (op, text(parts, name, name_len)?, text(parts, at, at_len)?)
            };
            s.take(op, name, thread, at)
        })
    }
}

unsafe extern "C" fn c_free(
    session: *mut ffi::PyObject,
    buf: u64,
    thread: u64,
    at: *const c_char,
    at_len: usize,
) -> c_int {
    // SAFETY: the observer's contract (module doc): GIL held, valid arguments.
    unsafe {
        with_session(session, |s| {
            let at = text(&mut s.parts(), at, at_len)?;
            s.take(Op::Free { buf, stream: None }, None, thread, at)
        })
    }
}
