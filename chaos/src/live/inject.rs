//! Injecting a run's faults into the real processes, and healing them.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::Rng;

use super::proxy::{LinkFault, Rules};
use super::run::{name, now_us, signal, Live, LiveError};
use super::schedule::{LiveFault, Planned};
use crate::system::history::Fact;

/// What heals an injected fault.
pub(super) enum Heal {
    RestartMaster(u64),
    RestartAgent(u64),
    RestartFramework(u64),
    Resume(u32),
    ClearRules,
    FreeDisk(u64, PathBuf),
}

impl Live<'_> {
    pub(super) fn victim<T: Clone>(&mut self, choices: &[T], pick: u64) -> Option<T> {
        if choices.is_empty() {
            return None;
        }
        let i = usize::try_from(pick % choices.len() as u64).unwrap_or(0);
        Some(choices[i].clone())
    }

    pub(super) fn running_masters(&self) -> Vec<u64> {
        self.cluster
            .addrs
            .keys()
            .copied()
            .filter(|id| self.cluster.is_running(*id))
            .collect()
    }

    pub(super) fn running_agents(&self) -> Vec<u64> {
        (1..=self.options.agents)
            .filter(|n| self.cluster.agent_pid(*n).is_some())
            .collect()
    }

    pub(super) fn all_processes(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .cluster
            .addrs
            .keys()
            .map(|id| name("master", *id))
            .collect();
        all.extend((1..=self.options.agents).map(|n| name("agent", n)));
        all.extend(self.frameworks.keys().map(|k| name("framework", *k)));
        all
    }

    /// Injects `planned`; what was done and how to heal it, or `None` if it had no victim.
    pub(super) fn inject(
        &mut self,
        planned: &Planned,
    ) -> Result<Option<(String, Heal)>, LiveError> {
        let pick = planned.pick;
        let leader = match planned.fault {
            LiveFault::KillLeader
            | LiveFault::PauseLeader
            | LiveFault::IsolateLeader
            | LiveFault::AgentCutFromLeader
            | LiveFault::Asymmetric
            | LiveFault::KillFollower
            | LiveFault::SplitMasters => self.leader(Duration::from_secs(2))?,
            _ => None,
        };
        let followers: Vec<u64> = self
            .running_masters()
            .into_iter()
            .filter(|id| Some(*id) != leader)
            .collect();
        let done = match planned.fault {
            LiveFault::KillLeader => leader.map(|id| {
                self.leader_kills.push(now_us());
                self.cluster.kill(id);
                (format!("master {id} (the leader)"), Heal::RestartMaster(id))
            }),
            LiveFault::KillFollower => self.victim(&followers, pick).map(|id| {
                self.cluster.kill(id);
                (format!("master {id}"), Heal::RestartMaster(id))
            }),
            LiveFault::KillAgent => {
                let agents = self.running_agents();
                self.victim(&agents, pick).map(|n| {
                    self.cluster.kill_agent(n);
                    (format!("agent {n}"), Heal::RestartAgent(n))
                })
            }
            LiveFault::KillFramework => {
                let running: Vec<u64> = self
                    .frameworks
                    .iter()
                    .filter(|(_, f)| f.child.is_some())
                    .map(|(k, _)| *k)
                    .collect();
                match self.victim(&running, pick) {
                    Some(k) => {
                        self.kill_framework(k);
                        Some((format!("framework process {k}"), Heal::RestartFramework(k)))
                    }
                    None => None,
                }
            }
            LiveFault::PauseLeader => leader
                .and_then(|id| self.cluster.master_pid(id).map(|pid| (id, pid)))
                .map(|(id, pid)| {
                    signal(pid, libc::SIGSTOP);
                    (format!("master {id} (the leader)"), Heal::Resume(pid))
                }),
            LiveFault::PauseAgent => {
                let agents = self.running_agents();
                self.victim(&agents, pick)
                    .and_then(|n| self.cluster.agent_pid(n).map(|pid| (n, pid)))
                    .map(|(n, pid)| {
                        signal(pid, libc::SIGSTOP);
                        (format!("agent {n}"), Heal::Resume(pid))
                    })
            }
            LiveFault::IsolateLeader => leader.map(|id| {
                let me = name("master", id);
                let others: Vec<String> = self
                    .all_processes()
                    .into_iter()
                    .filter(|p| *p != me)
                    .collect();
                let mut rules = Rules::default();
                rules.cut_between(&[me], &others);
                self.proxy.set_rules(rules);
                (format!("master {id} (the leader)"), Heal::ClearRules)
            }),
            LiveFault::SplitMasters => {
                let masters = self.running_masters();
                let minority_size = (masters.len().saturating_sub(1) / 2).max(1);
                let mut shuffled = masters.clone();
                shuffled.shuffle(&mut self.rng);
                // Half the time the leader is in the minority.
                if let (Some(leader), true) = (leader, pick % 2 == 0) {
                    shuffled.retain(|id| *id != leader);
                    shuffled.insert(0, leader);
                }
                let minority: Vec<String> = shuffled[..minority_size.min(shuffled.len())]
                    .iter()
                    .map(|id| name("master", *id))
                    .collect();
                let majority: Vec<String> = masters
                    .iter()
                    .map(|id| name("master", *id))
                    .filter(|m| !minority.contains(m))
                    .collect();
                let mut rules = Rules::default();
                rules.cut_between(&minority, &majority);
                self.proxy.set_rules(rules);
                Some((format!("{minority:?} from {majority:?}"), Heal::ClearRules))
            }
            LiveFault::AgentCutFromLeader => {
                let agents = self.running_agents();
                match (leader, self.victim(&agents, pick)) {
                    (Some(id), Some(n)) => {
                        let mut rules = Rules::default();
                        rules.cut_between(&[name("agent", n)], &[name("master", id)]);
                        self.proxy.set_rules(rules);
                        Some((
                            format!("agent {n} from master {id} (the leader)"),
                            Heal::ClearRules,
                        ))
                    }
                    _ => None,
                }
            }
            LiveFault::Asymmetric => match (leader, self.victim(&followers, pick)) {
                (Some(id), Some(follower)) => {
                    let (from, to) = if pick % 2 == 0 {
                        (id, follower)
                    } else {
                        (follower, id)
                    };
                    let mut rules = Rules::default();
                    rules.cut.insert((name("master", from), name("master", to)));
                    self.proxy.set_rules(rules);
                    Some((
                        format!("master {from} -> master {to} cut"),
                        Heal::ClearRules,
                    ))
                }
                _ => None,
            },
            LiveFault::Loss | LiveFault::Delay | LiveFault::Duplicate => {
                let all = self.all_processes();
                let process = self.victim(&all, pick);
                process.map(|process| {
                    let fault = match planned.fault {
                        LiveFault::Loss => LinkFault {
                            loss: self.rng.gen_range(0.1..0.4),
                            ..LinkFault::default()
                        },
                        LiveFault::Delay => {
                            let low = self.rng.gen_range(10..60);
                            LinkFault {
                                delay: (
                                    Duration::from_millis(low),
                                    Duration::from_millis(low + self.rng.gen_range(20..150)),
                                ),
                                ..LinkFault::default()
                            }
                        }
                        _ => LinkFault {
                            duplicate: self.rng.gen_range(0.2..0.6),
                            ..LinkFault::default()
                        },
                    };
                    let mut rules = Rules::default();
                    rules.degraded.insert(process.clone(), fault);
                    self.proxy.set_rules(rules);
                    (format!("{process}: {fault:?}"), Heal::ClearRules)
                })
            }
            LiveFault::DiskFull => {
                if !self.disk_limited {
                    None
                } else {
                    let masters = self.running_masters();
                    match self.victim(&masters, pick) {
                        Some(id) => {
                            let filler = self.cluster.data_dir(id).join("chaos-filler");
                            fill(&filler);
                            Some((
                                format!("master {id}'s data directory"),
                                Heal::FreeDisk(id, filler),
                            ))
                        }
                        None => None,
                    }
                }
            }
        };
        let Some((detail, heal)) = done else {
            self.shell("chaos", format!("{} skipped: no victim", planned.fault));
            return Ok(None);
        };
        *self
            .injected
            .entry(planned.fault.name().to_string())
            .or_default() += 1;
        // The simulation's fault kinds are its own; a live fault is the run's doing.
        self.shell("chaos", format!("fault {}: {detail}", planned.fault));
        Ok(Some((detail, heal)))
    }

    pub(super) fn kill_framework(&mut self, k: u64) {
        let ended = self.unfinished_frameworks(k);
        if let Some(proc_) = self.frameworks.get_mut(&k) {
            if let Some(mut child) = proc_.child.take() {
                let _ = child.kill();
                let _ = child.wait();
                self.owners.remove(child.id());
            }
        }
        // The next process takes these frameworks over from the same state directory.
        for framework_id in ended {
            self.note(Fact::FrameworkTakenOver { framework_id });
        }
    }

    pub(super) fn heal(&mut self, heal: Heal) -> Result<(), LiveError> {
        match heal {
            Heal::RestartMaster(id) => {
                if !self.cluster.is_running(id) {
                    self.start_master(id)?;
                }
            }
            Heal::RestartAgent(n) => {
                if self.cluster.agent_pid(n).is_none() {
                    self.start_agent(n)?;
                }
            }
            Heal::RestartFramework(k) => {
                if self.frameworks.get(&k).is_some_and(|f| f.child.is_none()) {
                    self.start_framework(k)?;
                }
            }
            Heal::Resume(pid) => signal(pid, libc::SIGCONT),
            Heal::ClearRules => self.proxy.set_rules(Rules::default()),
            Heal::FreeDisk(id, filler) => {
                let _ = std::fs::remove_file(&filler);
                // A master that stopped on the full disk is started again now that there is
                // room, as its supervisor would: it must rejoin from what it had written.
                self.reap_processes();
                if !self.cluster.is_running(id) {
                    self.start_master(id)?;
                }
            }
        }
        Ok(())
    }

    /// Whatever is still broken: every master and agent runs, nothing is paused or cut.
    pub(super) fn heal_all(&mut self) -> Result<(), LiveError> {
        self.proxy.set_rules(Rules::default());
        for id in self.cluster.addrs.keys().copied().collect::<Vec<_>>() {
            if let Some(pid) = self.cluster.master_pid(id) {
                signal(pid, libc::SIGCONT);
            }
            let _ = std::fs::remove_file(self.cluster.data_dir(id).join("chaos-filler"));
        }
        for n in 1..=self.options.agents {
            if let Some(pid) = self.cluster.agent_pid(n) {
                signal(pid, libc::SIGCONT);
            }
        }
        // A master that stopped by itself (a full disk, a crash) is started again: its log
        // says why it stopped.
        self.reap_processes();
        for id in self.cluster.founders.clone() {
            if !self.cluster.is_running(id) {
                self.start_master(id)?;
            }
        }
        for n in 1..=self.options.agents {
            if self.cluster.agent_pid(n).is_none() {
                self.start_agent(n)?;
            }
        }
        Ok(())
    }
}

/// Writes zeros to `path` until the filesystem is full.
pub(super) fn fill(path: &Path) {
    let Ok(mut file) = File::create(path) else {
        return;
    };
    let block = vec![0u8; 1 << 20];
    while file.write_all(&block).is_ok() {}
    let _ = file.sync_all();
}
