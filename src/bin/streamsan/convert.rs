//! `streamsan convert IN OUT`: a trace from either encoding into either, through the library's
//! [`streamsan::trace::binary::convert`]. A file OUT is written whole or not at all, as the
//! export files are (`output_file.rs`).

use std::io::{BufWriter, IsTerminal, Write};
use std::path::Path;

use streamsan::trace::binary::{self, ConvertError, Converted, WriteTrace, convert};
use streamsan::trace::error::io_message;
use streamsan::trace::{BinaryWriter, Encoding, TraceReader, TraceWriter};

use super::args::TraceEncoding;
use super::output_file;
use super::progress::Progress;

/// The name of standard output in messages.
const STDOUT_NAME: &str = "<stdout>";

/// Runs `streamsan convert`: 0 when converted, 2 otherwise (the error on stderr).
pub fn run(input: &str, output: &str, to: Option<TraceEncoding>) -> u8 {
    match convert_file(input, output, to) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("error: {message}");
            2
        }
    }
}

fn convert_file(input: &str, output: &str, to: Option<TraceEncoding>) -> Result<(), String> {
    let to = output_encoding(output, to)?;
    if output == "-" && to == Encoding::Binary && std::io::stdout().is_terminal() {
        return Err(format!(
            "{STDOUT_NAME}: not writing a binary trace to a terminal: redirect standard output, \
             or give --to jsonl"
        ));
    }
    let mut reader = TraceReader::open(input).map_err(|e| e.to_string())?;
    tracing::debug!(
        input = reader.file(),
        from = %reader.encoding(),
        to = %to,
        "converting"
    );
    let progress = Progress::start("converting", &mut reader);
    let result = if output == "-" {
        let stdout = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        write_trace(&mut reader, stdout, to).map(|(converted, _)| converted)
    } else {
        to_file(&mut reader, Path::new(output), to)
    };
    progress.finish();
    let converted = result.map_err(|e| match e {
        ConvertError::Input(e) => e.to_string(),
        ConvertError::Output(e) => {
            let name = if output == "-" { STDOUT_NAME } else { output };
            format!("{name}: cannot write: {}", io_message(&e))
        }
    })?;
    tracing::debug!(
        records = converted.records,
        kept_as_json = converted.kept_as_json,
        lines = reader.line(),
        "converted"
    );
    Ok(())
}

/// The encoding to write: `--to`, else the extension of OUT.
fn output_encoding(output: &str, to: Option<TraceEncoding>) -> Result<Encoding, String> {
    match to {
        Some(TraceEncoding::Jsonl) => return Ok(Encoding::JsonLines),
        Some(TraceEncoding::Binary) => return Ok(Encoding::Binary),
        None => {}
    }
    if output == "-" {
        return Err(
            "cannot tell which encoding to write to standard output: give --to jsonl or --to \
             binary"
                .into(),
        );
    }
    let extension = Path::new(output)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some(binary::EXTENSION) => Ok(Encoding::Binary),
        Some("jsonl" | "ndjson" | "json") => Ok(Encoding::JsonLines),
        _ => Err(format!(
            "{output}: cannot tell which encoding to write from the file name (expected .sstb \
             for binary, or .jsonl): give --to jsonl or --to binary"
        )),
    }
}

/// Converts into the output file for `out` (`output_file.rs`): complete, or not written at all.
fn to_file(reader: &mut TraceReader, out: &Path, to: Encoding) -> Result<Converted, ConvertError> {
    let (file, pending) = output_file::create(out).map_err(ConvertError::Output)?;
    let written = write_trace(reader, BufWriter::with_capacity(1 << 20, file), to).and_then(
        |(converted, file)| {
            file.into_inner()
                .map(|_| converted)
                .map_err(|e| ConvertError::Output(e.into_error()))
        },
    );
    pending.finish(written, ConvertError::Output)
}

/// Writes the trace of `reader` to `out` in `to`, the header as the reader read it; gives the
/// writer back, flushed.
fn write_trace<W: Write>(
    reader: &mut TraceReader,
    out: W,
    to: Encoding,
) -> Result<(Converted, W), ConvertError> {
    match to {
        Encoding::JsonLines => {
            let mut w =
                TraceWriter::with_header(out, reader.header()).map_err(ConvertError::Output)?;
            let converted = convert(reader, &mut w as &mut dyn WriteTrace)?;
            Ok((converted, w.into_inner()))
        }
        Encoding::Binary => {
            let mut w =
                BinaryWriter::with_header(out, reader.header()).map_err(ConvertError::Output)?;
            let converted = convert(reader, &mut w as &mut dyn WriteTrace)?;
            Ok((converted, w.into_inner()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_encoding_comes_from_to_or_the_extension() {
        let enc = |out, to| output_encoding(out, to);
        assert_eq!(enc("t.sstb", None), Ok(Encoding::Binary));
        assert_eq!(enc("dir/T.SSTB", None), Ok(Encoding::Binary));
        assert_eq!(enc("t.jsonl", None), Ok(Encoding::JsonLines));
        assert_eq!(enc("t.ndjson", None), Ok(Encoding::JsonLines));
        assert_eq!(enc("t.json", None), Ok(Encoding::JsonLines));
        assert_eq!(
            enc("t.sstb", Some(TraceEncoding::Jsonl)),
            Ok(Encoding::JsonLines)
        );
        assert_eq!(enc("-", Some(TraceEncoding::Binary)), Ok(Encoding::Binary));
        assert!(enc("-", None).unwrap_err().contains("give --to"));
        assert!(
            enc("t.txt", None)
                .unwrap_err()
                .starts_with("t.txt: cannot tell")
        );
        assert!(enc("trace", None).is_err());
    }
}
