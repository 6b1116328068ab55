//! The `fullerene` command: one binary for operators, framework authors and developers.

mod commands;
mod config;
mod naming;
mod output;

use std::ffi::OsString;
use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use crate::output::JsonOutput;

/// Fullerene: a cluster manager with two-level offers, Graphene's DAG-aware packing and
/// Carbyne's altruism.
///
/// Every flag can also come from the config file (`--config`, one TOML table per subcommand, keys
/// named like the long flags) or from the environment variable shown in each command's help.
/// Precedence: flags, then environment, then config file, then defaults.
#[derive(Parser, Debug)]
#[command(
    name = "fullerene",
    version = commands::version::VERSION_LINE,
    about,
    long_about,
    propagate_version = true
)]
struct Cli {
    /// Config file (TOML) with defaults for any subcommand's flags.
    #[arg(long, global = true, env = "FULLERENE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    /// Log filter: a level (off, error, warn, info, debug, trace) or a tracing directive list
    /// such as `info,fullerene_master=debug`. Default: warn; info for `master`, off for `chaos`.
    /// Colored only on a terminal, and never with NO_COLOR set.
    #[arg(
        long,
        global = true,
        env = "FULLERENE_LOG",
        default_value = "warn",
        value_name = "FILTER",
        value_parser = parse_log_filter
    )]
    log_level: String,

    /// Machine-readable output: JSON on standard output instead of tables; with `--json=FILE`
    /// (or `--json FILE.json`), tables on standard output and the JSON written to FILE.
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, value_name = "FILE")]
    json: Option<Option<PathBuf>>,

    #[command(subcommand)]
    command: Commands,
}

// Parsed once per process: boxing the agent's flags would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Commands {
    /// Certificates for the cluster's mutual TLS.
    #[command(subcommand)]
    Certs(commands::certs::CertsCommand),
    /// Bearer tokens for the masters' HTTP API (`--http-tokens`).
    #[command(subcommand)]
    Token(commands::token::TokenCommand),
    /// Simulate workloads under one or several scheduling policies, in virtual time.
    Sim(commands::sim::SimArgs),
    /// Build Graphene's offline schedule for jobs and compare it with the lower bound.
    Plan(commands::plan::PlanArgs),
    /// Run a replicated master (Raft over RocksDB, mutual-TLS QUIC).
    Master(commands::master::MasterArgs),
    /// Run the agent of this machine: report its resources to the masters, run tasks in
    /// sandboxes (cgroups v2 limits where available) and deliver their status updates reliably.
    ///
    /// Every status update is checkpointed in the work directory before it is sent and resent
    /// until the master acknowledges it; a restarted agent recovers its tasks from there,
    /// re-attaches to processes still running and re-registers with the same id (the one in its
    /// certificate). Stopping the agent (SIGTERM, ctrl-c) leaves its tasks running.
    ///
    /// Example: `fullerene agent --master-addrs 127.0.0.1:5051,127.0.0.1:5052 --work-dir data/a1
    /// --certs-dir certs --id 1 --resources disk_mbps=1000,net_mbps=10000 --attributes rack=r1`
    ///
    /// Operators drain an agent for maintenance with `fullerene agent drain` (and `undrain`).
    Agent(commands::agent::AgentCommand),
    /// Operator view and membership of the replicated masters.
    #[command(subcommand)]
    Cluster(commands::cluster::ClusterCommand),
    /// The agents the masters know: address, state, resources used and total, last heartbeat.
    Agents(commands::cluster::ClusterArgs),
    /// The frameworks the masters know: group, connection, active tasks.
    Frameworks(commands::cluster::ClusterArgs),
    /// The tasks the masters track (all, or one framework's with `--framework`); with
    /// `--all`, also the finished tasks the cluster keeps, with how and when they ended.
    Tasks(commands::status::TasksArgs),
    /// What happened in the cluster: leader changes, agents registered, unreachable, lost and
    /// drained, frameworks subscribed, reconnected and torn down, task state changes.
    ///
    /// A table of the latest events by default, one JSON object per line with `--json`;
    /// `--follow` keeps printing them as they happen, across leader changes, without a gap or
    /// a repeat. The leader keeps the latest events only (`fullerene master --events-kept`).
    Events(commands::events::EventsArgs),
    /// Act on one task (`kill`).
    #[command(subcommand)]
    Task(commands::control::TaskCommand),
    /// Act on one framework (`teardown`).
    #[command(subcommand)]
    Framework(commands::control::FrameworkCommand),
    /// Fairness groups, set by operators: which principals' frameworks share a deficit
    /// counter, and each group's weight (frameworks cannot choose their group).
    #[command(subcommand)]
    Groups(commands::groups::GroupsCommand),
    /// The cluster's quotas: frameworks per principal, tasks per framework, pending offers.
    #[command(subcommand)]
    Quotas(commands::groups::QuotasCommand),
    /// Reservations (Rayon): capacity reserved ahead for production jobs with deadlines,
    /// placed in the masters' replicated plan; create, update, delete, list, show.
    #[command(subcommand)]
    Reservation(commands::reservation::ReservationCommand),
    /// Fault injection: the whole-system deterministic simulation under seeded faults, with
    /// the invariant checker's verdict.
    #[command(subcommand)]
    Chaos(commands::chaos::ChaosCommand),
    /// Benchmarks on real processes (Raft commit rate, latency and failover time).
    #[command(subcommand)]
    Bench(commands::bench::BenchCommand),
    /// Run DAG jobs from a workload file on a running cluster (the SDK's DAG-job framework).
    #[command(subcommand)]
    Job(commands::job::JobCommand),
    /// A whole local cluster in one command: starts masters and agents (sleep executor) on
    /// loopback, runs a sample of TPC-H jobs with the DAG-job framework (a progress bar per job,
    /// then the JCT summary), and stops everything it started at the end, on error and on
    /// ctrl-c. With `--policy decima` the jobs run in one session framework under Decima's
    /// learned policy (`--model`, or the built-in one).
    ///
    /// The time scale is chosen from the sample's work and the cluster's capacity so that the
    /// run takes about `--target-secs` (60 s); the masters' HTTP API (`/state`, `/metrics`) is
    /// printed while it runs.
    ///
    /// Example: `fullerene dev --masters 3 --agents 5 --jobs 8`. Config file table: `[dev]`.
    Dev(commands::dev::DevArgs),
    /// Decima's multi-job setting: one framework runs many jobs and a policy picks each next
    /// stage and its job's parallelism; `eval` compares the policies on unseen job sequences.
    #[command(subcommand)]
    Learn(commands::learn::LearnCommand),
    /// This binary's version, git commit, target, profile and enabled features (`--json` for
    /// machines).
    Version,
    /// A shell completion script on standard output.
    ///
    /// Install: bash `fullerene completions bash > ~/.local/share/bash-completion/completions/fullerene`;
    /// zsh `fullerene completions zsh > ~/.zfunc/_fullerene` (with `fpath+=~/.zfunc` before
    /// `compinit`); fish `fullerene completions fish > ~/.config/fish/completions/fullerene.fish`.
    Completions(commands::shell_docs::CompletionsArgs),
    /// Man pages for `fullerene` and every subcommand, written to a directory (read one with
    /// `man -l DIR/fullerene-job-run.1`, or install them under a `man1` directory of MANPATH).
    Man(commands::shell_docs::ManArgs),
}

