//! What a run found: the history checked, written out, and the figures the issue asks for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use fullerene_client::event_log::{read_events, unix_micros, Event, LoggedEvent};
use fullerene_proto::{AgentId, FrameworkId, ResourceKind, TaskId, TaskKey};
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

/// Whether some agent had a core free (its task processes using at most its total less one
/// CPU; every task of the workloads asks for at least one), from each change on: `(µs since
/// the epoch, room)`. Read from the process table's facts, not from the masters.
fn room_timeline(history: &[Step], start_us: u64) -> Vec<(u64, bool)> {
    let mut total: BTreeMap<&AgentId, f64> = BTreeMap::new();
    let mut running: BTreeMap<(&AgentId, &FrameworkId, &TaskId), f64> = BTreeMap::new();
    let mut timeline = Vec::new();
    for step in history {
        match &step.fact {
            Fact::AgentCapacity {
                agent, total: t, ..
            } => {
                total.insert(agent, t[ResourceKind::Cpus]);
            }
            Fact::Spawned {
                agent,
                framework_id,
                task_id,
                demand,
            } => {
                running.insert((agent, framework_id, task_id), demand[ResourceKind::Cpus]);
            }
            Fact::ProcessEnded {
                agent,
                framework_id,
                task_id,
            } => {
                running.remove(&(agent, framework_id, task_id));
            }
            _ => continue,
        }
        let room = total.iter().any(|(agent, cpus)| {
            let used: f64 = running
                .iter()
                .filter(|((a, _, _), _)| a == agent)
                .map(|(_, c)| c)
                .sum();
            cpus - used >= 1.0 - 1e-9
        });
        timeline.push((start_us + step.at.as_micros(), room));
    }
    timeline
}

/// How long after each leader kill (`kills`, µs since the epoch) offers flowed again, in
/// milliseconds: from the kill, or, if no offer could have been made then (no framework had a
/// runnable task, or no agent had a free core: `room`), from the first moment after it that
/// one could, to the first offer any framework was handed after that.
fn recoveries(
    kills: &[u64],
    framework_logs: &BTreeMap<u64, Vec<LoggedEvent>>,
    room: &[(u64, bool)],
) -> Vec<f64> {
    let mut offers: Vec<u64> = Vec::new();
    // (time, framework, runnable tasks) as each framework told the master.
    let mut demand: Vec<(u64, &FrameworkId, u64)> = Vec::new();
    for event in framework_logs.values().flatten() {
        match &event.event {
            Event::OffersReceived { .. } => offers.push(event.at_us),
            Event::DemandChanged {
                framework_id,
                runnable,
            } => demand.push((event.at_us, framework_id, *runnable)),
            _ => {}
        }
    }
    offers.sort_unstable();
    demand.sort_by_key(|(at, _, _)| *at);
    // Whether any framework had runnable tasks, from each demand change on.
    let mut latest: BTreeMap<&FrameworkId, u64> = BTreeMap::new();
    let wanting: Vec<(u64, bool)> = demand
        .iter()
        .map(|(at, framework, runnable)| {
            latest.insert(framework, *runnable);
            (*at, latest.values().any(|r| *r > 0))
        })
        .collect();
    let at = |timeline: &[(u64, bool)], t: u64, empty: bool| -> bool {
        match timeline.partition_point(|(at, _)| *at <= t) {
            0 => empty,
            i => timeline[i - 1].1,
        }
    };
    kills
        .iter()
        .filter_map(|&kill| {
            let possible = |t: u64| at(&wanting, t, false) && at(room, t, room.is_empty());
            let mut changes: Vec<u64> = wanting
                .iter()
                .chain(room)
                .map(|(t, _)| *t)
                .filter(|t| *t > kill)
                .collect();
            changes.sort_unstable();
            let ready = std::iter::once(kill)
                .chain(changes)
                .find(|t| possible(*t))?;
            let next = offers.iter().find(|&&at| at > ready)?;
            Some((next - ready) as f64 / 1000.0)
        })
        .collect()
}

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
        let mut report = self.figures(&history, sources.start_us, &verdict, &framework_logs);
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
        start_us: u64,
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
        let room = room_timeline(history, start_us);
        let recoveries = recoveries(&self.leader_kills, framework_logs, &room);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at_s: f64, event: Event) -> LoggedEvent {
        LoggedEvent {
            at_us: (at_s * 1e6) as u64,
            event,
        }
    }

    fn demand(at_s: f64, runnable: u64) -> LoggedEvent {
        event(
            at_s,
            Event::DemandChanged {
                framework_id: FrameworkId::from("fw-1"),
                runnable,
            },
        )
    }

    fn offer(at_s: f64) -> LoggedEvent {
        event(
            at_s,
            Event::OffersReceived {
                framework_id: FrameworkId::from("fw-1"),
                offers: 1,
            },
        )
    }

    #[test]
    fn failover_is_timed_from_the_kill_or_from_when_work_was_waiting() {
        let log = vec![
            demand(1.0, 4),
            offer(9.5),
            // Killed at 10 s with work waiting: offers again at 10.7 s.
            offer(10.7),
            demand(15.0, 0),
            // Killed at 16 s with nothing to run: work waits from 18 s, offered at 18.1 s.
            demand(18.0, 3),
            offer(18.1),
        ];
        let logs = BTreeMap::from([(1, log)]);
        let got = recoveries(&[10_000_000, 16_000_000], &logs, &[]);
        assert_eq!(got.len(), 2);
        assert!((got[0] - 700.0).abs() < 1e-6, "{got:?}");
        assert!((got[1] - 100.0).abs() < 1e-6, "{got:?}");
        // A kill after the last offer never recovered: not counted.
        assert!(recoveries(&[20_000_000], &logs, &[]).is_empty());
        // Work waited at the 10 s kill, but every core was busy until 10.5 s.
        let room = [(0, true), (9_000_000, false), (10_500_000, true)];
        let got = recoveries(&[10_000_000], &logs, &room);
        assert!((got[0] - 200.0).abs() < 1e-6, "{got:?}");
    }
}
