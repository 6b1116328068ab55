//! `fullerene version`: what this binary is, for bug reports and fleet inventories.

use anyhow::Result;
use serde::Serialize;

use crate::output::JsonOutput;

/// The git commit the binary was built from (see `build.rs`: `git rev-parse`, else
/// `FULLERENE_COMMIT`, else "unknown").
pub(crate) const COMMIT: &str = env!("FULLERENE_COMMIT");

/// What `--version` prints after the name: version, commit, target and profile.
pub(crate) const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FULLERENE_COMMIT"),
    ", ",
    env!("FULLERENE_TARGET"),
    ", ",
    env!("FULLERENE_PROFILE"),
    ")"
);

/// What the binary is.
#[derive(Debug, Serialize)]
pub(crate) struct VersionInfo {
    /// The crate's version.
    version: &'static str,
    /// The git commit (abbreviated), or "unknown".
    commit: &'static str,
    /// The target triple it was compiled for.
    target: &'static str,
    /// The cargo profile it was compiled with (`debug` or `release`).
    profile: &'static str,
    /// Enabled optional features, as `crate/feature`.
    features: Vec<String>,
}

impl VersionInfo {
    /// This binary's.
    pub(crate) fn current() -> VersionInfo {
        let own = env!("FULLERENE_FEATURES")
            .split(',')
            .filter(|name| !name.is_empty())
            .map(|name| format!("fullerene/{name}"));
        let master = fullerene_master::ENABLED_FEATURES
            .iter()
            .map(|name| format!("fullerene-master/{name}"));
        VersionInfo {
            version: env!("CARGO_PKG_VERSION"),
            commit: COMMIT,
            target: env!("FULLERENE_TARGET"),
            profile: env!("FULLERENE_PROFILE"),
            features: own.chain(master).collect(),
        }
    }

    fn render(&self) -> String {
        let features = if self.features.is_empty() {
            "none".to_string()
        } else {
            self.features.join(", ")
        };
        format!(
            "fullerene {}\ncommit:   {}\ntarget:   {}\nprofile:  {}\nfeatures: {features}",
            self.version, self.commit, self.target, self.profile
        )
    }
}

/// Prints the version (JSON with `--json`).
pub(crate) fn run(json: &JsonOutput) -> Result<()> {
    let info = VersionInfo::current();
    json.emit(&info, || info.render())
}
