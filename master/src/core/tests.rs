//! The leader's decisions, each driven through [`MasterCore`] with no network and no clock: a
//! single master on in-memory storage, a virtual clock, and the outputs read back.

use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::ids::{AgentId, FrameworkId, TaskId};
use fullerene_proto::messages::{
    AgentState, CallOk, ErrorCode, FrameworkCall, FrameworkRequest, GroupPlacement, Leftover,
    MasterToAgent, MasterToFramework, Offer, OperatorRequest, OperatorResponse, StatusAck,
    StatusReason, StatusUpdate, TaskSpec, TaskState, MAX_ACKS_PER_CALL, MAX_RECONCILE_TASK_IDS,
};
use fullerene_proto::{Now, Time};

use fullerene_scheduling::testkit::{demand, resources};

use super::frameworks::SWEEP_PAGE;
use super::*;
use crate::raft_node::NodeConfig;
use crate::state::{ClusterSettings, TaskKey};
use crate::storage::MemStorage;

const TICK: Duration = Duration::from_millis(25);

/// What each task of the tests' framework asks for.
const ONE_TASK: &str = "cpus=1,mem_mib=512";

fn address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 4000))
}

/// One master that leads, with a virtual clock.
struct Harness {
    core: MasterCore<MemStorage>,
    now: Now,
    next_session: u64,
    next_call: u64,
    /// Agents that heartbeat on every tick.
    heartbeating: Vec<AgentId>,
}

impl Harness {
    /// A master that has elected itself, with liveness timeouts of 1 s and 3 s and offers
    /// valid for 2 s.
    fn leader() -> Harness {
        Harness::leader_allocating_every(CoreConfig::default().allocation_interval)
    }

    /// [`Harness::leader`] with a periodic allocation cycle every `interval`.
    fn leader_allocating_every(interval: Duration) -> Harness {
        let node = RaftNode::bootstrap(
            NodeConfig::new(1),
            MemStorage::new("m1"),
            &[1],
            ClusterSettings::default(),
        )
        .expect("bootstrap");
        let mut harness = Harness {
            core: MasterCore::new(node, Harness::config(interval)),
            now: Now::at(Time::from_millis(1_000)),
            next_session: 1,
            next_call: 1,
            heartbeating: Vec::new(),
        };
        harness.elect();
        harness
    }

    /// Liveness timeouts of 1 s and 3 s, offers valid for 2 s, allocation every `interval`.
    fn config(interval: Duration) -> CoreConfig {
        CoreConfig {
            members: [(1, address())].into_iter().collect(),
            agent_timeouts: AgentTimeouts {
                heartbeat_interval: Duration::from_millis(100),
                unreachable_after: Duration::from_secs(1),
                lost_after: Duration::from_secs(3),
            },
            offer_ttl: Duration::from_secs(2),
            allocation_interval: interval,
            ..CoreConfig::default()
        }
    }

    /// Starts the core and makes it elect itself.
    fn elect(&mut self) {
        assert_eq!(self.core.start(self.now), None);
        // Forced, so that it happens at a known step (election timeouts are random).
        self.core.campaign().expect("campaign");
        self.run();
        assert!(self.core.node().is_leader(), "a lone master elects itself");
        self.run();
    }

    /// The master stops, stays down for `down`, and starts again from what its storage
    /// holds, electing itself; no session survives.
    fn restart_after(&mut self, down: Duration) {
        let storage = self.core.node().store().crash();
        let node = RaftNode::open(NodeConfig::new(1), storage).expect("reopen");
        self.core = MasterCore::new(
            node,
            Harness::config(CoreConfig::default().allocation_interval),
        );
        self.now = self.now.after(down);
        self.heartbeating.clear();
        self.elect();
    }

    /// Runs the node until it is idle; returns every output.
    fn run(&mut self) -> Vec<Output> {
        assert_eq!(self.core.advance(self.now).expect("advance"), None);
        self.core.drain_outputs()
    }

    fn input(&mut self, input: Input) -> Vec<Output> {
        self.core.handle(input, self.now);
        self.run()
    }

    fn tick(&mut self) -> Vec<Output> {
        self.now = self.now.after(TICK);
        for agent in self.heartbeating.clone() {
            self.core.handle(Input::AgentHeartbeat(agent), self.now);
        }
        self.core.tick(self.now);
        self.run()
    }

    /// Ticks through `span` of virtual time; returns every output.
    fn pass(&mut self, span: Duration) -> Vec<Output> {
        let until = self.now.monotonic + span;
        let mut outputs = Vec::new();
        while self.now.monotonic < until {
            outputs.extend(self.tick());
        }
        outputs
    }

    fn session(&mut self) -> SessionId {
        let session = SessionId(self.next_session);
        self.next_session += 1;
        session
    }

    fn register_agent(&mut self, agent: &str, capacity: &str) -> (SessionId, Vec<Output>) {
        self.register_agent_with(agent, capacity, &["sleep"])
    }

    /// [`Harness::register_agent`] with the executors `executors`.
    fn register_agent_with(
        &mut self,
        agent: &str,
        capacity: &str,
        executors: &[&str],
    ) -> (SessionId, Vec<Output>) {
        let session = self.session();
        let outputs = self.input(Input::AgentRegister {
            agent_id: agent.into(),
            session,
            address: address(),
            registration: AgentRegistration {
                hostname: format!("{agent}.host"),
                resources: resources(capacity),
                attributes: Default::default(),
                tasks: Vec::new(),
                executors: executors
                    .iter()
                    .map(std::string::ToString::to_string)
                    .collect(),
                isolation: Default::default(),
            },
        });
        (session, outputs)
    }

    fn subscribe(
        &mut self,
        principal: &str,
        framework_id: Option<FrameworkId>,
    ) -> (SessionId, FrameworkId) {
        self.subscribe_to(principal, framework_id, "default")
    }

