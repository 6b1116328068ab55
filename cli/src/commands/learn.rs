//! `fullerene learn`: Decima's learned policy (issue 18). `train` trains it by REINFORCE in
//! the simulator's session environment; `eval` runs it and the hand-written session policies
//! on job sequences training never saw, in Decima's batch or streaming setting, and prints
//! each policy's average JCT with its reduction against every other.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::builder::TypedValueParser as _;
use clap::{Args, Subcommand, ValueEnum};
use fullerene_learn::{Choice, DecimaPolicy, IterationReport, ModelFile, TrainConfig, Trainer};
use fullerene_sdk::session::{SessionPolicyFactory, SessionPolicyKind};
use fullerene_sdk::{read_workload, Job};
use fullerene_sim::session::{
    compare_sessions, mean_gap_for_load, Contender, SessionComparison, SessionEnv, SessionSetting,
    DECIMA_BATCH_JOBS, DECIMA_EXECUTORS, DECIMA_MOVING_DELAY_S, DECIMA_STREAM_LOAD,
    DEFAULT_STREAM_JOBS,
};

use crate::commands::plan::progress_bar;
use crate::commands::{parse_number, parse_positive, parse_weight, resolve_workload, ActionChoice};
use crate::output::{table, JsonOutput};

/// `fullerene learn` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum LearnCommand {
    /// Compare the multi-job session policies on job sequences not used in training (seeds
    /// from `--first-seed`), in Decima's batch or streaming setting: average JCT per policy
    /// and the reduction of each against every other.
    ///
    /// Example: `fullerene learn eval --setting batch --seeds 20 --model decima.model`.
    Eval(EvalArgs),
    /// Train Decima's policy by REINFORCE (Decima §5.3): each iteration runs `--episodes`
    /// episodes of one job sequence with sampled actions (in parallel), baselines them against
    /// each other, and takes one Adam step. A progress bar shows the reward and average JCT;
    /// a checkpoint (`--out` with `.ckpt`) is written every `--checkpoint-every` iterations
    /// and resumed from with `--resume`; the learning curve goes to `--curve` (JSON lines).
    ///
    /// Example: `fullerene learn train --setting batch --iterations 500 --out decima.model`.
    Train(TrainArgs),
    /// Plot a training run's learning curve (`learn train --curve`) as SVG: each iteration's
    /// average JCT over the fair scheduler's on the same jobs (each iteration draws other
    /// jobs, so the ratio is what shows learning), as a moving average.
    ///
    /// Example: `fullerene learn plot --curve curve.jsonl --out curve.svg`.
    Plot(PlotArgs),
}

/// Flags of `fullerene learn plot`.
#[derive(Args, Debug)]
pub(crate) struct PlotArgs {
    /// The learning curve (JSON lines from `learn train --curve`).
    #[arg(long, value_name = "FILE")]
    curve: PathBuf,
    /// The SVG to write.
    #[arg(long, value_name = "PATH", default_value = "learning-curve.svg")]
    out: PathBuf,
    /// Iterations averaged per point.
    #[arg(long = "average-iterations", value_name = "N", default_value_t = 25,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    window: usize,
}

/// How jobs arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Setting {
    /// Decima's batch: `--jobs` (10) random jobs, all at time 0.
    Batch,
    /// Continuous Poisson arrivals at `--load` (85%: Decima's high load), or `--mean-gap-secs`
    /// apart on average.
    Poisson,
}

