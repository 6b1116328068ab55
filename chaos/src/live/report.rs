//! What a run found: the history checked, written out, and the figures the issue asks for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use fullerene_client::event_log::{read_events, unix_micros, Event, LoggedEvent};
use fullerene_proto::TaskKey;
use serde::Serialize;

use super::history::{assemble, Sources};
use super::run::{io, Live, LiveError};
use crate::system::checker::{check, CheckReport, Invariant, Violation};
use crate::system::history::{Fact, Step};

/// Percentiles of a set of durations, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latencies {
    /// How many.
    pub count: usize,
    /// Median.
    pub p50_ms: Option<f64>,
    /// 99th percentile (nearest rank).
    pub p99_ms: Option<f64>,
    /// Largest.
    pub max_ms: Option<f64>,
    /// Every value, in the order measured.
    pub values_ms: Vec<f64>,
}

impl Latencies {
    pub(super) fn of(measured: Vec<f64>) -> Latencies {
        let mut values = measured.clone();
        values.sort_by(f64::total_cmp);
        let rank = |q: f64| -> Option<f64> {
            if values.is_empty() {
                return None;
            }
            let r = (q * values.len() as f64).ceil() as usize;
            Some(values[r.clamp(1, values.len()) - 1])
        };
        Latencies {
            count: values.len(),
            p50_ms: rank(0.5),
            p99_ms: rank(0.99),
            max_ms: values.last().copied(),
            values_ms: measured,
        }
    }
}

/// An offer this recent before a leader kill means offers were flowing when it died.
const OFFERS_FLOWING_US: u64 = 1_000_000;

/// What a run found.
#[derive(Clone, Debug, Serialize)]
pub struct LiveReport {
    /// The seed.
    pub seed: u64,
    /// Where its files are.
    pub dir: PathBuf,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Faults asked for that could not be injected here, and why.
    pub skipped: BTreeMap<String, String>,
    /// After each leader kill: the time until a framework was handed offers again.
    pub offers_after_leader_kill: Latencies,
    /// Status updates sent by agents (distinct task and sequence number).
    pub updates_sent: usize,
    /// Sends beyond the first of an update (resends after lost sessions or acks).
    pub updates_resent: usize,
    /// Updates handed to frameworks (distinct).
    pub updates_delivered: usize,
    /// Highest sequence numbers acknowledged to agents (distinct task and number).
    pub updates_acked: usize,
    /// Task launches the frameworks asked for.
    pub launches_requested: usize,
    /// Ends of tasks sent and never handed to a framework that went on (must be 0).
    pub updates_lost: usize,
    /// Tasks that ran twice at once (must be 0).
    pub tasks_run_twice: usize,
    /// Task instances seen in the process table.
    pub task_processes: usize,
    /// Jobs submitted.
    pub jobs: usize,
    /// Jobs completed.
    pub jobs_completed: usize,
    /// Average JCT over completed jobs, seconds (from the first submission of a job).
    pub avg_jct_s: Option<f64>,
    /// Packets the proxy relayed, dropped (cut, lost), duplicated, delayed.
    pub packets: BTreeMap<String, u64>,
    /// Checks run, by invariant.
    pub checks: BTreeMap<String, u64>,
    /// What broke.
    pub violations: Vec<Violation>,
    /// Framework processes that exited with an error, and their last words.
    pub framework_errors: Vec<String>,
    /// Masters and agents that exited by themselves (a master on a full disk must, with a
    /// clear error), and their last log line.
    pub process_exits: Vec<String>,
    /// Steps in the history.
    pub history_steps: usize,
}

