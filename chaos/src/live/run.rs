//! One real-process run: lay out, start, inject, heal, wait, check, report, stop.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use fullerene_client::event_log::{read_events, unix_micros, Event, LoggedEvent};
use fullerene_proto::http::StateDocument;
use fullerene_proto::messages::{AgentState, ClusterView};
use fullerene_proto::{FrameworkId, ResourceVec};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::inject::Heal;
use super::observe::{Observer, Timed};
use super::procs::{SocketOwners, TaskWatcher};
use super::proxy::{FaultProxy, ProxyError};
use super::report::LiveReport;
use super::schedule::{schedule, LiveFault, Planned, Timeouts};
use crate::api::ApiClient;
use crate::cluster::{ClusterError, LocalMasters};
use crate::system::history::Fact;

/// What a run does.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// The `fullerene` binary.
    pub binary: PathBuf,
    /// Draws the jobs, the faults and their victims.
    pub seed: u64,
    /// How long faults are injected.
    pub duration: Duration,
    /// Where everything is kept (a new or empty directory).
    pub dir: PathBuf,
    /// Masters (Raft voters).
    pub masters: u64,
    /// Agents.
    pub agents: u64,
    /// Framework processes (`fullerene job run`), started during the first half of the run.
    pub frameworks: u64,
    /// Jobs each framework process runs.
    pub jobs_per_framework: usize,
    /// The workload the jobs are drawn from (small jobs first).
    pub workload: PathBuf,
    /// Real seconds per second of the workload's task durations.
    pub time_scale: f64,
    /// Each agent's resources (`--resources` syntax).
    pub agent_resources: String,
    /// The faults to inject (none: a baseline run).
    pub faults: BTreeSet<LiveFault>,
    /// How long the jobs may take to complete once faults stop.
    pub settle: Duration,
    /// Set from outside (ctrl-c): the run stops, stopping everything it started.
    pub interrupted: std::sync::Arc<AtomicBool>,
}

/// How the run is going, for a progress bar.
#[derive(Clone, Debug)]
pub enum Progress {
    /// A phase began.
    Phase(String),
    /// Seconds into the fault phase, and the fault just injected.
    Fault {
        /// Seconds into the fault phase.
        at: f64,
        /// What.
        fault: LiveFault,
        /// On whom.
        detail: String,
    },
}

/// Why a run could not be carried out (as opposed to a run that found violations).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The cluster could not be laid out or driven.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The fault proxy could not start.
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The run could not go on (the cluster did not start, the workload is unusable, ...).
    #[error("{0}")]
    Failed(String),
    /// Interrupted (ctrl-c); everything was stopped.
    #[error("interrupted; every process the run started was stopped")]
    Interrupted,
}

pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LiveError {
    let what = what.into();
    move |source| LiveError::Io { what, source }
}

/// Master flags of a chaos run: agents heartbeat every 250 ms, are unreachable after 1 s and
/// lost after 3 s, so that a minute holds many losses; Raft keeps its defaults (25 ms ticks,
/// elections after 250-500 ms), which are what operators run.
/// The leader's HTTP view is built at most every 100 ms, the observer's period, so that each
/// poll can see a new applied index.
const MASTER_FLAGS: [&str; 8] = [
    "--agent-heartbeat-ms",
    "250",
    "--agent-unreachable-ms",
    "1000",
    "--agent-lost-ms",
    "3000",
    "--http-view-interval-ms",
    "100",
];

const TIMEOUTS: Timeouts = Timeouts {
    election: Duration::from_millis(500),
    agent_lost: Duration::from_millis(3000),
};

/// How long a framework process waits for a lost session before its master gives its jobs up.
const FRAMEWORK_FAILOVER_SECS: &str = "5";

/// A framework process: `fullerene job run` over its own workload file.
pub(super) struct FrameworkProc {
    pub(super) child: Option<Child>,
    pub(super) jobs: Vec<(String, String)>,
    pub(super) certificate: u64,
    pub(super) starts: u32,
}

