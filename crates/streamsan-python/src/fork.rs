//! Sessions' checker threads paused around `fork()`.
//!
//! Why: a forked child has only the thread that forked. A checker thread holding a session's
//! lock at that moment would leave it locked in the child for good (a DataLoader worker, or a
//! `multiprocessing` child, then hangs at its first query or at exit). So before any fork
//! (Python's `os.fork`, `multiprocessing`, or C code calling `fork()`), every session's thread
//! checks what it had queued and ends; the parent starts it again, and the child checks within
//! each call.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, Once, Weak};

use crate::checker::Checker;

static SESSIONS: Mutex<Vec<Weak<Checker>>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

thread_local! {
    /// The sessions `prepare` paused, for the handlers after the fork (same thread).
    static PAUSED: RefCell<Vec<Arc<Checker>>> = const { RefCell::new(Vec::new()) };
}

/// Pauses `checker`'s thread around every later fork of this process.
pub fn register(checker: &Arc<Checker>) {
    INSTALL.call_once(|| {
        // SAFETY: the handlers are plain functions that live as long as the process.
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
        }
    });
    let mut sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    sessions.retain(|s| s.strong_count() > 0);
    sessions.push(Arc::downgrade(checker));
}

extern "C" fn prepare() {
    let sessions: Vec<Arc<Checker>> = SESSIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let paused = sessions.into_iter().filter(|c| c.pause()).collect();
    PAUSED.with(|p| *p.borrow_mut() = paused);
}

extern "C" fn parent() {
    for checker in PAUSED.with(|p| std::mem::take(&mut *p.borrow_mut())) {
        // Unable to start a thread, the session checks within each call.
        let _ = checker.resume();
    }
}

extern "C" fn child() {
    for checker in PAUSED.with(|p| std::mem::take(&mut *p.borrow_mut())) {
        checker.forked();
    }
}
