//! One module per subcommand: argument definitions (clap derive) and the thin code that calls
//! the libraries and presents their results.

pub(crate) mod agent;
pub(crate) mod bench;
pub(crate) mod certs;
pub(crate) mod chaos;
pub(crate) mod cluster;
pub(crate) mod dev;
pub(crate) mod job;
pub(crate) mod master;
pub(crate) mod plan;
pub(crate) mod sim;
pub(crate) mod status;

use std::path::PathBuf;

use anyhow::{bail, Result};

/// Parses an overbooking allowance flag with the rule masters and agents share
/// ([`Overbooking`](fullerene_scheduling::Overbooking)'s `FromStr`), so that both accept the same
/// values and say the same thing about a bad one.
pub(crate) fn parse_allowance(text: &str) -> Result<f64, fullerene_scheduling::AllowanceError> {
    text.parse::<fullerene_scheduling::Overbooking>()
        .map(|allowance| allowance.0)
}

/// Where the shared workloads are looked for when `--workload` is not given: beside the
/// checkout (the layout of development machines and CI), then below the current directory.
const DEFAULT_WORKLOADS: [&str; 2] = [
    "../shared/workloads/tpch-decima.jsonl",
    "shared/workloads/tpch-decima.jsonl",
];

/// The workload to read: the one given, or the default TPC-H file if it can be found.
pub(crate) fn resolve_workload(given: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(path) = given {
        return Ok(path);
    }
    for candidate in DEFAULT_WORKLOADS {
        let path = PathBuf::from(candidate);
        if path.is_file() {
            return Ok(path);
        }
    }
    bail!(
        "no --workload given and the default workload was not found at {}; pass --workload FILE \
         or set FULLERENE_WORKLOAD",
        DEFAULT_WORKLOADS.join(" or ")
    )
}
