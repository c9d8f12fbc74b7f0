//! How reports name things: symbolic, numbered in trace order (`stream s1 "side"`,
//! `buffer b3 "logits"`, trace line 7). Raw trace ids and addresses appear only in JSON.
//!
//! Strings from the trace (names, arguments) are quoted with Rust's `{:?}`, so a name holding a
//! quote or a newline cannot break the layout of a report.

use crate::engine::finding::{
    AccessKind, BufferInfo, Race, RaceKind, Site, StreamInfo, WarningKind,
};
use crate::trace::record::{MemSpace, Pool, StreamFlags, StreamKind};

pub(crate) const RACE_KINDS: [RaceKind; 5] = RaceKind::ALL;
pub(crate) const WARNING_KINDS: [WarningKind; 8] = WarningKind::ALL;

/// `s1`.
pub(crate) fn stream_sym(stream: &StreamInfo) -> String {
    format!("s{}", stream.ordinal)
}

/// `s1 "side" (created, non-blocking)`; the device is named when it is not device 0.
pub(crate) fn stream_label(stream: &StreamInfo) -> String {
    let mut out = stream_sym(stream);
    if let Some(name) = &stream.name {
        out.push_str(&format!(" {name:?}"));
    }
    let kind = match stream.kind {
        StreamKind::LegacyDefault => "legacy default",
        StreamKind::PerThreadDefault => "per-thread default",
        StreamKind::Created => match stream.flags {
            StreamFlags::Blocking => "created, blocking",
            StreamFlags::NonBlocking => "created, non-blocking",
        },
    };
    if stream.device == 0 {
        out.push_str(&format!(" ({kind})"));
    } else {
        out.push_str(&format!(" ({kind}, device {})", stream.device));
    }
    out
}

/// True for a stream that legacy-default-stream barriers do not order (rule R6).
pub(crate) fn is_non_blocking(stream: &StreamInfo) -> bool {
    stream.kind == StreamKind::Created && stream.flags == StreamFlags::NonBlocking
}

/// `b1 "x"`.
pub(crate) fn buffer_label(buffer: &BufferInfo) -> String {
    match &buffer.name {
        Some(name) => format!("b{} {name:?}", buffer.ordinal),
        None => format!("b{}", buffer.ordinal),
    }
}

/// The actor that made an access, as the "why" sentence names it: `stream s1` or
/// `host thread 0`.
pub(crate) fn actor(site: &Site) -> String {
    match (&site.graph, &site.stream) {
        (Some(g), _) => format!("graph g{}", g.ordinal),
        (None, Some(stream)) => format!("stream {}", stream_sym(stream)),
        (None, None) => format!("host thread {}", site.thread),
    }
}

/// What an access was, as a noun: `read`, `write`, `atomic write`, `allocation` or `free`.
pub(crate) fn access_noun(site: &Site) -> &'static str {
    match site.access {
        AccessKind::Read => "read",
        AccessKind::Allocate => "allocation",
        AccessKind::Write => "write",
        AccessKind::Atomic => "atomic write",
        AccessKind::Free => "free",
    }
}

/// True for an allocation's "birth" write.
pub(crate) fn is_allocation(site: &Site) -> bool {
    site.access == AccessKind::Allocate
}

/// One access, without the leading "previous":
/// `read by launch "sum" (arg "x") on stream s1 "side" (created, non-blocking), thread 0,
/// at examples/sum.rs:31:5, trace line 9`, or for host code
/// `read by host thread 0 (host_access "check", arg "x"), trace line 12`.
pub(crate) fn describe_site(site: &Site) -> String {
    let mut out = String::from(match site.access {
        AccessKind::Atomic => "atomic write",
        access => access.as_str(),
    });
    if is_allocation(site) {
        out.push_str(" (allocation)");
    }
    match &site.stream {
        Some(stream) => {
            out.push_str(" by ");
            out.push_str(site.op.as_str());
            if let Some(name) = &site.name {
                out.push_str(&format!(" {name:?}"));
            }
            if let Some(arg) = &site.arg {
                out.push_str(&format!(" (arg {arg:?})"));
            }
            out.push_str(&format!(
                " on stream {}, thread {}",
                stream_label(stream),
                site.thread
            ));
        }
        None => {
            out.push_str(&format!(" by host thread {} ({}", site.thread, site.op));
            if let Some(name) = &site.name {
                out.push_str(&format!(" {name:?}"));
            }
            if let Some(arg) = &site.arg {
                out.push_str(&format!(", arg {arg:?}"));
            }
            out.push(')');
        }
    }
    if let Some(at) = &site.at {
        out.push_str(&format!(", at {}", printable(at)));
    }
    out.push_str(&format!(", trace line {}", site.line));
    if let Some(g) = &site.graph {
        out.push_str(&format!(
            " (captured into graph g{}, launched at trace line {}",
            g.ordinal, g.launch
        ));
        if let Some(s) = &g.launch_stream {
            out.push_str(&format!(" on stream {}", stream_sym(s)));
        }
        out.push(')');
    }
    out
}