fn main() -> std::process::ExitCode {
    pin_threads();
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", error_chain(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Sets the thread counts of rayon and candle (Decima's model, `fullerene learn`, `--policy
/// decima`) where the environment does not, before any thread starts:
/// - `RAYON_NUM_THREADS` to the machine's cores: candle otherwise looks the core count up in
///   `/proc/cpuinfo` on every matrix product, which made a decision six times slower;
/// - `CANDLE_NUM_THREADS` to 1: training and evaluation run their episodes and gradient
///   batches in parallel on rayon's threads already, and candle's own pool of threads, which
///   serves one caller at a time, had them spin on its barrier (40% of a training run's CPU
///   under `perf`). One thread each: three batch-setting iterations of 8 episodes took 35 s
///   instead of 64 s on the two-core machine, with the same results (a model's operations
///   are too small to gain from splitting: 5,538 weights).
fn pin_threads() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        std::env::set_var("RAYON_NUM_THREADS", cores.to_string());
    }
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

/// The error and its causes, outermost first, joined by `: `, each said once: many library
/// errors already end with their source's text (`cannot read workload: No such file...`),
/// which `{:#}` would print again after it.
fn error_chain(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let message = cause.to_string();
        if text.contains(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    text
}

fn run() -> Result<()> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let args = with_config_file(normalize_json_flag(args))?;
    let matches = Cli::command().get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let defaulted =
        matches.value_source("log_level") == Some(clap::parser::ValueSource::DefaultValue);
    let filter = match &cli.command {
        // The simulation's cores log what production would (a refused update, a lost quorum),
        // by the thousand per second: `chaos sim` logs only when asked.
        Commands::Chaos(_) if defaulted => "off",
        // A master is a daemon whose log is read later: it says at start who it is and where it
        // listens, and when it leads or follows, at info.
        Commands::Master(_) if defaulted => "info",
        _ => &cli.log_level,
    };
    init_tracing(filter)?;
    let json = JsonOutput::from_flag(cli.json);
    match cli.command {
        Commands::Certs(cmd) => commands::certs::run(cmd, &json),
        Commands::Token(cmd) => commands::token::run(cmd, &json),
        Commands::Sim(args) => commands::sim::run(args, &json),
        Commands::Plan(args) => commands::plan::run(args, &json),
        Commands::Master(args) => commands::master::run(args),
        Commands::Agent(agent) => match agent.action {
            Some(action) => commands::control::run_agent_action(action, &json),
            None => commands::agent::run(agent.run),
        },
        Commands::Cluster(cmd) => commands::cluster::run(cmd, &json),
        Commands::Bench(cmd) => commands::bench::run(cmd, &json),
        Commands::Chaos(cmd) => commands::chaos::run(cmd, &json),
        Commands::Job(cmd) => commands::job::run(cmd, &json),
        Commands::Dev(args) => commands::dev::run(args, &json),
        Commands::Learn(cmd) => commands::learn::run(cmd, &json),
        Commands::Agents(args) => commands::status::agents(args, &json),
        Commands::Groups(cmd) => commands::groups::run_groups(cmd, &json),
        Commands::Quotas(cmd) => commands::groups::run_quotas(cmd, &json),
        Commands::Reservation(cmd) => commands::reservation::run_reservation(cmd, &json),
        Commands::Frameworks(args) => commands::status::frameworks(args, &json),
        Commands::Tasks(args) => commands::status::tasks(args, &json),
        Commands::Events(args) => commands::events::run(args, &json),
        Commands::Task(cmd) => commands::control::run_task(cmd, &json),
        Commands::Framework(cmd) => commands::control::run_framework(cmd, &json),
        Commands::Version => commands::version::run(&json),
        Commands::Completions(args) => commands::shell_docs::completions(&args, Cli::command()),
        Commands::Man(args) => commands::shell_docs::man(&args, Cli::command()),
    }
}

