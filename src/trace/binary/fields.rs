//! The fields of one op frame, read in the order `docs/trace-format.md` lists them, into a
//! [`Record`] under the same checks as a JSON Lines line: a launch needs its name, `off + len`
//! fits in 64 bits, a caching block has its address, a device ordinal fits in 32 bits. Errors
//! say which field and what was expected; the frame decoder places them in the file.

use super::strings::StringTable;
use super::varint::{Cursor, Fault};
use super::{access_bit, allowed_flags, flag, named, op_tag};
use crate::trace::record::{
    Access, ByteRange, MemSpace, Op, OpKind, Pool, Record, StreamFlags, StreamKind,
};
use crate::trace::spare::SpareParts;

/// A field that could not be decoded: where in the body, and what was expected.
pub(crate) struct Bad {
    pub(crate) at: usize,
    pub(crate) message: String,
}

/// A field's name in messages: `stream`, `reads[2]`, `reads[2].off`.
#[derive(Clone, Copy)]
struct Path {
    field: &'static str,
    index: Option<usize>,
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}[{i}]", self.field),
            None => f.write_str(self.field),
        }
    }
}

/// The fields of one op frame, read in the documented order.
pub(crate) struct Fields<'a, 'b> {
    c: Cursor<'a>,
    strings: &'b StringTable,
    /// Where the record's strings and access lists come from.
    spare: &'b mut SpareParts,
}

impl<'a, 'b> Fields<'a, 'b> {
    /// The fields of `body`, whose strings refer to `strings`.
    pub(crate) fn new(
        body: &'a [u8],
        strings: &'b StringTable,
        spare: &'b mut SpareParts,
    ) -> Fields<'a, 'b> {
        Fields {
            c: Cursor::new(body),
            strings,
            spare,
        }
    }

    fn fault(&self, what: impl std::fmt::Display, expected: &str, fault: Fault) -> Bad {
        let found = match fault {
            Fault::End => "the end of the record",
            Fault::Overflow => "one longer than 10 bytes or above 2^64 - 1",
        };
        Bad {
            at: self.c.pos(),
            message: format!("`{what}`: expected {expected}, found {found}"),
        }
    }

    fn bad(&self, at: usize, message: String) -> Bad {
        Bad { at, message }
    }

    #[inline]
    fn u64(&mut self, field: &'static str) -> Result<u64, Bad> {
        self.c
            .varint()
            .map_err(|f| self.fault(field, "a varint", f))
    }

    fn byte(&mut self, field: &'static str) -> Result<u8, Bad> {
        self.c.byte().map_err(|f| self.fault(field, "a byte", f))
    }

    fn device(&mut self) -> Result<u32, Bad> {
        let at = self.c.pos();
        let v = self.u64("device")?;
        u32::try_from(v).map_err(|_| {
            self.bad(
                at,
                format!("`device`: expected a device ordinal (unsigned 32-bit integer), found {v}"),
            )
        })
    }

