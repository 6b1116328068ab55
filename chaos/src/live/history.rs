//! A real-process run's history: the facts of every source, merged in time order into the
//! [`Step`]s the invariant checker reads.
//!
//! Every source stamps its facts with the machine's wall clock (one clock for every process
//! on the machine). Sampled sources see a fact late (the process table every poll period,
//! the masters' API every poll), so where an earlier witness exists it is used: an agent is
//! lost from the moment the master stamped the LOST updates it sent for that agent's tasks,
//! not from the first poll that showed it lost.

use std::collections::{BTreeMap, BTreeSet};

use fullerene_client::event_log::{Event, LoggedEvent};
use fullerene_proto::messages::{StatusReason, TaskState};
use fullerene_proto::{AgentId, ResourceVec, TaskKey, Time};

use super::observe::Timed;
use super::procs::InstanceEvent;
use crate::system::history::{Fact, Step};

/// What a run collected.
#[derive(Debug, Default)]
pub struct Sources {
    /// When the run started, in microseconds since the Unix epoch (time 0 of the history).
    pub start_us: u64,
    /// The run's own doings: faults, jobs submitted, framework processes killed.
    pub harness: Vec<Timed>,
    /// What the masters' API showed.
    pub observed: Vec<Timed>,
    /// Task instances seen in the process table.
    pub instances: Vec<InstanceEvent>,
    /// Each agent's event log, by agent number.
    pub agent_logs: BTreeMap<u64, Vec<LoggedEvent>>,
    /// Each framework process's event log, by process number.
    pub framework_logs: BTreeMap<u64, Vec<LoggedEvent>>,
    /// The closing fact, last.
    pub end: Option<Fact>,
}

/// The id agent `n` goes by: the one its log names, else `agent-<n>` (its certificate's).
pub(super) fn agent_id(n: u64, log: Option<&Vec<LoggedEvent>>) -> AgentId {
    log.into_iter()
        .flatten()
        .find_map(|e| match &e.event {
            Event::AgentRegistered { agent, .. }
            | Event::TaskStarting { agent, .. }
            | Event::UpdateSent { agent, .. } => Some(agent.clone()),
            _ => None,
        })
        .unwrap_or_else(|| AgentId::from(format!("agent-{n}")))
}

/// When an instance ended. The process table says it ended after the last poll that saw it
/// (`last_seen_us`) and by the poll that did not (`at_us`); its agent reported the end only
/// after the process exited, so a report inside that window narrows it. A report from before
/// the last sighting (the process outlived its reported end) does not move the end before
/// what was seen.
fn seen_end(instance: &InstanceEvent, reported: Option<&u64>) -> u64 {
    match reported {
        Some(&reported) => reported.clamp(
            instance.last_seen_us,
            instance.at_us.max(instance.last_seen_us),
        ),
        None => instance.at_us,
    }
}

/// `(at, x)` pairs of one source with their times made non-decreasing: one process's own
/// order is its truth, and a wall clock stepped back must not reorder it.
fn monotonic<T: Clone>(items: impl IntoIterator<Item = (u64, T)>) -> Vec<(u64, T)> {
    let mut latest = 0;
    items
        .into_iter()
        .map(|(at, item)| {
            latest = latest.max(at);
            (latest, item)
        })
        .collect()
}

