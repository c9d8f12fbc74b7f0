//! The next window of a trace file, prepared on a thread of its own while the program fills the
//! current one. Growing the file (writing a window of spaces, mapping it, and unmapping the
//! window before) on the program's thread took 30% of its time in a loop of launches with a
//! trace under the do-nothing driver, about 0.2 µs per launch, all of it in the kernel, where
//! instruction counts do not see it (docs/performance.md, "Tenth round").

use std::fs::File;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::window::Window;
use crate::cuda::forked::Born;

/// What the owner of a trace file and its helper thread share.
#[derive(Default)]
struct Slot {
    /// The file offset of the window to prepare next, once asked and until begun.
    want: Option<u64>,
    /// The window prepared, or why it could not be.
    ready: Option<io::Result<Window>>,
    /// Windows the owner is done with, to unmap.
    retired: Vec<Window>,
    stop: bool,
}

struct Shared {
    slot: Mutex<Slot>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        // Nothing panics while holding the lock; a poisoned slot is still consistent.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Windows of `chunk` bytes, each prepared while the one before it is filled (asked for once
/// that one is half full).
pub(super) struct Ahead {
    file: Arc<File>,
    chunk: usize,
    /// The helper thread and what it shares; none where it could not be started.
    helper: Option<(Arc<Shared>, JoinHandle<()>)>,
    /// The window last asked for and not yet taken.
    asked: Option<u64>,
    /// The process that started the helper. A child made by `fork` has no helper thread, and
    /// the lock may have been held at the fork: there, the owner calls nothing but
    /// [`Ahead::forked`].
    born: Born,
    /// Windows still to make before one fails as growing the file would (tests only).
    #[cfg(test)]
    pub(super) fail_after: Option<usize>,
}

impl Ahead {
    /// A helper thread for windows of `chunk` bytes of `file`, idle until asked.
    pub(super) fn start(file: Arc<File>, chunk: usize) -> Ahead {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            changed: Condvar::new(),
        });
        let helper = {
            let (shared, file) = (Arc::clone(&shared), Arc::clone(&file));
            std::thread::Builder::new()
                .name("streamsan-trace".into())
                .spawn(move || prepare(&shared, &file, chunk))
        };
        let helper = match helper {
            Ok(thread) => Some((shared, thread)),
            Err(e) => {
                tracing::debug!("no thread to grow the trace file ({e}); growing it in place");
                None
            }
        };
        Ahead {
            file,
            chunk,
            helper,
            asked: None,
            born: Born::now(),
            #[cfg(test)]
            fail_after: None,
        }
    }

    /// Starts preparing the window at file offset `base` (page aligned).
    pub(super) fn ask(&mut self, base: u64) {
        if self.asked == Some(base) {
            return;
        }
        if let Some((shared, _)) = &self.helper {
            shared.lock().want = Some(base);
            shared.changed.notify_all();
            self.asked = Some(base);
        }
    }

    /// The window at file offset `base`, waiting for it if it is not prepared yet (and asking
    /// for it if it was not asked for).
    pub(super) fn next(&mut self, base: u64) -> io::Result<Window> {
        #[cfg(test)]
        if let Some(n) = &mut self.fail_after {
            if *n == 0 {
                return Err(io::Error::other("no space left (a test's)"));
            }
            *n -= 1;
        }
        self.ask(base);
        let Some((shared, thread)) = &self.helper else {
            return self.map_here(base);
        };
        self.asked = None;
        let mut slot = shared.lock();
        let window = loop {
            if let Some(ready) = slot.ready.take() {
                break ready?;
            }
            if thread.is_finished() {
                // Not expected (the helper does not panic); the window is made here then.
                drop(slot);
                return self.map_here(base);
            }
            slot = shared
                .changed
                .wait_timeout(slot, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        drop(slot);
        if window.base != base {
            // Not expected (each window is asked for where the last one ends).
            debug_assert_eq!(window.base, base, "windows follow each other");
            drop(window);
            return self.map_here(base);
        }
        Ok(window)
    }

    /// The window at file offset `base`, made on this thread.
    fn map_here(&self, base: u64) -> io::Result<Window> {
        Window::map(&self.file, base, self.chunk, 0)
    }

    /// Unmaps `done`, on the helper thread where there is one.
    pub(super) fn retire(&mut self, done: Window) {
        if let Some((shared, _)) = &self.helper {
            shared.lock().retired.push(done);
            shared.changed.notify_all();
        }
    }

    /// Stops the helper thread, and unmaps what it prepared. The file may have grown past the
    /// current window (by spaces); the owner cuts it after.
    pub(super) fn stop(&mut self) {
        if let Some((shared, thread)) = self.helper.take() {
            shared.lock().stop = true;
            shared.changed.notify_all();
            let _ = thread.join();
            let mut slot = shared.lock();
            slot.ready = None;
            slot.retired.clear();
        }
    }
}

/// The helper thread: prepares the window asked for, unmaps retired ones, until stopped.
fn prepare(shared: &Shared, file: &File, chunk: usize) {
    loop {
        let (want, retired) = {
            let mut slot = shared.lock();
            while !slot.stop && slot.want.is_none() && slot.retired.is_empty() {
                slot = shared.changed.wait(slot).unwrap_or_else(|p| p.into_inner());
            }
            if slot.stop {
                return;
            }
            (slot.want.take(), std::mem::take(&mut slot.retired))
        };
        drop(retired);
        if let Some(base) = want {
            let window = Window::map(file, base, chunk, 0);
            shared.lock().ready = Some(window);
            shared.changed.notify_all();
        }
    }
}

impl Ahead {
    /// True in a child made by `fork` since the file was opened: it must not touch the file.
    #[inline]
    pub(super) fn forked(&self) -> bool {
        self.born.forked()
    }

    /// Makes this `Ahead` act as in a child made by `fork`.
    #[cfg(test)]
    pub(super) fn pretend_forked(&mut self) {
        self.born.pretend_forked();
    }
}

/// What a child made by `fork` gets for writing its parent's trace.
pub(super) fn forked_error() -> io::Error {
    io::Error::other(
        "a child made by fork does not write its parent's trace (they share the mapped file)",
    )
}