pub(super) struct Live<'a> {
    pub(super) options: &'a LiveOptions,
    pub(super) cluster: LocalMasters,
    pub(super) proxy: FaultProxy,
    pub(super) owners: SocketOwners,
    pub(super) observer: Observer,
    /// The masters' HTTP API, with the operator's certificate.
    pub(super) api: ApiClient,
    pub(super) watcher: TaskWatcher,
    pub(super) frameworks: BTreeMap<u64, FrameworkProc>,
    pub(super) harness: Vec<Timed>,
    pub(super) started: Instant,
    pub(super) rng: ChaCha8Rng,
    pub(super) injected: BTreeMap<String, u64>,
    pub(super) skipped: BTreeMap<String, String>,
    pub(super) leader_kills: Vec<u64>,
    pub(super) disk_limited: bool,
    /// Masters and agents that exited by themselves, with their last log line.
    pub(super) exits: Vec<String>,
    /// Each master's applied index at the end, read before anything was stopped.
    pub(super) final_applied: Vec<(u64, u64)>,
}

/// Runs one chaos run and checks its history. `Ok` holds the report whether or not it found
/// violations; `Err` means the run itself could not be carried out.
pub fn run_live(
    options: &LiveOptions,
    progress: &dyn Fn(Progress),
) -> Result<LiveReport, LiveError> {
    // Agents report their sandboxes by absolute path; the process table is matched on it.
    let options = &LiveOptions {
        dir: std::path::absolute(&options.dir)
            .map_err(io(format!("resolve {}", options.dir.display())))?,
        ..options.clone()
    };
    check_empty_dir(&options.dir)?;
    std::fs::create_dir_all(&options.dir)
        .map_err(io(format!("create {}", options.dir.display())))?;
    let jobs = pick_jobs(options)?;
    progress(Progress::Phase("starting the cluster".into()));
    let mut live = Live::start(options)?;
    let outcome = live.drive(&jobs, progress);
    live.stop_everything();
    outcome?;
    progress(Progress::Phase("checking the history".into()));
    live.report()
}

fn check_empty_dir(dir: &Path) -> Result<(), LiveError> {
    let occupied = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        return Err(LiveError::Failed(format!(
            "--dir {} is not empty: a run lays out a new cluster there",
            dir.display()
        )));
    }
    Ok(())
}

/// The jobs of each framework process: drawn from the workload's smallest jobs (by work on
/// one agent), renamed `f<k>-<name>` so that every job of the run has its own name.
fn pick_jobs(options: &LiveOptions) -> Result<BTreeMap<u64, Vec<(String, String)>>, LiveError> {
    let text = std::fs::read_to_string(&options.workload)
        .map_err(io(format!("read {}", options.workload.display())))?;
    let jobs = fullerene_sdk::parse_workload(&text, &options.workload)
        .map_err(|e| LiveError::Failed(e.to_string()))?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let overrides = fullerene_agent::machine::parse_resources(&options.agent_resources)
        .map_err(|e| LiveError::Failed(format!("agent resources: {e}")))?;
    let machine = fullerene_agent::machine::with_overrides(ResourceVec::ZERO, &overrides);
    // Smallest work first (task-seconds in machines), so that jobs fit a run of minutes.
    let mut sized: Vec<(f64, usize)> = jobs
        .iter()
        .enumerate()
        .map(|(i, job)| (job.total_work(&machine), i))
        .collect();
    sized.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let wanted = usize::try_from(options.frameworks)
        .unwrap_or(usize::MAX)
        .saturating_mul(options.jobs_per_framework);
    // The smallest quarter of the file, at least twice what is wanted, drawn from by seed.
    let pool_size = (sized.len() / 4).max(wanted * 2).min(sized.len());
    let mut pool: Vec<usize> = sized[..pool_size].iter().map(|(_, i)| *i).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed ^ 0x6a6f6273);
    pool.shuffle(&mut rng);
    if pool.len() < wanted {
        return Err(LiveError::Failed(format!(
            "{} holds {} jobs; the run needs {wanted} (frameworks × jobs per framework)",
            options.workload.display(),
            jobs.len()
        )));
    }
    let mut out = BTreeMap::new();
    let mut next = pool.iter().cycle();
    for k in 1..=options.frameworks {
        let mut chosen = Vec::new();
        for _ in 0..options.jobs_per_framework {
            let Some(&index) = next.next() else { break };
            let mut line: serde_json::Value = serde_json::from_str(lines[index])
                .map_err(|e| LiveError::Failed(format!("workload line {}: {e}", index + 1)))?;
            let name = format!("f{k}-{}", jobs[index].name);
            line["name"] = serde_json::Value::String(name.clone());
            chosen.push((name, line.to_string()));
        }
        out.insert(k, chosen);
    }
    Ok(out)
}

