//! What the machine's process table says, independently of the code under test: which task
//! processes run ([`TaskWatcher`]), and which process owns a UDP socket ([`SocketOwners`]).
//!
//! The agent marks every process of a task with its framework, task id and sandbox
//! (`FULLERENE_FRAMEWORK_ID`, `FULLERENE_TASK_ID`, `FULLERENE_SANDBOX`); a sandbox lies under
//! one agent's work directory, `<dir>/agent-<n>-work/`, which names the agent. An instance is
//! a task on an agent: it starts when the first of its processes appears and ends when the
//! last is gone (zombies count as gone). The watcher polls `/proc`; an instance shorter than
//! the poll period may be missed, never invented.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use fullerene_agent::executor::{pids, proc_stat};
use fullerene_client::event_log::unix_micros;
use fullerene_proto::{FrameworkId, TaskId, TaskKey};

/// A task instance appeared or went away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceEvent {
    /// When it was seen, in microseconds since the Unix epoch.
    pub at_us: u64,
    /// The agent (its number, `agent-<n>-work`).
    pub agent: u64,
    /// The task.
    pub task: TaskKey,
    /// Whether it started (or ended).
    pub started: bool,
    /// For an end: the last poll that still saw it alive (it ended between then and
    /// `at_us`); for a start, `at_us`.
    pub last_seen_us: u64,
}

/// Polls `/proc` for the task processes of the agents whose work directories are
/// `<dir>/agent-<n>-work`, on a thread, until dropped.
pub struct TaskWatcher {
    stop: Arc<AtomicBool>,
    events: Arc<Mutex<Vec<InstanceEvent>>>,
    thread: Option<JoinHandle<()>>,
}

/// A process: its pid and start time (a pid is reused, the pair is not).
type ProcessId = (i32, u64);

/// A task instance: the agent's number and the task.
type Instance = (u64, TaskKey);

impl TaskWatcher {
    /// Starts polling every `period`.
    pub fn start(dir: &Path, period: Duration) -> std::io::Result<TaskWatcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let events = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, events, dir) = (Arc::clone(&stop), Arc::clone(&events), dir.to_path_buf());
            std::thread::Builder::new()
                .name("task-watcher".into())
                .spawn(move || watch(&dir, period, &stop, &events))?
        };
        Ok(TaskWatcher {
            stop,
            events,
            thread: Some(thread),
        })
    }

    /// Everything seen so far.
    pub fn events(&self) -> Vec<InstanceEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// The instances running now (as of the last poll).
    pub fn running(&self) -> BTreeSet<Instance> {
        let mut running = BTreeSet::new();
        for event in self.events() {
            let instance = (event.agent, event.task);
            if event.started {
                running.insert(instance);
            } else {
                running.remove(&instance);
            }
        }
        running
    }
}

impl Drop for TaskWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Polls a process's environment this many times before taking "not a task" for an answer:
/// a child the agent forked shows the agent's environment until it execs, a few milliseconds.
const ENVIRONMENT_READS: u32 = 10;

fn watch(dir: &Path, period: Duration, stop: &AtomicBool, events: &Mutex<Vec<InstanceEvent>>) {
    // What each process is, once known: its environment does not change after exec.
    let mut known: HashMap<ProcessId, (Option<Instance>, u32)> = HashMap::new();
    let mut previous: BTreeMap<Instance, usize> = BTreeMap::new();
    let mut previous_at = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut current: BTreeMap<Instance, usize> = BTreeMap::new();
        let mut alive = BTreeSet::new();
        for pid in pids() {
            let Some(stat) = proc_stat(pid) else { continue };
            if matches!(stat.state, 'Z' | 'X') {
                continue;
            }
            let id = (pid, stat.start_ticks);
            alive.insert(id);
            let entry = known.entry(id).or_insert((None, 0));
            if entry.0.is_none() && entry.1 < ENVIRONMENT_READS {
                entry.0 = instance_of(pid, dir);
                entry.1 += 1;
            }
            if let Some(instance) = entry.0.clone() {
                *current.entry(instance).or_default() += 1;
            }
        }
        known.retain(|id, _| alive.contains(id));
        let at_us = unix_micros(SystemTime::now());
        let mut seen = Vec::new();
        for instance in current.keys().filter(|i| !previous.contains_key(*i)) {
            seen.push(InstanceEvent {
                at_us,
                agent: instance.0,
                task: instance.1.clone(),
                started: true,
                last_seen_us: at_us,
            });
        }
        for instance in previous.keys().filter(|i| !current.contains_key(*i)) {
            seen.push(InstanceEvent {
                at_us,
                agent: instance.0,
                task: instance.1.clone(),
                started: false,
                last_seen_us: previous_at,
            });
        }
        if !seen.is_empty() {
            if let Ok(mut events) = events.lock() {
                events.extend(seen);
            }
        }
        previous = current;
        previous_at = at_us;
        std::thread::sleep(period);
    }
}

