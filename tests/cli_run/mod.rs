//! Running the `streamsan` binary from the integration tests (`mod cli_run;`): from the crate
//! root, so fixture paths are relative to it, with no `RUST_LOG` from the environment, and
//! never a panic.

#![allow(dead_code)]

use assert_cmd::Command;

/// What one run of the binary did.
#[derive(Debug, PartialEq)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The binary, run from the crate root with no `RUST_LOG` from the environment.
pub fn streamsan() -> Command {
    let mut cmd = Command::cargo_bin("streamsan").expect("the streamsan binary is built");
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG");
    cmd
}

/// Runs `cmd` and takes what it printed; fails the test if it panicked.
pub fn finish(cmd: &mut Command) -> Run {
    let out = cmd.output().expect("streamsan runs");
    let run = Run {
        code: out
            .status
            .code()
            .expect("streamsan exits with a code, not a signal"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    };
    assert!(
        !run.stderr.contains("panicked") && !run.stderr.contains("RUST_BACKTRACE"),
        "streamsan panicked: {run:#?}"
    );
    run
}

/// `streamsan ARGS`.
pub fn run(args: &[&str]) -> Run {
    finish(streamsan().args(args))
}
