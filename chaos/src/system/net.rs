//! The simulated network: Raft messages between masters (each lost, delayed or duplicated on
//! its own, so reordered), and sessions between clients and masters (ordered streams that
//! break on partitions and crashes; each end notices a break after the idle timeout).
//!
//! The master's end of a session mirrors its shell's session tasks
//! (`master/src/server/sessions.rs`, `serve_agent` and `serve_framework`), with the same rules
//! (`fullerene_master::core::session_rules`).

use std::time::Duration;

use fullerene_master::core::session_rules::{
    agent_must_register_first, ends_agent_session, ends_framework_session, refuse_framework_call,
    subscribed_as, subscription,
};
use fullerene_master::core::{AgentRegistration, Input, SessionId};
use fullerene_proto::messages::{AgentToMaster, FrameworkCall, MasterToAgent, MasterToFramework};
use fullerene_proto::{AgentId, FrameworkId, Time};
use raft::eraftpb::{Message, MessageType};

use super::{Event, FaultKind, Node, World, IDLE_TIMEOUT};

/// One frame on a session, or its end.
#[derive(Clone, Debug)]
pub(crate) enum Frame {
    AgentUp(AgentToMaster),
    AgentDown(MasterToAgent),
    FrameworkUp(FrameworkCall),
    FrameworkDown(MasterToFramework),
    /// The sender closed its end (after everything it sent before).
    End,
}

/// The master's session task's state (`serve_agent`, `serve_framework`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MasterSide {
    /// No frame yet.
    Opening,
    /// An agent's session, registered with the core.
    Agent(AgentId),
    /// A framework's session: subscribed once the core answered the subscription.
    Framework(Option<FrameworkId>),
    /// The session task ended (the core was told, when it knew the session).
    Ended,
}

/// A connection between a client and a master.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    pub(crate) id: u64,
    pub(crate) master: u64,
    pub(crate) master_incarnation: u64,
    pub(crate) client: Node,
    pub(crate) master_side: MasterSide,
    /// Whether the master's session task is stopping (it sent its last frame).
    closing: bool,
    /// Whether the client's end is open.
    pub(crate) client_open: bool,
    /// When the last frame each way arrives: a stream delivers in order.
    up_clock: Time,
    down_clock: Time,
}

impl Conn {
    pub(crate) fn new(
        id: u64,
        master: u64,
        master_incarnation: u64,
        client: Node,
        now: Time,
    ) -> Conn {
        Conn {
            id,
            master,
            master_incarnation,
            client,
            master_side: MasterSide::Opening,
            closing: false,
            client_open: true,
            up_clock: now,
            down_clock: now,
        }
    }

    fn master_open(&self) -> bool {
        self.master_side != MasterSide::Ended && !self.closing
    }
}

/// The address clients know master `id` by.
pub(crate) fn master_addr(id: u64) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([10, 0, 0, id as u8], 5050))
}

/// The master an address names.
pub(crate) fn master_of(addr: std::net::SocketAddr) -> Option<u64> {
    match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.octets()[..3] == [10, 0, 0] && addr.port() == 5050 => {
            Some(u64::from(ip.octets()[3]))
        }
        _ => None,
    }
}

impl World {
    /// Sends Raft messages from master `from`: each may be lost, delayed or duplicated.
    pub(crate) fn send_raft(&mut self, from: u64, messages: Vec<Message>) {
        for message in messages {
            let to = message.to;
            let snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
            let up = self.masters.get(&to).is_some_and(|m| m.core.is_some());
            let cut = !self.reachable(Node::Master(from), Node::Master(to));
            let loss = self.options.rates.loss;
            let lost = !snapshot && self.chance(FaultKind::Loss, loss);
            if lost {
                *self.injected.entry(FaultKind::Loss).or_default() += 1;
            }
            if !up || cut || lost {
                if !lost {
                    self.master_input(from, Input::PeerUnreachable(to));
                }
                if snapshot {
                    self.master_input(from, Input::SnapshotReport(to, false));
                }
                continue;
            }
            let duplication = self.options.rates.duplication;
            let copies = if !snapshot && self.chance(FaultKind::Duplication, duplication) {
                *self.injected.entry(FaultKind::Duplication).or_default() += 1;
                2
            } else {
                1
            };
            for _ in 0..copies {
                let latency = self.latency();
                self.after(
                    latency,
                    Event::Raft {
                        from,
                        message: Box::new(message.clone()),
                    },
                );
            }
            if snapshot {
                self.master_input(from, Input::SnapshotReport(to, true));
            }
        }
    }

    /// A Raft message reaches its master (if it is up and the link still holds).
    pub(crate) fn raft_arrives(&mut self, from: u64, message: Message) {
        let to = message.to;
        if !self.reachable(Node::Master(from), Node::Master(to)) {
            return;
        }
        self.master_input(to, Input::Raft(message));
    }

