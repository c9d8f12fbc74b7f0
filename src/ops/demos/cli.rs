//! The examples' shared `main`: parse the flags, make a context (sanitized when `STREAMSAN=1`:
//! `Context::new` reads the environment; or with `--streamsan`, for runners that cannot set
//! the environment per command), run the scenario, print the GPU's numbers next to the CPU
//! reference, say how to turn streamsan on (or what it found), and exit 0 when the numbers
//! are right, 1 when they are wrong, 2 on bad arguments or a CUDA error.

use std::process::ExitCode;

use super::{Outcome, Variant};
use crate::cuda::Context;
use crate::ops::Error;

/// What the command line asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Args {
    pub variant: Variant,
    /// `--streamsan`: sanitize through the builder and write the trace to
    /// [`Variant::trace_name`] in the current directory.
    pub streamsan: bool,
}

/// One example.
#[derive(Clone, Copy, Debug)]
pub struct Demo {
    pub name: &'static str,
    /// One line: what the program does.
    pub about: &'static str,
    /// The flag that selects the racy program when the fixed one is the default
    /// (`--readback-race`); `None`: racy by default, `--fixed` fixes it.
    pub racy_flag: Option<&'static str>,
    pub run: fn(&Context, Variant) -> Result<Outcome, Error>,
}

impl Demo {
    fn usage(&self) -> String {
        let choose = match self.racy_flag {
            None => (
                "--fixed",
                "add the missing synchronization (default: the racy program)",
            ),
            Some(flag) => (
                flag,
                "the racy program (default: the fixed one; --fixed accepted)",
            ),
        };
        let trace = format!(
            "sanitize this run (as STREAMSAN=1 does), writing the trace to\n{:19}{}-<racy|fixed>-tracking-<on|off>.jsonl here",
            "", self.name
        );
        let flags = [
            choose,
            (
                "--tracking",
                "leave cudarc's event tracking on (the racy program turns it off)",
            ),
            ("--streamsan", trace.as_str()),
        ];
        let mut s = format!(
            "usage: {} [{}] [--tracking] [--streamsan]\n{}\n\n",
            self.name, choose.0, self.about
        );
        for (flag, text) in flags {
            s += &format!("  {flag:<17}{text}\n");
        }
        s += "\nExit status: 0 when the GPU's numbers match the CPU reference, 1 when they do \
              not, 2 on errors.\n";
        s
    }

