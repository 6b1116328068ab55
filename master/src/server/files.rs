//! Reading a task's sandbox files (its `stdout` and `stderr`) through the leader.
//!
//! # Why through the master
//!
//! Operators reach only the masters, and the web UI the masters serve shows logs from the same
//! origin with the same authentication as the rest of the HTTP API; agents need no listener
//! of their own, no certificate for operators to trust and no firewall opening. So the HTTP
//! route `GET /frameworks/{framework}/tasks/{task}/files/{name}` and the QUIC operator
//! session's [`OperatorRequest::ReadTaskFile`](fullerene_proto::messages::OperatorRequest)
//! both come here, and the leader, which holds every agent's session, asks the task's agent
//! over that session ([`MasterToAgent::ReadFile`], answered with
//! [`AgentToMaster::FileRead`](fullerene_proto::messages::AgentToMaster)).
//!
//! # Off the node loop
//!
//! The node loop only answers where a task runs and who owns it ([`Event::LocateTask`], one
//! map lookup). The read itself goes from the caller's task to the agent's session task, which
//! sends the request and routes the answer back by its number; neither the request nor the
//! bytes pass through the node loop. Each agent session takes at most
//! [`MAX_READS_PER_AGENT`] reads at once (more are refused as busy, `503`), each of at most
//! [`MAX_FILE_READ_BYTES`] (the agent reads on a blocking thread and bounds its own reads
//! too), and a read unanswered within the request timeout is given up.

use std::collections::HashMap;
use std::sync::Mutex;

use fullerene_proto::ids::{AgentId, FrameworkId, TaskKey};
use fullerene_proto::messages::{
    FileChunk, FileRead, FileReadOutcome, FileRefusal, MasterToAgent, TaskFileRead, TaskState,
    MAX_FILE_READ_BYTES,
};
use tokio::sync::{mpsc, oneshot};

use super::node_loop::Event;
use super::sessions::SessionContext;
use crate::core::SessionId;

/// Reads in flight to one agent at once, through its session.
pub(crate) const MAX_READS_PER_AGENT: usize = 8;

/// A read waiting for its agent's session to send it.
#[derive(Debug)]
pub(crate) struct PendingRead {
    /// The read (its `request` number is set by the session).
    pub read: FileRead,
    /// Where the agent's answer goes.
    pub reply: oneshot::Sender<FileReadOutcome>,
}

/// The agent sessions this master holds, by agent, for reads of their sandboxes.
#[derive(Debug, Default)]
pub(crate) struct AgentFiles {
    sessions: Mutex<HashMap<AgentId, (SessionId, mpsc::Sender<PendingRead>)>>,
}

impl AgentFiles {
    /// An agent's session opened (a newer one replaces an older one of the same agent).
    pub(crate) fn opened(
        &self,
        agent: AgentId,
        session: SessionId,
        reads: mpsc::Sender<PendingRead>,
    ) {
        self.lock().insert(agent, (session, reads));
    }

    /// An agent's session ended: forgotten unless a newer one took its place.
    pub(crate) fn closed(&self, agent: &AgentId, session: SessionId) {
        let mut sessions = self.lock();
        if sessions
            .get(agent)
            .is_some_and(|(open, _)| *open == session)
        {
            sessions.remove(agent);
        }
    }

