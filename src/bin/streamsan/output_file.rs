//! An output file (`--perfetto`, `--html`, `convert OUT`) written whole or not at all: into
//! `PATH.partial`, renamed over `PATH` once complete, so an invalid trace or a failed write
//! leaves whatever `PATH` held before. A symbolic link is written through (what it points to
//! is replaced, not the link), and a path that is not a regular file (a FIFO, a device, the
//! pipe of a shell's `>(...)`) is written straight into: renaming over it would replace it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Links followed at most, as the kernel does (`ELOOP`).
const MAX_LINKS: usize = 40;

/// An output file being written: [`Pending::commit`] it once complete, else
/// [`Pending::abandon`] it.
#[derive(Debug)]
pub struct Pending {
    /// The partial file and the path it becomes; `None` when writing straight into the path.
    rename: Option<(PathBuf, PathBuf)>,
}

/// `PATH.partial`.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    PathBuf::from(partial)
}

/// Opens the output file for `path`.
pub fn create(path: &Path) -> io::Result<(File, Pending)> {
    let direct = |file| Ok((file, Pending { rename: None }));
    match destination(path)? {
        Destination::Renamed(target) => {
            let partial = partial_path(&target);
            let file = File::create(&partial)?;
            let rename = Some((partial, target));
            Ok((file, Pending { rename }))
        }
        Destination::Into => direct(File::create(path)?),
        Destination::Descriptor(name) => direct(open_descriptor(&name)?),
    }
}

/// Whether output paths `a` and `b` lead to one file (however spelled, through links, there
/// or not yet): two outputs written there would overwrite each other.
pub fn same_destination(a: &Path, b: &Path) -> bool {
    /// The file a destination ends at: its directory resolved, then its name.
    fn end(path: &Path) -> Option<PathBuf> {
        match destination(path).ok()? {
            Destination::Renamed(target) => {
                let dir = match target.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => Path::new("."),
                };
                Some(std::fs::canonicalize(dir).ok()?.join(target.file_name()?))
            }
            Destination::Into => std::fs::canonicalize(path).ok(),
            Destination::Descriptor(name) => Some(name),
        }
    }
    a == b || matches!((end(a), end(b)), (Some(x), Some(y)) if x == y)
}

/// Where an output file's bytes go.
enum Destination {
    /// A regular file (there or not yet), written through its partial file.
    Renamed(PathBuf),
    /// Something that is not a regular file (a FIFO, a device): written straight into.
    Into,
    /// A file descriptor the process holds, by one of the system's names for it.
    Descriptor(PathBuf),
}

/// The process's standard output or error for `/dev/stdout`, `/dev/fd/1`, `/proc/self/fd/1`
/// (and 2), sharing its offset, so that `>>` appends and the report and the file follow each
/// other; another descriptor's file opened to append, never truncated.
fn open_descriptor(name: &Path) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let is = |names: [&str; 3]| names.iter().any(|n| name == Path::new(n));
        if is(["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"]) {
            return Ok(File::from(std::io::stdout().as_fd().try_clone_to_owned()?));
        }
        if is(["/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"]) {
            return Ok(File::from(std::io::stderr().as_fd().try_clone_to_owned()?));
        }
    }
    std::fs::OpenOptions::new().append(true).open(name)
}

impl Pending {
    /// The file is complete: it takes the place of its path.
    pub fn commit(self) -> io::Result<()> {
        match &self.rename {
            Some((partial, target)) => {
                let renamed = std::fs::rename(partial, target);
                if renamed.is_err() {
                    let _ = std::fs::remove_file(partial);
                }
                renamed
            }
            None => Ok(()),
        }
    }

    /// Ends the file by how writing it ended: committed after `written` succeeded, else
    /// abandoned; gives `written` back (or the commit's error, made an `E` by `error`).
    pub fn finish<T, E>(
        self,
        written: Result<T, E>,
        error: impl FnOnce(io::Error) -> E,
    ) -> Result<T, E> {
        match written {
            Ok(value) => self.commit().map(|()| value).map_err(error),
            Err(e) => {
                self.abandon();
                Err(e)
            }
        }
    }

    /// The file will not be complete: the partial file goes, and the path keeps what it held.
    pub fn abandon(self) {
        if let Some((partial, _)) = &self.rename {
            let _ = std::fs::remove_file(partial);
        }
    }
}

