//! `fullerene reservation`: Rayon's four calls (§5.2: create, update, delete, list) and a
//! reservation's plan (show), against the masters' replicated plan.
//!
//! The RDL text is parsed here first, with the parser the masters use, so that a typo is shown
//! with its line, column and a caret before anything is sent; the masters parse it again and
//! check it against their plan's limits (quantum, horizon, size) before proposing it.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fullerene_client::OperatorClient;
use fullerene_proto::messages::{OperatorRequest, OperatorResponse};
use fullerene_proto::reservations::{
    RejectedReservationInfo, ReservationCall, ReservationCaps, ReservationInfo, ReservationPolicy,
    MAX_RDL_BYTES,
};
use serde::Serialize;

use crate::commands::cluster::{change, operator_client, ClusterArgs};
use crate::commands::control::parse_span;
use crate::commands::events::utc_time;
use crate::commands::runtime;
use crate::output::{table, JsonOutput};

/// `fullerene reservation` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum ReservationCommand {
    /// Reserve capacity ahead (Rayon's `createRes`): accepted only if the plan places the
    /// whole request, otherwise refused with the atom, window and work that did not fit. The
    /// reservation is owned by your operator certificate's principal.
    ///
    /// Example: two bundle-hours of 4-cpu bundles, at most two at once, within six hours:
    /// `fullerene reservation create etl-nightly --rdl 'window(atom(cpus=4,mem_mib=8192; g=1,
    /// h=2, l=10m, w=2h), s=0, f=6h)'`
    Create(WriteReservationArgs),
    /// Replace a reservation's request (`updateRes`); refused, the old one stays as it was.
    /// Windows count from the update.
    Update(WriteReservationArgs),
    /// Remove a reservation (`deleteRes`): its capacity is free for others from now on.
    Delete(NamedReservationArgs),
    /// The accepted reservations (`listRes`): owner, phase, span and what each is guaranteed
    /// now; and the ones rejected after a loss of capacity, with why.
    List(ClusterArgs),
    /// One reservation: its request and what the plan guarantees it over time.
    Show(NamedReservationArgs),
    /// How the cluster plans reservations: the placement policy and the sharing caps.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

/// `fullerene reservation policy` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum PolicyCommand {
    /// The placement policy and every principal's caps.
    Show(ClusterArgs),
    /// Change the placement policy or a principal's caps (the rest keep their values), for
    /// admissions from now on: what is accepted stays.
    ///
    /// Example: no principal may hold more than 20% of the cluster at once, nor 5% on average
    /// over a day: `fullerene reservation policy set --instantaneous-percent 20
    /// --integral-percent 5 --integral-window 24h`
    Set(SetPolicyArgs),
}

/// Flags of `fullerene reservation policy set`.
#[derive(Args, Debug)]
pub(crate) struct SetPolicyArgs {
    /// The placement policy (Rayon §4.2): `gree` places each request as late as it fits,
    /// `gree-l` as flat as it fits (fewer preemptions, a little less accepted).
    #[arg(long, value_name = "POLICY", value_parser = ["gree", "gree-l"])]
    pub placement: Option<String>,
    /// Set this principal's own caps; without it, the caps of every principal without its own.
    #[arg(long, value_name = "PRINCIPAL", conflicts_with = "clear_principal")]
    pub principal: Option<String>,
    /// Remove this principal's own caps: the default caps hold for it again.
    #[arg(long, value_name = "PRINCIPAL")]
    pub clear_principal: Option<String>,
    /// The most of the cluster (each resource kind on its own) the principal's reservations
    /// may hold at any instant, in percent.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    pub instantaneous_percent: Option<f64>,
    /// The most they may hold on average over any integral window, in percent.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    pub integral_percent: Option<f64>,
    /// The sliding window of the integral cap: `12h`, `1d`.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub integral_window: Option<std::time::Duration>,
    /// The plan's time step (`1m` by default, at least `100ms`): windows, leases and work are
    /// in whole quanta of it, so jobs of seconds need a short one. It can change only while no
    /// reservation is accepted.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub quantum: Option<std::time::Duration>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

fn parse_percent(text: &str) -> Result<f64, String> {
    super::parse_number(
        text,
        |x| x > 0.0 && x <= 100.0,
        "a cap is a percentage in (0, 100]",
    )
}

/// Flags of `fullerene reservation create` and `update`.
#[derive(Args, Debug)]
pub(crate) struct WriteReservationArgs {
    /// The reservation's name: 1 to 128 letters, digits, `-`, `_` and `.`.
    pub name: String,
    /// The request in RDL (Rayon §3.1): `atom(RESOURCES; g=N, h=N, l=SPAN, w=SPAN)`, `all(...)`,
    /// `any(...)`, `order(...)`, `window(EXPR, s=SPAN, f=SPAN)`, `repeat(EXPR, every=SPAN,
    /// count=N)`; windows count from the moment the masters accept the request.
    #[arg(
        long,
        value_name = "RDL",
        conflicts_with = "rdl_file",
        required_unless_present = "rdl_file"
    )]
    pub rdl: Option<String>,
    /// Read the request from this file (`-` for standard input).
    #[arg(long, value_name = "PATH")]
    pub rdl_file: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Flags of the subcommands that name one reservation.