/// Finds `--config FILE` (or `FULLERENE_CONFIG`) before the full parse, and folds the file's
/// values into the arguments.
fn with_config_file(args: Vec<OsString>) -> Result<Vec<OsString>> {
    let mut path: Option<PathBuf> = std::env::var_os("FULLERENE_CONFIG").map(PathBuf::from);
    let mut iter = args.iter().skip(1);
    while let Some(arg) = iter.next() {
        let Some(text) = arg.to_str() else { continue };
        if text == "--" {
            break;
        }
        if let Some(value) = text.strip_prefix("--config=") {
            path = Some(PathBuf::from(value));
        } else if text == "--config" {
            path = iter.next().map(PathBuf::from);
        }
    }
    match path {
        Some(path) => config::apply_config_file(&Cli::command(), args, &path),
        None => Ok(args),
    }
}

/// `--json FILE.json` means `--json=FILE.json`; any other word after `--json` is not its
/// value (it may be a subcommand or a positional argument), so `--json` stays a bare flag.
fn normalize_json_flag(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut iter = args.into_iter().peekable();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(iter);
            break;
        }
        if arg == "--json" {
            let next_is_file = iter
                .peek()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".json") || n == "-");
            if next_is_file {
                let mut joined = OsString::from("--json=");
                joined.push(iter.next().unwrap_or_default());
                out.push(joined);
                continue;
            }
        }
        out.push(arg);
    }
    out
}