impl LiveReport {
    /// Whether every promise held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl Live<'_> {
    pub(super) fn report(&mut self) -> Result<LiveReport, LiveError> {
        let dir = self.options.dir.clone();
        let mut agent_logs = BTreeMap::new();
        for n in 1..=self.options.agents {
            agent_logs.insert(n, events_of(&self.agent_log(n))?);
        }
        let mut framework_logs = BTreeMap::new();
        for k in self.frameworks.keys().copied().collect::<Vec<_>>() {
            framework_logs.insert(k, events_of(&self.framework_log(k))?);
        }
        let acked: BTreeSet<(&TaskKey, u64)> = agent_logs
            .values()
            .flatten()
            .filter_map(|e| match &e.event {
                Event::UpdateAcked { task, seq, .. } => Some((task, *seq)),
                _ => None,
            })
            .collect();
        let updates_acked = acked.len();
        let launches_requested = framework_logs
            .values()
            .flatten()
            .filter(|e| matches!(e.event, Event::LaunchRequested { .. }))
            .count();
        let observed = self.observer.facts();
        let applied = self.final_applied.clone();
        let mut live_frameworks = Vec::new();
        for k in self.frameworks.keys().copied().collect::<Vec<_>>() {
            live_frameworks.extend(self.unfinished_frameworks(k));
        }
        let sources = Sources {
            start_us: unix_micros(SystemTime::now())
                .saturating_sub(u64::try_from(self.started.elapsed().as_micros()).unwrap_or(0)),
            harness: self.harness.clone(),
            observed,
            instances: self.watcher.events(),
            agent_logs: agent_logs.clone(),
            framework_logs: framework_logs.clone(),
            end: Some(Fact::End {
                applied,
                live_frameworks,
            }),
        };
        let history = assemble(&sources);
        let verdict = check(&history);
        write_history(&dir.join("history.txt"), &history)?;
        let mut report = self.figures(&history, &verdict, &framework_logs);
        report.updates_acked = updates_acked;
        report.launches_requested = launches_requested;
        if !report.violations.is_empty() {
            write_violations(&dir.join("violations.txt"), &history, &report.violations)?;
        }
        let json = serde_json::to_vec_pretty(&report)
            .map_err(|e| LiveError::Failed(format!("cannot encode the report: {e}")))?;
        std::fs::write(dir.join("report.json"), json).map_err(io("write report.json"))?;
        Ok(report)
    }