    /// Sends `frame` on `conn`, toward the master (`to_master`) or the client; in order after
    /// what was sent before. Dropped when the sender's end is closed or the link is cut (the
    /// cut breaks the connection).
    pub(crate) fn send_frame(&mut self, conn: u64, to_master: bool, frame: Frame) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (from, to) = if to_master {
            (c.client, Node::Master(c.master))
        } else {
            (Node::Master(c.master), c.client)
        };
        let open = if to_master {
            c.client_open
        } else {
            c.master_open()
        };
        if !open {
            return;
        }
        if !self.reachable(from, to) {
            self.break_conn(conn);
            return;
        }
        let latency = self.latency();
        let arrive = self.now.saturating_add(latency);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let clock = if to_master {
            &mut c.up_clock
        } else {
            &mut c.down_clock
        };
        // Strictly after the previous frame: simultaneous events run in a shuffled order.
        let at = arrive.max(clock.saturating_add(Duration::from_micros(1)));
        *clock = at;
        self.at(
            at,
            Event::Frame {
                conn,
                to_master,
                frame: Box::new(frame),
            },
        );
    }

    /// The connection broke (a cut, a crashed end): each open end notices after the idle
    /// timeout.
    pub(crate) fn break_conn(&mut self, conn: u64) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (client_open, master_open) = (c.client_open, c.master_open());
        let (client, master) = (c.client, c.master);
        self.note(
            client,
            format!("connection {conn} to master {master} broke"),
        );
        if client_open {
            self.after(
                IDLE_TIMEOUT,
                Event::Broken {
                    conn,
                    to_master: false,
                },
            );
        }
        if master_open {
            self.after(
                IDLE_TIMEOUT,
                Event::Broken {
                    conn,
                    to_master: true,
                },
            );
        }
    }

    /// The client closes its end: the master reads the end after what was sent before.
    pub(crate) fn client_closes(&mut self, conn: u64) {
        self.send_frame(conn, true, Frame::End);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.client_open = false;
        }
        self.forget_conn_if_closed(conn);
    }

    fn forget_conn_if_closed(&mut self, conn: u64) {
        if self
            .conns
            .get(&conn)
            .is_some_and(|c| !c.client_open && c.master_side == MasterSide::Ended)
        {
            self.conns.remove(&conn);
        }
    }

    /// Whether `conn`'s master end belongs to the master's current incarnation.
    fn master_end_alive(&self, conn: &Conn) -> bool {
        self.masters
            .get(&conn.master)
            .is_some_and(|m| m.core.is_some() && m.incarnation == conn.master_incarnation)
    }

    /// A frame reaches the master's end of `conn` (`serve_agent` / `serve_framework`).
    pub(crate) fn master_frame(&mut self, conn: u64, frame: Frame) {
        let Some(c) = self.conns.get(&conn).cloned() else {
            return;
        };
        if !c.master_open() || !self.master_end_alive(&c) {
            return;
        }
        let session = SessionId(conn);
        match (c.master_side.clone(), frame) {
            (_, Frame::End) => self.master_side_ends(conn),
            (
                MasterSide::Opening,
                Frame::AgentUp(AgentToMaster::Register {
                    hostname,
                    resources,
                    attributes,
                    tasks,
                    executors,
                    isolation,
                }),
            ) => {
                let Node::Agent(i) = c.client else { return };
                let agent_id = self.agents[i].id.clone();
                self.set_master_side(conn, MasterSide::Agent(agent_id.clone()));
                let address = std::net::SocketAddr::from(([10, 1, 0, i as u8], 7000));
                self.master_input(
                    c.master,
                    Input::AgentRegister {
                        agent_id,
                        session,
                        address,
                        registration: AgentRegistration {
                            hostname,
                            resources,
                            attributes,
                            tasks,
                            executors,
                            isolation,
                        },
                    },
                );
            }
            (MasterSide::Opening, Frame::AgentUp(_)) => {
                let error = agent_must_register_first();
                self.send_frame(conn, false, Frame::AgentDown(error));
                self.end_master_side(conn);
            }
            (MasterSide::Agent(agent_id), Frame::AgentUp(message)) => {
                let input = match message {
                    AgentToMaster::Heartbeat { seq } => {
                        self.send_frame(
                            conn,
                            false,
                            Frame::AgentDown(MasterToAgent::HeartbeatAck { seq }),
                        );
                        Input::AgentHeartbeat(agent_id)
                    }
                    AgentToMaster::Status(update) => {
                        if update.agent_id != agent_id {
                            self.end_master_side(conn);
                            return;
                        }
                        Input::AgentStatus(agent_id, update)
                    }
                    AgentToMaster::UpdateResources { resources } => {
                        Input::AgentResources(agent_id, resources)
                    }
                    AgentToMaster::Register { .. } => {
                        self.end_master_side(conn);
                        return;
                    }
                    // The simulated masters never ask for files.
                    AgentToMaster::FileRead(_) => return,
                };
                self.master_input(c.master, input);
            }
            (MasterSide::Opening, Frame::FrameworkUp(first)) => {
                let Node::Framework(f) = c.client else { return };
                let principal = self.frameworks[f].principal.clone();
                match subscription(first, principal) {
                    Ok(subscription) => {
                        self.set_master_side(conn, MasterSide::Framework(None));
                        self.master_input(
                            c.master,
                            Input::FrameworkSubscribe(session, subscription),
                        );
                    }
                    Err(reply) => {
                        self.send_frame(conn, false, Frame::FrameworkDown(*reply));
                        self.end_master_side(conn);
                    }
                }
            }
            (MasterSide::Framework(subscribed), Frame::FrameworkUp(call)) => {
                if let Some(reply) = refuse_framework_call(subscribed.is_some(), &call) {
                    self.send_frame(conn, false, Frame::FrameworkDown(reply));
                    return;
                }
                let Some(framework_id) = subscribed else {
                    return;
                };
                self.master_input(
                    c.master,
                    Input::FrameworkCall {
                        framework_id,
                        session,
                        call,
                    },
                );
            }
            // Frames of the wrong kind for the session never come from the simulated clients.
            _ => {}
        }
    }

    fn set_master_side(&mut self, conn: u64, side: MasterSide) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.master_side = side;
        }
    }

    /// The master's session task ends by itself (after a redirect, an error, a refusal or a
    /// close): the client reads the end after what was sent, and the core is told.
    pub(crate) fn end_master_side(&mut self, conn: u64) {
        self.send_frame(conn, false, Frame::End);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.closing = true;
        }
        self.after(Duration::ZERO, Event::SessionEnded { conn });
    }

    /// The master's end reads the end of the session (the client closed it, or it broke).
    pub(crate) fn master_side_ends(&mut self, conn: u64) {
        self.session_ended(conn);
    }

    /// The session task is gone: the core hears of it as `AgentGone` / `FrameworkGone`.
    pub(crate) fn session_ended(&mut self, conn: u64) {
        let Some(c) = self.conns.get(&conn).cloned() else {
            return;
        };
        if c.master_side == MasterSide::Ended {
            return;
        }
        let alive = self.master_end_alive(&c);
        let side = std::mem::replace(
            &mut self.conns.get_mut(&conn).expect("just read").master_side,
            MasterSide::Ended,
        );
        if alive {
            self.note(
                Node::Master(c.master),
                format!("session {conn} ({side:?}) ended"),
            );
            let session = SessionId(conn);
            match side {
                MasterSide::Agent(agent_id) => {
                    self.master_input(c.master, Input::AgentGone(agent_id, session));
                }
                MasterSide::Framework(Some(framework_id)) => {
                    self.master_input(c.master, Input::FrameworkGone(framework_id, session));
                }
                MasterSide::Framework(None) | MasterSide::Opening | MasterSide::Ended => {}
            }
        }
        self.forget_conn_if_closed(conn);
    }

    /// Carries a frame the core pushed to a session, the way the session task does: a
    /// redirect or error ends an agent's session; a redirect, or a refused subscription, a
    /// framework's.
    pub(crate) fn push_to_agent(&mut self, conn: u64, message: MasterToAgent) {
        if !self.conns.get(&conn).is_some_and(Conn::master_open) {
            return;
        }
        let ends = ends_agent_session(&message);
        self.send_frame(conn, false, Frame::AgentDown(message));
        if ends {
            self.end_master_side(conn);
        }
    }

    /// See [`World::push_to_agent`].
    pub(crate) fn push_to_framework(&mut self, conn: u64, message: MasterToFramework) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if !c.master_open() {
            return;
        }
        let mut subscribed = matches!(c.master_side, MasterSide::Framework(Some(_)));
        if let Some(framework_id) = subscribed_as(&message) {
            self.set_master_side(conn, MasterSide::Framework(Some(framework_id.clone())));
            subscribed = true;
        }
        let ends = ends_framework_session(subscribed, &message);
        self.send_frame(conn, false, Frame::FrameworkDown(message));
        if ends {
            self.end_master_side(conn);
        }
    }

    /// A master's `Close`: the session task stops after what was queued.
    pub(crate) fn close_session(&mut self, conn: u64) {
        if self.conns.get(&conn).is_some_and(Conn::master_open) {
            self.end_master_side(conn);
        }
    }

    /// A frame (or the end) reaches the client's end of `conn`.
    pub(crate) fn client_frame(&mut self, conn: u64, frame: Frame) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if !c.client_open {
            return;
        }
        let client = c.client;
        if matches!(frame, Frame::End) {
            self.note(client, format!("connection {conn} ended"));
            if let Some(c) = self.conns.get_mut(&conn) {
                c.client_open = false;
            }
            self.forget_conn_if_closed(conn);
        }
        match client {
            Node::Agent(i) => self.agent_frame(i, conn, frame),
            Node::Framework(f) => self.framework_frame(f, conn, frame),
            Node::Master(_) => {}
        }
    }
}