/// Where `path` leads: through any symbolic links to a regular file (it may not exist yet);
/// to something that is not a regular file; or to a file descriptor the process holds
/// (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`: a redirection, appended to or not, that
/// renaming would bypass).
fn destination(path: &Path) -> io::Result<Destination> {
    let mut target = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        if names_a_descriptor(&target) {
            return Ok(Destination::Descriptor(target));
        }
        match std::fs::symlink_metadata(&target) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = std::fs::read_link(&target)?;
                target = match target.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            Ok(meta) if !meta.is_file() => return Ok(Destination::Into),
            _ => return Ok(Destination::Renamed(target)),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// Whether `path` is one of the system's names for an open file descriptor: `/dev/stdout`,
/// `/dev/stderr`, `/dev/stdin`, `/dev/fd/N`, or `/proc/P/fd/N` (`P` a process id, `self` or
/// `thread-self`). Other paths under `/proc` (`/proc/self/cwd/...`) name ordinary files.
fn names_a_descriptor(path: &Path) -> bool {
    use std::path::Component::{Normal, RootDir};
    let parts: Vec<_> = path.components().collect();
    let is = |c: &std::path::Component, name: &str| matches!(c, Normal(n) if *n == name);
    let number = |c: &std::path::Component| matches!(c, Normal(n) if n.to_str().is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())));
    match parts.as_slice() {
        [RootDir, dev, std] if is(dev, "dev") => ["stdout", "stderr", "stdin"]
            .iter()
            .any(|name| is(std, name)),
        [RootDir, dev, fd, n] => is(dev, "dev") && is(fd, "fd") && number(n),
        [RootDir, proc, process, fd, n] => {
            is(proc, "proc")
                && (number(process) || is(process, "self") || is(process, "thread-self"))
                && is(fd, "fd")
                && number(n)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("streamsan-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, text: &str) -> io::Result<()> {
        use std::io::Write;
        let (mut file, pending) = create(path)?;
        file.write_all(text.as_bytes())?;
        drop(file);
        pending.commit()
    }

    #[test]
    fn descriptor_names_are_told_from_files_under_proc() {
        for name in [
            "/dev/stdout",
            "/dev/stderr",
            "/dev/fd/63",
            "/proc/self/fd/1",
            "/proc/thread-self/fd/4",
            "/proc/1234/fd/7",
        ] {
            assert!(names_a_descriptor(Path::new(name)), "{name}");
        }
        for name in [
            "/proc/self/cwd/out.json",
            "/proc/1234/root/tmp/out.json",
            "/dev/fd",
            "/dev/null",
            "/tmp/fd/1",
            "out.json",
        ] {
            assert!(!names_a_descriptor(Path::new(name)), "{name}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn two_spellings_of_one_file_are_one_destination() {
        let d = dir("same");
        let (a, b) = (d.join("out.html"), d.join("other.html"));
        let dotted = d.join(".").join("out.html");
        assert!(same_destination(&a, &dotted), "not there yet");
        assert!(!same_destination(&a, &b));
        std::os::unix::fs::symlink("out.html", d.join("link.html")).unwrap();
        assert!(
            same_destination(&a, &d.join("link.html")),
            "a dangling link to it"
        );
    }

    #[test]
    fn a_file_is_replaced_only_when_complete() {
        let d = dir("plain");
        let path = d.join("out.json");
        std::fs::write(&path, "old").unwrap();
        let (file, pending) = create(&path).unwrap();
        drop(file);
        pending.abandon();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert!(!partial_path(&path).exists());
        write(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_is_written_through() {
        let d = dir("link");
        let real = d.join("real.json");
        std::fs::write(&real, "old").unwrap();
        let link = d.join("link.json");
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        write(&link, "new").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        // A link to a file not there yet makes it.
        let dangling = d.join("dangling.json");
        std::os::unix::fs::symlink("later.json", &dangling).unwrap();
        write(&dangling, "made").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("later.json")).unwrap(),
            "made"
        );
    }

    #[cfg(unix)]
    #[test]
    fn what_is_not_a_regular_file_is_written_into() {
        let d = dir("fifo");
        let fifo = d.join("fifo.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", fifo.display());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        write(&fifo, "through").unwrap();
        assert_eq!(reader.join().unwrap(), "through");
        assert!(!std::fs::metadata(&fifo).unwrap().is_file(), "still a FIFO");
        // A directory is an error, not replaced.
        assert!(write(&d, "x").is_err());
        assert!(d.is_dir());
    }
}