/// The levels a log filter's directives may name.
const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Checks a `--log-level` filter: each directive is a level, or `TARGET=LEVEL`. Tracing alone
/// would take a misspelt level (`loud`) for a target's name and log nothing of it.
fn parse_log_filter(text: &str) -> Result<String, String> {
    for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = directive
            .rsplit_once('=')
            .map_or(directive, |(_, level)| level);
        if !LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{directive}` names no level: use one of {}, or TARGET=LEVEL directives such \
                 as `info,fullerene_master=debug`",
                LOG_LEVELS.join(", ")
            ));
        }
    }
    EnvFilter::try_new(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

fn init_tracing(filter: &str) -> Result<()> {
    let filter = EnvFilter::try_new(filter)
        .map_err(|e| anyhow::anyhow!("invalid --log-level `{filter}`: {e}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colored(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_writer(std::io::stderr)
        .with_target(true)
        .init();
    Ok(())
}

/// Whether log lines get colors: only on a terminal (a log file or a pipe would keep the
/// escape codes), and not when `NO_COLOR` is set to anything non-empty (no-color.org).
fn colored(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    fn parse(words: &[&str]) -> Cli {
        let args = normalize_json_flag(words.iter().map(OsString::from).collect());
        Cli::try_parse_from(args).expect("parses")
    }

    /// The annotated example config file at the repository's root.
    const EXAMPLE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/fullerene.toml");

    /// The example config file, read the way the binary reads `--config`: every option a
    /// master and an agent take is in it, each value parses, and each flag with a default is
    /// written with that default (the file says so).
    #[test]
    fn the_example_config_sets_every_master_and_agent_option() {
        let path = std::path::Path::new(EXAMPLE_CONFIG);
        let text = std::fs::read_to_string(path).expect("the example config reads");
        let table: toml::Table = text.parse().expect("the example config is TOML");
        for subcommand in ["master", "agent"] {
            let words = ["fullerene", "--config", EXAMPLE_CONFIG, subcommand];
            let args = config::apply_config_file(
                &Cli::command(),
                words.iter().map(OsString::from).collect(),
                path,
            )
            .expect("the example config applies");
            let cli = Cli::try_parse_from(args)
                .unwrap_or_else(|error| panic!("[{subcommand}] does not parse: {error}"));
            match cli.command {
                Commands::Master(master) => {
                    assert_eq!((master.id, master.peers.len()), (1, 3));
                    assert!(master.bootstrap && !master.join);
                }
                Commands::Agent(agent) => {
                    assert_eq!((agent.run.id, agent.run.masters.addrs.len()), (Some(1), 3));
                }
                other => panic!("parsed as {other:?}"),
            }

            let section = table[subcommand].as_table().expect("a table");
            let command = Cli::command();
            let options = command.find_subcommand(subcommand).expect("a subcommand");
            for arg in options.get_arguments().filter(|arg| !arg.is_global_set()) {
                let Some(long) = arg.get_long() else { continue };
                let key = long.replace('-', "_");
                let value = section
                    .get(&key)
                    .unwrap_or_else(|| panic!("[{subcommand}] of the example lacks `{key}`"));
                let defaults: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|value| value.to_string_lossy().into_owned())
                    .collect();
                if arg.get_action().takes_values() && !defaults.is_empty() {
                    assert_eq!(
                        config::scalar_to_string(value).expect("a scalar"),
                        defaults.join(","),
                        "[{subcommand}] `{key}` is not the default it claims to be"
                    );
                }
            }
        }
    }

    #[test]
    fn an_error_that_repeats_its_source_is_printed_with_the_source_once() {
        let os = std::io::Error::from(std::io::ErrorKind::NotFound);
        let read = fullerene_sdk::WorkloadError::Io {
            file: "w.jsonl".into(),
            source: os,
        };
        let err = anyhow::Error::new(read).context("cannot run the jobs");
        let text = error_chain(&err);
        assert_eq!(
            text.matches("entity not found").count(),
            1,
            "the OS error once: {text}"
        );
        assert!(
            text.starts_with("cannot run the jobs: w.jsonl: cannot read workload"),
            "{text}"
        );
        let err = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(error_chain(&err), "outer: middle: inner");
    }

    #[test]
    fn logs_are_colored_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colored(true, None));
        assert!(colored(true, Some(OsStr::new(""))));
        assert!(!colored(true, Some(OsStr::new("1"))));
        assert!(!colored(false, None));
    }

    #[test]
    fn log_levels_and_directives_are_accepted_and_anything_else_refused() {
        for good in [
            "warn",
            "INFO",
            "info,fullerene_master=debug",
            "off",
            "raft=trace,warn",
        ] {
            let cli = parse(&[
                "fullerene",
                "--log-level",
                good,
                "certs",
                "init",
                "--certs-dir",
                "d",
            ]);
            assert_eq!(cli.log_level, good);
        }
        for bad in ["loud", "info,fullerene_master", "fullerene_master=loud"] {
            let err = Cli::try_parse_from(["fullerene", "--log-level", bad, "sim"])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("--log-level") && err.contains("off, error, warn, info, debug, trace"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn json_flag_takes_a_file_only_when_one_is_given() {
        let cli = parse(&["fullerene", "--json", "certs", "init", "--certs-dir", "d"]);
        assert!(matches!(
            JsonOutput::from_flag(cli.json),
            JsonOutput::Stdout
        ));
        let cli = parse(&[
            "fullerene",
            "certs",
            "init",
            "--certs-dir",
            "d",
            "--json",
            "out.json",
        ]);
        assert!(
            matches!(JsonOutput::from_flag(cli.json), JsonOutput::File(p) if p == std::path::Path::new("out.json"))
        );
        let cli = parse(&["fullerene", "sim", "--json=report", "--jobs", "3"]);
        assert!(
            matches!(JsonOutput::from_flag(cli.json), JsonOutput::File(p) if p == std::path::Path::new("report"))
        );
        let cli = parse(&["fullerene", "sim", "--json"]);
        assert!(matches!(
            JsonOutput::from_flag(cli.json),
            JsonOutput::Stdout
        ));
    }
}