    fn reads_to(&self, agent: &AgentId) -> Option<mpsc::Sender<PendingRead>> {
        self.lock().get(agent).map(|(_, reads)| reads.clone())
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<AgentId, (SessionId, mpsc::Sender<PendingRead>)>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Where a task runs and who owns it, as the node loop answers [`Event::LocateTask`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TaskLocation {
    /// Whether this master leads (only the leader holds agents' sessions).
    pub leads: bool,
    /// The principal of the task's framework, if the framework is known.
    pub principal: Option<String>,
    /// The task's agent and state, while the master tracks the task.
    pub task: Option<(AgentId, TaskState)>,
    /// Whether the task runs with the `sleep` executor (which has no sandbox).
    pub sleeps: bool,
}

/// Who reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    /// An operator (a certificate, or a token with the read scope).
    Operator,
    /// A framework's certificate, by principal: it may read only its own frameworks' tasks.
    Framework(String),
}

/// Why a read was not answered with bytes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    /// This master does not lead.
    #[error("this master does not lead")]
    NotLeader,
    /// The framework is unknown.
    #[error("no framework {0} is known to the master")]
    UnknownFramework(FrameworkId),
    /// The caller is a framework that does not own the task.
    #[error("the principal `{0}` does not own framework {1}; only operators and the task's framework may read its files")]
    NotOwner(String, FrameworkId),
    /// The master does not track the task and no agent was named.
    #[error("the master does not know task {0} (it may have ended and been acknowledged, and then forgotten): name the agent it ran on (`agent=` in the query, `--agent` on the command line)")]
    UnknownTask(TaskKey),
    /// The task has no sandbox.
    #[error("task {0} runs with the `sleep` executor, which has no sandbox and writes no files")]
    NoSandbox(TaskKey),
    /// The agent has no session with this master.
    #[error("agent {0} is not connected to the leader (it is gone, or reconnecting); retry later")]
    AgentGone(AgentId),
    /// Too many reads in flight to the agent.
    #[error("agent {0} is already answering {MAX_READS_PER_AGENT} file reads; retry")]
    Busy(AgentId),
    /// No answer in time.
    #[error("agent {0} did not answer the file read in time; retry")]
    Timeout(AgentId),
    /// The agent refused the read.
    #[error("{0}")]
    Refused(FileRefusal),
    /// The master is stopping.
    #[error("the master is shutting down")]
    ShuttingDown,
}

/// Reads part of a task's sandbox file from its agent, for `reader`; the bytes, and the
/// agent they came from (a follower names it in its next reads, which then work after the
/// master forgot the ended task).
pub(crate) async fn read_task_file(
    context: &SessionContext,
    reader: &Reader,
    request: TaskFileRead,
) -> Result<(AgentId, FileChunk), FileError> {
    let key = TaskKey::new(request.framework_id.clone(), request.task_id.clone());
    let (reply, answer) = oneshot::channel();
    context
        .events
        .send(Event::LocateTask(key.clone(), reply))
        .await
        .map_err(|_| FileError::ShuttingDown)?;
    let location = tokio::time::timeout(context.request_timeout, answer)
        .await
        .map_err(|_| FileError::ShuttingDown)?
        .map_err(|_| FileError::ShuttingDown)?;
    if !location.leads {
        return Err(FileError::NotLeader);
    }
    let Some(principal) = location.principal else {
        return Err(FileError::UnknownFramework(request.framework_id));
    };
    if let Reader::Framework(caller) = reader {
        if *caller != principal {
            return Err(FileError::NotOwner(caller.clone(), request.framework_id));
        }
    }
    if location.sleeps {
        return Err(FileError::NoSandbox(key));
    }
    // The agent the master knows wins over the one the caller named.
    let Some(agent) = location.task.map(|(agent, _)| agent).or(request.agent_id) else {
        return Err(FileError::UnknownTask(key));
    };
    let reads = context
        .agent_files
        .reads_to(&agent)
        .ok_or_else(|| FileError::AgentGone(agent.clone()))?;
    let (reply, answer) = oneshot::channel();
    let read = FileRead {
        request: 0,
        framework_id: request.framework_id,
        task_id: request.task_id,
        name: request.name,
        offset: request.offset,
        length: request.length.min(MAX_FILE_READ_BYTES),
    };
    reads
        .try_send(PendingRead { read, reply })
        .map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => FileError::Busy(agent.clone()),
            mpsc::error::TrySendError::Closed(_) => FileError::AgentGone(agent.clone()),
        })?;
    match tokio::time::timeout(context.request_timeout, answer).await {
        Err(_) => Err(FileError::Timeout(agent)),
        // The session ended before the agent answered.
        Ok(Err(_)) => Err(FileError::AgentGone(agent)),
        Ok(Ok(FileReadOutcome::Chunk(chunk))) => Ok((agent, chunk)),
        Ok(Ok(FileReadOutcome::Refused(FileRefusal::Busy))) => Err(FileError::Busy(agent)),
        Ok(Ok(FileReadOutcome::Refused(refusal))) => Err(FileError::Refused(refusal)),
    }
}

/// The reads an agent's session task has sent and not yet seen answered, by number.
#[derive(Debug, Default)]
pub(crate) struct ReadsInFlight {
    next: u64,
    waiting: HashMap<u64, oneshot::Sender<FileReadOutcome>>,
}

impl ReadsInFlight {
    /// Numbers `pending`'s read and keeps its reply; the message to send the agent, or `None`
    /// when [`MAX_READS_PER_AGENT`] are already in flight (the reader is told it is busy).
    pub(crate) fn start(&mut self, pending: PendingRead) -> Option<MasterToAgent> {
        // Readers that gave up (timed out, or went away) free their place.
        self.waiting.retain(|_, reply| !reply.is_closed());
        if self.waiting.len() >= MAX_READS_PER_AGENT {
            let _ = pending
                .reply
                .send(FileReadOutcome::Refused(FileRefusal::Busy));
            return None;
        }
        self.next += 1;
        let mut read = pending.read;
        read.request = self.next;
        self.waiting.insert(self.next, pending.reply);
        Some(MasterToAgent::ReadFile(read))
    }

    /// The agent answered read `request`: its reader gets the outcome, if still waiting.
    pub(crate) fn answered(&mut self, request: u64, outcome: FileReadOutcome) {
        if let Some(reply) = self.waiting.remove(&request) {
            let _ = reply.send(outcome);
        }
    }
}