/// Flags of `fullerene learn eval`.
#[derive(Args, Debug)]
pub(crate) struct EvalArgs {
    #[command(flatten)]
    env: EnvArgs,
    /// Episodes (job sequences), one seed each.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as u64))]
    seeds: u64,
    /// The first episode's seed. Training draws its sequences below this, so the default
    /// evaluates on sequences it never saw.
    #[arg(long, value_name = "SEED", default_value_t = fullerene_learn::EVAL_FIRST_SEED)]
    first_seed: u64,
    /// The hand-written policies to compare, comma-separated (`none`: the model alone).
    #[arg(long, value_name = "NAMES", value_delimiter = ',',
          default_values_t = SessionPolicyKind::ALL.map(|k| k.name().to_string()))]
    policies: Vec<String>,
    /// A trained model (`fullerene learn train --out`): adds `decima`.
    #[arg(long, value_name = "FILE")]
    model: Option<PathBuf>,
    /// How `decima` takes its actions from the model's probabilities.
    #[arg(long = "action-choice", value_name = "CHOICE", value_enum,
          default_value_t = ActionChoice::Sampled, requires = "model")]
    action_choice: ActionChoice,
}

/// Flags of `fullerene learn train`.
#[derive(Args, Debug)]
pub(crate) struct TrainArgs {
    #[command(flatten)]
    env: EnvArgs,
    /// Iterations to run (in all, counting those of a resumed checkpoint).
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    iterations: u64,
    /// Episodes per iteration, all on the iteration's job sequence (Decima: 16).
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=1024).map(|n| n as usize))]
    episodes: usize,
    /// The run's seed: job sequences, initial weights and sampled actions derive from it.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Adam's learning rate.
    #[arg(long, value_name = "RATE", default_value_t = 1e-3, value_parser = parse_positive)]
    learning_rate: f64,
    /// How much the entropy weight falls per iteration, from 1 to 10⁻⁴ (Decima: 10⁻³; a
    /// short run explores less with a larger one).
    #[arg(long, value_name = "RATE", default_value_t = 1e-3, value_parser = parse_positive)]
    entropy_decay: f64,
    /// Where the trained model goes.
    #[arg(long, value_name = "PATH", default_value = "decima.model")]
    out: PathBuf,
    /// Iterations between checkpoints (`<out>.ckpt`, a model file too: `eval --model` reads
    /// it).
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: u64,
    /// Continue from `<out>.ckpt`.
    #[arg(long, conflicts_with = "init_model")]
    resume: bool,
    /// Start from this model's weights (a model file or a checkpoint) instead of random ones,
    /// with a new optimiser, at iteration 0: e.g. fine-tune the batch-trained model under
    /// `--setting poisson`. Give a low `--entropy-start` with it, or the entropy bonus first
    /// undoes what the model learnt.
    #[arg(long = "init-model", value_name = "FILE")]
    init_model: Option<PathBuf>,
    /// The entropy weight at iteration 0 (Decima: 1); it falls by `--entropy-decay` per
    /// iteration to 10⁻⁴.
    #[arg(long = "entropy-start", value_name = "WEIGHT", default_value_t = 1.0,
          value_parser = parse_weight)]
    entropy_start: f64,
    /// Append each iteration's figures to this file, one JSON object per line.
    #[arg(long, value_name = "FILE")]
    curve: Option<PathBuf>,
}

/// The session environment, shared by `train` and `eval`.
#[derive(Args, Debug)]
pub(crate) struct EnvArgs {
    /// Workload file (JSON Lines, `shared/workloads/FORMAT.md`). Default: the shared TPC-H file.
    #[arg(long, short, env = "FULLERENE_WORKLOAD", value_name = "FILE")]
    workload: Option<PathBuf>,
    /// Batch (all jobs at 0) or Poisson arrivals.
    #[arg(long, value_enum, default_value_t = Setting::Batch)]
    setting: Setting,
    /// Executors (Decima's task slots, one task each). Not `--executors`, which names an
    /// agent's task executors.
    #[arg(long = "executor-slots", value_name = "N", default_value_t = DECIMA_EXECUTORS,
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as usize))]
    executors: usize,
    /// Jobs per episode (default: 10 in batch, 100 with Poisson arrivals).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as usize))]
    jobs: Option<usize>,
    /// Poisson arrivals: the share of the executors' time the jobs' tasks take, on average
    /// (sets the mean gap from the workload's mean job).
    #[arg(long, value_name = "FRACTION", default_value_t = DECIMA_STREAM_LOAD,
          value_parser = load_fraction, conflicts_with = "mean_gap_s")]
    load: f64,
    /// Poisson arrivals: the mean gap, seconds (instead of `--load`).
    #[arg(long = "mean-gap-secs", value_name = "SECS", value_parser = positive_seconds)]
    mean_gap_s: Option<f64>,
    /// Seconds an executor takes to move to another job (Decima's simulator: 2).
    #[arg(long = "moving-delay-secs", value_name = "SECS", default_value_t = DECIMA_MOVING_DELAY_S,
          value_parser = non_negative_seconds)]
    moving_delay_s: f64,
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    parse_number(text, |x| x > 0.0, "a number of seconds > 0")
}

