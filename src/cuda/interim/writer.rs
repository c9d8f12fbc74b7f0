//! INTERIM — TO BE REPLACED by `crate::trace::writer::TraceWriter` (see `super`). Writes trace
//! format v1: the header line, then one JSON object per record, in one `write_all` each.

use std::io::{self, Write};

use serde_json::{Map, Value, json};

use crate::trace::record::{Access, Op, Record};

/// Writes a trace: the header on construction, then one line per [`TraceWriter::write`].
#[derive(Debug)]
pub(crate) struct TraceWriter<W: Write> {
    out: W,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header `{"streamsan_trace":1, ...header_extra}`.
    pub(crate) fn new(mut out: W, header_extra: Map<String, Value>) -> io::Result<Self> {
        // The version first, whatever the map's key order.
        let mut line = b"{\"streamsan_trace\":1".to_vec();
        for (k, v) in &header_extra {
            if k != "streamsan_trace" {
                line.push(b',');
                serde_json::to_writer(&mut line, k)?;
                line.push(b':');
                serde_json::to_writer(&mut line, v)?;
            }
        }
        line.extend_from_slice(b"}\n");
        out.write_all(&line)?;
        Ok(TraceWriter { out })
    }

    /// Writes one record as one line.
    pub(crate) fn write(&mut self, record: &Record) -> io::Result<()> {
        let mut line = serde_json::to_vec(&encode(record))?;
        line.push(b'\n');
        self.out.write_all(&line)
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn access(a: &Access) -> Value {
    match (&a.range, &a.arg) {
        (None, None) => json!(a.buf),
        (range, arg) => {
            let mut m = Map::new();
            m.insert("buf".into(), json!(a.buf));
            if let Some(r) = range {
                m.insert("off".into(), json!(r.off));
                m.insert("len".into(), json!(r.len));
            }
            if let Some(arg) = arg {
                m.insert("arg".into(), json!(arg));
            }
            Value::Object(m)
        }
    }
}

fn accesses(list: &[Access]) -> Value {
    Value::Array(list.iter().map(access).collect())
}

/// The record as a JSON object (field order is not significant in the format).
fn encode(r: &Record) -> Value {
    let mut m = Map::new();
    m.insert("op".into(), json!(r.op.name()));
    if let Some(name) = &r.name {
        m.insert("name".into(), json!(name));
    }
    let mut put = |k: &str, v: Value| {
        m.insert(k.into(), v);
    };
    match &r.op {
        Op::Stream {
            id,
            device,
            kind,
            flags,
        } => {
            put("id", json!(id));
            put("device", json!(device));
            put("kind", json!(kind.as_str()));
            put("flags", json!(flags.as_str()));
        }
        Op::Event { id } | Op::EventDestroy { id } => put("id", json!(id)),
        Op::Alloc {
            buf,
            bytes,
            device,
            space,
            stream,
            addr,
        } => {
            put("buf", json!(buf));
            put("bytes", json!(bytes));
            put("device", json!(device));
            put("space", json!(space.as_str()));
            if let Some(s) = stream {
                put("stream", json!(s));
            }
            if let Some(a) = addr {
                put("addr", json!(a));
            }
        }
        Op::Free { buf, stream } => {
            put("buf", json!(buf));
            if let Some(s) = stream {
                put("stream", json!(s));
            }
        }
        Op::Launch {
            stream,
            reads,
            writes,
        }
        | Op::HostFunc {
            stream,
            reads,
            writes,
        } => {
            put("stream", json!(stream));
            put("reads", accesses(reads));
            put("writes", accesses(writes));
        }
        Op::Memcpy {
            stream,
            src,
            dst,
            blocking,
        } => {
            put("stream", json!(stream));
            put("src", access(src));
            put("dst", access(dst));
            put("blocking", json!(blocking));
        }
        Op::Memset {
            stream,
            dst,
            blocking,
        } => {
            put("stream", json!(stream));
            put("dst", access(dst));
            put("blocking", json!(blocking));
        }
        Op::HostAccess { reads, writes } => {
            put("reads", accesses(reads));
            put("writes", accesses(writes));
        }
        Op::Record { event, stream } | Op::Wait { stream, event } => {
            put("event", json!(event));
            put("stream", json!(stream));
        }
        Op::EventSync { event } => put("event", json!(event)),
        Op::EventQuery { event, done } => {
            put("event", json!(event));
            put("done", json!(done));
        }
        Op::StreamSync { stream } => put("stream", json!(stream)),
        Op::StreamQuery { stream, done } => {
            put("stream", json!(stream));
            put("done", json!(done));
        }
        Op::DeviceSync { device } => put("device", json!(device)),
    }
    m.insert("thread".into(), json!(r.thread));
    if let Some(at) = &r.at {
        m.insert("at".into(), json!(at));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_then_one_line_per_record() {
        let mut extra = Map::new();
        extra.insert("producer".into(), json!("test"));
        let mut w = TraceWriter::new(Vec::new(), extra).unwrap();
        let r = Record {
            line: 2,
            thread: 1,
            at: Some("a.rs:1:2".into()),
            name: Some("k".into()),
            op: Op::Launch {
                stream: 3,
                reads: vec![Access::whole(1)],
                writes: vec![Access::bytes(2, 0, 8).arg("out")],
            },
        };
        w.write(&r).unwrap();
        let text = String::from_utf8(w.out).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0], json!({"streamsan_trace": 1, "producer": "test"}));
        assert_eq!(
            lines[1],
            json!({"op": "launch", "name": "k", "stream": 3, "reads": [1],
                   "writes": [{"buf": 2, "off": 0, "len": 8, "arg": "out"}],
                   "thread": 1, "at": "a.rs:1:2"})
        );
    }
}
