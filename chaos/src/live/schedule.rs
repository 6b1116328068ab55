//! The faults of a real-process run and their schedule, drawn from the run's seed.
//!
//! Faults come one at a time: each is injected, held, then healed, with a short calm between
//! two, from a warm-up after the cluster started until the fault phase ends. One at a time
//! keeps every fault's effect measurable (the time until offers flow again after a leader
//! kill is that kill's), while the seeded mix still crosses every kind with every phase of the
//! jobs' lives.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// A fault a real-process run injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LiveFault {
    /// SIGKILL the leader, restart it on its data directory.
    KillLeader,
    /// SIGKILL a follower, restart it.
    KillFollower,
    /// SIGKILL an agent (its tasks' processes keep running), restart it: it re-adopts them.
    KillAgent,
    /// SIGKILL a framework process (`job run`), start it again on the same state directory:
    /// it takes its frameworks over within their failover timeout.
    KillFramework,
    /// SIGSTOP the leader for longer than the election timeout, then SIGCONT.
    PauseLeader,
    /// SIGSTOP an agent for longer than the agent-lost timeout, then SIGCONT.
    PauseAgent,
    /// Cut the leader from every other process, both ways.
    IsolateLeader,
    /// Cut a minority of masters (with the leader in it, or not) from the majority.
    SplitMasters,
    /// Cut one agent from the leader only (it still reaches the followers).
    AgentCutFromLeader,
    /// Cut one direction between the leader and a follower.
    Asymmetric,
    /// Drop a share of every packet of one process.
    Loss,
    /// Delay every packet of one process (which reorders them).
    Delay,
    /// Send a share of every packet of one process twice.
    Duplicate,
    /// Fill a master's data directory (a size-limited filesystem; needs root).
    DiskFull,
}

impl LiveFault {
    /// Every fault, in report order.
    pub const ALL: [LiveFault; 14] = [
        LiveFault::KillLeader,
        LiveFault::KillFollower,
        LiveFault::KillAgent,
        LiveFault::KillFramework,
        LiveFault::PauseLeader,
        LiveFault::PauseAgent,
        LiveFault::IsolateLeader,
        LiveFault::SplitMasters,
        LiveFault::AgentCutFromLeader,
        LiveFault::Asymmetric,
        LiveFault::Loss,
        LiveFault::Delay,
        LiveFault::Duplicate,
        LiveFault::DiskFull,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LiveFault::KillLeader => "kill-leader",
            LiveFault::KillFollower => "kill-follower",
            LiveFault::KillAgent => "kill-agent",
            LiveFault::KillFramework => "kill-framework",
            LiveFault::PauseLeader => "pause-leader",
            LiveFault::PauseAgent => "pause-agent",
            LiveFault::IsolateLeader => "isolate-leader",
            LiveFault::SplitMasters => "split-masters",
            LiveFault::AgentCutFromLeader => "agent-cut-from-leader",
            LiveFault::Asymmetric => "asymmetric",
            LiveFault::Loss => "loss",
            LiveFault::Delay => "delay",
            LiveFault::Duplicate => "duplicate",
            LiveFault::DiskFull => "disk-full",
        }
    }

    /// Whether it needs root (a filesystem mounted for the run).
    pub fn needs_root(self) -> bool {
        matches!(self, LiveFault::DiskFull)
    }

    /// Every fault that needs no root.
    pub fn without_root() -> BTreeSet<LiveFault> {
        LiveFault::ALL
            .into_iter()
            .filter(|f| !f.needs_root())
            .collect()
    }
}

impl fmt::Display for LiveFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LiveFault {
    type Err = String;

    fn from_str(text: &str) -> Result<LiveFault, String> {
        LiveFault::ALL
            .into_iter()
            .find(|f| f.name() == text)
            .ok_or_else(|| {
                let known: Vec<&str> = LiveFault::ALL.iter().map(|f| f.name()).collect();
                format!("unknown fault `{text}` (known: {})", known.join(", "))
            })
    }
}

