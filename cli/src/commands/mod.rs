//! One module per subcommand: argument definitions (clap derive) and the thin code that calls
//! the libraries and presents their results.

pub(crate) mod agent;
pub(crate) mod bench;
pub(crate) mod bench_scale;
pub(crate) mod certs;
pub(crate) mod chaos;
pub(crate) mod cluster;
pub(crate) mod control;
pub(crate) mod dev;
pub(crate) mod events;
pub(crate) mod groups;
pub(crate) mod job;
pub(crate) mod learn;
pub(crate) mod master;
pub(crate) mod plan;
pub(crate) mod reservation;
pub(crate) mod shell_docs;
pub(crate) mod sim;
pub(crate) mod status;
pub(crate) mod token;
pub(crate) mod version;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use fullerene_transport::{TransportConfig, DEFAULT_IDLE_TIMEOUT, DEFAULT_KEEP_ALIVE};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The single-threaded runtime an operator command runs its client on.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// How fast a QUIC connection gives up on a silent peer: the same flags on masters, agents and
/// frameworks (QUIC uses the smaller idle timeout of the two sides).
#[derive(Args, Clone, Debug)]
pub(crate) struct QuicArgs {
    /// A silent connection sends a keep-alive this often, in milliseconds.
    #[arg(long, value_name = "MS", env = "FULLERENE_QUIC_KEEP_ALIVE_MS", default_value_t = DEFAULT_KEEP_ALIVE.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub quic_keep_alive_ms: u64,
    /// A peer heard nothing from (keep-alives included) for this long, in milliseconds, is
    /// dead: a client moves to another master. The default (500 ms) matches the masters' own
    /// election timeout on a LAN; raise both on slower or lossier networks.
    #[arg(long, value_name = "MS", env = "FULLERENE_QUIC_IDLE_TIMEOUT_MS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_millis() as u64, value_parser = clap::value_parser!(u64).range(2..))]
    pub quic_idle_timeout_ms: u64,
}

impl Default for QuicArgs {
    /// The transport's defaults.
    fn default() -> QuicArgs {
        QuicArgs {
            quic_keep_alive_ms: DEFAULT_KEEP_ALIVE.as_millis() as u64,
            quic_idle_timeout_ms: DEFAULT_IDLE_TIMEOUT.as_millis() as u64,
        }
    }
}

impl QuicArgs {
    /// The transport settings, checked.
    pub(crate) fn config(&self) -> Result<TransportConfig> {
        let config = TransportConfig {
            keep_alive_interval: Duration::from_millis(self.quic_keep_alive_ms),
            idle_timeout: Duration::from_millis(self.quic_idle_timeout_ms),
            ..TransportConfig::default()
        };
        config
            .validate()
            .context("invalid --quic-keep-alive-ms / --quic-idle-timeout-ms")?;
        Ok(config)
    }
}

/// Parses an overbooking allowance flag with the rule masters and agents share
/// ([`Overbooking`](fullerene_scheduling::Overbooking)'s `FromStr`), so that both accept the same
/// values and say the same thing about a bad one.
pub(crate) fn parse_allowance(text: &str) -> Result<f64, fullerene_scheduling::AllowanceError> {
    text.parse::<fullerene_scheduling::Overbooking>()
        .map(|allowance| allowance.0)
}

/// `--master-addrs` of every command that talks to a cluster (operators' commands, agents,
/// `job run`).
#[derive(Args, Debug, Clone)]
pub(crate) struct MasterAddrs {
    /// Any of the masters, by name or address: `10.0.0.1:5050,m2.example:5050`. Followers
    /// redirect to the leader; they are tried in turn, with exponential backoff and jitter,
    /// until one answers. Names are resolved once, at start.
    #[arg(
        long = "master-addrs",
        short = 'm',
        env = "FULLERENE_MASTER_ADDRS",
        value_name = "HOST:PORT,...",
        value_delimiter = ',',
        value_parser = parse_host_port,
        required = true
    )]
    pub addrs: Vec<SocketAddr>,
}