    pub(super) fn figures(
        &self,
        history: &[Step],
        verdict: &CheckReport,
        framework_logs: &BTreeMap<u64, Vec<LoggedEvent>>,
    ) -> LiveReport {
        let mut sent = BTreeMap::new();
        let mut delivered = BTreeSet::new();
        let mut spawned = 0;
        for step in history {
            match &step.fact {
                Fact::UpdateSent {
                    framework_id,
                    task_id,
                    seq,
                    ..
                } => {
                    *sent
                        .entry((framework_id.clone(), task_id.clone(), *seq))
                        .or_insert(0usize) += 1;
                }
                Fact::UpdateDelivered {
                    framework_id,
                    task_id,
                    seq,
                    ..
                } => {
                    delivered.insert((framework_id.clone(), task_id.clone(), *seq));
                }
                Fact::Spawned { .. } => spawned += 1,
                _ => {}
            }
        }
        // Offers flowing again after each leader kill: the first offer any framework was
        // handed after it. Only kills while offers flowed count (one was handed in the second
        // before): with no work waiting, none would flow, kill or not.
        let mut offers: Vec<u64> = framework_logs
            .values()
            .flatten()
            .filter(|e| matches!(e.event, Event::OffersReceived { .. }))
            .map(|e| e.at_us)
            .collect();
        offers.sort_unstable();
        let recoveries: Vec<f64> = self
            .leader_kills
            .iter()
            .filter_map(|&kill| {
                let flowing = offers
                    .iter()
                    .any(|&at| at <= kill && kill - at <= OFFERS_FLOWING_US);
                let next = offers.iter().find(|&&at| at > kill)?;
                flowing.then(|| (next - kill) as f64 / 1000.0)
            })
            .collect();
        // JCT from a job's first submission to its completion.
        let mut submitted: BTreeMap<String, u64> = BTreeMap::new();
        for (at, fact) in &self.harness {
            if let Fact::JobSubmitted { job } = fact {
                submitted.entry(job.clone()).or_insert(*at);
            }
        }
        let mut completed: BTreeMap<String, u64> = BTreeMap::new();
        for event in framework_logs.values().flatten() {
            if let Event::JobCompleted { job, .. } = &event.event {
                completed.entry(job.clone()).or_insert(event.at_us);
            }
        }
        let jcts: Vec<f64> = completed
            .iter()
            .filter_map(|(job, done)| {
                let from = submitted.get(job)?;
                Some(done.saturating_sub(*from) as f64 / 1e6)
            })
            .collect();
        let count = |invariant: Invariant| {
            verdict
                .violations
                .iter()
                .filter(|v| v.invariant == invariant)
                .count()
        };
        let stats = self.proxy.stats();
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let mut framework_errors = Vec::new();
        for k in self.frameworks.keys() {
            let log =
                crate::cluster::tail(&self.cluster.dir().join(format!("framework-{k}.log")), 200);
            for line in log
                .lines()
                .filter(|l| l.contains("ERROR") || l.contains("Error:"))
            {
                framework_errors.push(format!("framework {k}: {line}"));
            }
        }
        LiveReport {
            seed: self.options.seed,
            dir: self.options.dir.clone(),
            faults: self.injected.clone(),
            skipped: self.skipped.clone(),
            offers_after_leader_kill: Latencies::of(recoveries),
            updates_sent: sent.len(),
            updates_resent: sent.values().map(|n| n - 1).sum(),
            updates_acked: 0,
            launches_requested: 0,
            updates_delivered: delivered.len(),
            updates_lost: count(Invariant::UpdatesDelivered),
            tasks_run_twice: count(Invariant::AtMostOneInstance),
            task_processes: spawned,
            jobs: submitted.len(),
            jobs_completed: completed.len(),
            avg_jct_s: (!jcts.is_empty()).then(|| jcts.iter().sum::<f64>() / jcts.len() as f64),
            packets: BTreeMap::from([
                ("relayed".to_string(), load(&stats.relayed)),
                ("cut".to_string(), load(&stats.cut)),
                ("lost".to_string(), load(&stats.lost)),
                ("duplicated".to_string(), load(&stats.duplicated)),
                ("delayed".to_string(), load(&stats.delayed)),
            ]),
            checks: verdict
                .checks
                .iter()
                .map(|(i, n)| (i.name().to_string(), *n))
                .collect(),
            violations: verdict.violations.clone(),
            framework_errors,
            process_exits: self.exits.clone(),
            history_steps: history.len(),
        }
    }
}

fn write_history(path: &Path, history: &[Step]) -> Result<(), LiveError> {
    let mut text = String::new();
    for (i, step) in history.iter().enumerate() {
        text.push_str(&format!("{i:>7} {step}\n"));
    }
    std::fs::write(path, text).map_err(io(format!("write {}", path.display())))
}

/// The events of the log at `path`; none if it was never written (its process never
/// started). A log that cannot be read is an error: a history without it would be checked as
/// if its process had done nothing.
fn events_of(path: &Path) -> Result<Vec<LoggedEvent>, LiveError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    read_events(path).map_err(|e| LiveError::Failed(e.to_string()))
}

/// Each violation with the steps that led to it.
fn write_violations(
    path: &Path,
    history: &[Step],
    violations: &[Violation],
) -> Result<(), LiveError> {
    let mut text = String::new();
    for violation in violations {
        text.push_str(&format!(
            "{} at step {}: {}\n",
            violation.invariant, violation.step, violation.detail
        ));
        for line in crate::system::trace_excerpt(history, violation.step, 60) {
            text.push_str(&line);
            text.push('\n');
        }
        text.push('\n');
    }
    std::fs::write(path, text).map_err(io(format!("write {}", path.display())))
}