/// The task instance process `pid` belongs to, if it is one of an agent under `dir`.
fn instance_of(pid: i32, dir: &Path) -> Option<Instance> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let mut task = None;
    let mut framework = None;
    let mut sandbox = None;
    for var in environ.split(|b| *b == 0) {
        let Ok(var) = std::str::from_utf8(var) else {
            continue;
        };
        if let Some(value) = var.strip_prefix("FULLERENE_TASK_ID=") {
            task = Some(value.to_string());
        } else if let Some(value) = var.strip_prefix("FULLERENE_FRAMEWORK_ID=") {
            framework = Some(value.to_string());
        } else if let Some(value) = var.strip_prefix("FULLERENE_SANDBOX=") {
            sandbox = Some(PathBuf::from(value));
        }
    }
    let agent = agent_of_sandbox(&sandbox?, dir)?;
    Some((
        agent,
        TaskKey::new(FrameworkId::from(framework?), TaskId::from(task?)),
    ))
}

/// The `n` of `<dir>/agent-<n>-work/...`.
fn agent_of_sandbox(sandbox: &Path, dir: &Path) -> Option<u64> {
    let first = sandbox.strip_prefix(dir).ok()?.components().next()?;
    let name = first.as_os_str().to_str()?;
    name.strip_prefix("agent-")?
        .strip_suffix("-work")?
        .parse()
        .ok()
}

/// Which of the run's processes owns a local UDP port: found through `/proc/net/udp{,6}`
/// (port to socket inode) and `/proc/<pid>/fd` (inode to process), for the processes named in
/// the shared table.
#[derive(Clone, Default)]
pub struct SocketOwners {
    /// The run's processes: pid to name (`master-1`, `agent-3`, `framework-2`).
    pub processes: Arc<Mutex<BTreeMap<u32, String>>>,
}

impl SocketOwners {
    /// Names process `pid` (replacing what the pid was before).
    pub fn insert(&self, pid: u32, name: &str) {
        if let Ok(mut processes) = self.processes.lock() {
            processes.insert(pid, name.to_string());
        }
    }

    /// Forgets process `pid`.
    pub fn remove(&self, pid: u32) {
        if let Ok(mut processes) = self.processes.lock() {
            processes.remove(&pid);
        }
    }

    /// The name of the process that owns the loopback or wildcard UDP socket at `addr`.
    pub fn owner(&self, addr: SocketAddr) -> Option<String> {
        let inodes = udp_inodes(addr.port());
        if inodes.is_empty() {
            return None;
        }
        let processes = self.processes.lock().ok()?.clone();
        for (pid, name) in processes {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                let Ok(link) = std::fs::read_link(fd.path()) else {
                    continue;
                };
                let link = link.to_string_lossy();
                let Some(inode) = link
                    .strip_prefix("socket:[")
                    .and_then(|rest| rest.strip_suffix(']'))
                    .and_then(|n| n.parse::<u64>().ok())
                else {
                    continue;
                };
                if inodes.contains(&inode) {
                    return Some(name);
                }
            }
        }
        None
    }
}

/// The inodes of the UDP sockets bound to local `port` (IPv4 and IPv6 tables).
fn udp_inodes(port: u16) -> BTreeSet<u64> {
    let mut inodes = BTreeSet::new();
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        inodes.extend(parse_udp_table(&text, port));
    }
    inodes
}

/// The inodes of the lines of a `/proc/net/udp{,6}` table whose local port is `port`.
fn parse_udp_table(text: &str, port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(inode)) = (fields.get(1), fields.get(9)) else {
            continue;
        };
        let local_port = local
            .rsplit_once(':')
            .and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok());
        if local_port == Some(port) {
            if let Ok(inode) = inode.parse() {
                inodes.push(inode);
            }
        }
    }
    inodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_read_from_the_sandbox_path() {
        let dir = Path::new("/run/chaos");
        assert_eq!(
            agent_of_sandbox(Path::new("/run/chaos/agent-4-work/sandboxes/f/t"), dir),
            Some(4)
        );
        assert_eq!(
            agent_of_sandbox(Path::new("/elsewhere/agent-4-work/x"), dir),
            None
        );
        assert_eq!(
            agent_of_sandbox(Path::new("/run/chaos/master-1-data"), dir),
            None
        );
    }

    #[test]
    fn udp_tables_give_the_inode_of_a_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                     \u{20}1: 0100007F:1F90 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n\
                     \u{20}2: 0100007F:1F91 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 77 2 0000000000000000 0\n";
        assert_eq!(parse_udp_table(table, 0x1F90), vec![4242]);
        assert!(parse_udp_table(table, 9).is_empty());
    }

    #[test]
    fn this_process_owns_its_own_socket() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("binds");
        let owners = SocketOwners::default();
        owners.insert(std::process::id(), "me");
        let addr = socket.local_addr().expect("address");
        assert_eq!(owners.owner(addr).as_deref(), Some("me"));
        owners.remove(std::process::id());
        assert_eq!(owners.owner(addr), None);
    }
}
