//! `fullerene groups` and `fullerene quotas`: the operator's fairness groups (which principal's
//! frameworks share which deficit counter, and with what weight) and the cluster's quotas,
//! both replicated in the masters' state.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use fullerene_proto::messages::{
    GroupInfo, GroupPlacement, GroupRemoval, OperatorRequest, OperatorResponse, Quotas,
};
use serde::Serialize;

use crate::commands::cluster::{change, operator_client, ClusterArgs};
use crate::commands::runtime;
use crate::output::{table, JsonOutput};

/// `fullerene groups` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum GroupsCommand {
    /// Create or change a group: set its weight and place principals in it (a principal is in
    /// one group; one in another group moves). Frameworks join their principal's group when
    /// they subscribe; frameworks already subscribed keep theirs.
    ///
    /// Example: `fullerene groups set analytics --weight 2 --principal etl --principal bi`
    Set(SetGroupArgs),
    /// Every group: weight, principals, frameworks, fair share, held and deficit, and the
    /// default group of principals nobody placed.
    List(ClusterArgs),
    /// Remove a group's weight and its principals' placements (they fall back to the default
    /// group), or with `--principal`, only those principals' placements.
    Remove(RemoveGroupArgs),
}

/// Flags of `fullerene groups set`.
#[derive(Args, Debug)]
pub(crate) struct SetGroupArgs {
    /// The group.
    pub group: String,
    /// Its weight: its share of the cluster is its weight over the sum of the active groups'
    /// weights (a new group weighs 1 unless this says otherwise).
    #[arg(long, value_parser = super::parse_weight)]
    pub weight: Option<f64>,
    /// A principal (the id in a framework certificate, e.g. `framework-3`) to place in the
    /// group; repeat for several, or separate with commas.
    #[arg(long = "principal", value_name = "PRINCIPAL", value_delimiter = ',')]
    pub principals: Vec<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Flags of `fullerene groups remove`.
#[derive(Args, Debug)]
pub(crate) struct RemoveGroupArgs {
    /// The group.
    pub group: String,
    /// Only these principals' placements (each must be in the group).
    #[arg(long = "principal", value_name = "PRINCIPAL", value_delimiter = ',')]
    pub principals: Vec<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `fullerene quotas` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum QuotasCommand {
    /// The cluster's quotas.
    Show(ClusterArgs),
    /// Change some of the cluster's quotas (the others keep their values). Lowering one
    /// refuses what would go past it from now on; nothing running is stopped.
    Set(SetQuotasArgs),
}

/// Flags of `fullerene quotas set`.
#[derive(Args, Debug)]
pub(crate) struct SetQuotasArgs {
    /// Frameworks one principal may have registered at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub frameworks_per_principal: Option<u32>,
    /// Live tasks one framework may have at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub tasks_per_framework: Option<u32>,
    /// Offers one framework may hold unanswered at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub pending_offers_per_framework: Option<u32>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The groups as `fullerene groups list --json` prints them.
#[derive(Serialize)]
struct GroupsList {
    groups: Vec<GroupInfo>,
    default_group: String,
}

/// Runs a `groups` subcommand.
pub(crate) fn run_groups(command: GroupsCommand, json: &JsonOutput) -> Result<()> {
    let (cluster, request, message) = match command {
        GroupsCommand::List(cluster) => {
            let list = match ask(&cluster, OperatorRequest::ListGroups)? {
                OperatorResponse::Groups {
                    groups,
                    default_group,
                } => GroupsList {
                    groups,
                    default_group,
                },
                other => bail!("unexpected answer to a groups listing: {other:?}"),
            };
            return json.emit(&list, || render_groups(&list));
        }
        GroupsCommand::Set(args) => {
            if args.weight.is_none() && args.principals.is_empty() {
                bail!(
                    "nothing to set: give --weight, --principal or both (see `fullerene groups \
                     set --help`)"
                );
            }
            let message = match (&args.weight, args.principals.len()) {
                (Some(w), 0) => format!("group {} weighs {w}", args.group),
                (None, n) => format!("{n} principal(s) placed in group {}", args.group),
                (Some(w), n) => {
                    format!(
                        "group {} weighs {w}; {n} principal(s) placed in it",
                        args.group
                    )
                }
            };
            let request = OperatorRequest::SetGroup(GroupPlacement {
                group: args.group,
                weight: args.weight,
                principals: args.principals,
            });
            (args.cluster, request, message)
        }
        GroupsCommand::Remove(args) => {
            let message = if args.principals.is_empty() {
                format!(
                    "group {} removed: its principals are in the default group",
                    args.group
                )
            } else {
                format!(
                    "{} principal(s) removed from group {}",
                    args.principals.len(),
                    args.group
                )
            };
            let request = OperatorRequest::RemoveGroup(GroupRemoval {
                group: args.group,
                principals: args.principals,
            });
            (args.cluster, request, message)
        }
    };
    done(&cluster, request, message, json)
}

/// Runs a `quotas` subcommand.
pub(crate) fn run_quotas(command: QuotasCommand, json: &JsonOutput) -> Result<()> {
    match command {
        QuotasCommand::Show(cluster) => {
            let quotas = current_quotas(&cluster)?;
            json.emit(&quotas, || render_quotas(&quotas))
        }
        QuotasCommand::Set(args) => {
            if args.frameworks_per_principal.is_none()
                && args.tasks_per_framework.is_none()
                && args.pending_offers_per_framework.is_none()
            {
                bail!(
                    "nothing to set: give at least one quota (see `fullerene quotas set --help`)"
                );
            }
            // Read, change, write: the quotas are one replicated value. Two operators changing
            // different quotas at once may lose one change; `quotas show` tells.
            let current = current_quotas(&args.cluster)?;
            let quotas = Quotas {
                frameworks_per_principal: args
                    .frameworks_per_principal
                    .unwrap_or(current.frameworks_per_principal),
                tasks_per_framework: args
                    .tasks_per_framework
                    .unwrap_or(current.tasks_per_framework),
                pending_offers_per_framework: args
                    .pending_offers_per_framework
                    .unwrap_or(current.pending_offers_per_framework),
            };
            done(
                &args.cluster,
                OperatorRequest::SetQuotas(quotas),
                format!("quotas set:\n{}", render_quotas(&quotas)),
                json,
            )
        }
    }
}

fn current_quotas(cluster: &ClusterArgs) -> Result<Quotas> {
    match ask(cluster, OperatorRequest::Quotas)? {
        OperatorResponse::Quotas(quotas) => Ok(quotas),
        other => bail!("unexpected answer to a quotas request: {other:?}"),
    }
}

/// Sends one request to the leader and returns its answer (a refusal is an error naming why).
fn ask(cluster: &ClusterArgs, request: OperatorRequest) -> Result<OperatorResponse> {
    runtime()?.block_on(async {
        let mut client = operator_client(cluster)?;
        Ok(client.request(&request).await?)
    })
}

fn done(
    cluster: &ClusterArgs,
    request: OperatorRequest,
    message: String,
    json: &JsonOutput,
) -> Result<()> {
    runtime()?.block_on(change(cluster, request, json, message))
}

fn render_groups(list: &GroupsList) -> String {
    let mut out = table(&[
        "group",
        "weight",
        "principals",
        "frameworks",
        "share",
        "held",
        "deficit",
    ]);
    for group in &list.groups {
        let principals = if group.principals.is_empty() {
            "-".to_string()
        } else if group.principals.len() <= 4 {
            group.principals.join(", ")
        } else {
            format!(
                "{}, ... ({} in all)",
                group.principals[..3].join(", "),
                group.principals.len()
            )
        };
        out.add_row(vec![
            group.name.clone(),
            format!("{}", group.weight),
            principals,
            group.frameworks.to_string(),
            format!("{:.1}%", group.share * 100.0),
            format!("{:.2}", group.held),
            format!("{:.2}", group.deficit),
        ]);
    }
    format!(
        "{out}\nprincipals in no group are in `{}`",
        list.default_group
    )
}

fn render_quotas(quotas: &Quotas) -> String {
    let mut out = table(&["quota", "value"]);
    out.add_row(vec![
        "frameworks per principal".to_string(),
        quotas.frameworks_per_principal.to_string(),
    ]);
    out.add_row(vec![
        "tasks per framework".to_string(),
        quotas.tasks_per_framework.to_string(),
    ]);
    out.add_row(vec![
        "pending offers per framework".to_string(),
        quotas.pending_offers_per_framework.to_string(),
    ]);
    out.to_string()
}