fn non_negative_seconds(text: &str) -> Result<f64, String> {
    parse_number(text, |x| x >= 0.0, "a number of seconds >= 0")
}

fn load_fraction(text: &str) -> Result<f64, String> {
    parse_number(
        text,
        |x| x > 0.0 && x <= 1.0,
        "a load is a fraction in (0, 1]",
    )
}

pub(crate) fn run(cmd: LearnCommand, json: &JsonOutput) -> Result<()> {
    match cmd {
        LearnCommand::Eval(args) => eval(args, json),
        LearnCommand::Train(args) => train(args, json),
        LearnCommand::Plot(args) => plot(args),
    }
}

fn plot(args: PlotArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.curve)
        .with_context(|| format!("cannot read --curve {}", args.curve.display()))?;
    let mut points = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let report: IterationReport = serde_json::from_str(line).with_context(|| {
            format!(
                "{} line {}: not a learning curve point",
                args.curve.display(),
                n + 1
            )
        })?;
        points.push(report);
    }
    if points.is_empty() {
        bail!("{} holds no iteration", args.curve.display());
    }
    let moving = |value: &dyn Fn(&IterationReport) -> f64| -> Vec<(f64, f64)> {
        points
            .windows(args.window.min(points.len()))
            .map(|w| {
                let last = &w[w.len() - 1];
                let mean = w.iter().map(value).sum::<f64>() / w.len() as f64;
                (last.iteration as f64, mean)
            })
            .collect()
    };
    let ratio = moving(&|p| p.mean_jct_s / p.fair_jct_s);
    let seconds: f64 = points.iter().map(|p| p.seconds).sum();
    let last = &points[points.len() - 1];
    fullerene_sim::plot_lines(
        &[
            ("decima (sampled) / fair".to_string(), ratio),
            (
                "fair".to_string(),
                vec![
                    (points[0].iteration as f64, 1.0),
                    (last.iteration as f64, 1.0),
                ],
            ),
        ],
        "Decima's learning curve: average JCT over the fair scheduler's on the same jobs",
        [
            &format!(
                "{} iterations in {:.0} s of training; moving average over {} iterations",
                points.len(),
                seconds,
                args.window
            ),
            &format!(
                "last: {:.1} s against fair's {:.1} s; entropy weight {:.4}",
                last.mean_jct_s, last.fair_jct_s, last.entropy_weight
            ),
        ],
        ("iteration", "average JCT / fair's"),
        &args.out,
    )?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

impl EnvArgs {
    /// The workload's path and jobs, and the environment the flags describe.
    fn resolve(&self) -> Result<(PathBuf, Vec<Job>, SessionEnv)> {
        let workload = resolve_workload(self.workload.clone())?;
        let jobs = read_workload(&workload)?;
        let env = self.env(&jobs)?;
        Ok((workload, jobs, env))
    }

    fn env(&self, jobs: &[Job]) -> Result<SessionEnv> {
        let setting = match self.setting {
            Setting::Batch => SessionSetting::Batch {
                jobs: self.jobs.unwrap_or(DECIMA_BATCH_JOBS),
            },
            Setting::Poisson => SessionSetting::Poisson {
                jobs: self.jobs.unwrap_or(DEFAULT_STREAM_JOBS),
                mean_gap_s: match self.mean_gap_s {
                    Some(gap) => gap,
                    None => mean_gap_for_load(jobs, self.executors, self.load)?,
                },
            },
        };
        Ok(SessionEnv {
            executors: self.executors,
            moving_delay_s: self.moving_delay_s,
            setting,
        })
    }
}

