//! What the CLI's end-to-end tests share.
// Each test crate includes this module and uses only some of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The binary under test, with none of the environment variables that would change what
/// its flags default to.
pub(crate) fn fullerene() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fullerene"));
    cmd.env_remove("FULLERENE_CONFIG")
        .env_remove("FULLERENE_WORKLOAD")
        .env_remove("FULLERENE_MASTER_ADDRS")
        .env_remove("FULLERENE_MODEL")
        .env_remove("FULLERENE_LOG");
    cmd
}

/// Runs the binary with `args` to the end.
pub(crate) fn run(args: &[&str]) -> Output {
    fullerene().args(args).output().expect("fullerene runs")
}

/// What it printed on standard output.
pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What it printed on standard error.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Processes other than `except` whose command line mentions `dir` (the cluster's masters and
/// agents do).
pub(crate) fn processes_using(dir: &Path, except: Option<u32>) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(false);
        let pid = entry.file_name().to_string_lossy().parse::<u32>().ok();
        if text.contains(&needle) && !zombie && (except.is_none() || pid != except) {
            found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
        }
    }
    found
}
