//! [`StandaloneAllocator`]: the allocator with an accounting state of its own, for where no
//! replicated state exists (the simulator, benchmarks, tests).

use super::{
    AllocationState, Allocator, AllocatorConfig, AllocatorError, CycleOutcome, CycleSnapshot,
    LeftoverAction, OfferDecision, ShardPlan,
};
use crate::demand::DemandSummary;
use crate::fairness::DeficitCounters;
use crate::ids::{AgentId, FrameworkId};
use crate::resources::ResourceVec;

/// An [`Allocator`] paired with the [`AllocationState`] it reads. Registrations, launches and
/// releases are applied to that state directly, as the master's state machine applies the
/// committed commands that carry them, and the allocator follows ([`Allocator::sync`]). The
/// simulator drives this; the master's leader drives a bare [`Allocator`] over the replicated
/// state instead.
///
/// ```
/// use fullerene_scheduling::allocator::{AllocatorConfig, StandaloneAllocator};
/// use fullerene_scheduling::demand::{DemandSummary, PendingDemand};
/// use fullerene_scheduling::{Resources, ResourceVec};
///
/// let mut allocator = StandaloneAllocator::new(AllocatorConfig::default())?;
/// allocator.add_agent("agent-1".into(), "cpus=16,mem_mib=65536".parse()?)?;
/// allocator.add_framework("etl".into(), "prod", 0.0)?;
/// let task: ResourceVec = "cpus=2,mem_mib=4096".parse()?;
/// let demand = DemandSummary {
///     pending: vec![PendingDemand { resources: Resources::from(task), count: 3, pri_score: 1.0 }],
///     remaining_work: 3.0,
///     srpt: 3.0,
///     reservation_progress: None,
/// };
/// allocator.update_demand(&"etl".into(), &demand)?;
/// // One cycle, task at a time: the only framework with demand is offered its three tasks,
/// // and the rest of the agent stays free for others.
/// let offers = allocator.allocate_all(0.0);
/// assert_eq!(offers.len(), 1);
/// assert_eq!(offers[0].framework.as_str(), "etl");
/// assert_eq!(offers[0].resources, "cpus=6,mem_mib=12288".parse()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct StandaloneAllocator {
    state: AllocationState,
    allocator: Allocator,
}

impl StandaloneAllocator {
    /// An allocator over an empty cluster.
    pub fn new(config: AllocatorConfig) -> Result<StandaloneAllocator, AllocatorError> {
        let state = AllocationState::new(config.policy.fairness_factor(), config.slot_size);
        StandaloneAllocator::from_state(config, state)
    }

    /// An allocator over a recovered state: shards are derived from the agents, and the soft
    /// state starts empty.
    pub fn from_state(
        config: AllocatorConfig,
        state: AllocationState,
    ) -> Result<StandaloneAllocator, AllocatorError> {
        let mut allocator = Allocator::new(config)?;
        // Every release goes through `release` below, which reports it.
        allocator.pass_over_idle_agents();
        allocator.check_state(&state)?;
        allocator.sync(&state);
        Ok(StandaloneAllocator { state, allocator })
    }

    /// The configuration.
    pub fn config(&self) -> &AllocatorConfig {
        self.allocator.config()
    }

    /// The accounting state.
    pub fn state(&self) -> &AllocationState {
        &self.state
    }

    /// The allocator, to change for a test.
    #[cfg(test)]
    pub(super) fn allocator_mut(&mut self) -> &mut Allocator {
        &mut self.allocator
    }

    /// The allocator's soft state.
    pub fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// Has every pick scanned from the lists (no replays across agents of the same state, no
    /// bounding trees) and every agent a cycle visits planned (no agent passed over as a misfit
    /// or for want of work left, module `idle`), for the tests that compare those with the
    /// plain scan.
    #[cfg(test)]
    pub(super) fn set_plain_scan(&mut self, plain: bool) {
        self.allocator.plain_scan = plain;
    }

