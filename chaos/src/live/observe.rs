//! What the masters say, read through their HTTP API (which no fault touches) with the
//! operator's certificate: every master's `/metrics` (its Raft term, whether it leads, its
//! applied index) and the leader's `/state` (its published view of the committed cluster
//! state, exact for the applied index it carries), polled on a thread and turned into the
//! checker's facts as they are read.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use fullerene_client::event_log::unix_micros;
use fullerene_proto::http::StateDocument;
use fullerene_proto::ids::stable_digest;
use fullerene_proto::messages::{AgentState, ClusterView};
use fullerene_proto::{AgentId, ResourceVec};
use fullerene_scheduling::allocator::DEFAULT_KAPPA;

use crate::api::ApiClient;
use crate::system::history::{Accounting, AgentAccount, Fact};

/// A fact and when it was read, in microseconds since the Unix epoch.
pub type Timed = (u64, Fact);

/// A master's Raft figures, from its `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RaftFigures {
    /// Its term.
    pub term: u64,
    /// Whether it leads.
    pub leader: bool,
    /// Its applied index.
    pub applied: u64,
}

/// Reads the Raft figures out of a Prometheus exposition.
pub fn parse_raft_figures(text: &str) -> RaftFigures {
    let mut figures = RaftFigures::default();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(name), Some(value)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        // Series carry labels (`{node="1"}`).
        let name = name.split_once('{').map_or(name, |(name, _)| name);
        match name {
            "fullerene_raft_term" => figures.term = value as u64,
            "fullerene_raft_is_leader" => figures.leader = value >= 1.0,
            "fullerene_raft_applied_index" => figures.applied = value as u64,
            _ => {}
        }
    }
    figures
}

/// The bound of DESIGN.md for the masters' default fairness factor (DRF: the cluster's
/// capacity is one unit, and a task adds at most one).
pub fn deficit_bound() -> f64 {
    DEFAULT_KAPPA + 1.0
}

/// A digest of what a view holds that only the log decides (every task's state and agent,
/// every framework and group membership), so two views of one applied index must agree.
pub fn committed_digest(view: &ClusterView) -> u64 {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut tasks: Vec<String> = view
        .tasks
        .iter()
        .map(|t| {
            format!(
                "{}|{}|{}|{:?}|{}",
                t.framework_id, t.spec.id, t.agent_id, t.state, t.seq
            )
        })
        .collect();
    tasks.sort();
    let mut frameworks: Vec<String> = view
        .frameworks
        .iter()
        .map(|f| format!("{}|{}|{}|{}", f.id, f.name, f.group, f.torn_down))
        .collect();
    frameworks.sort();
    parts.extend(tasks.into_iter().map(String::into_bytes));
    parts.push(b"--".to_vec());
    parts.extend(frameworks.into_iter().map(String::into_bytes));
    let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    stable_digest(&slices)
}

/// Polls the masters until dropped.
pub struct Observer {
    stop: Arc<AtomicBool>,
    facts: Arc<Mutex<Vec<Timed>>>,
    figures: Arc<Mutex<BTreeMap<u64, RaftFigures>>>,
    thread: Option<JoinHandle<()>>,
}

impl Observer {
    /// Starts polling the masters' HTTP addresses (by Raft id) every `period` with `client`
    /// (its timeout should be shorter than `period`); agents' totals are checked against
    /// `allowance` of overbooking.
    pub fn start(
        http: BTreeMap<u64, SocketAddr>,
        client: ApiClient,
        period: Duration,
        allowance: f64,
    ) -> std::io::Result<Observer> {
        let stop = Arc::new(AtomicBool::new(false));
        let facts = Arc::new(Mutex::new(Vec::new()));
        let figures = Arc::new(Mutex::new(BTreeMap::new()));
        let thread = {
            let (stop, facts, figures) =
                (Arc::clone(&stop), Arc::clone(&facts), Arc::clone(&figures));
            std::thread::Builder::new()
                .name("observer".into())
                .spawn(move || {
                    let mut poller = Poller {
                        http,
                        client,
                        allowance,
                        facts,
                        figures,
                        leading: BTreeMap::new(),
                        candidates: BTreeMap::new(),
                        capacity: BTreeMap::new(),
                    };
                    while !stop.load(Ordering::Relaxed) {
                        poller.poll();
                        std::thread::sleep(period);
                    }
                })?
        };
        Ok(Observer {
            stop,
            facts,
            figures,
            thread: Some(thread),
        })
    }

