//! What the CLI's end-to-end tests share.

use std::path::Path;

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