    /// A string reference: `0` then a literal, or an index + 1 into the table.
    pub(crate) fn str(&mut self, path: impl std::fmt::Display + Copy) -> Result<String, Bad> {
        let at = self.c.pos();
        let r = self
            .c
            .varint()
            .map_err(|f| self.fault(path, "a string reference (a varint)", f))?;
        if r > 0 {
            return match self.strings.get(r - 1) {
                Some(s) => Ok(self.spare.string(s)),
                None => Err(self.bad(
                    at,
                    format!(
                        "`{path}`: string {} is not defined (expected an index below {}, or 0 \
                         and the text)",
                        r - 1,
                        self.strings.len()
                    ),
                )),
            };
        }
        let len = self
            .c
            .varint()
            .map_err(|f| self.fault(path, "the length of a literal string", f))?;
        let text_at = self.c.pos();
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|len| self.c.take(len).ok())
            .ok_or_else(|| {
                self.bad(
                    text_at,
                    format!(
                        "`{path}`: expected {len} bytes of a literal string, found the end of \
                         the record after {}",
                        self.c.remaining()
                    ),
                )
            })?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(self.spare.string(s)),
            Err(e) => Err(self.bad(
                text_at + e.valid_up_to(),
                format!(
                    "`{path}`: expected UTF-8 text, found the invalid byte 0x{:02x}",
                    bytes[e.valid_up_to()]
                ),
            )),
        }
    }

    /// The record of an op frame of `kind` on `line`, written to `out`. Under a newer minor
    /// version, unknown flag bits and bytes after the last field are a later minor's additions,
    /// and ignored.
    pub(crate) fn record(
        mut self,
        kind: OpKind,
        line: u64,
        newer_minor: bool,
        out: &mut Record,
    ) -> Result<(), Bad> {
        if named(op_tag(kind)) {
            self.op_name(kind)?;
        }
        let flags_at = self.c.pos();
        let flags = self.byte("flags")?;
        let unknown = flags & !allowed_flags(kind);
        if unknown != 0 && !newer_minor {
            return Err(self.bad(
                flags_at,
                format!(
                    "unknown flag bits 0x{unknown:02x} (this op's flags are a subset of \
                     0x{:02x}; others belong to a newer minor version, which the header does \
                     not declare)",
                    allowed_flags(kind)
                ),
            ));
        }
        let has = |bit: u8| flags & bit != 0;
        let thread = if has(flag::THREAD) {
            self.u64("thread")?
        } else {
            0
        };
        let name = if has(flag::NAME) {
            Some(self.str("name")?)
        } else {
            None
        };
        let at = if has(flag::AT) {
            Some(self.str("at")?)
        } else {
            None
        };
        let op = self.op(kind, flags, name.is_some())?;
        if self.c.remaining() > 0 && !newer_minor {
            return Err(self.bad(
                self.c.pos(),
                format!(
                    "{} bytes after the last field (fields this reader does not know belong to \
                     a newer minor version, which the header does not declare)",
                    self.c.remaining()
                ),
            ));
        }
        *out = Record {
            line,
            thread,
            at,
            name,
            op,
        };
        Ok(())
    }

    /// The name a named op's body starts with: it must be the op of the tag.
    fn op_name(&mut self, kind: OpKind) -> Result<(), Bad> {
        let at = self.c.pos();
        let name = self.str("op")?;
        if name == kind.as_str() {
            return Ok(());
        }
        Err(self.bad(
            at,
            format!(
                "`op`: expected {:?} (the op of tag 0x{:02x}), found {}",
                kind.as_str(),
                op_tag(kind),
                serde_json::to_string(&name).unwrap_or_default()
            ),
        ))
    }

    /// The op's own fields, after the common ones.
    fn op(&mut self, kind: OpKind, flags: u8, named: bool) -> Result<Op, Bad> {
        let has = |bit: u8| flags & bit != 0;
        let device = |this: &mut Self| {
            if has(flag::BIT3) {
                this.device()
            } else {
                Ok(0)
            }
        };
        Ok(match kind {
            OpKind::Stream => Op::Stream {
                id: self.u64("id")?,
                device: device(self)?,
                kind: self.stream_kind()?,
                flags: if has(flag::BIT4) {
                    StreamFlags::NonBlocking
                } else {
                    StreamFlags::Blocking
                },
            },
            OpKind::Event => Op::Event {
                id: self.u64("id")?,
            },
            OpKind::EventDestroy => Op::EventDestroy {
                id: self.u64("id")?,
            },
            OpKind::StreamDestroy => Op::StreamDestroy {
                id: self.u64("id")?,
            },
            OpKind::Alloc => {
                let buf = self.u64("buf")?;
                let bytes = self.u64("bytes")?;
                let space = self.space()?;
                let device = device(self)?;
                let stream = self.opt(has(flag::BIT4), "stream")?;
                let addr = self.opt(has(flag::ADDR), "addr")?;
                let pool = if has(flag::CACHING) {
                    Pool::Caching
                } else {
                    Pool::Driver
                };
                if pool == Pool::Caching && addr.is_none() {
                    return Err(self.bad(
                        0,
                        "missing field `addr` (a `caching` alloc needs the block's device \
                         address: its bytes keep their history by address)"
                            .into(),
                    ));
                }
                Op::Alloc {
                    buf,
                    bytes,
                    device,
                    space,
                    stream,
                    addr,
                    pool,
                }
            }
            OpKind::Free => Op::Free {
                buf: self.u64("buf")?,
                stream: self.opt(has(flag::BIT4), "stream")?,
            },
            OpKind::Launch => {
                if !named {
                    return Err(self.bad(
                        0,
                        "missing field `name` (a `launch` record needs the kernel's name)".into(),
                    ));
                }
                Op::Launch {
                    stream: self.u64("stream")?,
                    reads: self.accesses("reads")?,
                    writes: self.accesses("writes")?,
                    atomics: if has(flag::BIT3) {
                        self.accesses("atomics")?
                    } else {
                        Vec::new()
                    },
                }
            }
            OpKind::Memcpy => Op::Memcpy {
                stream: self.u64("stream")?,
                src: self.access(Path {
                    field: "src",
                    index: None,
                })?,
                dst: self.access(Path {
                    field: "dst",
                    index: None,
                })?,
                blocking: has(flag::BIT3),
            },
            OpKind::Memset => Op::Memset {
                stream: self.u64("stream")?,
                dst: self.access(Path {
                    field: "dst",
                    index: None,
                })?,
                blocking: has(flag::BIT3),
            },
            OpKind::HostFunc => Op::HostFunc {
                stream: self.u64("stream")?,
                reads: self.accesses("reads")?,
                writes: self.accesses("writes")?,
            },
            OpKind::HostAccess => Op::HostAccess {
                reads: self.accesses("reads")?,
                writes: self.accesses("writes")?,
            },
            OpKind::Record => Op::Record {
                event: self.u64("event")?,
                stream: self.u64("stream")?,
            },
            OpKind::Wait => Op::Wait {
                stream: self.u64("stream")?,
                event: self.u64("event")?,
            },
            OpKind::EventSync => Op::EventSync {
                event: self.u64("event")?,
            },
            OpKind::EventQuery => Op::EventQuery {
                event: self.u64("event")?,
                done: has(flag::BIT3),
            },
            OpKind::StreamSync => Op::StreamSync {
                stream: self.u64("stream")?,
            },
            OpKind::StreamQuery => Op::StreamQuery {
                stream: self.u64("stream")?,
                done: has(flag::BIT3),
            },
            OpKind::DeviceSync => Op::DeviceSync {
                device: device(self)?,
            },
            OpKind::RecordStream => Op::RecordStream {
                buf: self.u64("buf")?,
                stream: self.u64("stream")?,
            },
            OpKind::GraphBegin => Op::GraphBegin {
                graph: self.u64("graph")?,
                stream: self.u64("stream")?,
            },
            OpKind::GraphEnd => Op::GraphEnd {
                graph: self.u64("graph")?,
                stream: self.u64("stream")?,
            },
            OpKind::GraphLaunch => Op::GraphLaunch {
                graph: self.u64("graph")?,
                stream: self.u64("stream")?,
            },
            OpKind::GraphDestroy => Op::GraphDestroy {
                graph: self.u64("graph")?,
            },
        })
    }

    fn opt(&mut self, present: bool, field: &'static str) -> Result<Option<u64>, Bad> {
        present.then(|| self.u64(field)).transpose()
    }

    fn stream_kind(&mut self) -> Result<StreamKind, Bad> {
        let at = self.c.pos();
        match self.byte("kind")? {
            0 => Ok(StreamKind::LegacyDefault),
            1 => Ok(StreamKind::PerThreadDefault),
            2 => Ok(StreamKind::Created),
            b => Err(self.bad(
                at,
                format!(
                    "`kind`: expected a stream kind: 0 (legacy_default), 1 (per_thread_default) \
                     or 2 (created), found {b}"
                ),
            )),
        }
    }

    fn space(&mut self) -> Result<MemSpace, Bad> {
        let at = self.c.pos();
        match self.byte("space")? {
            0 => Ok(MemSpace::Device),
            1 => Ok(MemSpace::Pinned),
            2 => Ok(MemSpace::Managed),
            3 => Ok(MemSpace::Host),
            b => Err(self.bad(
                at,
                format!(
                    "`space`: expected a memory space: 0 (device), 1 (pinned), 2 (managed) or 3 \
                     (host), found {b}"
                ),
            )),
        }
    }

    /// A count, then that many accesses. The count is checked against the bytes left (an
    /// access takes at least one), so it cannot make the list allocate more than the body holds.
    fn accesses(&mut self, field: &'static str) -> Result<Vec<Access>, Bad> {
        let at = self.c.pos();
        let n = self.u64(field)?;
        if n > self.c.remaining() as u64 {
            return Err(self.bad(
                at,
                format!(
                    "`{field}`: expected {n} accesses, but the record has only {} bytes left",
                    self.c.remaining()
                ),
            ));
        }
        let mut list = self.spare.list();
        list.reserve(n as usize);
        for i in 0..n as usize {
            list.push(self.access(Path {
                field,
                index: Some(i),
            })?);
        }
        Ok(list)
    }

    /// The head byte, the rest of the buffer id, the range, the argument name.
    fn access(&mut self, path: Path) -> Result<Access, Bad> {
        let head = self
            .c
            .byte()
            .map_err(|f| self.fault(path, "an access", f))?;
        let low = u64::from(head >> access_bit::ID_SHIFT) & 0x1f;
        let buf = if head & access_bit::MORE != 0 {
            let at = self.c.pos();
            let rest = self
                .c
                .varint()
                .map_err(|f| self.fault(format_args!("{path}.buf"), "a varint", f))?;
            if rest >> (64 - access_bit::ID_BITS) != 0 {
                return Err(self.bad(
                    at,
                    format!("`{path}.buf`: expected a buffer id below 2^64, found a larger one"),
                ));
            }
            low | rest << access_bit::ID_BITS
        } else {
            low
        };
        let range = if head & access_bit::RANGE != 0 {
            let off = self
                .c
                .varint()
                .map_err(|f| self.fault(format_args!("{path}.off"), "a varint", f))?;
            let at = self.c.pos();
            let len = self
                .c
                .varint()
                .map_err(|f| self.fault(format_args!("{path}.len"), "a varint", f))?;
            if off.checked_add(len).is_none() {
                return Err(self.bad(
                    at,
                    format!(
                        "`{path}`: expected off + len to fit in an unsigned 64-bit integer, \
                         found off {off} + len {len}"
                    ),
                ));
            }
            Some(ByteRange { off, len })
        } else {
            None
        };
        let arg = if head & access_bit::ARG != 0 {
            Some(self.str(format_args!("{path}.arg"))?)
        } else {
            None
        };
        Ok(Access { buf, range, arg })
    }
}