    /// What `args` (without the program name) ask for.
    pub fn parse(&self, args: &[String]) -> Result<Args, String> {
        let mut a = Args {
            variant: Variant {
                fixed: self.racy_flag.is_some(),
                tracking: false,
            },
            streamsan: false,
        };
        for arg in args {
            match arg.as_str() {
                "--fixed" => a.variant.fixed = true,
                "--tracking" => a.variant.tracking = true,
                "--streamsan" => a.streamsan = true,
                flag if Some(flag) == self.racy_flag => a.variant.fixed = false,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(a)
    }

    /// The context: from the environment, or sanitized with a trace for `--streamsan` (the
    /// other options still come from `STREAMSAN_OPTIONS`).
    fn context(&self, a: Args) -> Result<Context, Error> {
        // SAFETY: only tries to open the library (cudarc would panic where it is missing).
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(Error::Context(
                "libcuda not found: this example needs an NVIDIA GPU and its driver".into(),
            ));
        }
        let ctx = if a.streamsan {
            Context::builder()
                .sanitize(true)
                .trace_path(a.variant.trace_name(self.name))
                .build(0)
        } else {
            Context::new(0)
        };
        Ok(ctx?)
    }

    /// The example's `main`.
    pub fn main(&self) -> ExitCode {
        let argv: Vec<String> = std::env::args().collect();
        if argv.iter().any(|a| a == "--help" || a == "-h") {
            print!("{}", self.usage());
            return ExitCode::SUCCESS;
        }
        let args = match self.parse(&argv[1..]) {
            Ok(a) => a,
            Err(e) => {
                eprint!("{}: {e}\n{}", self.name, self.usage());
                return ExitCode::from(2);
            }
        };
        // The context (and with it the sanitizer, which prints its summary when dropped) ends
        // before the description is printed.
        let outcome = self
            .context(args)
            .and_then(|ctx| (self.run)(&ctx, args.variant));
        match outcome {
            Ok(outcome) => {
                let trace = args.streamsan.then(|| args.variant.trace_name(self.name));
                print!("{}", describe(self, &outcome, &argv, trace.as_deref()));
                if outcome.matches() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("{}: {e}", self.name);
                ExitCode::from(2)
            }
        }
    }
}

/// The first elements of `values`, and how many there are.
fn head(values: &[f32]) -> String {
    const SHOWN: usize = 4;
    let shown: Vec<String> = values.iter().take(SHOWN).map(|v| format!("{v}")).collect();
    if values.len() > SHOWN {
        format!("[{}, ...] ({} elements)", shown.join(", "), values.len())
    } else {
        format!("[{}]", shown.join(", "))
    }
}

/// What an example prints after its run; `trace`: the trace it wrote, when known.
pub fn describe(demo: &Demo, o: &Outcome, argv: &[String], trace: Option<&str>) -> String {
    let mut s = format!("{} ({})\n  {}\n", demo.name, o.variant, demo.about);
    s += &format!("  GPU:       {}\n", head(&o.gpu));
    s += &format!("  reference: {}\n", head(&o.reference));
    let c = o.comparison();
    match c.first_mismatch {
        None => s += "  the GPU's numbers match the CPU reference\n",
        Some((i, g, r)) => {
            s += &format!(
                "  the GPU's numbers are WRONG: {} of {} differ; element {i}: GPU {g}, \
                 reference {r}\n",
                c.mismatches,
                o.reference.len()
            )
        }
    }
    for note in &o.notes {
        s += &format!("  {note}\n");
    }
    s += &format!(
        "  expected: {}\n",
        if o.variant.races() {
            "a race (racy program, cudarc's event tracking off)"
        } else if o.variant.fixed {
            "no race (the program synchronizes)"
        } else {
            "no race (cudarc's event tracking inserts the missing wait)"
        }
    );
    if o.sanitized {
        let races = o.races();
        s += &format!(
            "streamsan: on; {} race(s), {} warning(s) (reported on stderr as they happened)\n",
            races.len(),
            o.warnings().len()
        );
        if o.variant.races() {
            let e = &o.expected;
            s += &format!(
                "  the {} race on {:?} at {} (previous access at {}): {}\n",
                e.kind.as_str(),
                e.buffer,
                e.current.site,
                e.previous.site,
                if o.expected_race().is_some() {
                    "reported"
                } else {
                    "NOT reported"
                }
            );
        }
        if let Some(t) = trace {
            s += &format!("  trace: {t}; replay it anywhere: streamsan check {t}\n");
        }
    } else {
        let trace = o.variant.trace_name(demo.name);
        s += &format!(
            "streamsan: off. To check this run:\n  STREAMSAN=1 STREAMSAN_OPTIONS=trace={trace} \
             {}\n  (or add --streamsan), and replay the trace anywhere: streamsan check {trace}\n",
            argv.join(" ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo(racy_flag: Option<&'static str>) -> Demo {
        Demo {
            name: "d",
            about: "a demo",
            racy_flag,
            run: |_, _| unreachable!(),
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn racy_by_default_unless_a_racy_flag_exists() {
        let d = demo(None);
        let v = |a: &[&str]| d.parse(&args(a)).map(|a| a.variant);
        assert_eq!(v(&[]).unwrap(), Variant::RACY);
        assert_eq!(v(&["--fixed"]).unwrap(), Variant::FIXED);
        let both = v(&["--tracking", "--fixed"]).unwrap();
        assert!(both.fixed && both.tracking);
        assert!(v(&["--readback-race"]).is_err());
        assert!(!d.parse(&[]).unwrap().streamsan);
        assert!(d.parse(&args(&["--streamsan"])).unwrap().streamsan);

        let p = demo(Some("--readback-race"));
        let v = |a: &[&str]| p.parse(&args(a)).map(|a| a.variant);
        assert_eq!(v(&[]).unwrap(), Variant::FIXED);
        assert_eq!(v(&["--readback-race"]).unwrap(), Variant::RACY);
        assert!(p.usage().contains("--readback-race"));
        assert!(p.usage().contains("d-<racy|fixed>-tracking-<on|off>.jsonl"));
    }

    #[test]
    fn long_results_are_abbreviated() {
        assert_eq!(head(&[1.0, 2.5]), "[1, 2.5]");
        assert_eq!(head(&[0.0; 6]), "[0, 0, 0, 0, ...] (6 elements)");
    }
}
