//! How results reach the user: human-readable tables by default, JSON with `--json` (to stdout,
//! or to a file with `--json FILE`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;

/// Where machine-readable output goes, from the global `--json [FILE]` flag.
#[derive(Clone, Debug, Default)]
pub(crate) enum JsonOutput {
    /// Tables for humans.
    #[default]
    Off,
    /// JSON on standard output instead of tables.
    Stdout,
    /// Tables on standard output, and JSON written to this file.
    File(PathBuf),
}

impl JsonOutput {
    /// From the parsed flag: absent, `--json`, or `--json FILE`.
    pub(crate) fn from_flag(flag: Option<Option<PathBuf>>) -> JsonOutput {
        match flag {
            None => JsonOutput::Off,
            Some(None) => JsonOutput::Stdout,
            Some(Some(path)) if path.as_os_str() == "-" => JsonOutput::Stdout,
            Some(Some(path)) => JsonOutput::File(path),
        }
    }

    /// Emits `value`: as JSON where asked, and `human` (a rendered table) otherwise.
    pub(crate) fn emit<T: Serialize>(
        &self,
        value: &T,
        human: impl FnOnce() -> String,
    ) -> Result<()> {
        match self {
            JsonOutput::Off => println!("{}", human()),
            JsonOutput::Stdout => println!("{}", serde_json::to_string_pretty(value)?),
            JsonOutput::File(path) => {
                println!("{}", human());
                write_json(path, value)?;
                eprintln!("wrote {}", path.display());
            }
        }
        Ok(())
    }
}

/// Writes `value` as pretty JSON to `path`, through a temporary file so a full disk or a crash
/// never leaves a half-written file behind.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n").with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// A table with the project's style and the given header.
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    t
}