    /// Registers an agent with `total` resources and assigns it to its shard.
    pub fn add_agent(&mut self, id: AgentId, total: ResourceVec) -> Result<(), AllocatorError> {
        self.state.add_agent(id, total)?;
        self.allocator.sync(&self.state);
        Ok(())
    }

    /// Removes an agent: offers of it are dropped, its tasks released.
    pub fn remove_agent(&mut self, id: &AgentId) -> Result<(), AllocatorError> {
        self.state.remove_agent(id)?;
        self.allocator.sync(&self.state);
        Ok(())
    }

    /// Registers a framework in `group` (created with weight 1 if new) at `now_s`.
    pub fn add_framework(
        &mut self,
        id: FrameworkId,
        group: &str,
        now_s: f64,
    ) -> Result<(), AllocatorError> {
        self.state.add_framework(id, group, now_s)?;
        self.allocator.sync(&self.state);
        Ok(())
    }

    /// Removes a framework: its offers are dropped, its filters forgotten, its tasks released.
    pub fn remove_framework(&mut self, id: &FrameworkId) -> Result<(), AllocatorError> {
        self.state.remove_framework(id)?;
        self.allocator.sync(&self.state);
        Ok(())
    }

    /// Sets a group's weight: its share under deficit counters and DRF, its guaranteed
    /// capacity under the capacity scheduler.
    pub fn set_group_weight(&mut self, group: &str, weight: f64) -> Result<(), AllocatorError> {
        if !weight.is_finite() || weight < 0.0 {
            return Err(AllocatorError::InvalidWeight {
                group: group.to_string(),
                weight,
            });
        }
        self.state.set_group_weight(group, weight)?;
        self.allocator.sync(&self.state);
        Ok(())
    }

    /// See [`Allocator::update_demand`].
    pub fn update_demand(
        &mut self,
        id: &FrameworkId,
        summary: &DemandSummary,
    ) -> Result<(), AllocatorError> {
        self.allocator.update_demand(&self.state, id, summary)
    }

    /// See [`Allocator::suppress`].
    pub fn suppress(&mut self, id: &FrameworkId) -> Result<(), AllocatorError> {
        self.allocator.suppress(&self.state, id)
    }

    /// See [`Allocator::revive`].
    pub fn revive(&mut self, id: &FrameworkId) -> Result<(), AllocatorError> {
        self.allocator.revive(&self.state, id)
    }

    /// See [`Allocator::set_guarantees`].
    pub fn set_guarantees(&mut self, owed: &[(FrameworkId, ResourceVec)]) {
        self.allocator.set_guarantees(&self.state, owed);
    }

    /// See [`Allocator::shard_count`].
    pub fn shard_count(&self) -> usize {
        self.allocator.shard_count()
    }

    /// See [`Allocator::shard_of`].
    pub fn shard_of(&self, id: &AgentId) -> Option<usize> {
        self.allocator.shard_of(&self.state, id)
    }

    /// See [`Allocator::shard_agents`].
    pub fn shard_agents(&self, shard: usize) -> Vec<AgentId> {
        self.allocator.shard_agents(&self.state, shard)
    }

    /// See [`Allocator::allocate_shard`].
    pub fn allocate_shard(&mut self, shard: usize, now_s: f64) -> Vec<OfferDecision> {
        self.allocator.allocate_shard(&self.state, shard, now_s)
    }

    /// See [`Allocator::allocate_all`].
    pub fn allocate_all(&mut self, now_s: f64) -> Vec<OfferDecision> {
        self.allocator.allocate_all(&self.state, now_s)
    }

    /// See [`Allocator::allocate_all_with`].
    pub fn allocate_all_with(
        &mut self,
        now_s: f64,
        plan: impl FnOnce(&CycleSnapshot) -> Vec<ShardPlan>,
    ) -> CycleOutcome {
        self.allocator.allocate_all_with(&self.state, now_s, plan)
    }