fn eval(args: EvalArgs, json: &JsonOutput) -> Result<()> {
    let mut contenders = args
        .policies
        .iter()
        .filter(|name| !matches!(name.trim(), "" | "none"))
        .map(|name| name.parse::<SessionPolicyKind>().map(Contender::from))
        .collect::<Result<Vec<_>, _>>()?;
    let mut failures = Arc::new(AtomicU64::new(0));
    if let Some(path) = &args.model {
        let (build, counter) = decima_policies(Some(path), args.action_choice)?;
        failures = counter;
        contenders.push(Contender {
            name: "decima".to_string(),
            needs_pri_scores: false,
            build,
        });
    }
    if contenders.is_empty() {
        bail!("nothing to evaluate: give --policies or --model");
    }
    let (workload, jobs, env) = args.env.resolve()?;
    let seeds: Vec<u64> = (0..args.seeds)
        .map(|i| args.first_seed.saturating_add(i))
        .collect();
    let comparison = compare_sessions(&jobs, &env, &contenders, &seeds)
        .with_context(|| format!("evaluating on {}", workload.display()))?;
    let failed = failures.load(Ordering::Relaxed);
    if failed > 0 {
        bail!("the model failed to compute {failed} decision(s): its figures would not be its own");
    }
    json.emit(&comparison, || render(&comparison))
}

/// The learning curve's file, holding the iterations before `from` (a fresh run's is
/// emptied; a resumed run's loses the iterations after its checkpoint, which it runs again).
fn open_curve(path: &Path, from: u64) -> Result<std::fs::File> {
    let kept: String = match std::fs::read_to_string(path) {
        Ok(text) if from > 0 => text
            .lines()
            .filter(|line| {
                serde_json::from_str::<IterationReport>(line).is_ok_and(|r| r.iteration < from)
            })
            .map(|line| format!("{line}\n"))
            .collect(),
        _ => String::new(),
    };
    std::fs::write(path, kept)
        .with_context(|| format!("cannot write --curve {}", path.display()))?;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open --curve {}", path.display()))
}

/// Decima's policy from `--model` (the built-in model without one), taking its actions as
/// `choice` says, as a factory of policies for sessions (a sampling one draws from the
/// session's seed, salted so that its draws do not replay those that made the jobs), and the
/// count of decisions the model failed to compute (each then falls back to the first
/// candidate): a run reports it, as its figures are not the model's.
pub(crate) fn decima_policies(
    model: Option<&Path>,
    choice: ActionChoice,
) -> Result<(SessionPolicyFactory, Arc<AtomicU64>)> {
    const ACTION_SALT: u64 = 0x5eed_ac71_0e5a_4b1e;
    let model = Arc::new(fullerene_learn::load_model(model)?);
    let failures = Arc::new(AtomicU64::new(0));
    let counter = failures.clone();
    let factory: SessionPolicyFactory = Arc::new(move |seed| {
        let choice = match choice {
            ActionChoice::Sampled => Choice::sample(seed ^ ACTION_SALT),
            ActionChoice::Greedy => Choice::Greedy,
        };
        Box::new(DecimaPolicy::new(model.clone(), choice).counting_failures(counter.clone()))
    });
    Ok((factory, failures))
}

/// The checkpoint beside a model file.
fn checkpoint_path(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".ckpt");
    PathBuf::from(name)
}

