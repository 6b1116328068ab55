//! `fullerene cluster`: the replicated masters' status and membership, as an operator.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fullerene_client::OperatorClient;
use fullerene_proto::ids::MasterId;
use fullerene_proto::messages::{ClusterStatus, OperatorRequest, OperatorResponse};
use fullerene_transport::{Client, Role, TlsMaterial, TransportConfig};
use serde::Serialize;

use crate::commands::master::tls_paths;
use crate::output::{table, JsonOutput};

/// Cluster commands.
#[derive(Subcommand, Debug)]
pub(crate) enum ClusterCommand {
    /// The Raft view of the masters: leader, term, commit and applied index, members and their
    /// replication lag (the leader answers; followers redirect to it).
    Status(ClusterArgs),
    /// Add a master to the running group (start it first with `fullerene master --join`).
    AddMaster(AddMasterArgs),
    /// Remove a master from the group; the removed master stops serving.
    RemoveMaster(RemoveMasterArgs),
}

/// How to reach the masters as an operator.
#[derive(Args, Debug)]
pub(crate) struct ClusterArgs {
    #[command(flatten)]
    pub masters: crate::commands::MasterAddrs,
    /// Directory laid out by `fullerene certs init` (uses `operator-<N>`, see `--operator-cert`).
    #[arg(long = "certs-dir", env = "FULLERENE_CERTS_DIR", value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// Which operator certificate of `--certs-dir` to use (`operator-<N>.pem`).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub operator_cert: usize,
    /// The cluster CA certificate.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// The operator's certificate.
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// The operator's private key.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Give up after this many seconds without an answer from a leader.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub timeout_secs: u64,
}

/// Flags of `fullerene cluster add-master`.
#[derive(Args, Debug)]
pub(crate) struct AddMasterArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The new master's Raft id (its certificate is `master-<ID>`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub id: u64,
    /// The new master's `--listen` address.
    #[arg(long, value_name = "ADDR")]
    pub addr: SocketAddr,
}

/// Flags of `fullerene cluster remove-master`.
#[derive(Args, Debug)]
pub(crate) struct RemoveMasterArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The Raft id of the master to remove.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub id: u64,
}

/// Runs a `cluster` subcommand.
pub(crate) fn run(command: ClusterCommand, json: &JsonOutput) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        match command {
            ClusterCommand::Status(args) => status(args, json).await,
            ClusterCommand::AddMaster(args) => {
                let request = OperatorRequest::AddMaster {
                    id: MasterId(args.id),
                    addr: args.addr,
                };
                change(
                    &args.cluster,
                    request,
                    json,
                    format!("master {} added", args.id),
                )
                .await
            }
            ClusterCommand::RemoveMaster(args) => {
                let request = OperatorRequest::RemoveMaster {
                    id: MasterId(args.id),
                };
                change(
                    &args.cluster,
                    request,
                    json,
                    format!("master {} removed", args.id),
                )
                .await
            }
        }
    })
}

/// An operator client for `args`' masters and certificate.
pub(crate) fn operator_client(args: &ClusterArgs) -> Result<OperatorClient> {
    let (ca, cert, key) = tls_paths(
        args.certs.as_deref(),
        args.ca.clone(),
        args.cert.clone(),
        args.key.clone(),
        Role::Operator,
        args.operator_cert,
    )?;
    let tls = TlsMaterial::load(&ca, &cert, &key).context("cannot load the TLS material")?;
    let client = Client::new(&tls, TransportConfig::default())?;
    Ok(OperatorClient::new(
        client,
        args.masters.addrs.clone(),
        Duration::from_secs(args.timeout_secs),
    ))
}

async fn status(args: ClusterArgs, json: &JsonOutput) -> Result<()> {
    let mut client = operator_client(&args)?;
    match client.request(&OperatorRequest::ClusterStatus).await? {
        OperatorResponse::ClusterStatus(status) => json.emit(&status, || render_status(&status)),
        other => bail!("unexpected answer to a status request: {other:?}"),
    }
}

fn render_status(status: &ClusterStatus) -> String {
    let leader = status.leader.as_ref().map_or_else(
        || "unknown".to_string(),
        |l| format!("master {} at {}", l.id.0, l.addr),
    );
    let mut members = table(&["master", "address", "role", "matched", "lag"]);
    for member in &status.members {
        let role = match (status.leader.as_ref().map(|l| l.id), member.voter) {
            (Some(leader), _) if leader == member.id => "leader",
            (_, true) => "voter",
            (_, false) => "learner",
        };
        members.add_row(vec![
            member.id.0.to_string(),
            member.addr.to_string(),
            role.to_string(),
            member.matched.to_string(),
            member.lag.to_string(),
        ]);
    }
    format!(
        "leader: {leader}\nterm: {}  commit: {}  applied: {}\n{members}",
        status.term, status.commit, status.applied
    )
}

#[derive(Serialize)]
struct ChangeResult {
    done: bool,
    message: String,
}

/// Sends an operator's write and prints `message` once the leader answers that it committed.
pub(crate) async fn change(
    args: &ClusterArgs,
    request: OperatorRequest,
    json: &JsonOutput,
    message: String,
) -> Result<()> {
    let mut client = operator_client(args)?;
    match client.request(&request).await? {
        OperatorResponse::Done => {
            let result = ChangeResult {
                done: true,
                message,
            };
            json.emit(&result, || result.message.clone())
        }
        other => bail!("unexpected answer to a change: {other:?}"),
    }
}