/// A source location as printed: control characters are escaped, so a trace cannot forge
/// report lines or send terminal escapes (names are quoted with `{:?}`, which does the same).
pub(crate) fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// `read-after-write on buffer b1 "x" bytes [0, 4096)`.
pub(crate) fn headline(race: &Race) -> String {
    format!(
        "{} on buffer {} bytes [{}, {})",
        race.kind.as_str(),
        buffer_label(&race.buffer),
        race.range.0,
        race.range.1
    )
}

/// `examples/sum.rs:20:5 (trace line 3): 4096 bytes of device memory on device 0`, with
/// `, stream-ordered on stream s1 "side" (created, blocking)` for `cudaMallocAsync`.
pub(crate) fn allocation(buffer: &BufferInfo) -> String {
    let mut out = match &buffer.alloc_at {
        Some(at) => format!("{} (trace line {})", printable(at), buffer.alloc_line),
        None => format!("trace line {}", buffer.alloc_line),
    };
    out.push_str(&format!(
        ": {} of {} on device {}",
        count(buffer.bytes, "byte", "bytes"),
        space_noun(buffer.space),
        buffer.device
    ));
    match (buffer.pool, &buffer.alloc_stream) {
        (Pool::Caching, stream) => {
            out.push_str(", a caching allocator's block");
            if let Some(addr) = buffer.addr {
                out.push_str(&format!(" at {addr:#x}"));
            }
            if let Some(stream) = stream {
                out.push_str(&format!(" of stream {}'s pool", stream_label(stream)));
            }
        }
        (Pool::Driver, Some(stream)) => out.push_str(&format!(
            ", stream-ordered on stream {}",
            stream_label(stream)
        )),
        (Pool::Driver, None) => {}
    }
    out
}

/// `bytes [0, 64) were buffer b2 "x" until its free at examples/a.rs:9:5 (trace line 16)`:
/// where a caching block's bytes came from, when the previous access was to that block.
pub(crate) fn reuse_line(race: &Race) -> Option<String> {
    let r = race.reused.as_ref()?;
    let freed = match &r.freed_at {
        Some(at) => format!("{} (trace line {})", printable(at), r.freed_line),
        None => format!("trace line {}", r.freed_line),
    };
    Some(format!(
        "bytes [{}, {}) were buffer {} until its free at {freed}; the caching allocator handed \
         them to {} while the previous access to them may not have been done",
        race.range.0,
        race.range.1,
        buffer_label(&r.buffer),
        buffer_label(&race.buffer)
    ))
}

fn space_noun(space: MemSpace) -> &'static str {
    match space {
        MemSpace::Device => "device memory",
        MemSpace::Pinned => "pinned host memory",
        MemSpace::Managed => "managed memory",
        MemSpace::Host => "pageable host memory",
    }
}

/// `1 race`, `3 races`.
pub(crate) fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    #[test]
    fn streams_are_named_by_ordinal_name_and_kind() {
        assert_eq!(stream_label(&stream_legacy()), "s0 (legacy default)");
        assert_eq!(
            stream_label(&stream_side()),
            "s1 \"side\" (created, non-blocking)"
        );
        assert_eq!(
            stream_label(&stream_created_blocking()),
            "s2 (created, blocking)"
        );
        let mut ptds = stream_created_blocking();
        ptds.kind = StreamKind::PerThreadDefault;
        ptds.device = 1;
        assert_eq!(stream_label(&ptds), "s2 (per-thread default, device 1)");
    }

    #[test]
    fn names_are_quoted_so_they_cannot_break_the_layout() {
        let mut b = buffer_x();
        b.name = Some("a \"b\"\nc".into());
        assert_eq!(buffer_label(&b), "b1 \"a \\\"b\\\"\\nc\"");
    }

    #[test]
    fn sites_describe_stream_host_and_allocation_sides() {
        let race = stream_stream_never_synced();
        assert_eq!(
            describe_site(&race.current),
            "read by launch \"sum\" (arg \"x\") on stream s1 \"side\" (created, non-blocking), \
             thread 0, at examples/sum.rs:31:5, trace line 9"
        );
        let host = host_reader_after_device_write();
        assert_eq!(
            describe_site(&host.current),
            "read by host thread 0 (host_access \"check\", arg \"x\"), at examples/sum.rs:40:9, \
             trace line 11"
        );
        let alloc = stream_ordered_alloc_on_other_stream();
        assert_eq!(
            describe_site(&alloc.previous),
            "write (allocation) by alloc on stream s2 (created, blocking), thread 0, trace line 4"
        );
    }

    #[test]
    fn allocation_line_names_size_space_and_allocating_stream() {
        assert_eq!(
            allocation(&buffer_x()),
            "examples/sum.rs:20:5 (trace line 3): 4096 bytes of device memory on device 0"
        );
        let alloc = stream_ordered_alloc_on_other_stream();
        assert_eq!(
            allocation(&alloc.buffer),
            "trace line 4: 1 byte of device memory on device 0, stream-ordered on stream s2 \
             (created, blocking)"
        );
    }
}