    /// See [`Allocator::snapshot_cycle`].
    pub fn snapshot_cycle(&mut self, now_s: f64) -> CycleSnapshot {
        self.allocator.snapshot_cycle(&self.state, now_s)
    }

    /// See [`Allocator::snapshot_partial_cycle`].
    pub fn snapshot_partial_cycle(&mut self, now_s: f64, max_agents: usize) -> CycleSnapshot {
        self.allocator
            .snapshot_partial_cycle(&self.state, now_s, max_agents)
    }

    /// See [`Allocator::commit_cycle`].
    pub fn commit_cycle(&mut self, plans: Vec<ShardPlan>, now_s: f64) -> CycleOutcome {
        self.allocator.commit_cycle(&self.state, plans, now_s)
    }

    /// [`Allocator::offer_answered`], then the launched tasks are charged at once (as a
    /// committed `LaunchTasks` would be).
    pub fn offer_answered(
        &mut self,
        agent: &AgentId,
        framework: &FrameworkId,
        launched: &[ResourceVec],
        leftover: LeftoverAction,
        now_s: f64,
    ) -> Result<Vec<OfferDecision>, AllocatorError> {
        let reoffer = self.allocator.offer_answered(
            &self.state,
            agent,
            framework,
            launched,
            leftover,
            now_s,
        )?;
        let mut total = ResourceVec::ZERO;
        for demand in launched {
            self.state.apply_launch(agent, framework, *demand)?;
            total += *demand;
        }
        self.allocator.launch_settled(&self.state, agent, total);
        Ok(reoffer)
    }

    /// See [`Allocator::rescind_offer`].
    pub fn rescind_offer(
        &mut self,
        agent: &AgentId,
        framework: &FrameworkId,
    ) -> Result<(), AllocatorError> {
        self.allocator.rescind_offer(&self.state, agent, framework)
    }

    /// A task of `framework` on `agent` holding `resources` ended: its resources are free and
    /// the deficit counters updated (see [`crate::fairness`] for what a release does to them).
    pub fn release(
        &mut self,
        agent: &AgentId,
        framework: &FrameworkId,
        resources: ResourceVec,
    ) -> Result<(), AllocatorError> {
        self.state.apply_release(agent, framework, resources)?;
        self.allocator.resources_freed(&self.state, agent);
        Ok(())
    }

    /// Charges a task that was launched outside this allocator's offers (tasks an agent
    /// reports running when it re-registers, or found by reconciliation).
    pub fn apply_launch(
        &mut self,
        agent: &AgentId,
        framework: &FrameworkId,
        resources: ResourceVec,
    ) -> Result<(), AllocatorError> {
        self.state.apply_launch(agent, framework, resources)?;
        Ok(())
    }

    /// See [`Allocator::fair_share`].
    pub fn fair_share(&mut self, framework: &FrameworkId) -> Result<ResourceVec, AllocatorError> {
        self.allocator.fair_share(&self.state, framework)
    }

    /// The deficit counters.
    pub fn deficits(&self) -> &DeficitCounters {
        self.state.deficits()
    }

    /// See [`Allocator::unfairness_threshold`].
    pub fn unfairness_threshold(&self) -> Option<f64> {
        self.allocator.unfairness_threshold(&self.state)
    }

    /// Sum of the agents' totals.
    pub fn cluster_capacity(&self) -> ResourceVec {
        self.state.capacity()
    }

    /// See [`Allocator::free_resources`].
    pub fn free_resources(&self, agent: &AgentId) -> Option<ResourceVec> {
        self.allocator.free_resources(&self.state, agent)
    }

    /// See [`Allocator::outstanding_offers`].
    pub fn outstanding_offers(&self) -> Vec<OfferDecision> {
        self.allocator.outstanding_offers(&self.state)
    }

    /// The current η of Graphene's perfScore.
    pub fn eta(&self) -> f64 {
        self.allocator.eta()
    }
}