/// The name of process `n` of a role, as rules and logs say it.
pub(super) fn name(role: &str, n: u64) -> String {
    format!("{role}-{n}")
}

pub(super) fn now_us() -> u64 {
    unix_micros(SystemTime::now())
}

pub(super) fn signal(pid: u32, signal: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) has no memory effects; the pid is a child this run started.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

impl<'a> Live<'a> {
    pub(super) fn start(options: &'a LiveOptions) -> Result<Live<'a>, LiveError> {
        let mut cluster = LocalMasters::prepare(
            options.binary.clone(),
            options.masters,
            options.masters,
            options.agents.max(options.frameworks),
            Some(options.dir.join("cluster")),
        )?;
        // ctrl-c reaches the run only; it stops its processes itself. A run killed outright
        // takes them with it.
        cluster.own_process_group = true;
        cluster.die_with_parent = true;
        cluster.extra_args = MASTER_FLAGS.iter().map(ToString::to_string).collect();
        let owners = SocketOwners::default();
        let targets: BTreeMap<String, _> = cluster
            .addrs
            .iter()
            .map(|(id, addr)| (name("master", *id), *addr))
            .collect();
        let proxy = FaultProxy::start(&targets, owners.clone(), options.seed)?;
        for id in cluster.addrs.keys().copied().collect::<Vec<_>>() {
            cluster
                .advertised
                .insert(id, proxy.public()[&name("master", id)]);
        }
        let api = cluster.api_client()?;
        let observer = Observer::start(
            cluster.http_addrs.clone(),
            api.clone().with_timeout(Duration::from_millis(500)),
            Duration::from_millis(100),
            fullerene_scheduling::DEFAULT_OVERBOOK_ALLOWANCE,
        )
        .map_err(io("start the observer's thread"))?;
        let watcher = TaskWatcher::start(cluster.dir(), Duration::from_millis(20))
            .map_err(io("start the process watcher's thread"))?;
        let mut live = Live {
            options,
            cluster,
            proxy,
            owners,
            observer,
            api: api.with_timeout(Duration::from_secs(1)),
            watcher,
            frameworks: BTreeMap::new(),
            harness: Vec::new(),
            started: Instant::now(),
            rng: ChaCha8Rng::seed_from_u64(options.seed ^ 0x7669_6374_696d),
            injected: BTreeMap::new(),
            skipped: BTreeMap::new(),
            leader_kills: Vec::new(),
            disk_limited: false,
            exits: Vec::new(),
            final_applied: Vec::new(),
        };
        live.prepare_disks();
        for id in live.cluster.founders.clone() {
            live.start_master(id)?;
        }
        Ok(live)
    }

    /// With root and the disk-full fault asked for, every master's data directory is a small
    /// filesystem of its own; otherwise the fault is skipped, and said so.
    pub(super) fn prepare_disks(&mut self) {
        if !self.options.faults.contains(&LiveFault::DiskFull) {
            return;
        }
        // SAFETY: geteuid(2) has no side effects.
        if unsafe { libc::geteuid() } != 0 {
            self.skipped.insert(
                LiveFault::DiskFull.name().into(),
                "needs root to mount a size-limited filesystem".into(),
            );
            return;
        }
        let mut mounted = true;
        for id in self.cluster.addrs.keys().copied().collect::<Vec<_>>() {
            let dir = self.cluster.data_dir(id);
            let made = std::fs::create_dir_all(&dir).is_ok()
                && Command::new("mount")
                    .args(["-t", "tmpfs", "-o", "size=256m", "fullerene-chaos"])
                    .arg(&dir)
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
            mounted &= made;
        }
        if mounted {
            self.disk_limited = true;
        } else {
            self.unmount_disks();
            self.skipped.insert(
                LiveFault::DiskFull.name().into(),
                "could not mount a tmpfs on the masters' data directories".into(),
            );
        }
    }

    pub(super) fn unmount_disks(&mut self) {
        for id in self.cluster.addrs.keys().copied().collect::<Vec<_>>() {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.cluster.data_dir(id))
                .stderr(Stdio::null())
                .status();
        }
        self.disk_limited = false;
    }