#[derive(Args, Debug)]
pub(crate) struct NamedReservationArgs {
    /// The reservation's name.
    pub name: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The reservations as `fullerene reservation list --json` prints them.
#[derive(Serialize)]
struct ReservationList {
    accepted: Vec<ReservationInfo>,
    rejected: Vec<RejectedReservationInfo>,
}

/// Runs a `reservation` subcommand.
pub(crate) fn run_reservation(command: ReservationCommand, json: &JsonOutput) -> Result<()> {
    match command {
        ReservationCommand::Create(args) => write_request(args, "accepted", json, |name, rdl| {
            ReservationCall::Create { name, rdl }
        }),
        ReservationCommand::Update(args) => write_request(args, "updated", json, |name, rdl| {
            ReservationCall::Update { name, rdl }
        }),
        ReservationCommand::Delete(args) => {
            let message = format!("reservation {} deleted", args.name);
            let call = ReservationCall::Delete { name: args.name };
            write(&args.cluster, call, message, json)
        }
        ReservationCommand::List(cluster) => {
            let list = list_all(&cluster)?;
            json.emit(&list, || render_list(&list))
        }
        ReservationCommand::Policy(PolicyCommand::Show(cluster)) => {
            let policy = current_policy(&cluster)?;
            json.emit(&policy, || render_policy(&policy))
        }
        ReservationCommand::Policy(PolicyCommand::Set(args)) => set_policy(args, json),
        ReservationCommand::Show(args) => {
            let request = OperatorRequest::ShowReservation { name: args.name };
            let info = match ask(&args.cluster, request)? {
                OperatorResponse::Reservation(info) => info,
                other => bail!("unexpected answer to a reservation read: {other:?}"),
            };
            json.emit(&info, || render_one(&info))
        }
    }
}

/// Changes the policy by read, change, write (it is one replicated value: two operators
/// changing it at once may lose one change; `policy show` tells).
fn set_policy(args: SetPolicyArgs, json: &JsonOutput) -> Result<()> {
    let caps_given = args.instantaneous_percent.is_some()
        || args.integral_percent.is_some()
        || args.integral_window.is_some();
    if args.placement.is_none()
        && !caps_given
        && args.clear_principal.is_none()
        && args.quantum.is_none()
    {
        bail!(
            "nothing to set: give --placement, a cap, --quantum or --clear-principal (see \
             `fullerene reservation policy set --help`)"
        );
    }
    let mut policy = current_policy(&args.cluster)?;
    if let Some(placement) = &args.placement {
        policy.placement = placement.clone();
    }
    if let Some(quantum) = args.quantum {
        policy.quantum_ms = millis(quantum);
    }
    if let Some(principal) = &args.clear_principal {
        if policy.principals.remove(principal).is_none() {
            bail!("principal {principal} has no caps of its own");
        }
    }
    if caps_given {
        let default = policy.default_caps;
        let caps = match &args.principal {
            Some(principal) => policy
                .principals
                .entry(principal.clone())
                .or_insert(default),
            None => &mut policy.default_caps,
        };
        if let Some(percent) = args.instantaneous_percent {
            caps.instantaneous = percent / 100.0;
        }
        if let Some(percent) = args.integral_percent {
            caps.integral = percent / 100.0;
        }
        if let Some(window) = args.integral_window {
            caps.window_ms = millis(window);
        }
    }
    let message = format!("reservation policy set:\n{}", render_policy(&policy));
    runtime()?.block_on(change(
        &args.cluster,
        OperatorRequest::SetReservationPolicy(policy),
        json,
        message,
    ))
}

fn millis(span: std::time::Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

/// Sets the plan's quantum through `client`, by read, change, write, unless it is that
/// already (`fullerene dev` plans its jobs of seconds in tenths of a second).
pub(crate) async fn set_plan_quantum(client: &mut OperatorClient, quantum_ms: u64) -> Result<()> {
    let mut policy = read_policy(client).await?;
    if policy.quantum_ms == quantum_ms {
        return Ok(());
    }
    policy.quantum_ms = quantum_ms;
    match client
        .request(&OperatorRequest::SetReservationPolicy(policy))
        .await?
    {
        OperatorResponse::Done => Ok(()),
        other => bail!("unexpected answer to a reservation policy change: {other:?}"),
    }
}

/// The cluster's reservation policy, read through `client`.
pub(crate) async fn read_policy(client: &mut OperatorClient) -> Result<ReservationPolicy> {
    match client
        .request(&OperatorRequest::ReservationPolicy)
        .await
        .context("cannot read the reservation policy")?
    {
        OperatorResponse::ReservationPolicy(policy) => Ok(policy),
        other => bail!("unexpected answer to a reservation policy read: {other:?}"),
    }
}

fn current_policy(cluster: &ClusterArgs) -> Result<ReservationPolicy> {
    runtime()?.block_on(async { read_policy(&mut operator_client(cluster)?).await })
}

fn render_policy(policy: &ReservationPolicy) -> String {
    let mut out = table(&["principal", "instantaneous", "integral", "over"]);
    let row = |who: String, caps: &ReservationCaps| {
        vec![
            who,
            format!("{:.1}%", caps.instantaneous * 100.0),
            format!("{:.1}%", caps.integral * 100.0),
            fullerene_reservation::rdl::format_duration_ms(caps.window_ms),
        ]
    };
    out.add_row(row("(default)".to_string(), &policy.default_caps));
    for (principal, caps) in &policy.principals {
        out.add_row(row(principal.clone(), caps));
    }
    format!(
        "placement: {}\nquantum: {}\n{out}",
        policy.placement,
        fullerene_reservation::rdl::format_duration_ms(policy.quantum_ms)
    )
}

/// Creates or updates (`call` of the name and the RDL) the reservation `args` describe, saying
/// it was `done` on success.
fn write_request(
    args: WriteReservationArgs,
    done: &str,
    json: &JsonOutput,
    call: impl FnOnce(String, String) -> ReservationCall,
) -> Result<()> {
    let rdl = request_text(&args)?;
    let message = format!("reservation {} {done}", args.name);
    write(&args.cluster, call(args.name, rdl), message, json)
}

/// The request's RDL text, from `--rdl` or `--rdl-file`, checked by the masters' parser.
fn request_text(args: &WriteReservationArgs) -> Result<String> {
    let text = match (&args.rdl, &args.rdl_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .take(MAX_RDL_BYTES as u64 + 1)
                .read_to_string(&mut text)
                .context("cannot read the request from standard input")?;
            text
        }
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the request from {}", path.display()))?,
        (None, None) => bail!("give the request with --rdl or --rdl-file"),
    };
    if text.len() > MAX_RDL_BYTES {
        bail!("the request is over {MAX_RDL_BYTES} bytes of RDL");
    }
    fullerene_reservation::parse(&text)
        .with_context(|| format!("reservation {}: the request is not valid RDL", args.name))?;
    Ok(text)
}

fn write(
    cluster: &ClusterArgs,
    call: ReservationCall,
    message: String,
    json: &JsonOutput,
) -> Result<()> {
    runtime()?.block_on(change(
        cluster,
        OperatorRequest::Reservation(call),
        json,
        message,
    ))
}

/// Every accepted reservation, page by page, and the rejected.
fn list_all(cluster: &ClusterArgs) -> Result<ReservationList> {
    runtime()?.block_on(async {
        let mut client = operator_client(cluster)?;
        let mut list = ReservationList {
            accepted: Vec::new(),
            rejected: Vec::new(),
        };
        let mut after = None;
        loop {
            let request = OperatorRequest::ListReservations {
                after: after.clone(),
            };
            match client.request(&request).await? {
                OperatorResponse::Reservations {
                    accepted,
                    next,
                    rejected,
                } => {
                    list.accepted.extend(accepted);
                    if after.is_none() {
                        list.rejected = rejected;
                    }
                    match next {
                        Some(next) => after = Some(next),
                        None => return Ok(list),
                    }
                }
                other => bail!("unexpected answer to a reservation listing: {other:?}"),
            }
        }
    })
}

/// Sends one request to the leader and returns its answer (a refusal is an error naming why).
fn ask(cluster: &ClusterArgs, request: OperatorRequest) -> Result<OperatorResponse> {
    runtime()?.block_on(async {
        let mut client = operator_client(cluster)?;
        Ok(client.request(&request).await?)
    })
}

/// A span's ends as operators read them, or `-` for a reservation of no work.
fn span(info: &ReservationInfo) -> (String, String) {
    match (info.start_ms, info.end_ms) {
        (Some(start), Some(end)) => (utc_time(start), utc_time(end)),
        _ => ("-".to_string(), "-".to_string()),
    }
}

fn render_list(list: &ReservationList) -> String {
    let mut out = table(&[
        "reservation",
        "owner",
        "phase",
        "from",
        "until",
        "guaranteed now",
    ]);
    for info in &list.accepted {
        let (from, until) = span(info);
        out.add_row(vec![
            info.name.clone(),
            info.owner.clone(),
            info.phase.as_str().to_string(),
            from,
            until,
            resources_or_dash(&info.guaranteed_now),
        ]);
    }
    let mut text = if list.accepted.is_empty() {
        "no accepted reservation".to_string()
    } else {
        out.to_string()
    };
    if !list.rejected.is_empty() {
        let mut rejected = table(&["rejected", "owner", "when", "why"]);
        for info in &list.rejected {
            rejected.add_row(vec![
                info.name.clone(),
                info.owner.clone(),
                utc_time(info.rejected_at_ms),
                info.reason.clone(),
            ]);
        }
        text.push_str(&format!("\n\n{rejected}"));
    }
    text
}

fn render_one(info: &ReservationInfo) -> String {
    let (from, until) = span(info);
    let mut out = table(&["field", "value"]);
    for (field, value) in [
        ("reservation", info.name.clone()),
        ("owner", info.owner.clone()),
        ("phase", info.phase.as_str().to_string()),
        ("request", info.rdl.clone()),
        ("windows from", utc_time(info.anchor_ms)),
        ("accepted", utc_time(info.admitted_at_ms)),
        ("from", from),
        ("until", until),
        ("guaranteed now", resources_or_dash(&info.guaranteed_now)),
    ] {
        out.add_row(vec![field.to_string(), value]);
    }
    let mut steps = table(&["from", "until", "guaranteed"]);
    for step in &info.allocation {
        steps.add_row(vec![
            utc_time(step.start_ms),
            utc_time(step.end_ms),
            step.resources.to_string(),
        ]);
    }
    format!("{out}\n\nthe plan's guarantee over time:\n{steps}")
}

fn resources_or_dash(resources: &fullerene_proto::ResourceVec) -> String {
    if resources.is_zero() {
        "-".to_string()
    } else {
        resources.to_string()
    }
}
