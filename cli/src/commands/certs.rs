//! `fullerene certs`: development certificates for the cluster's mutual TLS.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use fullerene_transport::certs::{generate_dev_cluster, CertCounts};
use serde::Serialize;

use crate::output::{table, JsonOutput};

/// Certificate commands.
#[derive(Subcommand, Debug)]
pub(crate) enum CertsCommand {
    /// Make a cluster CA and one certificate per master, agent, framework and operator.
    ///
    /// For development and tests: the CA key is written next to the certificates. A member's
    /// role and id are stated in its certificate (`fullerene://<role>/<role>-<n>`), and are
    /// the only source of a peer's identity. Production deployments issue certificates with
    /// their own CA and pass the paths to each process.
    Init(CertsInitArgs),
}

/// Flags of `fullerene certs init`.
#[derive(Args, Debug)]
pub(crate) struct CertsInitArgs {
    /// Directory to write `ca.pem`, `ca-key.pem` and `<role>-<n>.pem` / `<role>-<n>-key.pem` to.
    #[arg(long = "certs-dir", env = "FULLERENE_CERTS_DIR", value_name = "DIR")]
    dir: PathBuf,
    /// Number of master certificates (`master-1` ... `master-N`; the number is the Raft id).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=1000))]
    masters: u16,
    /// Number of agent certificates.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u16).range(0..=10000))]
    agents: u16,
    /// Number of framework certificates.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(0..=10000))]
    frameworks: u16,
    /// Number of operator certificates.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(0..=1000))]
    operators: u16,
    /// Replace existing files (a new CA invalidates every certificate of the old one).
    #[arg(long)]
    force: bool,
}

#[derive(Serialize)]
struct WrittenFile {
    role: String,
    id: String,
    cert: PathBuf,
    key: PathBuf,
}

/// Runs a `certs` subcommand.
pub(crate) fn run(command: CertsCommand, json: &JsonOutput) -> Result<()> {
    match command {
        CertsCommand::Init(args) => init(args, json),
    }
}

fn init(args: CertsInitArgs, json: &JsonOutput) -> Result<()> {
    let counts = CertCounts {
        masters: args.masters.into(),
        agents: args.agents.into(),
        frameworks: args.frameworks.into(),
        operators: args.operators.into(),
    };
    let generated = generate_dev_cluster(&args.dir, counts, args.force).with_context(|| {
        format!(
            "cannot create certificates in {} (use --force to replace existing ones)",
            args.dir.display()
        )
    })?;
    let mut files = vec![WrittenFile {
        role: "ca".into(),
        id: "ca".into(),
        cert: generated.ca_cert.clone(),
        key: generated.ca_key.clone(),
    }];
    files.extend(generated.members.iter().map(|m| WrittenFile {
        role: m.identity.role.to_string(),
        id: m.identity.id.clone(),
        cert: m.paths.cert.clone(),
        key: m.paths.key.clone(),
    }));
    json.emit(&files, || {
        let mut t = table(&["role", "id", "certificate", "key"]);
        for f in &files {
            t.add_row([
                f.role.clone(),
                f.id.clone(),
                f.cert.display().to_string(),
                f.key.display().to_string(),
            ]);
        }
        format!(
            "{t}\n{} certificates in {}",
            files.len(),
            generated.dir.display()
        )
    })
}