/// One scheduled fault: when it starts (from the start of the fault phase) and how long it
/// holds before it is healed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planned {
    /// When it is injected.
    pub at: Duration,
    /// Which.
    pub fault: LiveFault,
    /// How long it holds.
    pub hold: Duration,
    /// A draw the injection uses to pick its victim.
    pub pick: u64,
}

/// The timeouts that decide how long faults must hold to matter.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// The masters' election timeout.
    pub election: Duration,
    /// The masters' agent-lost timeout.
    pub agent_lost: Duration,
}

/// The faults of a run of `phase`, one at a time, drawn from `seed` among `kinds`.
pub fn schedule(
    seed: u64,
    phase: Duration,
    kinds: &BTreeSet<LiveFault>,
    timeouts: Timeouts,
) -> Vec<Planned> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let kinds: Vec<LiveFault> = kinds.iter().copied().collect();
    let mut planned = Vec::new();
    // Every kind once in a seeded order first, so a short run still sees them all; then
    // seeded draws.
    let mut first_round = kinds.clone();
    first_round.shuffle(&mut rng);
    let mut at = Duration::from_millis(rng.gen_range(500..1500));
    let mut round = first_round.into_iter();
    while at < phase && !kinds.is_empty() {
        let fault = match round.next() {
            Some(fault) => fault,
            None => kinds[rng.gen_range(0..kinds.len())],
        };
        let hold = hold_for(fault, timeouts, &mut rng);
        if at + hold > phase {
            break;
        }
        planned.push(Planned {
            at,
            fault,
            hold,
            pick: rng.gen(),
        });
        at += hold + Duration::from_millis(rng.gen_range(300..1500));
    }
    planned
}

/// How long `fault` holds: long enough to matter (pauses outlast the timeout they test),
/// short enough that a minute sees many.
fn hold_for(fault: LiveFault, timeouts: Timeouts, rng: &mut ChaCha8Rng) -> Duration {
    let mut millis = |low: u64, high: u64| Duration::from_millis(rng.gen_range(low..=high));
    match fault {
        LiveFault::KillLeader | LiveFault::KillFollower => millis(500, 2500),
        LiveFault::KillAgent | LiveFault::KillFramework => millis(500, 3000),
        LiveFault::PauseLeader => timeouts.election * 2 + millis(0, 1500),
        LiveFault::PauseAgent => timeouts.agent_lost + millis(500, 2500),
        LiveFault::IsolateLeader | LiveFault::SplitMasters => {
            timeouts.election * 2 + millis(500, 2500)
        }
        LiveFault::AgentCutFromLeader => timeouts.agent_lost + millis(0, 2000),
        LiveFault::Asymmetric | LiveFault::Loss | LiveFault::Delay | LiveFault::Duplicate => {
            millis(2000, 5000)
        }
        LiveFault::DiskFull => millis(3000, 6000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUTS: Timeouts = Timeouts {
        election: Duration::from_millis(1000),
        agent_lost: Duration::from_millis(3000),
    };

    #[test]
    fn a_minute_sees_every_kind_and_the_schedule_replays() {
        let kinds = LiveFault::without_root();
        let phase = Duration::from_secs(60);
        let planned = schedule(9, phase, &kinds, TIMEOUTS);
        let seen: BTreeSet<LiveFault> = planned.iter().map(|p| p.fault).collect();
        assert_eq!(seen, kinds, "{planned:?}");
        assert_eq!(planned, schedule(9, phase, &kinds, TIMEOUTS));
        assert_ne!(planned, schedule(10, phase, &kinds, TIMEOUTS));
        for pair in planned.windows(2) {
            assert!(pair[0].at + pair[0].hold < pair[1].at, "one at a time");
        }
        let last = planned.last().expect("some faults");
        assert!(last.at + last.hold <= phase);
        for p in &planned {
            if p.fault == LiveFault::PauseAgent {
                assert!(p.hold > TIMEOUTS.agent_lost, "a pause outlasts the timeout");
            }
        }
    }

    #[test]
    fn names_parse_back() {
        for fault in LiveFault::ALL {
            assert_eq!(fault.name().parse::<LiveFault>(), Ok(fault));
        }
        let error = "meteor".parse::<LiveFault>().expect_err("unknown");
        assert!(error.contains("kill-leader"), "{error}");
    }
}