/// `--policy` of the commands that run DAG jobs on a cluster (`job run`, `dev`).
#[derive(Args, Debug)]
pub(crate) struct JobPolicyArg {
    /// The intra-job policy: graphene+carbyne, graphene, carbyne, drf, tetris, cp, bfs, fifo,
    /// sjf; or decima, Decima's learned policy over all jobs run as one session framework
    /// (`--model`).
    #[arg(
        long,
        short,
        env = "FULLERENE_POLICY",
        value_name = "POLICY",
        default_value = "graphene+carbyne"
    )]
    pub policy: String,
}

impl JobPolicyArg {
    /// The policy named: an intra-job policy, or `decima`.
    pub(crate) fn choice(&self) -> Result<PolicyChoice> {
        PolicyChoice::parse(&self.policy)
    }
}

/// How a command that runs many jobs schedules them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PolicyChoice {
    /// Each job as its own framework with this intra-job policy; the master shares the
    /// cluster between them.
    Job(fullerene_sdk::policy::PolicyKind),
    /// Every job in one framework, a session whose learned policy (Decima §5.2, issue 18)
    /// picks the next stage among all jobs and each job's parallelism.
    Decima,
}

impl PolicyChoice {
    /// The name on the command line.
    pub(crate) const DECIMA: &'static str = "decima";

    /// `decima` or an intra-job policy's name; an error names `--policy`.
    pub(crate) fn parse(name: &str) -> Result<PolicyChoice> {
        name.parse().context("invalid --policy")
    }

    /// The name on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PolicyChoice::Job(kind) => kind.name(),
            PolicyChoice::Decima => Self::DECIMA,
        }
    }
}

impl std::str::FromStr for PolicyChoice {
    type Err = anyhow::Error;

    /// `decima` or an intra-job policy's name, the error naming no flag (for lists such as
    /// `sim --compare`).
    fn from_str(name: &str) -> Result<PolicyChoice> {
        if name.trim() == Self::DECIMA {
            return Ok(PolicyChoice::Decima);
        }
        use fullerene_sdk::policy::PolicyKind;
        match name.parse::<PolicyKind>() {
            Ok(kind) => Ok(PolicyChoice::Job(kind)),
            Err(_) => {
                let known: Vec<&str> = PolicyKind::ALL
                    .iter()
                    .map(|k| k.name())
                    .chain([Self::DECIMA])
                    .collect();
                bail!(
                    "unknown policy `{}` (known: {})",
                    name.trim(),
                    known.join(", ")
                )
            }
        }
    }
}

/// `--model` of the commands that can run `--policy decima`.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct ModelArg {
    /// With `--policy decima`: the trained model (`fullerene learn train --out`). Default:
    /// the model built in (`learn/models/decima-batch.model`).
    #[arg(long, env = "FULLERENE_MODEL", value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// With `--policy decima`: how it takes its actions from the model's probabilities
    /// (default: sampled).
    #[arg(long = "action-choice", value_name = "CHOICE", value_enum)]
    pub action_choice: Option<ActionChoice>,
}

/// How Decima's learned policy picks among the actions its model scores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ActionChoice {
    /// Drawn from the probabilities, seeded by the run (`--seed`; in `learn eval`, each
    /// episode's seed), as Decima runs its policy: its evaluation (`test.py`) uses the
    /// training agent, which samples.
    #[default]
    Sampled,
    /// The most likely stage and limit at each decision.
    Greedy,
}

impl ModelArg {
    /// How `--policy decima` takes its actions.
    pub(crate) fn choice(&self) -> ActionChoice {
        self.action_choice.unwrap_or_default()
    }