fn train(args: TrainArgs, json: &JsonOutput) -> Result<()> {
    let (workload, jobs, env) = args.env.resolve()?;
    let mut config = TrainConfig::new(env, args.seed);
    config.episodes = args.episodes;
    config.learning_rate = args.learning_rate;
    config.entropy.0 = args.entropy_start;
    config.entropy.2 = args.entropy_decay;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let workload_name = workload.file_name().map_or_else(
        || workload.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let checkpoint = checkpoint_path(&args.out);
    let mut trainer = if args.resume {
        let file = ModelFile::load(&checkpoint)
            .with_context(|| format!("--resume: reading {}", checkpoint.display()))?;
        Trainer::resume(config, jobs, &file, &checkpoint)?
    } else if let Some(path) = &args.init_model {
        let file = ModelFile::load(path)
            .with_context(|| format!("--init-model: reading {}", path.display()))?;
        Trainer::warm_start(config, jobs, &file, path)?
    } else {
        Trainer::new(config, jobs)?
    };
    let mut curve = match &args.curve {
        Some(path) => Some(open_curve(path, trainer.iteration())?),
        None => None,
    };
    let bar = progress_bar(args.iterations);
    bar.set_position(trainer.iteration().min(args.iterations));
    let mut last = None;
    while trainer.iteration() < args.iterations {
        let report = trainer.step()?;
        bar.set_position(trainer.iteration());
        bar.set_message(format!(
            "reward {:.2}  avg JCT {:.1} s  entropy {:.2}",
            report.mean_reward, report.mean_jct_s, report.entropy
        ));
        if let Some(file) = curve.as_mut() {
            use std::io::Write as _;
            writeln!(file, "{}", serde_json::to_string(&report)?)
                .context("cannot write the learning curve")?;
        }
        if trainer.iteration() % args.checkpoint_every == 0
            || trainer.iteration() == args.iterations
        {
            trainer
                .checkpoint(&command, &workload_name)?
                .save(&checkpoint)?;
        }
        last = Some(report);
    }
    bar.finish_and_clear();
    let file = trainer.model_file(&command, &workload_name)?;
    file.save(&args.out)?;
    json.emit(&(&file.provenance, &last), || {
        format!(
            "trained {} iterations ({:.0} s of training) → {} ({} weights){}",
            file.provenance.iterations,
            file.provenance.training_s,
            args.out.display(),
            trainer.model().num_weights(),
            last.as_ref().map_or_else(String::new, |r| format!(
                "; last iteration: avg JCT {:.1} s, reward {:.2}",
                r.mean_jct_s, r.mean_reward
            ))
        )
    })
}

/// The policies' average JCT, and each one's reduction against every other
/// (`1 − mine / theirs`: positive when it is faster).
fn render(comparison: &SessionComparison) -> String {
    let env = &comparison.env;
    let setting = match env.setting {
        SessionSetting::Batch { jobs } => format!("batch of {jobs} jobs"),
        SessionSetting::Poisson { jobs, mean_gap_s } => {
            format!("{jobs} jobs, Poisson arrivals {mean_gap_s:.1} s apart")
        }
    };
    let mut header = vec![
        "policy".to_string(),
        "avg JCT (s)".to_string(),
        "decisions".to_string(),
        "utilisation".to_string(),
    ];
    header.extend(
        comparison
            .results
            .iter()
            .map(|r| format!("vs {}", r.policy)),
    );
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = table(&header);
    for r in &comparison.results {
        let mut row = vec![
            r.policy.clone(),
            format!("{:.1}", r.average_jct_s),
            format!("{:.0}", r.decisions),
            format!("{:.0}%", 100.0 * r.utilisation),
        ];
        row.extend(comparison.results.iter().map(|other| {
            if other.policy == r.policy {
                "—".to_string()
            } else {
                format!(
                    "{:+.1}%",
                    100.0 * (1.0 - r.average_jct_s / other.average_jct_s)
                )
            }
        }));
        t.add_row(row);
    }
    format!(
        "{setting}, {} executors, moving delay {} s, {} episodes (seeds {}..{})\n{t}\n\
         vs X: the reduction of average JCT against X (positive: faster)",
        env.executors,
        env.moving_delay_s,
        comparison.seeds.len(),
        comparison.seeds.first().copied().unwrap_or(0),
        comparison.seeds.last().copied().unwrap_or(0),
    )
}