/// Merges the sources into one history in time order (ties keep the sources' order: the
/// run's doings, the masters, processes, agents, frameworks).
pub fn assemble(sources: &Sources) -> Vec<Step> {
    let mut timed: Vec<Timed> = Vec::new();
    timed.extend(monotonic(sources.harness.iter().cloned()));
    timed.extend(monotonic(sources.observed.iter().cloned()));
    let in_order = |logs: &BTreeMap<u64, Vec<LoggedEvent>>| -> BTreeMap<u64, Vec<LoggedEvent>> {
        logs.iter()
            .map(|(n, log)| {
                let events = monotonic(log.iter().map(|e| (e.at_us, e.event.clone())))
                    .into_iter()
                    .map(|(at_us, event)| LoggedEvent { at_us, event })
                    .collect();
                (*n, events)
            })
            .collect()
    };
    let agent_logs = in_order(&sources.agent_logs);
    let framework_logs = in_order(&sources.framework_logs);

    let ids: BTreeMap<u64, AgentId> = sources
        .agent_logs
        .keys()
        .chain(sources.instances.iter().map(|i| &i.agent))
        .map(|n| (*n, agent_id(*n, sources.agent_logs.get(n))))
        .collect();
    let mut demands: BTreeMap<(AgentId, TaskKey), ResourceVec> = BTreeMap::new();
    for (n, log) in &agent_logs {
        for record in log {
            let fact = match &record.event {
                Event::AgentRegistered { killing, .. } => Fact::AgentRejoined {
                    agent: ids[n].clone(),
                    killing: killing.clone(),
                },
                Event::TaskStarting {
                    task, resources, ..
                } => {
                    demands.insert((ids[n].clone(), task.clone()), *resources);
                    continue;
                }
                Event::UpdateSent {
                    task, seq, state, ..
                } => Fact::UpdateSent {
                    agent: ids[n].clone(),
                    framework_id: task.framework_id.clone(),
                    task_id: task.task_id.clone(),
                    seq: *seq,
                    state: *state,
                },
                _ => continue,
            };
            timed.push((record.at_us, fact));
        }
    }
    // When each agent reported each task ended: its executor saw the process exit.
    let mut reported_end: BTreeMap<(u64, TaskKey), u64> = BTreeMap::new();
    for (n, log) in &agent_logs {
        for record in log {
            if let Event::UpdateSent { task, state, .. } = &record.event {
                if state.is_terminal() {
                    reported_end
                        .entry((*n, task.clone()))
                        .or_insert(record.at_us);
                }
            }
        }
    }
    let mut started_at: BTreeMap<(u64, TaskKey), u64> = BTreeMap::new();
    for instance in &sources.instances {
        let slot = (instance.agent, instance.task.clone());
        let at_us = if instance.started {
            started_at.insert(slot, instance.at_us);
            instance.at_us
        } else {
            // Never before the table showed it start: a task shorter than a poll is seen
            // starting after its agent already reported its end.
            let start = started_at.get(&slot).copied().unwrap_or(0);
            seen_end(instance, reported_end.get(&slot)).max(start)
        };
        let agent = ids
            .get(&instance.agent)
            .cloned()
            .unwrap_or_else(|| AgentId::from(format!("agent-{}", instance.agent)));
        let key = &instance.task;
        let fact = if instance.started {
            Fact::Spawned {
                demand: demands
                    .get(&(agent.clone(), key.clone()))
                    .copied()
                    .unwrap_or(ResourceVec::ZERO),
                agent,
                framework_id: key.framework_id.clone(),
                task_id: key.task_id.clone(),
            }
        } else {
            Fact::ProcessEnded {
                agent,
                framework_id: key.framework_id.clone(),
                task_id: key.task_id.clone(),
            }
        };
        timed.push((at_us, fact));
    }
    // The first moment the master is known to have given each lost agent up.
    let mut lost_at: BTreeMap<AgentId, BTreeSet<u64>> = BTreeMap::new();
    for log in framework_logs.values() {
        for record in log {
            let fact = match &record.event {
                Event::FrameworkSubscribed { job, framework_id } => Fact::FrameworkRegistered {
                    job: job.clone(),
                    framework_id: framework_id.clone(),
                },
                Event::UpdateDelivered {
                    task,
                    agent,
                    seq,
                    state,
                    reason,
                    made_ms,
                } => {
                    if *state == TaskState::Lost && *reason == Some(StatusReason::AgentLost) {
                        lost_at
                            .entry(agent.clone())
                            .or_default()
                            .insert(made_ms.saturating_mul(1000));
                    }
                    Fact::UpdateDelivered {
                        framework_id: task.framework_id.clone(),
                        task_id: task.task_id.clone(),
                        seq: *seq,
                        state: *state,
                    }
                }
                Event::FrameworkGone { framework_id } => Fact::FrameworkEnded {
                    framework_id: Some(framework_id.clone()),
                    why: "its failover timeout passed before a new process took it over".into(),
                },
                Event::JobCompleted { job, framework_id } => Fact::JobCompleted {
                    job: job.clone(),
                    framework_id: framework_id.clone(),
                },
                _ => continue,
            };
            timed.push((record.at_us, fact));
        }
    }
    for (agent, stamps) in lost_at {
        // One fact per decision: every LOST update of one loss carries its stamp.
        for at in stamps {
            timed.push((
                at,
                Fact::AgentLost {
                    agent: agent.clone(),
                },
            ));
        }
    }
    // A stable sort keeps each source's own order among equal times.
    timed.sort_by_key(|(at, _)| *at);
    let mut steps: Vec<Step> = timed
        .into_iter()
        .map(|(at, fact)| Step {
            at: Time::from_micros(at.saturating_sub(sources.start_us)),
            fact,
        })
        .collect();
    if let Some(end) = &sources.end {
        let at = steps.last().map_or(Time::ZERO, |s| s.at);
        steps.push(Step {
            at,
            fact: end.clone(),
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    use fullerene_proto::{FrameworkId, TaskId};

    use super::*;
    use crate::system::checker::{check, Invariant};

    fn key(task: &str) -> TaskKey {
        TaskKey::new(FrameworkId::from("fw-1"), TaskId::from(task))
    }

    fn instance(at_us: u64, agent: u64, task: &str, started: bool) -> InstanceEvent {
        InstanceEvent {
            at_us,
            agent,
            task: key(task),
            started,
            // The poll before, 20 ms earlier.
            last_seen_us: if started {
                at_us
            } else {
                at_us.saturating_sub(20_000)
            },
        }
    }

    fn delivered_lost(at_us: u64, agent: &str, task: &str, made_ms: u64) -> LoggedEvent {
        LoggedEvent {
            at_us,
            event: Event::UpdateDelivered {
                task: key(task),
                agent: AgentId::from(agent),
                seq: 2,
                state: TaskState::Lost,
                reason: Some(StatusReason::AgentLost),
                made_ms,
            },
        }
    }

    #[test]
    fn two_instances_at_once_are_caught_from_the_process_table() {
        let sources = Sources {
            start_us: 1_000,
            instances: vec![
                instance(2_000, 1, "j/0.0/1", true),
                instance(3_000, 2, "j/0.0/2", true),
            ],
            ..Sources::default()
        };
        let history = assemble(&sources);
        assert_eq!(history[0].at, Time::from_micros(1_000));
        let report = check(&history);
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
        assert_eq!(report.violations[0].invariant, Invariant::AtMostOneInstance);
    }

    #[test]
    fn an_instance_on_an_agent_the_master_gave_up_does_not_count_from_the_lost_stamp() {
        // Agent 1's instance outlives its agent's loss (the agent is paused); the master
        // stamped the LOST update at 2.5 ms, the relaunch on agent 2 appears at 3 ms, and the
        // framework's log shows the LOST update only at 4 ms: the stamp, not the delivery,
        // says when the old instance stopped counting.
        let sources = Sources {
            start_us: 0,
            instances: vec![
                instance(1_000, 1, "j/0.0/1", true),
                instance(3_000, 2, "j/0.0/2", true),
            ],
            framework_logs: BTreeMap::from([(
                1,
                vec![delivered_lost(4_000, "agent-1", "j/0.0/1", 2)],
            )]),
            ..Sources::default()
        };
        let report = check(&assemble(&sources));
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert!(report.checks[&Invariant::AtMostOneInstance] >= 2);
    }

    #[test]
    fn a_task_shorter_than_a_poll_ends_after_it_starts() {
        // Reported ended at 1.0 ms; the table saw it start at 1.5 ms and end at 2 ms.
        let sources = Sources {
            instances: vec![
                instance(1_500, 1, "j/0.0/1", true),
                instance(2_000, 1, "j/0.0/1", false),
            ],
            agent_logs: BTreeMap::from([(
                1,
                vec![LoggedEvent {
                    at_us: 1_000,
                    event: Event::UpdateSent {
                        agent: AgentId::from("agent-1"),
                        task: key("j/0.0/1"),
                        seq: 2,
                        state: TaskState::Finished,
                    },
                }],
            )]),
            ..Sources::default()
        };
        let history = assemble(&sources);
        let spawned = history
            .iter()
            .position(|s| matches!(s.fact, Fact::Spawned { .. }))
            .expect("spawned");
        let ended = history
            .iter()
            .position(|s| matches!(s.fact, Fact::ProcessEnded { .. }))
            .expect("ended");
        assert!(spawned < ended, "{history:?}");
    }

    #[test]
    fn an_end_is_placed_by_the_report_only_inside_the_window_the_table_allows() {
        // Seen alive at 230 ms, gone at 250 ms.
        let ended = instance(250_000, 1, "j/0.0/1", false);
        assert_eq!(
            seen_end(&ended, Some(&240_000)),
            240_000,
            "inside the window"
        );
        assert_eq!(
            seen_end(&ended, Some(&10_000)),
            230_000,
            "it outlived its report: alive when last seen"
        );
        assert_eq!(seen_end(&ended, Some(&300_000)), 250_000, "reported late");
        assert_eq!(seen_end(&ended, None), 250_000);
    }
}
