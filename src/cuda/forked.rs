//! Whether this process is a child made by `fork` since a sanitizer (or its trace file) was
//! made. A child has no checker thread to wait for, must leave the sanitizer's end to the
//! parent, and shares the parent's mapping of the trace file (`MAP_SHARED` survives `fork`):
//! its lines would land where the parent writes its own, and cutting the file would take the
//! parent's pages away (a `SIGBUS` in the parent). A fork handler counts forks in the child,
//! so the check on every trace append is one atomic load, not a `getpid` system call.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

/// Forks this process came out of as the child, since the handler was registered.
static FORKS: AtomicU64 = AtomicU64::new(0);

#[cfg(unix)]
unsafe extern "C" {
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> i32;
}

/// Runs in the child right after `fork` (only async-signal-safe work: an atomic add).
#[cfg(unix)]
extern "C" fn in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The process something was made in: [`Born::forked`] tells a child made since.
#[derive(Debug)]
pub(crate) struct Born(u64);

impl Born {
    pub(crate) fn now() -> Born {
        static REGISTER: Once = Once::new();
        // SAFETY: registers a handler that only adds to an atomic; the result is checked.
        #[cfg(unix)]
        REGISTER.call_once(|| {
            if unsafe { pthread_atfork(None, None, Some(in_child)) } != 0 {
                tracing::debug!("no fork handler: a forked child may write its parent's trace");
            }
        });
        Born(FORKS.load(Ordering::Relaxed))
    }

    /// True in a child made by `fork` after [`Born::now`].
    #[inline]
    pub(crate) fn forked(&self) -> bool {
        FORKS.load(Ordering::Relaxed) != self.0
    }

    /// Acts as in a child made by `fork` (for unit tests, which run in the harness's process).
    #[cfg(test)]
    pub(crate) fn pretend_forked(&mut self) {
        self.0 = self.0.wrapping_sub(1);
    }
}
