//! Shared by the agent's component tests: the agent's side of the testkit's fake master (an
//! agent session that counts heartbeats, the `Register` it opens with) and an agent running in
//! the test's runtime.

#![allow(dead_code)] // each test crate uses its own subset

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fullerene_agent::{AgentConfig, AgentError};
use fullerene_proto::ids::{AgentId, FrameworkId, MasterId, TaskKey};
use fullerene_proto::messages::{
    AgentToMaster, MasterToAgent, StatusAck, StatusUpdate, TaskIsolation, TaskReport, TaskSpec,
};
use fullerene_proto::resources::ResourceVec;
use fullerene_transport::certs::CertCounts;
use fullerene_transport::testkit::{awaiting, AgentPeer, PeerSession};
pub(crate) use fullerene_transport::testkit::{FakeMaster, TestCerts};
use fullerene_transport::Role;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Two masters (a leader and a follower) and one agent.
pub(crate) fn certs() -> TestCerts {
    TestCerts::new(CertCounts {
        masters: 2,
        agents: 1,
        ..CertCounts::default()
    })
}

/// The next agent session at `master` and its `Register`.
pub(crate) async fn next_registration(master: &mut FakeMaster) -> Registering {
    let peer = master.accept::<AgentPeer>().await;
    assert_eq!(peer.peer().agent_id(), Some(AgentId::from("agent-1")));
    let mut agent = AgentSession {
        peer,
        heartbeats: 0,
        last_heartbeat: 0,
    };
    match agent.next().await {
        AgentToMaster::Register {
            tasks, isolation, ..
        } => agent.registered_tasks(tasks, isolation),
        other => panic!("expected Register first, got {other:?}"),
    }
}

pub(crate) struct AgentSession {
    pub peer: PeerSession<AgentPeer>,
    pub heartbeats: u64,
    pub last_heartbeat: u64,
}

/// A session whose `Register` carried `tasks`.
pub(crate) struct Registering {
    pub agent: AgentSession,
    pub tasks: Vec<TaskReport>,
    /// How the agent said it isolates its tasks.
    pub isolation: TaskIsolation,
}

impl AgentSession {
    pub(crate) fn registered_tasks(
        self,
        tasks: Vec<TaskReport>,
        isolation: TaskIsolation,
    ) -> Registering {
        Registering {
            agent: self,
            tasks,
            isolation,
        }
    }

    /// The next message other than a heartbeat (which it counts).
    pub(crate) async fn next(&mut self) -> AgentToMaster {
        loop {
            match self.peer.recv().await {
                AgentToMaster::Heartbeat { seq } => {
                    self.heartbeats += 1;
                    assert!(
                        seq > self.last_heartbeat,
                        "heartbeat seq {seq} did not increase"
                    );
                    self.last_heartbeat = seq;
                }
                other => return other,
            }
        }
    }

    pub(crate) async fn status(&mut self) -> StatusUpdate {
        match self.next().await {
            AgentToMaster::Status(update) => update,
            other => panic!("expected a status update, got {other:?}"),
        }
    }

    pub(crate) async fn send(&mut self, message: MasterToAgent) {
        self.peer.send(&message).await;
    }

    /// Redirects the agent to the leader `id` at `addr`.
    pub(crate) async fn redirect_to(&mut self, id: u64, addr: SocketAddr) {
        self.peer.redirect_to(MasterId(id), addr).await;
    }

    pub(crate) async fn ack(&mut self, update: &StatusUpdate) {
        self.send(MasterToAgent::StatusAck(StatusAck {
            task_id: update.task_id.clone(),
            framework_id: update.framework_id.clone(),
            seq: update.seq,
        }))
        .await;
    }

    pub(crate) async fn launch(&mut self, tasks: Vec<TaskSpec>) {
        self.send(MasterToAgent::Launch {
            framework_id: FrameworkId::from("fw"),
            tasks,
        })
        .await;
    }

    pub(crate) fn drop_connection(self) {
        self.peer.close("scripted master drops the session");
    }
}

impl Registering {
    pub(crate) async fn accept(self, kill: Vec<TaskKey>) -> AgentSession {
        let mut agent = self.agent;
        agent
            .send(MasterToAgent::Registered {
                agent_id: AgentId::from("agent-1"),
                heartbeat_interval_ms: 50,
                lost_after_ms: 30_000,
                kill,
            })
            .await;
        agent
    }
}

pub(crate) struct RunningAgent {
    pub stop: Option<oneshot::Sender<()>>,
    pub handle: JoinHandle<Result<(), AgentError>>,
}

impl RunningAgent {
    pub(crate) fn start(
        certs: &TestCerts,
        masters: Vec<SocketAddr>,
        work_dir: &Path,
    ) -> RunningAgent {
        RunningAgent::start_with(certs, masters, work_dir, |_| {})
    }

    pub(crate) fn start_with(
        certs: &TestCerts,
        masters: Vec<SocketAddr>,
        work_dir: &Path,
        tweak: impl FnOnce(&mut AgentConfig),
    ) -> RunningAgent {
        let mut config = AgentConfig::new(
            masters,
            work_dir.to_path_buf(),
            "cpus=4,mem_mib=4096".parse::<ResourceVec>().expect("r"),
        );
        config.hostname = "test-host".into();
        config.attributes = BTreeMap::from([("rack".to_string(), "r1".to_string())]);
        config.backoff_min = Duration::from_millis(20);
        config.backoff_max = Duration::from_millis(200);
        // Long enough that every resend in these tests comes from a new session.
        config.status_retry = Duration::from_secs(600);
        config.cgroup_root = work_dir.join("no-cgroups-here");
        tweak(&mut config);
        let tls = certs.tls(Role::Agent, 1);
        let (stop, stopped) = oneshot::channel();
        let handle = tokio::spawn(fullerene_agent::run(config, tls, async move {
            let _ = stopped.await;
        }));
        RunningAgent {
            stop: Some(stop),
            handle,
        }
    }

    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let result = awaiting("the agent to stop", &mut self.handle)
            .await
            .expect("no panic");
        result.expect("the agent stopped cleanly");
    }
}

impl RunningAgent {
    /// Ends the agent as a crash would: its task is dropped mid-flight, with no orderly stop
    /// (no final checkpoint sync, no connection close).
    pub(crate) async fn crash(mut self) {
        self.handle.abort();
        let _ = awaiting("the agent to abort", &mut self.handle).await;
    }
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

pub(crate) fn sh(id: &str, script: &str) -> TaskSpec {
    fullerene_proto::testkit::shell_task(id, script, "cpus=1,mem_mib=64", 100)
}

pub(crate) fn sleep_task(id: &str, duration_ms: u64) -> TaskSpec {
    fullerene_proto::testkit::sleep_task(id, duration_ms, "cpus=1,mem_mib=64", 100)
}

pub(crate) fn work_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("work");
    (dir, path)
}