    pub(super) fn note(&mut self, fact: Fact) {
        self.harness.push((now_us(), fact));
    }

    pub(super) fn shell(&mut self, process: &str, event: impl Into<String>) {
        self.note(Fact::Shell {
            process: process.to_string(),
            event: event.into(),
        });
    }

    pub(super) fn start_master(&mut self, id: u64) -> Result<(), LiveError> {
        self.cluster.spawn(id, false)?;
        if let Some(pid) = self.cluster.master_pid(id) {
            self.owners.insert(pid, &name("master", id));
        }
        self.shell(&name("master", id), "started");
        Ok(())
    }

    pub(super) fn agent_flags(&self, n: u64) -> Vec<String> {
        vec![
            "--executors".into(),
            "command".into(),
            "--resources".into(),
            self.options.agent_resources.clone(),
            "--hostname".into(),
            format!("chaos-agent-{n}"),
            "--event-log".into(),
            self.agent_log(n).display().to_string(),
        ]
    }

    pub(super) fn agent_log(&self, n: u64) -> PathBuf {
        self.cluster.dir().join(format!("agent-{n}.events.jsonl"))
    }

    pub(super) fn framework_log(&self, k: u64) -> PathBuf {
        self.cluster
            .dir()
            .join(format!("framework-{k}.events.jsonl"))
    }

    pub(super) fn start_agent(&mut self, n: u64) -> Result<(), LiveError> {
        let flags = self.agent_flags(n);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        self.cluster.spawn_agent(n, &flags)?;
        if let Some(pid) = self.cluster.agent_pid(n) {
            self.owners.insert(pid, &name("agent", n));
        }
        self.shell(&name("agent", n), "started");
        Ok(())
    }

