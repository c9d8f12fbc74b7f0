//! The sanitizer's options: the `STREAMSAN` enable flag and the `STREAMSAN_OPTIONS` string,
//! parsed by pure functions so that they are tested without CUDA or a process environment.
//!
//! Syntax (documented in `docs/online.md`): `key=value` pairs separated by `:` or `,`, e.g.
//! `STREAMSAN_OPTIONS="halt_on_error=1:trace=run.jsonl:format=json:report=races.json"`. A value
//! cannot contain `:` or `,`; name such paths through the builder API instead. Each key is
//! declared once in [`KEYS`] (name, values, description), as ThreadSanitizer's `tsan_flags.inc`
//! does, so the parser, the error messages and the documentation agree.

use std::path::PathBuf;

use super::error::Error;

/// The environment variable that turns the sanitizer on (`1`) or off (`0`).
pub const ENV_ENABLE: &str = "STREAMSAN";
/// The environment variable that carries the options.
pub const ENV_OPTIONS: &str = "STREAMSAN_OPTIONS";
/// The exit status of `halt_on_error`, ThreadSanitizer's convention.
pub const DEFAULT_EXITCODE: i32 = 66;

/// Every key, its values and what it does.
pub const KEYS: &[(&str, &str, &str)] = &[
    (
        "halt_on_error",
        "0|1",
        "print the first race and exit the process with `exitcode` (default 0)",
    ),
    (
        "exitcode",
        "N",
        "the exit status halt_on_error uses (default 66)",
    ),
    (
        "trace",
        "PATH",
        "also write every call to this trace file (JSON Lines, trace format v1)",
    ),
    (
        "format",
        "text|json",
        "report format: text blocks as races happen, or one JSON report at the end (default text)",
    ),
    ("report", "stderr|PATH", "where reports go (default stderr)"),
    (
        "check",
        "0|1",
        "check races online (default 1); 0 only records the trace, for `streamsan check` later",
    ),
    (
        "checker_thread",
        "0|1",
        "check on a thread of the sanitizer's own (default 1): races are printed shortly \
         after the racing call, and at once when the program asks for findings or exits; 0 \
         checks within each call (halt_on_error always does)",
    ),
];

/// How reports are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportFormat {
    /// One text block per race, printed when the race is found (within the racing call, or
    /// shortly after it on the checker thread); a summary at the end.
    #[default]
    Text,
    /// One JSON report (the `streamsan check --format json` schema) when the sanitizer ends.
    Json,
}

/// Where reports go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ReportTo {
    #[default]
    Stderr,
    Path(PathBuf),
}

/// Everything that shapes an enabled sanitizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Exit the process with [`Options::exitcode`] at the first race, after printing it.
    pub halt_on_error: bool,
    /// The status `halt_on_error` exits with.
    pub exitcode: i32,
    /// Write a trace here.
    pub trace: Option<PathBuf>,
    pub format: ReportFormat,
    pub report: ReportTo,
    /// Feed records to the engine as they happen. Off: the trace is the only output.
    pub check: bool,
    /// Suppressions files, read when the sanitizer is made (`docs/suppressions.md`).
    pub suppressions: Vec<PathBuf>,
    /// A baseline (a JSON report of known races), read when the sanitizer is made.
    pub baseline: Option<PathBuf>,
    /// Check on a thread of the sanitizer's own, so that a call costs the calling thread
    /// little more than numbering its records (default). Findings then come shortly after
    /// the racing call (`docs/online.md`, "Reports and exit status"), and at once when asked
    /// for; `halt_on_error` always checks within the call.
    pub checker_thread: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            halt_on_error: false,
            exitcode: DEFAULT_EXITCODE,
            trace: None,
            format: ReportFormat::Text,
            report: ReportTo::Stderr,
            check: true,
            suppressions: Vec::new(),
            baseline: None,
            checker_thread: true,
        }
    }
}

/// Reads the `STREAMSAN` flag: `None` when unset or empty.
pub fn parse_enable(value: Option<&str>) -> Result<Option<bool>, Error> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some("1" | "true" | "yes" | "on") => Ok(Some(true)),
        Some("0" | "false" | "no" | "off") => Ok(Some(false)),
        Some(other) => Err(Error::BadEnable(other.to_string())),
    }
}

/// Applies an option string on top of `options`. Empty items (`a=1::b=2`) are skipped.
pub fn parse_options(text: &str, options: &mut Options) -> Result<(), Error> {
    for item in text.split([':', ',']) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(Error::NotKeyValue(item.to_string()));
        };
        let (key, value) = (key.trim(), value.trim());
        let bad = |expected| Error::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        match key {
            "halt_on_error" => options.halt_on_error = parse_bool(value).ok_or(bad("0 or 1"))?,
            "check" => options.check = parse_bool(value).ok_or(bad("0 or 1"))?,
            "checker_thread" => options.checker_thread = parse_bool(value).ok_or(bad("0 or 1"))?,
            "exitcode" => options.exitcode = value.parse().map_err(|_| bad("an integer"))?,
            "trace" if value.is_empty() => return Err(bad("a file path")),
            "trace" => options.trace = Some(PathBuf::from(value)),
            "format" => {
                options.format = match value {
                    "text" => ReportFormat::Text,
                    "json" => ReportFormat::Json,
                    _ => return Err(bad("text or json")),
                }
            }
            "report" => {
                options.report = match value {
                    "" => return Err(bad("stderr or a file path")),
                    "stderr" => ReportTo::Stderr,
                    path => ReportTo::Path(PathBuf::from(path)),
                }
            }
            "suppressions" => {
                let paths: Vec<PathBuf> = value
                    .split(';')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect();
                if paths.is_empty() {
                    return Err(bad("file paths separated by `;`"));
                }
                options.suppressions = paths;
            }
            "baseline" if value.is_empty() => return Err(bad("a file path")),
            "baseline" => options.baseline = Some(PathBuf::from(value)),
            _ => return Err(Error::UnknownKey(key.to_string())),
        }
    }
    Ok(())
}

fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "true" => Some(true),
        "0" | "false" => Some(false),
        _ => None,
    }
}

/// What the environment asks for: whether to sanitize (`None`: it does not say) and the options.
pub fn from_env_values(
    enable: Option<&str>,
    options: Option<&str>,
) -> Result<(Option<bool>, Options), Error> {
    let enabled = parse_enable(enable)?;
    let mut parsed = Options::default();
    if let Some(text) = options {
        parse_options(text, &mut parsed)?;
    }
    Ok((enabled, parsed))
}

/// [`from_env_values`] on this process's environment.
pub fn from_env() -> Result<(Option<bool>, Options), Error> {
    let enable = std::env::var(ENV_ENABLE).ok();
    let options = std::env::var(ENV_OPTIONS).ok();
    from_env_values(enable.as_deref(), options.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error's message, to compare (the error holds `io::Error`s, which do not compare).
    fn message<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn enable_flag() {
        assert_eq!(parse_enable(None).unwrap(), None);
        assert_eq!(parse_enable(Some("")).unwrap(), None);
        assert_eq!(parse_enable(Some("1")).unwrap(), Some(true));
        assert_eq!(parse_enable(Some(" on ")).unwrap(), Some(true));
        assert_eq!(parse_enable(Some("0")).unwrap(), Some(false));
        assert_eq!(
            message(parse_enable(Some("2"))),
            "STREAMSAN=\"2\": expected 1 or 0"
        );
    }

    #[test]
    fn defaults() {
        let (on, o) = from_env_values(None, None).unwrap();
        assert_eq!(on, None);
        assert_eq!(o, Options::default());
        assert!(o.check && !o.halt_on_error);
        assert_eq!(o.exitcode, 66);
    }

    #[test]
    fn colon_and_comma_separated() {
        for text in [
            "halt_on_error=1:trace=t.jsonl:format=json:report=r.json",
            "halt_on_error=1,trace=t.jsonl,format=json,report=r.json",
            " halt_on_error = 1 ,trace=t.jsonl:: format=json, report=r.json ,",
        ] {
            let (on, o) = from_env_values(Some("1"), Some(text)).unwrap();
            assert_eq!(on, Some(true));
            assert!(o.halt_on_error, "{text}");
            assert_eq!(o.trace, Some(PathBuf::from("t.jsonl")));
            assert_eq!(o.format, ReportFormat::Json);
            assert_eq!(o.report, ReportTo::Path("r.json".into()));
        }
    }

    #[test]
    fn later_keys_win_and_stderr_is_a_keyword() {
        let mut o = Options::default();
        parse_options("format=json:format=text:report=x:report=stderr", &mut o).unwrap();
        assert_eq!(o.format, ReportFormat::Text);
        assert_eq!(o.report, ReportTo::Stderr);
        parse_options("check=0:exitcode=3", &mut o).unwrap();
        assert!(!o.check);
        assert_eq!(o.exitcode, 3);
    }

    #[test]
    fn suppressions_and_baseline() {
        let mut o = Options::default();
        parse_options("suppressions=a.supp; b.supp;:baseline=known.json", &mut o).unwrap();
        assert_eq!(
            o.suppressions,
            [PathBuf::from("a.supp"), PathBuf::from("b.supp")]
        );
        assert_eq!(o.baseline, Some(PathBuf::from("known.json")));
        // A later key replaces the list, as every key does.
        parse_options("suppressions=c.supp", &mut o).unwrap();
        assert_eq!(o.suppressions, [PathBuf::from("c.supp")]);
        assert!(parse_options("suppressions=;", &mut o).is_err());
        assert!(parse_options("baseline=", &mut o).is_err());
    }

    #[test]
    fn errors_name_the_problem() {
        let mut o = Options::default();
        assert_eq!(
            message(parse_options("halt_on_error", &mut o)),
            "STREAMSAN_OPTIONS: `halt_on_error` is not `key=value`"
        );
        let e = parse_options("halt=1", &mut o).unwrap_err();
        assert!(matches!(&e, Error::UnknownKey(k) if k == "halt"));
        assert!(e.to_string().contains("halt_on_error, exitcode, trace"));
        assert_eq!(
            message(parse_options("format=xml", &mut o)),
            "STREAMSAN_OPTIONS: format=\"xml\": expected text or json"
        );
        assert!(parse_options("halt_on_error=yes", &mut o).is_err());
        assert!(parse_options("trace=", &mut o).is_err());
        assert!(parse_options("exitcode=x", &mut o).is_err());
        // A failed parse leaves the earlier keys applied; the caller discards the result.
        assert_eq!(o.format, ReportFormat::Text);
    }
}