    /// Refuses a `--model` or `--action-choice` the command will not read: `decima` says
    /// whether Decima runs (in `sim`, also as one of --compare or --baseline). A model set by
    /// `FULLERENE_MODEL` is not refused: the environment serves every command, only some of
    /// which run Decima.
    pub(crate) fn check_used(&self, decima: bool) -> Result<()> {
        if let (Some(choice), false) = (self.action_choice, decima) {
            bail!(
                "--action-choice {} is only read with --policy decima (in `sim`, also with \
                 decima in --compare or --baseline): drop it or run decima",
                clap::ValueEnum::to_possible_value(&choice)
                    .map_or_else(String::new, |v| v.get_name().to_string())
            );
        }
        let Some(model) = &self.model else {
            return Ok(());
        };
        let from_env =
            std::env::var_os("FULLERENE_MODEL").is_some_and(|env| Path::new(&env) == model);
        if !decima && !from_env {
            bail!(
                "--model is only read with --policy decima (in `sim`, also with decima in \
                 --compare or --baseline): drop it or run decima"
            );
        }
        Ok(())
    }
}

/// Parses `HOST:PORT`, a name or an IP address, into the address it resolves to now (the first
/// IPv4 one the resolver gives, else the first): `--master-addrs` and `--peers` take host names
/// as well as addresses. A name is resolved once, when the command starts.
pub(crate) fn parse_host_port(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    if !text.contains(':') {
        return Err(format!("`{text}` is not HOST:PORT (the port is missing)"));
    }
    let resolved: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("`{text}` is not HOST:PORT or cannot be resolved: {e}"))?
        .collect();
    resolved
        .iter()
        .find(|addr| addr.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| format!("`{text}` resolves to no address"))
}

/// Parses a flag that must be a finite number > 0 (a time scale): clap reports the flag and
/// this reason. Such a flag also takes `allow_negative_numbers`, so that `-1` is refused as a
/// number out of range rather than taken for an unknown flag.
pub(crate) fn parse_positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(format!("`{text}` is not a number > 0")),
    }
}

/// A finite number for which `within` holds; otherwise the error says `rule` (what the flag
/// takes, as "a weight is a number >= 0") and the text given. The one rule of the numeric
/// flags below.
pub(crate) fn parse_number(
    text: &str,
    within: impl Fn(f64) -> bool,
    rule: &str,
) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if !(value.is_finite() && within(value)) {
        return Err(format!("{rule}, not {text}"));
    }
    Ok(value)
}

/// A fraction of the jobs, in (0, 1] (`--deadlines` of `sim`, `job run` and `dev`).
pub(crate) fn parse_fraction(text: &str) -> Result<f64, String> {
    parse_number(
        text,
        |x| x > 0.0 && x <= 1.0,
        "a fraction of the jobs is in (0, 1]",
    )
}

/// A share of the cluster, in (0, 1] (`--capacity-shares`).
pub(crate) fn parse_fraction_of_cluster(text: &str) -> Result<f64, String> {
    parse_number(
        text,
        |x| x > 0.0 && x <= 1.0,
        "a share of the cluster is in (0, 1]",
    )
}

/// A weight, finite and >= 0 (a group's `--weight`, `learn train --entropy-start`).
pub(crate) fn parse_weight(text: &str) -> Result<f64, String> {
    parse_number(text, |x| x >= 0.0, "a weight must be finite and >= 0")
}

/// A deadline's slack over the job's lower bound, >= 0 (`--deadline-slack`).
pub(crate) fn parse_slack(text: &str) -> Result<f64, String> {
    parse_number(text, |x| x >= 0.0, "a slack is a number >= 0")
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

/// A signal that stops a command which cleans up on its way out (`dev`, `job run`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caught {
    /// What happened, for the last message: "interrupted", "terminated", "hung up".
    pub(crate) name: &'static str,
    /// The signal's number.
    pub(crate) number: i32,
}

impl std::fmt::Display for Caught {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// SIGINT (ctrl-c), SIGTERM and SIGHUP (a closed terminal or a dropped ssh session): a command
/// that cleans up on its way out does so for each alike.
pub(crate) struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Must be called inside a tokio runtime.
    pub(crate) fn new() -> Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            hangup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
        })
    }

    /// The next signal.
    pub(crate) async fn next(&mut self) -> Caught {
        let (name, number) = tokio::select! {
            _ = self.interrupt.recv() => ("interrupted", libc::SIGINT),
            _ = self.terminate.recv() => ("terminated", libc::SIGTERM),
            _ = self.hangup.recv() => ("hung up", libc::SIGHUP),
        };
        Caught { name, number }
    }
}