    /// Starts framework process `k` on the jobs of its that have not completed.
    pub(super) fn start_framework(&mut self, k: u64) -> Result<(), LiveError> {
        let completed = self.completed_jobs(k);
        let Some(proc_) = self.frameworks.get(&k) else {
            return Ok(());
        };
        let remaining: Vec<(String, String)> = proc_
            .jobs
            .iter()
            .filter(|(job, _)| !completed.contains(job))
            .cloned()
            .collect();
        if remaining.is_empty() {
            return Ok(());
        }
        let starts = proc_.starts + 1;
        let certificate = proc_.certificate;
        let dir = self.cluster.dir().to_path_buf();
        let file = dir.join(format!("framework-{k}.{starts}.jsonl"));
        let text: String = remaining
            .iter()
            .map(|(_, line)| format!("{line}\n"))
            .collect();
        std::fs::write(&file, text).map_err(io(format!("write {}", file.display())))?;
        let open = |path: PathBuf| {
            File::options()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io(format!("open {}", path.display())))
        };
        let stdout = open(dir.join(format!("framework-{k}.out")))?;
        let stderr = open(dir.join(format!("framework-{k}.log")))?;
        let masters: Vec<String> = self
            .cluster
            .addrs
            .keys()
            .filter_map(|id| self.cluster.advertised_addr(*id).ok())
            .map(|a| a.to_string())
            .collect();
        let mut command = Command::new(&self.options.binary);
        command
            // The driver says how it follows the leader at debug level: kept for forensics.
            .args([
                "--log-level",
                "info,fullerene_sdk=debug,fullerene_client=debug",
                "--json",
                "job",
                "run",
                "--workload",
            ])
            .arg(&file)
            .arg("--master-addrs")
            .arg(masters.join(","))
            .arg("--certs-dir")
            .arg(self.cluster.certs_dir())
            .arg("--framework-cert")
            .arg(certificate.to_string())
            .arg("--command")
            .arg("sleep {duration_s}")
            .arg("--time-scale")
            .arg(self.options.time_scale.to_string())
            .arg("--failover-timeout-secs")
            .arg(FRAMEWORK_FAILOVER_SECS)
            .arg("--max-attempts")
            .arg("1000")
            .arg("--event-log")
            .arg(self.framework_log(k))
            .arg("--state-dir")
            .arg(dir.join(format!("framework-{k}.state")))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        crate::cluster::die_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(io(format!("start {}", self.options.binary.display())))?;
        self.owners.insert(child.id(), &name("framework", k));
        for (job, _) in &remaining {
            self.note(Fact::JobSubmitted { job: job.clone() });
        }
        if let Some(proc_) = self.frameworks.get_mut(&k) {
            proc_.child = Some(child);
            proc_.starts = starts;
        }
        self.shell(
            &name("framework", k),
            format!("started ({} jobs)", remaining.len()),
        );
        Ok(())
    }

    pub(super) fn framework_events(&self, k: u64) -> Vec<LoggedEvent> {
        read_events(&self.framework_log(k)).unwrap_or_default()
    }

    pub(super) fn completed_jobs(&self, k: u64) -> BTreeSet<String> {
        self.framework_events(k)
            .into_iter()
            .filter_map(|e| match e.event {
                Event::JobCompleted { job, .. } => Some(job),
                _ => None,
            })
            .collect()
    }

    /// The frameworks of process `k` that subscribed and whose jobs have not ended.
    pub(super) fn unfinished_frameworks(&self, k: u64) -> Vec<FrameworkId> {
        let mut subscribed = BTreeSet::new();
        for event in self.framework_events(k) {
            match event.event {
                Event::FrameworkSubscribed { framework_id, .. } => {
                    subscribed.insert(framework_id);
                }
                Event::JobCompleted { framework_id, .. }
                | Event::FrameworkGone { framework_id } => {
                    subscribed.remove(&framework_id);
                }
                Event::JobFailed {
                    framework_id: Some(framework_id),
                    ..
                } => {
                    subscribed.remove(&framework_id);
                }
                _ => {}
            }
        }
        subscribed.into_iter().collect()
    }

    pub(super) fn check_interrupted(&self) -> Result<(), LiveError> {
        if self.options.interrupted.load(Ordering::Relaxed) {
            Err(LiveError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// Sleeps `duration` in small steps, so that ctrl-c is heard.
    pub(super) fn sleep(&self, duration: Duration) -> Result<(), LiveError> {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            self.check_interrupted()?;
            std::thread::sleep(
                until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
            );
        }
        Ok(())
    }

    /// The leader the masters' metrics name (the highest term wins), within `patience`.
    pub(super) fn leader(&self, patience: Duration) -> Result<Option<u64>, LiveError> {
        let until = Instant::now() + patience;
        loop {
            let figures = self.observer.figures();
            let leader = figures
                .iter()
                .filter(|(id, f)| f.leader && self.cluster.is_running(**id))
                .max_by_key(|(_, f)| f.term)
                .map(|(id, _)| *id);
            if leader.is_some() || Instant::now() >= until {
                return Ok(leader);
            }
            self.sleep(Duration::from_millis(50))?;
        }
    }

    /// The leader's committed view.
    pub(super) fn view(&self) -> Option<ClusterView> {
        let leader = self.leader(Duration::ZERO).ok().flatten()?;
        let addr = self.cluster.http_addrs.get(&leader)?;
        let answer = self.api.get(*addr, "/state").ok()?;
        (answer.code == 200)
            .then(|| answer.json::<StateDocument>().ok())
            .flatten()
            .map(|document| document.view)
    }

    pub(super) fn wait_until(
        &self,
        what: &str,
        patience: Duration,
        mut done: impl FnMut(&Live<'_>) -> bool,
    ) -> Result<(), LiveError> {
        let until = Instant::now() + patience;
        while !done(self) {
            if Instant::now() >= until {
                return Err(LiveError::Failed(format!(
                    "{what} within {} s\n{}",
                    patience.as_secs(),
                    self.cluster.logs(15)
                )));
            }
            self.sleep(Duration::from_millis(100))?;
        }
        Ok(())
    }

    pub(super) fn drive(
        &mut self,
        jobs: &BTreeMap<u64, Vec<(String, String)>>,
        progress: &dyn Fn(Progress),
    ) -> Result<(), LiveError> {
        self.wait_until(
            "the masters did not elect a leader",
            Duration::from_secs(30),
            |l| l.leader(Duration::ZERO).ok().flatten().is_some(),
        )?;
        for n in 1..=self.options.agents {
            self.start_agent(n)?;
        }
        let agents = usize::try_from(self.options.agents).unwrap_or(usize::MAX);
        self.wait_until(
            "the agents did not register",
            Duration::from_secs(30),
            |l| {
                l.view().is_some_and(|v| {
                    v.agents
                        .iter()
                        .filter(|a| a.state == AgentState::Active)
                        .count()
                        >= agents
                })
            },
        )?;
        for (k, jobs) in jobs {
            let certificate = (k - 1) % self.options.agents.max(self.options.frameworks) + 1;
            self.frameworks.insert(
                *k,
                FrameworkProc {
                    child: None,
                    jobs: jobs.clone(),
                    certificate,
                    starts: 0,
                },
            );
        }

        // Framework processes start through the first half of the fault phase, so that
        // faults meet jobs at every stage of their lives.
        let phase = self.options.duration;
        let spacing = phase / 2 / u32::try_from(self.options.frameworks.max(1)).unwrap_or(1);
        let mut starts: Vec<(Duration, u64)> = (1..=self.options.frameworks)
            .map(|k| (spacing * u32::try_from(k - 1).unwrap_or(0), k))
            .collect();
        starts.reverse();
        // A fault this machine cannot inject (said in the report) takes no slot.
        let mut kinds = self.options.faults.clone();
        kinds.retain(|kind| !self.skipped.contains_key(kind.name()));
        let planned = schedule(self.options.seed, phase, &kinds, TIMEOUTS);
        let mut planned: std::collections::VecDeque<Planned> = planned.into();
        let mut healing: Vec<(Duration, Heal)> = Vec::new();
        progress(Progress::Phase(format!(
            "injecting faults for {} s",
            phase.as_secs()
        )));
        let phase_start = Instant::now();
        loop {
            self.check_interrupted()?;
            let elapsed = phase_start.elapsed();
            while starts.last().is_some_and(|(at, _)| *at <= elapsed) {
                if let Some((_, k)) = starts.pop() {
                    self.start_framework(k)?;
                }
            }
            let due: Vec<Heal> = {
                let (due, later): (Vec<_>, Vec<_>) =
                    healing.drain(..).partition(|(at, _)| *at <= elapsed);
                healing = later;
                due.into_iter().map(|(_, h)| h).collect()
            };
            for heal in due {
                self.heal(heal)?;
            }
            if planned.front().is_some_and(|p| p.at <= elapsed) {
                if let Some(p) = planned.pop_front() {
                    if let Some((detail, heal)) = self.inject(&p)? {
                        progress(Progress::Fault {
                            at: elapsed.as_secs_f64(),
                            fault: p.fault,
                            detail,
                        });
                        // Held for its whole time from when it took effect.
                        healing.push((phase_start.elapsed() + p.hold, heal));
                    }
                }
            }
            self.reap_frameworks();
            self.reap_processes();
            if elapsed >= phase && starts.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for (_, heal) in healing {
            self.heal(heal)?;
        }
        self.heal_all()?;
        self.note(Fact::FaultsStopped);
        progress(Progress::Phase("waiting for the jobs to complete".into()));
        let until = Instant::now() + self.options.settle;
        while Instant::now() < until {
            self.reap_frameworks();
            if self.frameworks.values().all(|f| f.child.is_none()) {
                break;
            }
            self.sleep(Duration::from_millis(200))?;
        }
        // Late resends of acknowledged updates, and the last polls.
        self.sleep(Duration::from_secs(2))?;
        self.final_applied = self.settled_applied()?;
        Ok(())
    }

    /// Every master's applied index once they agree (nothing is proposed any more but
    /// heartbeats' effects), read while they all still run: what the end of the history says
    /// each master applied. Waits up to 10 s; then whatever they last said.
    fn settled_applied(&self) -> Result<Vec<(u64, u64)>, LiveError> {
        let until = Instant::now() + Duration::from_secs(10);
        let mut last: Vec<(u64, u64)> = Vec::new();
        loop {
            let figures = self.observer.figures();
            let now: Vec<(u64, u64)> = self
                .cluster
                .founders
                .iter()
                .filter_map(|id| figures.get(id).map(|f| (*id, f.applied)))
                .collect();
            let everyone = now.len() == self.cluster.founders.len();
            let agree = now.windows(2).all(|w| w[0].1 == w[1].1);
            if (everyone && agree && now == last) || Instant::now() >= until {
                return Ok(now);
            }
            last = now;
            self.sleep(Duration::from_millis(150))?;
        }
    }

    /// Notes masters and agents that exited by themselves, with their last words.
    pub(super) fn reap_processes(&mut self) {
        for exited in self.cluster.reap_exited() {
            let last = crate::cluster::tail(&exited.log, 1);
            let line = format!("{}: {} ({})", exited.name, exited.status, last.trim());
            self.shell(&exited.name, format!("exited by itself: {}", exited.status));
            self.exits.push(line);
        }
    }

    /// Notes framework processes that exited (their jobs ended, or they failed).
    pub(super) fn reap_frameworks(&mut self) {
        let mut exited = Vec::new();
        for (k, proc_) in &mut self.frameworks {
            if let Some(child) = &mut proc_.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.owners.remove(child.id());
                    proc_.child = None;
                    exited.push((*k, status));
                }
            }
        }
        for (k, status) in exited {
            self.shell(&name("framework", k), format!("exited: {status}"));
        }
    }

    pub(super) fn stop_everything(&mut self) {
        for k in self.frameworks.keys().copied().collect::<Vec<_>>() {
            if let Some(proc_) = self.frameworks.get_mut(&k) {
                if let Some(mut child) = proc_.child.take() {
                    signal(child.id(), libc::SIGCONT);
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        for id in self.cluster.addrs.keys().copied().collect::<Vec<_>>() {
            if let Some(pid) = self.cluster.master_pid(id) {
                signal(pid, libc::SIGCONT);
            }
            self.cluster.kill(id);
        }
        for n in 1..=self.options.agents {
            if let Some(pid) = self.cluster.agent_pid(n) {
                signal(pid, libc::SIGCONT);
            }
            self.cluster.kill_agent(n);
        }
        // The tasks' processes outlive their agents by design: end them too.
        kill_task_processes(self.cluster.dir());
        if self.disk_limited {
            self.unmount_disks();
        }
    }
}

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.stop_everything();
    }
}

/// SIGKILLs the process groups of every task process of an agent under `dir` (their sandboxes
/// are under it), never this process's own group or init's.
pub(crate) fn kill_task_processes(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let mut mark = b"FULLERENE_SANDBOX=".to_vec();
    mark.extend_from_slice(dir.as_os_str().as_bytes());
    mark.push(b'/');
    // SAFETY: getpgrp(2) has no side effects.
    let own_group = unsafe { libc::getpgrp() };
    for pid in fullerene_agent::executor::pids() {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|var| var.starts_with(&mark)) {
            continue;
        }
        let Some(stat) = fullerene_agent::executor::proc_stat(pid) else {
            continue;
        };
        if stat.pgrp > 1 && stat.pgrp != own_group {
            // SAFETY: kill(2) has no memory effects; the group is a task of this run.
            unsafe {
                libc::kill(-stat.pgrp, libc::SIGKILL);
            }
        }
    }
}