    /// The facts read so far.
    pub fn facts(&self) -> Vec<Timed> {
        self.facts.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// Each master's last figures (masters that did not answer the last poll are left out).
    pub fn figures(&self) -> BTreeMap<u64, RaftFigures> {
        self.figures.lock().map(|f| f.clone()).unwrap_or_default()
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Poller {
    http: BTreeMap<u64, SocketAddr>,
    client: ApiClient,
    allowance: f64,
    facts: Arc<Mutex<Vec<Timed>>>,
    figures: Arc<Mutex<BTreeMap<u64, RaftFigures>>>,
    /// The term each master was last seen leading.
    leading: BTreeMap<u64, u64>,
    /// The term each master said it led at the last poll: a lead is recorded once two polls
    /// in a row agree, since the term and the role are two gauges a scrape can read between
    /// the updates of.
    candidates: BTreeMap<u64, u64>,
    capacity: BTreeMap<AgentId, ResourceVec>,
}

impl Poller {
    fn record(&self, fact: Fact) {
        if let Ok(mut facts) = self.facts.lock() {
            facts.push((unix_micros(SystemTime::now()), fact));
        }
    }

    fn poll(&mut self) {
        let mut figures = BTreeMap::new();
        for (&master, &addr) in &self.http {
            let Ok(answer) = self.client.get(addr, "/metrics") else {
                continue;
            };
            if answer.code == 200 {
                figures.insert(master, parse_raft_figures(&answer.body));
            }
        }
        if let Ok(mut shared) = self.figures.lock() {
            shared.clone_from(&figures);
        }
        let mut candidates = BTreeMap::new();
        for (&master, figure) in &figures {
            if !figure.leader {
                continue;
            }
            candidates.insert(master, figure.term);
            let confirmed = self.candidates.get(&master) == Some(&figure.term);
            if confirmed && self.leading.get(&master) != Some(&figure.term) {
                self.leading.insert(master, figure.term);
                self.record(Fact::Leader {
                    master,
                    term: figure.term,
                });
            }
        }
        self.candidates = candidates;
        // The leader's view; a master that just lost the lead answers with a redirect.
        let leaders: Vec<(u64, u64)> = figures
            .iter()
            .filter(|(_, f)| f.leader)
            .map(|(m, f)| (*m, f.term))
            .collect();
        for (master, term) in leaders {
            let Some(addr) = self.http.get(&master).copied() else {
                continue;
            };
            let Ok(answer) = self.client.get(addr, "/state") else {
                continue;
            };
            if answer.code != 200 {
                continue;
            }
            let Ok(document) = answer.json::<StateDocument>() else {
                continue;
            };
            self.view(master, term, &document.view);
        }
    }

    fn view(&mut self, master: u64, term: u64, view: &ClusterView) {
        for agent in &view.agents {
            let Ok(total) = agent.total.to_vec() else {
                continue;
            };
            if self.capacity.get(&agent.id) != Some(&total) {
                self.capacity.insert(agent.id.clone(), total);
                self.record(Fact::AgentCapacity {
                    agent: agent.id.clone(),
                    total,
                    allowance: self.allowance,
                });
            }
        }
        // Losses come from the master's own stamp on the LOST updates it sent (see
        // `history`): a poll sees them late, possibly after the agent came back.
        self.record(Fact::Applied {
            master,
            index: view.applied,
            // The view does not carry the term of its last entry; the digest stands for it.
            term: 0,
            digest: committed_digest(view),
        });
        let mut offered: BTreeMap<&AgentId, ResourceVec> = BTreeMap::new();
        for offer in &view.offers {
            if let Ok(resources) = offer.resources.to_vec() {
                let sum = offered.entry(&offer.agent_id).or_insert(ResourceVec::ZERO);
                *sum += resources;
            }
        }
        let agents = view
            .agents
            .iter()
            .filter(|a| a.state != AgentState::Lost)
            .filter_map(|a| {
                Some(AgentAccount {
                    agent: a.id.clone(),
                    total: a.total.to_vec().ok()?,
                    used: a.used.to_vec().ok()?,
                    offered: offered.get(&a.id).copied().unwrap_or(ResourceVec::ZERO),
                })
            })
            .collect();
        self.record(Fact::Accounting(Accounting {
            master,
            term,
            agents,
            allowance: self.allowance,
            deficits: view
                .groups
                .iter()
                .map(|g| (g.name.clone(), g.deficit))
                .collect(),
            deficit_bound: deficit_bound(),
            // The live view has no plan and no follower's decision: its runs check neither.
            plan_excess: None,
            reservations_owed: Vec::new(),
            reservation_grace_ms: 0,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raft_figures_are_read_from_the_exposition() {
        let text = "# HELP x\nfullerene_raft_term{node=\"2\"} 7\nfullerene_raft_is_leader 1\n\
                    fullerene_raft_applied_index 1234\nfullerene_raft_commit_index 1240\n";
        assert_eq!(
            parse_raft_figures(text),
            RaftFigures {
                term: 7,
                leader: true,
                applied: 1234
            }
        );
        assert_eq!(parse_raft_figures(""), RaftFigures::default());
    }
}