    /// [`Harness::subscribe`] asking for `group` (empty: the principal's).
    fn subscribe_to(
        &mut self,
        principal: &str,
        framework_id: Option<FrameworkId>,
        group: &str,
    ) -> (SessionId, FrameworkId) {
        let (session, outputs) = self.subscribe_in(principal, framework_id, group);
        let call_id = self.next_call - 1;
        let id = outputs
            .iter()
            .find_map(|output| match output {
                Output::ToFramework {
                    session: to,
                    message:
                        MasterToFramework::CallResult {
                            call_id: answered,
                            result: Ok(CallOk::Subscribed { framework_id, .. }),
                        },
                } if *to == session && *answered == call_id => Some(framework_id.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no subscription answer in {outputs:?}"));
        (session, id)
    }

    fn call_id(&mut self) -> u64 {
        let id = self.next_call;
        self.next_call += 1;
        id
    }

    /// Makes a framework call; returns its answer and every output.
    fn call(
        &mut self,
        framework_id: &FrameworkId,
        session: SessionId,
        request: FrameworkRequest,
    ) -> (Option<Result<CallOk, WireError>>, Vec<Output>) {
        let call_id = self.call_id();
        let outputs = self.input(Input::FrameworkCall {
            framework_id: framework_id.clone(),
            session,
            call: FrameworkCall {
                call_id,
                call: request,
            },
        });
        let answer = outputs.iter().find_map(|output| match output {
            Output::ToFramework {
                message:
                    MasterToFramework::CallResult {
                        call_id: id,
                        result,
                    },
                ..
            } if *id == call_id => Some(result.clone()),
            _ => None,
        });
        (answer, outputs)
    }

    fn want(&mut self, framework_id: &FrameworkId, session: SessionId, count: u32) {
        let demand = demand(&resources(ONE_TASK), count);
        let (answer, _) = self.call(
            framework_id,
            session,
            FrameworkRequest::UpdateDemand(demand),
        );
        assert_eq!(answer, Some(Ok(CallOk::Done)));
    }

    /// Runs allocation cycles until `session` receives offers.
    fn offers_for(&mut self, session: SessionId) -> Vec<Offer> {
        for _ in 0..20 {
            let offers: Vec<Offer> = offers_in(&self.tick(), session);
            if !offers.is_empty() {
                return offers;
            }
        }
        panic!("no offer for session {session:?}");
    }

    fn accept(
        &mut self,
        framework_id: &FrameworkId,
        session: SessionId,
        offer: &Offer,
        tasks: Vec<TaskSpec>,
    ) -> (Option<Result<CallOk, WireError>>, Vec<Output>) {
        self.call(
            framework_id,
            session,
            FrameworkRequest::Accept {
                offer_ids: vec![offer.id],
                tasks,
                leftover: Leftover::Decline { refuse_ms: 0 },
            },
        )
    }

    /// Accepts `offer` for the one task `t1` of [`ONE_TASK`].
    fn accept_t1(
        &mut self,
        framework_id: &FrameworkId,
        session: SessionId,
        offer: &Offer,
    ) -> (Option<Result<CallOk, WireError>>, Vec<Output>) {
        self.accept(framework_id, session, offer, vec![task("t1", ONE_TASK)])
    }

    /// Launches `t1` on the first offer `session` receives; returns the accept's outputs.
    fn launch_t1(&mut self, framework_id: &FrameworkId, session: SessionId) -> Vec<Output> {
        let offer = self.offers_for(session).remove(0);
        let (answer, outputs) = self.accept_t1(framework_id, session, &offer);
        assert_eq!(answer, Some(Ok(CallOk::Done)));
        outputs
    }

    /// Proposes alice's reservation `name` of `rdl` as of now, as an operator's would be (the
    /// operator request for it is not this module's), and checks that it is accepted.
    fn reserve(&mut self, name: &str, rdl: &str) {
        let reserve = crate::state::Command::CreateReservation {
            name: name.into(),
            principal: "alice".into(),
            expr: fullerene_reservation::parse(rdl).expect("valid RDL"),
            at_ms: self.now.wall_ms(),
        };
        let token = self.core.token();
        self.core.node.propose(&reserve, token).expect("proposed");
        self.run();
        let reservations = self.core.node().state().reservations();
        assert!(reservations.get(name).is_some(), "{name} accepted");
    }

    /// The agent's state in the replicated state.
    fn agent_state(&self, agent: &AgentId) -> AgentState {
        self.core.node().state().agents()[agent].state
    }

    fn operator(&mut self, request: OperatorRequest) -> OperatorResponse {
        let id = RequestId(self.call_id());
        let outputs = self.input(operator_input(id, request));
        answer_to(&outputs, id).unwrap_or_else(|| panic!("no answer in {outputs:?}"))
    }
}

/// An operator request from the test operator's principal.
fn operator_input(request_id: RequestId, request: OperatorRequest) -> Input {
    Input::Operator {
        request_id,
        principal: TEST_OPERATOR.to_string(),
        request,
    }
}

/// The principal of the tests' operator.
const TEST_OPERATOR: &str = "operator-1";

fn answer_to(outputs: &[Output], id: RequestId) -> Option<OperatorResponse> {
    outputs.iter().find_map(|output| match output {
        Output::Answer(answered, response) if *answered == id => Some(response.clone()),
        _ => None,
    })
}

fn offers_in(outputs: &[Output], session: SessionId) -> Vec<Offer> {
    outputs
        .iter()
        .filter_map(|output| match output {
            Output::ToFramework {
                session: to,
                message: MasterToFramework::Offers(offers),
            } if *to == session => Some(offers.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn to_agent(outputs: &[Output], session: SessionId) -> Vec<&MasterToAgent> {
    outputs
        .iter()
        .filter_map(|output| match output {
            Output::ToAgent {
                session: to,
                message,
            } if *to == session => Some(message),
            _ => None,
        })
        .collect()
}

fn to_framework(outputs: &[Output], session: SessionId) -> Vec<&MasterToFramework> {
    outputs
        .iter()
        .filter_map(|output| match output {
            Output::ToFramework {
                session: to,
                message,
            } if *to == session => Some(message),
            _ => None,
        })
        .collect()
}

fn task(id: &str, demand: &str) -> TaskSpec {
    fullerene_proto::testkit::sleep_task(id, 10, demand, 0)
}

fn update(
    task: &str,
    framework_id: &FrameworkId,
    agent: &str,
    state: TaskState,
    seq: u64,
) -> StatusUpdate {
    fullerene_proto::testkit::status_update(task, framework_id.as_str(), agent, state, seq)
}

fn error_code(answer: Option<Result<CallOk, WireError>>) -> ErrorCode {
    match answer {
        Some(Err(error)) => error.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A leader with one 4-core agent and one framework that wants two 1-core tasks.
fn cluster_with_demand() -> (Harness, SessionId, FrameworkId, SessionId) {
    let mut h = Harness::leader();
    let (agent_session, outputs) = h.register_agent("agent-1", "cpus=4,mem_mib=4096");
    assert!(matches!(
        to_agent(&outputs, agent_session).as_slice(),
        [MasterToAgent::Registered { kill, .. }] if kill.is_empty()
    ));
    h.heartbeating.push(AgentId::from("agent-1"));
    let (session, framework) = h.subscribe("framework-1", None);
    h.want(&framework, session, 2);
    (h, agent_session, framework, session)
}

#[test]
fn an_agent_is_registered_once_its_registration_commits() {
    let mut h = Harness::leader();
    let (session, outputs) = h.register_agent("agent-1", "cpus=4,mem_mib=4096");
    match to_agent(&outputs, session).as_slice() {
        [MasterToAgent::Registered {
            agent_id,
            heartbeat_interval_ms,
            lost_after_ms,
            kill,
        }] => {
            assert_eq!(agent_id, &AgentId::from("agent-1"));
            assert_eq!(*heartbeat_interval_ms, 100);
            assert!(*lost_after_ms > *heartbeat_interval_ms);
            assert!(kill.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert!(h
        .core
        .node()
        .state()
        .agents()
        .contains_key(&AgentId::from("agent-1")));
}

#[test]
fn a_framework_with_demand_is_offered_an_agents_free_resources() {
    let (mut h, _, framework, session) = cluster_with_demand();
    let offers = h.offers_for(session);
    assert_eq!(offers.len(), 1);
    assert_eq!(offers[0].framework_id, framework);
    assert_eq!(offers[0].agent_id, AgentId::from("agent-1"));
    // Task at a time (Graphene Fig. 8): the offer holds the two tasks it wants, and the rest of
    // the agent stays free for others.
    assert_eq!(offers[0].resources, resources("cpus=2,mem_mib=1024"));
    assert_eq!(h.core.open_offers(), offers);
}

/// Allocation is driven by events: with a periodic cycle an hour apart, demand that arrives is
/// offered within the minimum gap.
#[test]
fn demand_is_offered_without_waiting_for_the_periodic_cycle() {
    let mut h = Harness::leader_allocating_every(Duration::from_secs(3600));
    let (_, _) = h.register_agent("agent-1", "cpus=1,mem_mib=512");
    h.heartbeating.push(AgentId::from("agent-1"));
    let (session, framework) = h.subscribe("framework-1", None);
    // The first periodic cycle runs (nothing to offer) and the next is an hour away.
    h.pass(Duration::from_millis(200));
    let (answer, mut outputs) = h.call(
        &framework,
        session,
        FrameworkRequest::UpdateDemand(demand(&resources(ONE_TASK), 1)),
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    outputs.extend(h.pass(Duration::from_millis(100)));
    let offers = offers_in(&outputs, session);
    assert_eq!(offers.len(), 1, "demand waits for the periodic cycle");
    assert_eq!(offers[0].resources, resources(ONE_TASK));
}

#[test]
fn an_accept_launches_on_the_agent_once_committed_and_charges_its_resources() {
    let (mut h, agent_session, framework, session) = cluster_with_demand();
    let outputs = h.launch_t1(&framework, session);
    match to_agent(&outputs, agent_session).as_slice() {
        [MasterToAgent::Launch {
            framework_id,
            tasks,
        }] => {
            assert_eq!(framework_id, &framework);
            assert_eq!(tasks[0].id, TaskId::from("t1"));
        }
        other => panic!("expected one launch, got {other:?}"),
    }
    let info = h
        .core
        .node()
        .state()
        .agent_info(&AgentId::from("agent-1"))
        .expect("agent");
    assert_eq!(info.used, resources(ONE_TASK));
    // The offer is answered: it is gone.
    assert!(h.core.open_offers().is_empty());
}

#[test]
fn an_accept_is_refused_while_the_leaders_writes_wait_at_the_backlog_limit() {
    let (mut h, _, framework, session) = cluster_with_demand();
    h.core.config.accept_backlog_limit = 1;
    let offer = h.offers_for(session).remove(0);
    // A write in the leader's backlog: proposed, not applied before the accept comes.
    let kill = FrameworkRequest::Kill {
        task_id: TaskId::from("nothing"),
    };
    for (call_id, call) in [(901, kill), (902, accept_of(&offer, "t1"))] {
        h.core.handle(
            Input::FrameworkCall {
                framework_id: framework.clone(),
                session,
                call: FrameworkCall { call_id, call },
            },
            h.now,
        );
    }
    assert_eq!(h.core.node().pending_proposals(), 1);
    let outputs = h.run();
    let answer = to_framework(&outputs, session)
        .into_iter()
        .find_map(|message| match message {
            MasterToFramework::CallResult {
                call_id: 902,
                result,
            } => Some(result.clone()),
            _ => None,
        });
    match answer {
        Some(Err(error)) => {
            assert_eq!(error.code, ErrorCode::Unavailable);
            assert!(error.message.contains("busy"), "{error:?}");
        }
        other => panic!("the accept was not refused as busy: {other:?}"),
    }
    assert!(
        !outputs.iter().any(|o| matches!(o, Output::ToAgent { .. })),
        "nothing launched: {outputs:?}"
    );
    // The offer was taken back, and its resources come again once the backlog is gone.
    assert!(h.core.open_offers().is_empty());
    assert_eq!(h.core.offer_tally().refused_busy, 1);
    let outputs = h.launch_t1(&framework, session);
    assert!(outputs.iter().any(|o| matches!(o, Output::ToAgent { .. })));
}

/// An accept of all of `offer` for one task `id` of [`ONE_TASK`].
fn accept_of(offer: &Offer, id: &str) -> FrameworkRequest {
    FrameworkRequest::Accept {
        offer_ids: vec![offer.id],
        tasks: vec![task(id, ONE_TASK)],
        leftover: Leftover::Decline { refuse_ms: 0 },
    }
}

#[test]
fn an_accept_of_an_answered_offer_is_refused_as_unknown() {
    let (mut h, _, framework, session) = cluster_with_demand();
    let offer = h.offers_for(session).remove(0);
    let (first, _) = h.accept_t1(&framework, session, &offer);
    assert_eq!(first, Some(Ok(CallOk::Done)));
    let (stale, outputs) = h.accept(&framework, session, &offer, vec![task("t2", ONE_TASK)]);
    assert_eq!(error_code(stale), ErrorCode::UnknownOffer);
    assert!(
        !outputs.iter().any(|o| matches!(o, Output::ToAgent { .. })),
        "nothing launched: {outputs:?}"
    );
}

#[test]
fn an_accept_of_another_frameworks_offer_is_refused_and_changes_nothing() {
    let (mut h, _, _, session) = cluster_with_demand();
    let offer = h.offers_for(session).remove(0);
    let (thief_session, thief) = h.subscribe("framework-2", None);
    let (answer, outputs) = h.accept(&thief, thief_session, &offer, vec![task("t1", ONE_TASK)]);
    assert_eq!(error_code(answer), ErrorCode::OfferNotYours);
    assert!(!outputs.iter().any(|o| matches!(o, Output::ToAgent { .. })));
    assert_eq!(
        h.core.open_offers(),
        vec![offer],
        "the offer stays open for its framework"
    );
}

#[test]
fn an_accept_asking_for_more_than_the_offer_holds_is_refused() {
    let (mut h, _, framework, session) = cluster_with_demand();
    let offer = h.offers_for(session).remove(0);
    let (answer, _) = h.accept(
        &framework,
        session,
        &offer,
        vec![task("big", "cpus=8,mem_mib=512")],
    );
    assert_eq!(error_code(answer), ErrorCode::InsufficientResources);
    assert!(h.core.node().state().tasks().is_empty());
}

#[test]
fn an_expired_offer_is_rescinded_and_its_accept_refused() {
    let (mut h, _, framework, session) = cluster_with_demand();
    let offer = h.offers_for(session).remove(0);
    // Suppressed, so that the rescinded resources are not offered to it again at once.
    let (answer, _) = h.call(&framework, session, FrameworkRequest::Suppress);
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    let outputs = h.pass(Duration::from_millis(2_200));
    let rescinded: Vec<_> = to_framework(&outputs, session)
        .into_iter()
        .filter_map(|m| match m {
            MasterToFramework::Rescind { offer_ids } => Some(offer_ids.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(rescinded, vec![vec![offer.id]]);
    let (answer, _) = h.accept_t1(&framework, session, &offer);
    assert_eq!(error_code(answer), ErrorCode::UnknownOffer);
}

#[test]
fn a_silent_agent_is_marked_unreachable_then_lost_and_its_tasks_reported_lost() {
    let (mut h, _, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    let agent = AgentId::from("agent-1");
    h.heartbeating.clear();
    h.pass(Duration::from_millis(1_100));
    assert_eq!(h.agent_state(&agent), AgentState::Unreachable);
    let outputs = h.pass(Duration::from_millis(3_100));
    assert_eq!(h.agent_state(&agent), AgentState::Lost);
    let lost: Vec<_> = to_framework(&outputs, session)
        .into_iter()
        .filter_map(|m| match m {
            MasterToFramework::Update(update) if update.state == TaskState::Lost => {
                Some(update.task_id.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        lost,
        vec![TaskId::from("t1")],
        "the framework learns its task is lost"
    );
}

/// Agents stopped while the master was down: the restarted master cannot know when its
/// predecessor last heard from them, so their clocks start at its election, and one never heard
/// from again is marked unreachable, then lost, after the normal timeouts; meanwhile the
/// operator's listing shows it has no session here.
#[test]
fn after_a_restart_an_agent_never_heard_from_is_marked_unreachable_then_lost() {
    let mut h = Harness::leader();
    let agent = AgentId::from("agent-1");
    h.register_agent("agent-1", "cpus=4,mem_mib=4096");
    assert_eq!(h.agent_state(&agent), AgentState::Active);
    h.restart_after(Duration::from_secs(846));
    let OperatorResponse::Agents { agents, .. } =
        h.operator(OperatorRequest::ListAgents { after: None })
    else {
        panic!("not an agent listing");
    };
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0].state, AgentState::Active, "not marked yet");
    assert_eq!(agents[0].address, None, "no session on the new leader");
    h.pass(Duration::from_millis(1_100));
    assert_eq!(h.agent_state(&agent), AgentState::Unreachable);
    h.pass(Duration::from_millis(2_000));
    assert_eq!(h.agent_state(&agent), AgentState::Lost);
}

#[test]
fn a_heartbeat_keeps_an_agent_active_and_brings_an_unreachable_one_back() {
    let mut h = Harness::leader();
    let agent = AgentId::from("agent-1");
    h.register_agent("agent-1", "cpus=4,mem_mib=4096");
    for _ in 0..20 {
        h.pass(Duration::from_millis(200));
        h.input(Input::AgentHeartbeat(agent.clone()));
    }
    assert_eq!(
        h.agent_state(&agent),
        AgentState::Active,
        "4 s of heartbeats every 200 ms"
    );
    h.pass(Duration::from_millis(1_100));
    assert_eq!(h.agent_state(&agent), AgentState::Unreachable);
    h.input(Input::AgentHeartbeat(agent.clone()));
    assert_eq!(h.agent_state(&agent), AgentState::Active);
}

#[test]
fn status_updates_are_committed_then_acknowledged_to_the_agent_and_forwarded_to_the_framework() {
    let (mut h, agent_session, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    let running = update("t1", &framework, "agent-1", TaskState::Running, 1);
    let outputs = h.input(Input::AgentStatus("agent-1".into(), running.clone()));
    assert_eq!(
        to_agent(&outputs, agent_session),
        vec![&MasterToAgent::StatusAck(StatusAck {
            task_id: TaskId::from("t1"),
            framework_id: framework.clone(),
            seq: 1
        })]
    );
    assert_eq!(
        to_framework(&outputs, session),
        vec![&MasterToFramework::Update(running)]
    );
    let key = TaskKey::new(framework.clone(), TaskId::from("t1"));
    assert_eq!(
        h.core.node().state().tasks()[&key].state,
        TaskState::Running
    );

    // An acknowledgement naming another framework is refused, and says why.
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::Acknowledge(vec![StatusAck {
            task_id: TaskId::from("t1"),
            framework_id: "fw-someone-else".into(),
            seq: 1,
        }]),
    );
    match answer {
        Some(Err(error)) => {
            assert_eq!(error.code, ErrorCode::InvalidRequest);
            assert!(error.message.contains("fw-someone-else"), "{error:?}");
        }
        other => panic!("a foreign acknowledgement was not refused: {other:?}"),
    }
    // So are an empty batch and one past the limit.
    let own = |seq: u64| StatusAck {
        task_id: TaskId::from("t1"),
        framework_id: framework.clone(),
        seq,
    };
    let oversized = vec![own(1); MAX_ACKS_PER_CALL + 1];
    for (acks, says) in [(Vec::new(), "at least one"), (oversized, "at most 1024")] {
        let (answer, _) = h.call(&framework, session, FrameworkRequest::Acknowledge(acks));
        match answer {
            Some(Err(error)) => {
                assert_eq!(error.code, ErrorCode::InvalidRequest);
                assert!(error.message.contains(says), "{error:?}");
            }
            other => panic!("a batch that should say `{says}` was not refused: {other:?}"),
        }
    }
    // The framework's acknowledgement is committed.
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::Acknowledge(vec![StatusAck {
            task_id: TaskId::from("t1"),
            framework_id: framework.clone(),
            seq: 1,
        }]),
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
}

/// The status updates `outputs` carry to `session`.
fn updates_to(outputs: &[Output], session: SessionId) -> Vec<StatusUpdate> {
    to_framework(outputs, session)
        .into_iter()
        .filter_map(|m| match m {
            MasterToFramework::Update(update) => Some(update.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn unacknowledged_updates_are_sent_again_until_acknowledged_and_to_a_framework_back_from_failover()
{
    let (mut h, _, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    // Pushed once; as if that push had been dropped, the framework does not acknowledge it.
    let running = update("t1", &framework, "agent-1", TaskState::Running, 1);
    let outputs = h.input(Input::AgentStatus("agent-1".into(), running.clone()));
    assert_eq!(updates_to(&outputs, session), vec![running.clone()]);
    let outputs = h.pass(DEFAULT_STATUS_RESEND_INTERVAL + TICK);
    assert_eq!(
        updates_to(&outputs, session),
        vec![running.clone()],
        "sent again once in an interval"
    );

    // Acknowledged: no longer sent.
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::Acknowledge(vec![StatusAck {
            task_id: TaskId::from("t1"),
            framework_id: framework.clone(),
            seq: 1,
        }]),
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    let outputs = h.pass(DEFAULT_STATUS_RESEND_INTERVAL + TICK);
    assert!(updates_to(&outputs, session).is_empty(), "{outputs:?}");

    // The task ends while its framework is away: it gets the end when it fails over, after
    // the answer to its subscription, and the task is forgotten only once acknowledged.
    h.input(Input::FrameworkGone(framework.clone(), session));
    let finished = update("t1", &framework, "agent-1", TaskState::Finished, 2);
    h.input(Input::AgentStatus("agent-1".into(), finished.clone()));
    let new_session = h.session();
    let call_id = h.call_id();
    let outputs = h.input(Input::FrameworkSubscribe(
        new_session,
        Subscription {
            call_id,
            framework_id: Some(framework.clone()),
            name: "job".to_string(),
            group: "default".to_string(),
            failover_timeout_ms: 2_000,
            principal: "framework-1".to_string(),
        },
    ));
    let to_new = to_framework(&outputs, new_session);
    assert!(
        matches!(
            to_new.as_slice(),
            [
                MasterToFramework::CallResult { result: Ok(CallOk::Subscribed { .. }), .. },
                MasterToFramework::Update(update),
            ] if *update == finished
        ),
        "{to_new:?}"
    );
    let key = TaskKey::new(framework.clone(), TaskId::from("t1"));
    assert!(h.core.node().state().task(&key).is_some());
    h.call(
        &framework,
        new_session,
        FrameworkRequest::Acknowledge(vec![StatusAck {
            task_id: TaskId::from("t1"),
            framework_id: framework.clone(),
            seq: 2,
        }]),
    );
    assert!(h.core.node().state().task(&key).is_none());
}

#[test]
fn an_agent_declared_lost_while_its_session_is_open_is_told_to_register_again_and_comes_back() {
    let (mut h, agent_session, _, _) = cluster_with_demand();
    let agent = AgentId::from("agent-1");
    // Its heartbeats stop reaching the leader (a pause, a one-way partition) but its session
    // stays open.
    h.heartbeating.clear();
    let outputs = h.pass(Duration::from_millis(4_200));
    assert_eq!(h.agent_state(&agent), AgentState::Lost);
    assert!(
        matches!(
            to_agent(&outputs, agent_session).as_slice(),
            [MasterToAgent::Error(error)] if error.code == ErrorCode::UnknownAgent
        ),
        "{outputs:?}"
    );
    assert!(outputs.contains(&Output::Close(agent_session)));

    // It registers again, as any agent whose session closed does, and is active.
    let (new_session, outputs) = h.register_agent("agent-1", "cpus=4,mem_mib=4096");
    assert!(matches!(
        to_agent(&outputs, new_session).as_slice(),
        [MasterToAgent::Registered { .. }]
    ));
    assert_eq!(h.agent_state(&agent), AgentState::Active);
}

#[test]
fn status_from_an_agent_without_a_session_here_is_not_acknowledged() {
    let (mut h, _, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    let running = update("t1", &framework, "agent-2", TaskState::Running, 1);
    let outputs = h.input(Input::AgentStatus("agent-2".into(), running));
    assert!(outputs.is_empty(), "{outputs:?}");
}

#[test]
fn reconciliation_reports_the_latest_state_and_unknown_tasks_as_lost() {
    let (mut h, _, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    h.input(Input::AgentStatus(
        "agent-1".into(),
        update("t1", &framework, "agent-1", TaskState::Running, 1),
    ));
    let (answer, outputs) = h.call(
        &framework,
        session,
        FrameworkRequest::Reconcile {
            task_ids: vec![TaskId::from("t1"), TaskId::from("nope")],
        },
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    let updates: Vec<_> = to_framework(&outputs, session)
        .into_iter()
        .filter_map(|m| match m {
            MasterToFramework::Update(update) => {
                Some((update.task_id.clone(), update.state, update.reason.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        updates,
        vec![
            (TaskId::from("t1"), TaskState::Running, None),
            (
                TaskId::from("nope"),
                TaskState::Lost,
                Some(StatusReason::UnknownTask)
            ),
        ]
    );
    // Implicit reconciliation: every task of the framework.
    let (_, outputs) = h.call(
        &framework,
        session,
        FrameworkRequest::Reconcile {
            task_ids: Vec::new(),
        },
    );
    assert_eq!(
        to_framework(&outputs, session)
            .into_iter()
            .filter(|m| matches!(m, MasterToFramework::Update(_)))
            .count(),
        1
    );
}

/// The updates among `outputs` to `session`, by task id.
fn update_ids(outputs: &[Output], session: SessionId) -> Vec<String> {
    updates_to(outputs, session)
        .into_iter()
        .map(|update| update.task_id.to_string())
        .collect()
}

/// A framework with more tasks than a session's queue holds gets an implicit reconciliation,
/// and its unacknowledged updates after a failover, a page per tick, every task once, in order;
/// an explicit reconciliation naming too many tasks is refused, saying so.
#[test]
fn a_framework_with_many_tasks_is_sent_its_tasks_a_page_per_tick() {
    let tasks = 2 * SWEEP_PAGE + 88;
    let mut h = Harness::leader();
    let capacity = format!("cpus={tasks},mem_mib={}", 512 * tasks);
    h.register_agent("agent-1", &capacity);
    h.heartbeating.push(AgentId::from("agent-1"));
    let (session, framework) = h.subscribe("framework-1", None);
    h.want(&framework, session, tasks as u32);
    let offer = h.offers_for(session).remove(0);
    let specs: Vec<TaskSpec> = (0..tasks)
        .map(|i| task(&format!("t{i:04}"), ONE_TASK))
        .collect();
    let (answer, _) = h.accept(&framework, session, &offer, specs);
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    let mut expected: Vec<String> = (0..tasks).map(|i| format!("t{i:04}")).collect();
    expected.sort();

    let (answer, outputs) = h.call(
        &framework,
        session,
        FrameworkRequest::Reconcile {
            task_ids: Vec::new(),
        },
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    let mut swept = update_ids(&outputs, session);
    assert_eq!(swept.len(), SWEEP_PAGE, "the first page at once, no more");
    for _ in 0..4 {
        let page = update_ids(&h.tick(), session);
        assert!(page.len() <= SWEEP_PAGE, "{} in one tick", page.len());
        swept.extend(page);
    }
    assert_eq!(swept, expected);

    // Each task's RUNNING, unacknowledged, goes to the framework's next session a page per
    // tick too.
    for i in 0..tasks {
        let id = format!("t{i:04}");
        h.input(Input::AgentStatus(
            "agent-1".into(),
            update(&id, &framework, "agent-1", TaskState::Running, 1),
        ));
    }
    let (failed_over, _) = h.subscribe("framework-1", Some(framework.clone()));
    let mut resent = Vec::new();
    for _ in 0..4 {
        let page = update_ids(&h.tick(), failed_over);
        assert!(page.len() <= SWEEP_PAGE, "{} in one tick", page.len());
        resent.extend(page);
    }
    assert_eq!(resent.len(), tasks - SWEEP_PAGE, "after the first page");

    let too_many: Vec<TaskId> = (0..=MAX_RECONCILE_TASK_IDS)
        .map(|i| TaskId::from(format!("t{i}")))
        .collect();
    let (answer, _) = h.call(
        &framework,
        failed_over,
        FrameworkRequest::Reconcile { task_ids: too_many },
    );
    match answer {
        Some(Err(error)) => {
            assert_eq!(error.code, ErrorCode::InvalidRequest);
            assert!(error.message.contains("1024"), "{error:?}");
        }
        other => panic!("an oversized reconciliation was not refused: {other:?}"),
    }
}

#[test]
fn a_framework_that_fails_over_in_time_keeps_its_tasks_and_a_late_one_is_torn_down() {
    let (mut h, _, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    h.input(Input::FrameworkGone(framework.clone(), session));
    let entry = &h.core.node().state().frameworks()[&framework];
    assert!(entry.torn_down_at_ms.is_none());

    // Back within its 2 s timeout, on a new session: same id, tasks kept.
    h.pass(Duration::from_millis(1_000));
    let (new_session, same) = h.subscribe("framework-1", Some(framework.clone()));
    assert_eq!(same, framework);
    h.pass(Duration::from_millis(3_000));
    assert!(h.core.node().state().frameworks()[&framework]
        .torn_down_at_ms
        .is_none());

    // Gone again, and past its timeout: torn down, its task killed on the agent.
    h.input(Input::FrameworkGone(framework.clone(), new_session));
    h.pass(Duration::from_millis(2_200));
    assert!(h.core.node().state().frameworks()[&framework]
        .torn_down_at_ms
        .is_some());
}

#[test]
fn a_failover_by_another_principal_is_refused_and_its_session_closed() {
    let (mut h, _, framework, _) = cluster_with_demand();
    let session = h.session();
    let outputs = h.input(Input::FrameworkSubscribe(
        session,
        Subscription {
            call_id: 99,
            framework_id: Some(framework),
            name: "job".to_string(),
            group: "default".to_string(),
            failover_timeout_ms: 2_000,
            principal: "framework-2".to_string(),
        },
    ));
    assert!(matches!(
        to_framework(&outputs, session).as_slice(),
        [MasterToFramework::CallResult { call_id: 99, result: Err(error) }] if error.code == ErrorCode::Unauthorized
    ));
    assert_eq!(outputs.last(), Some(&Output::Close(session)));
}

#[test]
fn a_newer_session_replaces_the_old_one_which_is_closed() {
    let (mut h, _, framework, session) = cluster_with_demand();
    let (newer, _) = h.subscribe("framework-1", Some(framework.clone()));
    // The old session was closed when the new one took over; its calls are ignored.
    let (answer, outputs) = h.call(&framework, session, FrameworkRequest::Revive);
    assert_eq!(answer, None);
    assert!(outputs.is_empty());
    let (answer, _) = h.call(&framework, newer, FrameworkRequest::Revive);
    assert_eq!(answer, Some(Ok(CallOk::Done)));
}

#[test]
fn a_follower_redirects_agents_frameworks_and_operators() {
    // A member of a three-master group that has heard from no leader.
    let node = RaftNode::bootstrap(
        NodeConfig::new(2),
        MemStorage::new("m2"),
        &[1, 2, 3],
        ClusterSettings::default(),
    )
    .expect("bootstrap");
    let mut core = MasterCore::new(node, CoreConfig::default());
    let now = Now::at(Time::from_millis(1));
    assert_eq!(core.start(now), None);
    core.handle(
        Input::AgentRegister {
            agent_id: "agent-1".into(),
            session: SessionId(1),
            address: address(),
            registration: AgentRegistration {
                hostname: "h".to_string(),
                resources: resources("cpus=1,mem_mib=1"),
                attributes: Default::default(),
                tasks: Vec::new(),
                executors: Vec::new(),
                isolation: Default::default(),
            },
        },
        now,
    );
    core.handle(
        operator_input(RequestId(7), OperatorRequest::ListAgents { after: None }),
        now,
    );
    let outputs = core.drain_outputs();
    assert!(outputs.contains(&Output::ToAgent {
        session: SessionId(1),
        message: MasterToAgent::Redirect(fullerene_proto::messages::Redirect { leader: None }),
    }));
    assert!(outputs.contains(&Output::Close(SessionId(1))));
    assert_eq!(
        answer_to(&outputs, RequestId(7)),
        Some(OperatorResponse::Redirect(
            fullerene_proto::messages::Redirect { leader: None }
        ))
    );
}

#[test]
fn operator_writes_are_answered_once_applied_and_reads_from_the_state() {
    let mut h = Harness::leader();
    let done = h.operator(OperatorRequest::SetGroupWeight {
        group: "prod".to_string(),
        weight: 3.0,
    });
    assert_eq!(done, OperatorResponse::Done);
    match h.operator(OperatorRequest::GroupWeights) {
        OperatorResponse::GroupWeights(weights) => assert_eq!(weights.get("prod"), Some(&3.0)),
        other => panic!("{other:?}"),
    }
    match h.operator(OperatorRequest::ClusterStatus) {
        OperatorResponse::ClusterStatus(status) => {
            assert_eq!(status.this, MasterId(1));
            assert_eq!(status.leader.map(|l| l.id), Some(MasterId(1)));
            assert_eq!(status.members.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    match h.operator(OperatorRequest::AddMaster {
        id: MasterId(1),
        addr: address(),
    }) {
        OperatorResponse::Error(error) => assert_eq!(error.code, ErrorCode::InvalidRequest),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_master_id_of_zero_is_refused() {
    let mut h = Harness::leader();
    match h.operator(OperatorRequest::AddMaster {
        id: MasterId(0),
        addr: address(),
    }) {
        OperatorResponse::Error(error) => {
            assert_eq!(error.code, ErrorCode::InvalidRequest);
            assert!(error.message.contains("start at 1"), "{}", error.message);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_bounded_view_is_redacted_counts_what_it_leaves_out_and_is_the_leaders_only() {
    let mut h = Harness::leader();
    let session = h.session();
    h.input(Input::AgentRegister {
        agent_id: "agent-1".into(),
        session,
        address: address(),
        registration: AgentRegistration {
            hostname: "agent-1.host".to_string(),
            resources: resources("cpus=4,mem_mib=4096"),
            attributes: Default::default(),
            tasks: Vec::new(),
            executors: vec!["command".to_string(), "sleep".to_string()],
            isolation: Default::default(),
        },
    });
    h.heartbeating.push(AgentId::from("agent-1"));
    let (session, framework) = h.subscribe("framework-1", None);
    h.want(&framework, session, 3);
    let offer = h.offers_for(session).remove(0);
    let mut secret = fullerene_proto::testkit::command_task("t1", "run", &[], ONE_TASK, 0);
    if let fullerene_proto::messages::Executor::Command(command) = &mut secret.executor {
        command
            .env
            .insert("DB_PASSWORD".to_string(), "hunter2".to_string());
    }
    let tasks = vec![secret, task("t2", ONE_TASK), task("t3", ONE_TASK)];
    let (answer, _) = h.accept(&framework, session, &offer, tasks);
    assert_eq!(answer, Some(Ok(CallOk::Done)));

    let bounded = h
        .core
        .bounded_view(2, h.now.wall_ms())
        .expect("the leader's view");
    assert_eq!(bounded.view.applied, h.core.node().applied_index());
    assert_eq!(bounded.term, h.core.node().term());
    assert_eq!(bounded.tasks_total, 3);
    assert_eq!(bounded.tasks_omitted, 1);
    assert_eq!(
        bounded.omitted_by_framework.get(&framework),
        Some(&1),
        "{:?}",
        bounded.omitted_by_framework
    );
    let ids: Vec<&str> = bounded
        .view
        .tasks
        .iter()
        .map(|t| t.spec.id.as_str())
        .collect();
    assert_eq!(ids, ["t1", "t2"], "the first tasks by key");
    let shown = format!("{:?}", bounded.view.tasks[0].spec);
    assert!(
        shown.contains("DB_PASSWORD") && !shown.contains("hunter2"),
        "{shown}"
    );
    assert_eq!(bounded.cluster.members.len(), 1);
    let whole = h
        .core
        .bounded_view(usize::MAX, h.now.wall_ms())
        .expect("the leader's view");
    assert_eq!((whole.view.tasks.len(), whole.tasks_omitted), (3, 0));
    // The operator's own read (an operator certificate) still shows the value.
    match h.operator(OperatorRequest::State) {
        OperatorResponse::State(view) => {
            assert!(format!("{:?}", view.tasks).contains("hunter2"));
        }
        other => panic!("{other:?}"),
    }

    // A master that does not lead publishes nothing.
    let node = RaftNode::bootstrap(
        NodeConfig::new(1),
        MemStorage::new("follower"),
        &[1, 2, 3],
        ClusterSettings::default(),
    )
    .expect("bootstrap");
    let follower = MasterCore::new(node, CoreConfig::default());
    assert!(follower.bounded_view(10, 0).is_none());
}

#[test]
fn shutdown_answers_what_waits_with_outcome_unknown() {
    let mut h = Harness::leader();
    // Proposed but not yet advanced: waiting for its commit.
    h.core.handle(
        operator_input(
            RequestId(1),
            OperatorRequest::SetGroupWeight {
                group: "g".to_string(),
                weight: 2.0,
            },
        ),
        h.now,
    );
    h.core.shutdown();
    match answer_to(&h.core.drain_outputs(), RequestId(1)) {
        Some(OperatorResponse::Error(error)) => assert_eq!(error.code, ErrorCode::OutcomeUnknown),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_same_inputs_give_the_same_outputs() {
    let run = || {
        let (mut h, _, framework, session) = cluster_with_demand();
        let offer = h.offers_for(session).remove(0);
        let mut all = h
            .accept(&framework, session, &offer, vec![task("t1", ONE_TASK)])
            .1;
        all.extend(h.input(Input::AgentStatus(
            "agent-1".into(),
            update("t1", &framework, "agent-1", TaskState::Finished, 1),
        )));
        all.extend(h.pass(Duration::from_secs(5)));
        all.iter()
            .map(|output| format!("{output:?}"))
            .collect::<Vec<_>>()
    };
    let (first, second) = (run(), run());
    let diverged = first.iter().zip(&second).position(|(a, b)| a != b);
    assert_eq!(
        diverged,
        None,
        "outputs diverge at {diverged:?}: {:?}",
        diverged.map(|i| (&first[i], &second[i]))
    );
    assert_eq!(first.len(), second.len());
}

/// Every operator listing comes in pages that fit a frame; following `next` lists each item
/// once, and a framework's listing holds its tasks only.
#[test]
fn operator_listings_come_in_pages_that_list_everything_once() {
    use fullerene_proto::limits::{MAX_PAGE_BYTES, MAX_PAGE_ITEMS};
    let tasks = MAX_PAGE_ITEMS * 2 + 37;
    let mut h = Harness::leader();
    h.register_agent("agent-1", &format!("cpus={tasks},mem_mib={}", 512 * tasks));
    h.heartbeating.push(AgentId::from("agent-1"));
    let (session, framework) = h.subscribe("framework-1", None);
    h.want(&framework, session, tasks as u32);
    let offer = h.offers_for(session).remove(0);
    let specs: Vec<TaskSpec> = (0..tasks)
        .map(|i| task(&format!("t{i:05}"), ONE_TASK))
        .collect();
    let (answer, _) = h.accept(&framework, session, &offer, specs);
    assert_eq!(answer, Some(Ok(CallOk::Done)));

    let mut listed = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let request = OperatorRequest::ListTasks {
            framework_id: Some(framework.clone()),
            after: after.clone(),
        };
        let OperatorResponse::Tasks { tasks: page, next } = h.operator(request) else {
            panic!("not a page of tasks");
        };
        pages += 1;
        assert!(page.len() <= MAX_PAGE_ITEMS);
        assert_eq!(next.is_some(), listed.len() + page.len() < tasks);
        listed.extend(page.into_iter().map(|t| t.spec.id.to_string()));
        match next {
            Some(key) => after = Some(key),
            None => break,
        }
    }
    let expected: Vec<String> = (0..tasks).map(|i| format!("t{i:05}")).collect();
    assert_eq!(listed, expected);
    assert_eq!(pages, 3);

    // Large tasks make the page end by bytes, well before the count.
    let (other_session, other) = h.subscribe("framework-2", None);
    h.register_agent_with("agent-2", "cpus=100,mem_mib=100000", &["command"]);
    h.heartbeating.push(AgentId::from("agent-2"));
    h.want(&other, other_session, 12);
    let offer = h
        .offers_for(other_session)
        .into_iter()
        .find(|o| o.agent_id.as_str() == "agent-2")
        .expect("an offer of agent-2");
    // 12 of 300 KiB: one launch under the 4 MiB frame, six pages' worth past MAX_PAGE_BYTES.
    let big: Vec<TaskSpec> = (0..12)
        .map(|i| {
            let mut spec = fullerene_proto::testkit::command_task(
                &format!("big{i:02}"),
                "true",
                &[],
                ONE_TASK,
                0,
            );
            if let fullerene_proto::messages::Executor::Command(command) = &mut spec.executor {
                command.env.insert("PAYLOAD".into(), "p".repeat(300 * 1024));
            }
            spec
        })
        .collect();
    let (answer, _) = h.accept(&other, other_session, &offer, big);
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    let request = OperatorRequest::ListTasks {
        framework_id: Some(other.clone()),
        after: None,
    };
    let response = h.operator(request);
    let OperatorResponse::Tasks { tasks: page, next } = &response else {
        panic!("not a page of tasks");
    };
    assert!(
        page.len() < 12 && next.is_some(),
        "{} tasks on one page",
        page.len()
    );
    assert!(page.iter().all(|t| t.framework_id == other));
    let size = fullerene_proto::codec::encoded_size(&response).unwrap();
    assert!(size <= MAX_PAGE_BYTES + 4096, "a page of {size} bytes");

    // One agent page holds both agents, and says nothing follows.
    let OperatorResponse::Agents { agents, next } =
        h.operator(OperatorRequest::ListAgents { after: None })
    else {
        panic!("not a page of agents");
    };
    assert_eq!((agents.len(), next), (2, None));
    let OperatorResponse::Frameworks { frameworks, next } =
        h.operator(OperatorRequest::ListFrameworks {
            after: Some(framework.clone()),
        })
    else {
        panic!("not a page of frameworks");
    };
    assert_eq!(next, None);
    assert!(frameworks.iter().all(|f| f.id > framework));
}

/// An agent that resends an update while its first copy waits in the log adds no copy, and
/// one resent after it committed is acknowledged without a new entry.
#[test]
fn a_resent_status_update_is_proposed_once() {
    let (mut h, agent_session, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    let running = update("t1", &framework, "agent-1", TaskState::Running, 1);
    let before = h.core.node().last_index();
    h.core
        .handle(Input::AgentStatus("agent-1".into(), running.clone()), h.now);
    h.core
        .handle(Input::AgentStatus("agent-1".into(), running.clone()), h.now);
    let outputs = h.run();
    assert_eq!(
        h.core.node().last_index(),
        before + 1,
        "one entry for two copies"
    );
    assert_eq!(to_agent(&outputs, agent_session).len(), 1);
    assert_eq!(updates_to(&outputs, session), vec![running.clone()]);
    let outputs = h.input(Input::AgentStatus("agent-1".into(), running));
    assert_eq!(
        h.core.node().last_index(),
        before + 1,
        "no entry for a committed update"
    );
    assert!(matches!(
        to_agent(&outputs, agent_session).as_slice(),
        [MasterToAgent::StatusAck(ack)] if ack.seq == 1
    ));
}

/// An accept that names one offer twice would count its resources twice: it is refused.
#[test]
fn an_accept_naming_an_offer_twice_is_refused() {
    let (mut h, _, framework, session) = cluster_with_demand();
    let offer = h.offers_for(session).remove(0);
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::Accept {
            offer_ids: vec![offer.id, offer.id],
            tasks: vec![task("t1", "cpus=6,mem_mib=512")],
            leftover: Leftover::Decline { refuse_ms: 0 },
        },
    );
    assert_eq!(error_code(answer), ErrorCode::InvalidRequest);
    assert!(h.core.node().state().tasks().is_empty());
}

/// A cycle that offers more agents than one frame holds sends several frames.
#[test]
fn offers_of_many_agents_are_sent_in_frames_of_bounded_count() {
    use fullerene_proto::limits::MAX_OFFERS_PER_FRAME;
    let agents = MAX_OFFERS_PER_FRAME * 2 + 5;
    let mut h = Harness::leader();
    for n in 0..agents {
        let agent = format!("agent-{n:03}");
        h.register_agent(&agent, "cpus=2,mem_mib=2048");
        h.heartbeating.push(AgentId::from(agent.as_str()));
    }
    let (session, framework) = h.subscribe("framework-1", None);
    h.want(&framework, session, (agents * 2) as u32);
    let mut frames = Vec::new();
    for _ in 0..20 {
        let outputs = h.tick();
        frames.extend(
            to_framework(&outputs, session)
                .into_iter()
                .filter_map(|m| match m {
                    MasterToFramework::Offers(offers) => Some(offers.len()),
                    _ => None,
                }),
        );
        if frames.iter().sum::<usize>() >= agents {
            break;
        }
    }
    assert_eq!(frames.iter().sum::<usize>(), agents, "{frames:?}");
    assert!(frames.len() >= 3, "{frames:?}");
    assert!(
        frames.iter().all(|n| *n <= MAX_OFFERS_PER_FRAME),
        "{frames:?}"
    );
}

impl Harness {
    /// A subscription of a framework of `principal` (new, or failing over `framework_id`)
    /// asking for `group`; its session and outputs.
    fn subscribe_in(
        &mut self,
        principal: &str,
        framework_id: Option<FrameworkId>,
        group: &str,
    ) -> (SessionId, Vec<Output>) {
        let session = self.session();
        let call_id = self.call_id();
        let outputs = self.input(Input::FrameworkSubscribe(
            session,
            Subscription {
                call_id,
                framework_id,
                name: "job".to_string(),
                group: group.to_string(),
                failover_timeout_ms: 2_000,
                principal: principal.to_string(),
            },
        ));
        (session, outputs)
    }
}

#[test]
fn a_framework_joins_its_principals_group_and_is_refused_another() {
    let mut h = Harness::leader();
    let placed = h.operator(OperatorRequest::SetGroup(GroupPlacement {
        group: "etl".to_string(),
        weight: Some(2.0),
        principals: vec!["framework-1".to_string()],
    }));
    assert_eq!(placed, OperatorResponse::Done);

    let (session, outputs) = h.subscribe_in("framework-1", None, "");
    match to_framework(&outputs, session).as_slice() {
        [MasterToFramework::CallResult {
            result: Ok(CallOk::Subscribed { group, .. }),
            ..
        }, ..] => assert_eq!(group, "etl", "the answer names the group it joined"),
        other => panic!("no subscription: {other:?}"),
    }

    // Another principal cannot put its framework in "etl": refused, and its session ends.
    let (session, outputs) = h.subscribe_in("framework-2", None, "etl");
    match to_framework(&outputs, session).as_slice() {
        [MasterToFramework::CallResult {
            result: Err(error), ..
        }] => {
            assert_eq!(error.code, ErrorCode::Unauthorized);
            assert!(
                error.message.contains("framework-2") && error.message.contains("etl"),
                "{}",
                error.message
            );
        }
        other => panic!("expected a refusal: {other:?}"),
    }
    assert!(outputs.contains(&Output::Close(session)), "{outputs:?}");

    match h.operator(OperatorRequest::ListGroups) {
        OperatorResponse::Groups {
            groups,
            default_group,
        } => {
            assert_eq!(default_group, "default");
            let etl = groups.iter().find(|g| g.name == "etl").expect("etl listed");
            assert_eq!(etl.principals, vec!["framework-1".to_string()]);
            assert_eq!(etl.frameworks, 1);
            assert_eq!(etl.weight, 2.0);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_framework_at_its_pending_offers_quota_is_offered_nothing_more_until_it_answers() {
    let mut h = Harness::leader();
    let quotas = fullerene_proto::messages::Quotas {
        pending_offers_per_framework: 1,
        ..Default::default()
    };
    assert_eq!(
        h.operator(OperatorRequest::SetQuotas(quotas)),
        OperatorResponse::Done
    );
    assert_eq!(
        h.operator(OperatorRequest::Quotas),
        OperatorResponse::Quotas(quotas)
    );
    for agent in ["agent-1", "agent-2", "agent-3"] {
        h.register_agent(agent, "cpus=4,mem_mib=4096");
        h.heartbeating.push(AgentId::from(agent));
    }
    let (session, framework) = h.subscribe("framework-1", None);
    h.want(&framework, session, 12);
    let first = h.offers_for(session);
    assert_eq!(first.len(), 1, "one offer at a time: {first:?}");
    for _ in 0..10 {
        assert!(
            offers_in(&h.tick(), session).is_empty(),
            "an offer past the quota"
        );
    }
    // Declined, the offer is replaced by another.
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::Decline {
            offer_ids: vec![first[0].id],
            refuse_ms: 0,
        },
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    let next = h.offers_for(session);
    assert_eq!(next.len(), 1);
}

fn kills_to(outputs: &[Output], session: SessionId) -> Vec<TaskId> {
    to_agent(outputs, session)
        .into_iter()
        .filter_map(|message| match message {
            MasterToAgent::Kill { task_id, .. } => Some(task_id.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_drained_agent_is_offered_nothing_and_its_tasks_are_killed_at_the_deadline() {
    let (mut h, agent_session, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    let agent = AgentId::from("agent-1");
    let answer = h.operator(OperatorRequest::DrainAgent {
        agent_id: agent.clone(),
        deadline_after_ms: Some(2_000),
    });
    assert_eq!(answer, OperatorResponse::Done);
    // Before the deadline: no offer of the draining agent, no kill.
    let before = h.pass(Duration::from_millis(1_500));
    assert!(offers_in(&before, session).is_empty(), "{before:?}");
    assert!(kills_to(&before, agent_session).is_empty());
    assert!(h.core.open_offers().is_empty());
    // Past it, what still runs is killed, once.
    let after = h.pass(Duration::from_millis(2_000));
    assert_eq!(kills_to(&after, agent_session), vec![TaskId::from("t1")]);
    assert!(offers_in(&after, session).is_empty());
    let killed = update("t1", &framework, "agent-1", TaskState::Killed, 1);
    h.input(Input::AgentStatus(agent.clone(), killed));
    let entry = &h.core.node().state().agents()[&agent];
    assert!(entry.drained(), "nothing runs: drained");
    assert!(offers_in(&h.pass(Duration::from_secs(1)), session).is_empty());

    // Undrained, it is offered again.
    let answer = h.operator(OperatorRequest::UndrainAgent {
        agent_id: agent.clone(),
    });
    assert_eq!(answer, OperatorResponse::Done);
    h.want(&framework, session, 1);
    assert!(
        h.core.open_offers().iter().any(|o| o.agent_id == agent),
        "undrained, agent-1 is offered again"
    );
}

#[test]
fn operators_kill_a_task_and_tear_a_framework_down() {
    let (mut h, agent_session, framework, session) = cluster_with_demand();
    h.launch_t1(&framework, session);
    let id = RequestId(h.call_id());
    let outputs = h.input(operator_input(
        id,
        OperatorRequest::KillTask {
            framework_id: framework.clone(),
            task_id: TaskId::from("t1"),
        },
    ));
    assert_eq!(answer_to(&outputs, id), Some(OperatorResponse::Done));
    assert_eq!(kills_to(&outputs, agent_session), vec![TaskId::from("t1")]);
    let unknown = h.operator(OperatorRequest::KillTask {
        framework_id: framework.clone(),
        task_id: TaskId::from("t9"),
    });
    assert!(
        matches!(&unknown, OperatorResponse::Error(e) if e.message.contains("unknown task")),
        "{unknown:?}"
    );

    let id = RequestId(h.call_id());
    let outputs = h.input(operator_input(
        id,
        OperatorRequest::TeardownFramework {
            framework_id: framework.clone(),
        },
    ));
    assert_eq!(answer_to(&outputs, id), Some(OperatorResponse::Done));
    // The scheduler is told why before its session closes, so it stops rather than retries.
    let told = outputs
        .iter()
        .position(|o| {
            matches!(o, Output::ToFramework { session: s, message: MasterToFramework::TornDown { reason } }
                if *s == session && reason.contains("operator"))
        })
        .unwrap_or_else(|| panic!("no TornDown to the framework: {outputs:?}"));
    let closed = outputs
        .iter()
        .position(|o| *o == Output::Close(session))
        .unwrap_or_else(|| panic!("the session is not closed: {outputs:?}"));
    assert!(told < closed, "{outputs:?}");
    assert_eq!(kills_to(&outputs, agent_session), vec![TaskId::from("t1")]);
    let entry = &h.core.node().state().frameworks()[&framework];
    assert!(entry.torn_down_at_ms.is_some());
}

#[test]
fn a_framework_describes_its_job_and_says_how_it_ended_through_its_session() {
    use fullerene_proto::jobs::{JobDescription, JobEnd, StageDescription};
    let (mut h, _agent_session, framework, session) = cluster_with_demand();
    let description = JobDescription {
        job: "q1".to_string(),
        policy: "graphene".to_string(),
        stages: vec![StageDescription {
            stage: 0,
            name: "scan".to_string(),
            tasks: 1,
            parents: vec![],
        }],
        reservation: None,
    };
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::DescribeJob(description.clone()),
    );
    assert!(matches!(answer, Some(Ok(_))), "{answer:?}");
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::EndJob {
            job: "q1".to_string(),
            end: JobEnd::Finished,
        },
    );
    assert!(matches!(answer, Some(Ok(_))), "{answer:?}");
    let jobs = &h.core.node().state().frameworks()[&framework].jobs;
    assert_eq!(jobs[0].description, description);
    assert_eq!(jobs[0].end, Some(JobEnd::Finished));
}

/// Issue 17: an accepted reservation is in the replicated state, so the plan the master had
/// before it stopped is the one it has after (from its log and snapshot, as a new leader
/// would have it from the others').
#[test]
fn an_accepted_reservation_survives_a_restart_of_the_master() {
    let mut h = Harness::leader();
    h.register_agent("agent-1", "cpus=8,mem_mib=8192");
    h.reserve(
        "etl",
        "window(atom(cpus=4,mem_mib=1024; g=1, h=2, l=1m, w=1h), s=0, f=1h)",
    );
    let before = h.core.node().state().reservations().clone();
    assert!(before.get("etl").is_some(), "accepted");
    h.restart_after(Duration::from_secs(30));
    let after = h.core.node().state().reservations();
    assert_eq!(*after, before);
    assert_eq!(after.get("etl").map(|r| r.user.as_str()), Some("alice"));
}

/// Issue 17, Rayon §5.2's calls: an operator and a framework reserve through the core, each
/// owning what it creates; a framework may not change another's reservation, an operator may
/// change any; a request with a syntax error is refused before anything is proposed, with its
/// column; and the reads show what the plan holds.
#[test]
fn operators_and_frameworks_reserve_and_only_owners_or_operators_change_reservations() {
    use fullerene_proto::reservations::{ReservationCall, ReservationPhase};

    let mut h = Harness::leader();
    h.register_agent("agent-1", "cpus=8,mem_mib=8192");
    // Windows count from when the masters accept: a minute from now, for an hour.
    let hour = "window(atom(cpus=4,mem_mib=1024; g=1, h=1, l=1m, w=1h), s=1m, f=62m)";
    let created = h.operator(OperatorRequest::Reservation(ReservationCall::Create {
        name: "nightly".into(),
        rdl: hour.into(),
    }));
    assert_eq!(created, OperatorResponse::Done);

    let (session, framework) = h.subscribe("etl", None);
    let reserve = |h: &mut Harness, name: &str, rdl: &str| {
        let call = ReservationCall::Create {
            name: name.into(),
            rdl: rdl.into(),
        };
        h.call(&framework, session, FrameworkRequest::Reservation(call))
            .0
    };
    let answer = reserve(&mut h, "etl-q1", hour);
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    // The cluster's 8 cpus are taken for that hour: a third is refused with the plan's reason.
    let answer = reserve(&mut h, "etl-q2", hour);
    let refused = answer.expect("answered").expect_err("no room");
    assert!(refused.message.contains("no room"), "{refused:?}");
    // A syntax error is refused at once, pointing at its column.
    let (answer, outputs) = h.call(
        &framework,
        session,
        FrameworkRequest::Reservation(ReservationCall::Create {
            name: "typo".into(),
            rdl: "atom(cpus=1; g=1, h=1, l=1m, w=1h".into(),
        }),
    );
    let typo = answer
        .expect("answered at once")
        .expect_err("a syntax error");
    assert!(typo.message.contains("1:34"), "{typo:?} in {outputs:?}");

    // The framework's principal may not delete the operator's reservation; the operator
    // may delete the framework's.
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::Reservation(ReservationCall::Delete {
            name: "nightly".into(),
        }),
    );
    let not_owner = answer.expect("answered").expect_err("not the owner");
    assert_eq!(not_owner.code, ErrorCode::Unauthorized, "{not_owner:?}");

    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::ListReservations { after: None },
    );
    match answer {
        Some(Ok(CallOk::Reservations { reservations, next })) => {
            let names: Vec<&str> = reservations.iter().map(|r| r.name.as_str()).collect();
            assert_eq!(names, ["etl-q1"], "only the principal's own");
            assert_eq!(next, None);
        }
        other => panic!("{other:?}"),
    }
    match h.operator(OperatorRequest::ListReservations { after: None }) {
        OperatorResponse::Reservations {
            accepted,
            next: None,
            rejected,
        } => {
            let owners: Vec<(&str, &str)> = accepted
                .iter()
                .map(|r| (r.name.as_str(), r.owner.as_str()))
                .collect();
            assert_eq!(owners, [("etl-q1", "etl"), ("nightly", TEST_OPERATOR)]);
            assert!(accepted
                .iter()
                .all(|r| r.phase == ReservationPhase::Planned));
            assert!(accepted.iter().all(|r| r.allocation.is_empty()));
            assert!(rejected.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let shown = match h.operator(OperatorRequest::ShowReservation {
        name: "etl-q1".into(),
    }) {
        OperatorResponse::Reservation(info) => info,
        other => panic!("{other:?}"),
    };
    // One bundle for an hour, within the window: one step of 4 cpus lasting an hour.
    assert_eq!(shown.allocation.len(), 1, "{shown:?}");
    let step = &shown.allocation[0];
    assert_eq!(step.end_ms - step.start_ms, 3_600_000);
    assert_eq!(step.resources.get(fullerene_proto::ResourceKind::Cpus), 4.0);
    assert!(step.start_ms >= shown.anchor_ms + 60_000);

    let deleted = h.operator(OperatorRequest::Reservation(ReservationCall::Delete {
        name: "etl-q1".into(),
    }));
    assert_eq!(deleted, OperatorResponse::Done);
    match h.operator(OperatorRequest::ShowReservation {
        name: "etl-q1".into(),
    }) {
        OperatorResponse::Error(error) => {
            assert_eq!(error.code, ErrorCode::UnknownReservation);
        }
        other => panic!("{other:?}"),
    }
    // With its room free, the refused request now fits.
    let answer = reserve(&mut h, "etl-q2", hour);
    assert_eq!(answer, Some(Ok(CallOk::Done)));
}

/// A job description of one stage of `tasks` tasks, running in `reservation`.
fn reserved_job(job: &str, tasks: u32, reservation: &str) -> fullerene_proto::jobs::JobDescription {
    use fullerene_proto::jobs::{JobDescription, StageDescription};
    JobDescription {
        job: job.to_string(),
        policy: "graphene".to_string(),
        stages: vec![StageDescription {
            stage: 0,
            name: "scan".to_string(),
            tasks,
            parents: vec![],
        }],
        reservation: Some(reservation.to_string()),
    }
}

/// Why `outputs` tell the framework on `session` that `task` changed state (`None`: they do
/// not tell it, or give no reason).
fn update_reason(outputs: &[Output], session: SessionId, task: &str) -> Option<StatusReason> {
    to_framework(outputs, session)
        .into_iter()
        .find_map(|message| match message {
            MasterToFramework::Update(update) if update.task_id.as_str() == task => {
                update.reason.clone()
            }
            _ => None,
        })
}

/// Issue 17, point 4: the plan follower. A best-effort framework fills a 4-cpu agent; then a
/// reservation guarantees 2 cpus and a framework runs a job in it, in a group whose weight
/// gives it almost no fair share (so that without the guarantee the allocator would hand freed
/// cpus to the best-effort framework, which wants more). Nothing is killed within the grace
/// period; after it, the two newest best-effort tasks are, named as preempted for the
/// reservation, and what they free is offered to the reserved job's framework first.
#[test]
fn a_reservations_jobs_are_offered_their_guarantee_first_and_best_effort_is_preempted_after_the_grace(
) {
    let mut h = Harness::leader();
    let (agent_session, _) = h.register_agent("agent-1", "cpus=4,mem_mib=4096");
    h.heartbeating.push(AgentId::from("agent-1"));
    let (be_session, best_effort) = h.subscribe("framework-1", None);
    h.want(&best_effort, be_session, 4);
    let offer = h.offers_for(be_session).remove(0);
    let tasks: Vec<TaskSpec> = (1..=4)
        .map(|i| task(&format!("be-{i}"), ONE_TASK))
        .collect();
    assert_eq!(offer.reservation, None, "no reservation yet: {offer:?}");
    let (answer, _) = h.accept(&best_effort, be_session, &offer, tasks);
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    // It wants as much again: it would take whatever frees up.
    h.want(&best_effort, be_session, 4);

    // At a whole minute (the plan's quanta), 2 cpus for the next ten minutes.
    let wall = h.now.wall_ms();
    h.now = h.now.after(Duration::from_millis(120_000 - wall));
    h.reserve(
        "etl",
        "window(atom(cpus=1,mem_mib=512; g=2, h=2, l=1m, w=20m), s=0, f=10m)",
    );

    let placed = h.operator(OperatorRequest::SetGroup(GroupPlacement {
        group: "prod".to_string(),
        weight: Some(0.01),
        principals: vec!["framework-2".to_string()],
    }));
    assert_eq!(placed, OperatorResponse::Done);
    let (prod_session, prod) = h.subscribe_to("framework-2", None, "");
    let (answer, _) = h.call(
        &prod,
        prod_session,
        FrameworkRequest::DescribeJob(reserved_job("q0", 2, "nightly")),
    );
    match answer {
        Some(Err(error)) => assert!(error.message.contains("`nightly`"), "{error:?}"),
        other => panic!("a job in an unknown reservation is refused, got {other:?}"),
    }
    let (answer, _) = h.call(
        &prod,
        prod_session,
        FrameworkRequest::DescribeJob(reserved_job("q1", 2, "etl")),
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    h.want(&prod, prod_session, 2);

    let killed = |outputs: &[Output]| kills_to(outputs, agent_session);
    // Short of 2 cpus with none free: nothing is killed within the grace period.
    let within = h.pass(DEFAULT_RESERVATION_GRACE - Duration::from_secs(2));
    assert!(killed(&within).is_empty(), "killed within the grace period");
    assert!(offers_in(&within, prod_session).is_empty());
    let decision = h.core.follower_decision();
    assert_eq!(decision.shares.len(), 1);
    assert_eq!(
        decision.shares[0].offer_first.to_string(),
        "cpus=2,mem_mib=1024"
    );

    // After it: the two newest tasks (all started together: the highest ids) go.
    let after = h.pass(Duration::from_secs(4));
    let mut victims = killed(&after);
    victims.sort();
    assert_eq!(victims, [TaskId::from("be-3"), TaskId::from("be-4")]);
    // What follows the kills is offered as soon as they end (the cycle an ended task wants).
    let mut after_kills = Vec::new();
    for (seq, victim) in victims.iter().enumerate() {
        let ended = update(
            victim.as_str(),
            &best_effort,
            "agent-1",
            TaskState::Killed,
            seq as u64 + 1,
        );
        let outputs = h.input(Input::AgentStatus(AgentId::from("agent-1"), ended));
        after_kills.extend(outputs);
        assert_eq!(
            update_reason(&after_kills, be_session, victim.as_str()),
            Some(StatusReason::Preempted {
                reservation: "etl".into()
            })
        );
    }
    // The 2 freed cpus go to the reserved job's framework, which launches its two tasks on
    // them; the best-effort one, which wants more, is offered none of them.
    let cpus = |offer: &Offer| {
        offer.resources.to_vec().expect("valid offer")[fullerene_proto::ResourceKind::Cpus]
    };
    let mut outputs = after_kills;
    let mut launched = 0;
    for _ in 0..40 {
        for offer in offers_in(&outputs, prod_session) {
            // Made out of the guarantee, so named for it.
            assert_eq!(offer.reservation.as_deref(), Some("etl"), "{offer:?}");
            let fit = (cpus(&offer) as usize).min(2 - launched);
            if fit == 0 {
                continue;
            }
            let tasks = (0..fit)
                .map(|i| task(&format!("q1-{}", launched + i), ONE_TASK))
                .collect();
            let (answer, _) = h.accept(&prod, prod_session, &offer, tasks);
            assert_eq!(answer, Some(Ok(CallOk::Done)));
            launched += fit;
        }
        let be_cpus: f64 = offers_in(&outputs, be_session).iter().map(cpus).sum();
        assert_eq!(be_cpus, 0.0, "best effort offered reserved cpus");
        if launched == 2 {
            break;
        }
        outputs = h.tick();
    }
    assert_eq!(launched, 2);
    // No more preemption once the shortfall is covered by what is free.
    let later = h.pass(Duration::from_secs(5));
    assert!(killed(&later).is_empty());
}

/// Issue 17, point 4, between reservations: a reserved job that ran beyond its stage's
/// allocation (one bundle) on an idle agent holds lent capacity, as best effort would. When a
/// second reservation's job is owed cpus for its stage and none are free, the first job's
/// newest tasks beyond that allocation are preempted for it after the grace period, named for
/// the second reservation; the task within the allocation is not.
#[test]
fn a_reserved_job_beyond_its_guarantee_is_preempted_for_another_reservation() {
    let mut h = Harness::leader();
    let (agent_session, _) = h.register_agent("agent-1", "cpus=4,mem_mib=4096");
    h.heartbeating.push(AgentId::from("agent-1"));
    let wall = h.now.wall_ms();
    h.now = h.now.after(Duration::from_millis(120_000 - wall));
    // One bundle of the jobs' task for "early", two for "etl", for the next ten minutes.
    h.reserve(
        "early",
        "window(atom(cpus=1,mem_mib=512; g=1, h=1, l=1m, w=10m), s=0, f=10m)",
    );
    h.reserve(
        "etl",
        "window(atom(cpus=1,mem_mib=512; g=2, h=2, l=1m, w=20m), s=0, f=10m)",
    );

    // "early"'s job takes the whole idle agent: its guaranteed task and three more.
    let (early_session, early) = h.subscribe("framework-1", None);
    let (answer, _) = h.call(
        &early,
        early_session,
        FrameworkRequest::DescribeJob(reserved_job("e1", 4, "early")),
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    h.want(&early, early_session, 4);
    let mut launched = 0;
    while launched < 4 {
        for offer in h.offers_for(early_session) {
            let cpus = offer.resources.to_vec().expect("valid offer")
                [fullerene_proto::ResourceKind::Cpus] as usize;
            let fit = cpus.min(4 - launched);
            let tasks = (0..fit)
                .map(|i| task(&format!("e1-{}", launched + i), ONE_TASK))
                .collect();
            let (answer, _) = h.accept(&early, early_session, &offer, tasks);
            assert_eq!(answer, Some(Ok(CallOk::Done)));
            launched += fit;
            // A second apart: the newest are the highest-numbered.
            h.now = h.now.after(Duration::from_secs(1));
        }
    }
    h.want(&early, early_session, 0);

    let (etl_session, etl) = h.subscribe("framework-2", None);
    let (answer, _) = h.call(
        &etl,
        etl_session,
        FrameworkRequest::DescribeJob(reserved_job("q1", 2, "etl")),
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    h.want(&etl, etl_session, 2);

    let killed = |outputs: &[Output]| kills_to(outputs, agent_session);
    let within = h.pass(DEFAULT_RESERVATION_GRACE - Duration::from_secs(2));
    assert!(killed(&within).is_empty(), "killed within the grace period");
    let after = h.pass(Duration::from_secs(4));
    let mut victims = killed(&after);
    victims.sort();
    assert_eq!(victims, [TaskId::from("e1-2"), TaskId::from("e1-3")]);
    let ended = update("e1-3", &early, "agent-1", TaskState::Killed, 1);
    let outputs = h.input(Input::AgentStatus(AgentId::from("agent-1"), ended));
    assert_eq!(
        update_reason(&outputs, early_session, "e1-3"),
        Some(StatusReason::Preempted {
            reservation: "etl".into()
        })
    );
}

/// The leader's plan follower owes a reservation only the allocations of the atoms its job
/// has not finished, as the job's demand summary reports them: a job that ran its first stage
/// early is not owed that stage's allocation (and preempts nothing for it), and is owed the
/// second one's when it comes.
#[test]
fn the_leader_owes_a_reservation_nothing_for_the_atoms_its_job_has_finished() {
    let mut h = Harness::leader();
    h.register_agent("agent-1", "cpus=4,mem_mib=4096");
    h.heartbeating.push(AgentId::from("agent-1"));
    let wall = h.now.wall_ms();
    h.now = h.now.after(Duration::from_millis(120_000 - wall));
    // Two stages in ten minutes: 2 cpus for two minutes, then 3 cpus for two minutes; GREE
    // places them as late as it can, in [6m, 8m) and [8m, 10m).
    let etl = "window(order(atom(cpus=1,mem_mib=512; g=2, h=2, l=2m, w=4m), \
               atom(cpus=1,mem_mib=512; g=3, h=3, l=2m, w=6m)), s=0, f=10m)";
    h.reserve("etl", etl);
    let request = fullerene_reservation::parse(etl)
        .expect("rdl")
        .fingerprint();
    let (session, framework) = h.subscribe("framework-1", None);
    let (answer, _) = h.call(
        &framework,
        session,
        FrameworkRequest::DescribeJob(reserved_job("q1", 5, "etl")),
    );
    assert_eq!(answer, Some(Ok(CallOk::Done)));
    let want = |h: &mut Harness, finished: &[u32], atoms: u32, request: u64| {
        let summary = fullerene_proto::messages::DemandSummary {
            reservation_progress: Some(fullerene_proto::messages::ReservationProgress {
                finished_atoms: finished.to_vec(),
                atoms,
                request,
            }),
            ..demand(&resources(ONE_TASK), 3)
        };
        let (answer, _) = h.call(&framework, session, FrameworkRequest::UpdateDemand(summary));
        assert_eq!(answer, Some(Ok(CallOk::Done)));
        h.pass(Duration::from_secs(2));
        h.core
            .follower_decision()
            .shares
            .iter()
            .map(|share| share.offer_first.to_string())
            .collect::<Vec<_>>()
    };
    // Within the first step's allocation, not finished: its 2 cpus are owed.
    h.pass(Duration::from_secs(6 * 60 + 10));
    assert_eq!(want(&mut h, &[], 2, request), ["cpus=2,mem_mib=1024"]);
    // The job reports its first stage's atom finished: its allocation is owed no more.
    assert_eq!(want(&mut h, &[0], 2, request), Vec::<String>::new());
    // Progress counted against another request (an operator replaced the job's own) is not
    // believed, whether it has another number of atoms or the same.
    assert_eq!(want(&mut h, &[0], 3, request), ["cpus=2,mem_mib=1024"]);
    assert_eq!(want(&mut h, &[0], 2, request ^ 1), ["cpus=2,mem_mib=1024"]);
    // In the second stage's time its 3 cpus are owed.
    h.pass(Duration::from_secs(2 * 60));
    assert_eq!(want(&mut h, &[0], 2, request), ["cpus=3,mem_mib=1536"]);
}

/// Issue 17, point 5: the adapter's rejection is told to the owner. `big` needs both agents'
/// cpus for ten minutes; when one agent is lost it no longer fits, and the leader tells the
/// frameworks of its owner connected to it why (another principal's hear nothing). When the
/// time of `small` (which nobody used) is over, its owner is told it closed unused.
#[test]
fn a_reservations_owner_is_told_when_the_adapter_rejects_it_and_when_it_closes() {
    use fullerene_proto::reservations::{ReservationNotice, ReservationVerdict};
    let mut h = Harness::leader();
    for agent in ["agent-1", "agent-2"] {
        h.register_agent(agent, "cpus=4,mem_mib=4096");
        h.heartbeating.push(AgentId::from(agent));
    }
    let (alice, _) = h.subscribe("alice", None);
    let (bob, _) = h.subscribe("bob", None);
    let wall = h.now.wall_ms();
    h.now = h.now.after(Duration::from_millis(120_000 - wall));
    h.reserve(
        "big",
        "window(atom(cpus=1,mem_mib=512; g=6, h=6, l=10m, w=60m), s=0, f=10m)",
    );
    h.reserve(
        "small",
        "window(atom(cpus=1,mem_mib=512; g=1, h=1, l=1m, w=1m), s=0, f=2m)",
    );
    let notices = |outputs: &[Output], session| -> Vec<ReservationNotice> {
        to_framework(outputs, session)
            .into_iter()
            .filter_map(|message| match message {
                MasterToFramework::ReservationEnded(notice) => Some(notice.clone()),
                _ => None,
            })
            .collect()
    };

    h.heartbeating.retain(|agent| agent.as_str() != "agent-2");
    let outputs = h.pass(Duration::from_secs(5));
    assert_eq!(h.agent_state(&AgentId::from("agent-2")), AgentState::Lost);
    let told = notices(&outputs, alice);
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].name, "big");
    match &told[0].verdict {
        ReservationVerdict::Rejected { reason } => {
            assert!(reason.contains("no room"), "{reason}");
        }
        other => panic!("big should be rejected, got {other:?}"),
    }
    assert!(notices(&outputs, bob).is_empty());
    let reservations = h.core.node().state().reservations();
    assert!(reservations.get("big").is_none());
    assert!(reservations.get("small").is_some());

    // Past the end of `small` (its window closes two minutes after it was made).
    let outputs = h.pass(Duration::from_secs(200));
    let told = notices(&outputs, alice);
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        (told[0].name.as_str(), &told[0].verdict),
        ("small", &ReservationVerdict::Unused)
    );
    assert!(notices(&outputs, bob).is_empty());
}

/// A leader removing itself commits the removal with its two followers before its own log
/// write is on disk, so the followers apply it first and tell the leader it is no longer a
/// member while it has not applied it yet. It still answers the removal as done (its own
/// apply does, once the write lands) instead of failing it with an unknown outcome.
#[test]
fn a_leader_told_of_its_removal_before_applying_it_answers_the_removal_then_stops() {
    use crate::raft_node::{run_store_jobs, Persistence, StoreJob};
    use crate::storage::{MemStorage, RaftStore};

    let members = [1, 2, 3];
    let mut leader_config = NodeConfig::new(1);
    leader_config.persistence = Persistence::Offloaded;
    let node = RaftNode::bootstrap(
        leader_config,
        MemStorage::new("m1"),
        &members,
        ClusterSettings::default(),
    )
    .expect("bootstrap");
    let config = CoreConfig {
        members: members
            .iter()
            .map(|id| (*id, SocketAddr::from(([127, 0, 0, 1], 4000 + *id as u16))))
            .collect(),
        ..Harness::config(CoreConfig::default().allocation_interval)
    };
    let mut core = MasterCore::new(node, config);
    let mut followers: BTreeMap<u64, RaftNode<MemStorage>> = [2, 3]
        .into_iter()
        .map(|id| {
            let node = RaftNode::bootstrap(
                NodeConfig::new(id),
                MemStorage::new(format!("m{id}")),
                &members,
                ClusterSettings::default(),
            )
            .expect("bootstrap");
            (id, node)
        })
        .collect();
    let now = Now::at(Time::from_millis(1_000));
    let mut held: Vec<StoreJob<_>> = Vec::new();

    // Delivers messages both ways until quiet; the leader's store jobs run at once unless
    // `hold` keeps them back (its disk is slow). Returns the leader's outputs.
    let mut exchange = |core: &mut MasterCore<MemStorage>,
                        followers: &mut BTreeMap<u64, RaftNode<MemStorage>>,
                        hold: bool|
     -> (Vec<Output>, Option<MasterExit>) {
        let mut outputs = Vec::new();
        let mut exit = None;
        for _ in 0..50 {
            exit = exit.or(core.advance(now).expect("advance"));
            let jobs = core.take_store_jobs();
            if hold {
                held.extend(jobs);
            } else {
                held.extend(jobs);
                let due = std::mem::take(&mut held);
                if !due.is_empty() {
                    let report = run_store_jobs(&mut core.node().store().writer(), due);
                    core.store_report(report);
                }
            }
            let mut to_leader = Vec::new();
            for output in core.drain_outputs() {
                match output {
                    Output::ToPeer { to, messages } => {
                        for message in messages {
                            followers
                                .get_mut(&to)
                                .expect("a follower")
                                .step(message)
                                .expect("step");
                        }
                    }
                    other => outputs.push(other),
                }
            }
            let mut between = Vec::new();
            for follower in followers.values_mut() {
                let out = follower.advance(now.monotonic).expect("follower advance");
                for message in out.messages_to_send {
                    if message.to == 1 {
                        to_leader.push(message);
                    } else {
                        between.push(message);
                    }
                }
            }
            let quiet = to_leader.is_empty() && between.is_empty();
            for message in between {
                let to = followers.get_mut(&message.to).expect("a follower");
                to.step(message).expect("step");
            }
            if quiet && !core.node().has_ready() {
                break;
            }
            for message in to_leader {
                core.handle(Input::Raft(message), now);
            }
        }
        (outputs, exit)
    };

    assert_eq!(core.start(now), None);
    core.campaign().expect("campaign");
    exchange(&mut core, &mut followers, false);
    assert!(core.node().is_leader(), "master 1 was elected");

    let request = RequestId(1);
    core.handle(
        operator_input(request, OperatorRequest::RemoveMaster { id: MasterId(1) }),
        now,
    );
    let (outputs, exit) = exchange(&mut core, &mut followers, true);
    assert_eq!(
        answer_to(&outputs, request),
        None,
        "answered before applying"
    );
    assert_eq!(exit, None);
    let removal = core.node().commit_index();
    assert!(
        removal > core.node().applied_index(),
        "the removal is committed, not applied"
    );
    assert!(
        followers.values().all(|f| f.applied_index() == removal),
        "the followers applied the removal"
    );

    // A follower tells the leader; then the leader's write lands and it applies its removal.
    core.handle(
        Input::NotAMember {
            from: 2,
            as_of: removal,
        },
        now,
    );
    let (outputs, exit) = exchange(&mut core, &mut followers, false);
    assert_eq!(
        answer_to(&outputs, request),
        Some(OperatorResponse::Done),
        "outputs: {outputs:?}"
    );
    assert_eq!(exit, Some(MasterExit::Removed));
}
