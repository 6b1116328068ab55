//! The part of the allocator's world that must survive a leader change (DESIGN.md, principle 2):
//! agents with their totals and what runs on them, frameworks with their group and registration
//! order, the groups' weights and the deficit counters. It changes only through the methods
//! here, deterministically, so the Raft state machine can own it and apply committed entries to
//! it; the [`crate::allocator::Allocator`] only reads it, except through the same `apply_*`
//! calls when it runs without Raft (simulator, tests).
//!
//! Agents and frameworks live in dense slots addressed by [`AgentIdx`] and [`FrameworkIdx`]; ids
//! are mapped to slots only at the boundary. Freed slots are reused last-freed-first, which is
//! deterministic, so replicas applying the same entries agree on every index.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::fairness::{slot_count, DeficitCounters, FairnessError, FairnessFactor, GroupIdx};
use crate::ids::{AgentId, FrameworkId};
use crate::resources::{ResourceVec, EPSILON, NUM_RESOURCES};

/// Dense index of an agent slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AgentIdx(pub u32);

/// Dense index of a framework slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FrameworkIdx(pub u32);

impl AgentIdx {
    /// As a `usize` for indexing.
    pub const fn get(self) -> usize {
        self.0 as usize
    }
}

impl FrameworkIdx {
    /// As a `usize` for indexing.
    pub const fn get(self) -> usize {
        self.0 as usize
    }
}

/// Errors of the replicated allocation state.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StateError {
    /// The agent is not registered.
    #[error("unknown agent `{0}`")]
    UnknownAgent(AgentId),
    /// The framework is not registered.
    #[error("unknown framework `{0}`")]
    UnknownFramework(FrameworkId),
    /// The agent is already registered.
    #[error("agent `{0}` is already registered")]
    DuplicateAgent(AgentId),
    /// The framework is already registered.
    #[error("framework `{0}` is already registered")]
    DuplicateFramework(FrameworkId),
    /// A resource vector with a negative, NaN or infinite component.
    #[error("invalid resources {0}: amounts must be finite and >= 0")]
    InvalidResources(ResourceVec),
    /// A release that matches no task of the framework on the agent.
    #[error("framework `{framework}` runs no task of {demand} on agent `{agent}`")]
    UnknownTask {
        /// The agent.
        agent: AgentId,
        /// The framework.
        framework: FrameworkId,
        /// The demand released.
        demand: ResourceVec,
    },
    /// An invalid group weight.
    #[error(transparent)]
    Fairness(#[from] FairnessError),
    /// An internal slot index that holds no agent (a stale index, never a wire input).
    #[error("no agent in slot {0:?}")]
    EmptyAgentSlot(AgentIdx),
    /// An internal slot index that holds no framework (a stale index, never a wire input).
    #[error("no framework in slot {0:?}")]
    EmptyFrameworkSlot(FrameworkIdx),
}

/// One running task as the allocator accounts for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningTask {
    /// Its framework.
    pub framework: FrameworkIdx,
    /// The resources charged for it.
    pub demand: ResourceVec,
    /// What it counted in the deficit counters when it launched. Under the DRF factor that
    /// changes with the cluster's capacity: what it counts now, and is released with, is the
    /// factor of its demand at the capacity now.
    pub factor: f64,
}

/// A registered agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// Its id.
    pub id: AgentId,
    /// Its total resources.
    pub total: ResourceVec,
    /// Resources charged to running tasks. Fungible kinds may exceed `total` by the
    /// overbooking allowance.
    pub used: ResourceVec,
    /// The tasks it runs.
    pub tasks: Vec<RunningTask>,
}

impl AgentRecord {
    /// `total − used`, floored at zero (overbooked fungible kinds have nothing free).
    pub fn free(&self) -> ResourceVec {
        self.total.saturating_sub(&self.used)
    }
}

/// A registered framework.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrameworkRecord {
    /// Its id.
    pub id: FrameworkId,
    /// Its fairness group.
    pub group: GroupIdx,
    /// Registration order, increasing over the life of the cluster (FIFO and the capacity
    /// scheduler order by it).
    pub registration: u64,
    /// When it registered.
    pub registered_at_s: f64,
    /// Resources its running tasks hold.
    pub held: ResourceVec,
    /// How many tasks it runs.
    pub running_tasks: u64,
}

/// Dense slots with last-freed-first reuse.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Slots<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Slots<T> {
    fn new() -> Slots<T> {
        Slots {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, item: T) -> u32 {
        if let Some(i) = self.free.pop() {
            self.items[i as usize] = Some(item);
            i
        } else {
            self.items.push(Some(item));
            (self.items.len() - 1) as u32
        }
    }

    fn remove(&mut self, i: u32) -> Option<T> {
        let item = self.items.get_mut(i as usize)?.take();
        if item.is_some() {
            self.free.push(i);
        }
        item
    }

    fn get(&self, i: u32) -> Option<&T> {
        self.items.get(i as usize)?.as_ref()
    }

    fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.items.get_mut(i as usize)?.as_mut()
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.as_ref().map(|x| (i as u32, x)))
    }

    fn capacity(&self) -> usize {
        self.items.len()
    }
}

/// The replicated allocation state: agents, frameworks, groups and deficit counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllocationState {
    agents: Slots<AgentRecord>,
    agent_ids: HashMap<AgentId, AgentIdx>,
    frameworks: Slots<FrameworkRecord>,
    framework_ids: HashMap<FrameworkId, FrameworkIdx>,
    next_registration: u64,
    deficits: DeficitCounters,
    /// Resources held by each group's running tasks, by group index.
    group_held: Vec<ResourceVec>,
    /// Number of running tasks in the cluster.
    running_tasks: u64,
    slot_size: ResourceVec,
    capacity: ResourceVec,
    slots: f64,
    /// Counts changes to the agents, frameworks and groups (not to what runs), so that an
    /// allocator reading this state knows cheaply when it must re-read them.
    structure: u64,
    /// The running tasks counted by group and demand, which is all a capacity change needs to
    /// recompute the groups' held factors. Derived from the agents' tasks: not serialized, and
    /// rebuilt from them at the first capacity change after a restore.
    #[serde(skip)]
    census: TaskCensus,
}

/// The running tasks of an [`AllocationState`] counted by group and demand (bit for bit).
///
/// When the cluster's capacity changes, every DRF factor does, and the deficit counters are
/// re-based on the new factors of everything that runs. Recomputed task by task, that was
/// O(running tasks) per agent registered or lost, so that a master applying thousands of
/// registrations or losses in a row (a new leader's agents coming back, a rack lost) held its
/// Raft loop up for seconds at 10,000 agents and 10,000 tasks (`fullerene bench scale`):
/// tasks alike in group and demand share a factor, and there are few distinct ones. Kept in
/// a B-tree, so that the sums are taken in the same order on every replica, whatever the
/// history.
#[derive(Clone, Debug, Default)]
struct TaskCensus {
    counts: BTreeMap<(GroupIdx, [u64; NUM_RESOURCES]), u64>,
    /// Whether it counts every running task: false in a restored state until it is rebuilt
    /// (it then counts nothing).
    valid: bool,
}

/// The census is derived from the tasks the state holds: two states with the same tasks are
/// equal whatever their censuses (a restored state rebuilds its own).
impl PartialEq for TaskCensus {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl TaskCensus {
    /// The census of a state without tasks.
    fn empty() -> TaskCensus {
        TaskCensus {
            counts: BTreeMap::new(),
            valid: true,
        }
    }

    fn key(group: GroupIdx, demand: &ResourceVec) -> (GroupIdx, [u64; NUM_RESOURCES]) {
        (group, demand.0.map(f64::to_bits))
    }

    fn add(&mut self, group: GroupIdx, demand: &ResourceVec) {
        if self.valid {
            *self.counts.entry(Self::key(group, demand)).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, group: GroupIdx, demand: &ResourceVec) {
        if !self.valid {
            return;
        }
        let key = Self::key(group, demand);
        if let Some(count) = self.counts.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&key);
            }
        }
    }
}

impl AllocationState {
    /// An empty cluster whose deficit counters count tasks with `factor`; `slot_size` is the
    /// slot [`FairnessFactor::Slot`] measures the cluster capacity in.
    pub fn new(factor: FairnessFactor, slot_size: ResourceVec) -> AllocationState {
        AllocationState {
            agents: Slots::new(),
            agent_ids: HashMap::new(),
            frameworks: Slots::new(),
            framework_ids: HashMap::new(),
            next_registration: 0,
            structure: 0,
            deficits: DeficitCounters::new(factor),
            group_held: Vec::new(),
            running_tasks: 0,
            slot_size,
            capacity: ResourceVec::ZERO,
            slots: 0.0,
            census: TaskCensus::empty(),
        }
    }

    /// Registers an agent with `total` resources.
    pub fn add_agent(&mut self, id: AgentId, total: ResourceVec) -> Result<AgentIdx, StateError> {
        if !total.is_valid() {
            return Err(StateError::InvalidResources(total));
        }
        if self.agent_ids.contains_key(&id) {
            return Err(StateError::DuplicateAgent(id));
        }
        let idx = AgentIdx(self.agents.insert(AgentRecord {
            id: id.clone(),
            total,
            used: ResourceVec::ZERO,
            tasks: Vec::new(),
        }));
        self.agent_ids.insert(id, idx);
        self.capacity += total;
        self.slots += slot_count(&total, &self.slot_size);
        self.capacity_changed();
        self.structure += 1;
        Ok(idx)
    }

    /// Removes an agent: its tasks are lost and their charges released (deficits included).
    /// Returns the released tasks.
    pub fn remove_agent(&mut self, id: &AgentId) -> Result<Vec<RunningTask>, StateError> {
        let idx = self
            .agent_ids
            .remove(id)
            .ok_or_else(|| StateError::UnknownAgent(id.clone()))?;
        let Some(record) = self.agents.remove(idx.0) else {
            return Err(StateError::UnknownAgent(id.clone()));
        };
        for task in &record.tasks {
            self.release_accounting(task);
        }
        self.capacity = (self.capacity - record.total).max(&ResourceVec::ZERO);
        self.slots = (self.slots - slot_count(&record.total, &self.slot_size)).max(0.0);
        self.capacity_changed();
        self.structure += 1;
        Ok(record.tasks)
    }

    /// Registers a framework in `group` (created with the default weight if new).
    pub fn add_framework(
        &mut self,
        id: FrameworkId,
        group: &str,
        now_s: f64,
    ) -> Result<FrameworkIdx, StateError> {
        if self.framework_ids.contains_key(&id) {
            return Err(StateError::DuplicateFramework(id));
        }
        let group = self.deficits.ensure_group(group);
        self.grow_groups();
        let registration = self.next_registration;
        self.next_registration += 1;
        let idx = FrameworkIdx(self.frameworks.insert(FrameworkRecord {
            id: id.clone(),
            group,
            registration,
            registered_at_s: now_s,
            held: ResourceVec::ZERO,
            running_tasks: 0,
        }));
        self.framework_ids.insert(id, idx);
        self.deficits.framework_joined(group);
        self.structure += 1;
        Ok(idx)
    }

    /// Removes a framework (Mesos teardown): its tasks are killed and their charges released.
    /// Returns the released tasks with their agents.
    pub fn remove_framework(
        &mut self,
        id: &FrameworkId,
    ) -> Result<Vec<(AgentIdx, RunningTask)>, StateError> {
        let idx = self
            .framework_ids
            .remove(id)
            .ok_or_else(|| StateError::UnknownFramework(id.clone()))?;
        let mut released = Vec::new();
        let agent_slots: Vec<u32> = self.agents.iter().map(|(i, _)| i).collect();
        for a in agent_slots {
            let Some(agent) = self.agents.get_mut(a) else {
                continue;
            };
            if !agent.tasks.iter().any(|t| t.framework == idx) {
                continue;
            }
            let (gone, kept): (Vec<RunningTask>, Vec<RunningTask>) =
                agent.tasks.drain(..).partition(|t| t.framework == idx);
            agent.tasks = kept;
            for task in &gone {
                agent.used = (agent.used - task.demand).max(&ResourceVec::ZERO);
            }
            released.extend(gone.into_iter().map(|t| (AgentIdx(a), t)));
        }
        for (_, task) in &released {
            self.release_accounting(task);
        }
        if let Some(record) = self.frameworks.remove(idx.0) {
            self.deficits.framework_left(record.group);
        }
        self.structure += 1;
        Ok(released)
    }

    /// Sets a group's weight (creating the group if new).
    pub fn set_group_weight(&mut self, group: &str, weight: f64) -> Result<GroupIdx, StateError> {
        let idx = self.deficits.set_weight(group, weight)?;
        self.grow_groups();
        self.structure += 1;
        Ok(idx)
    }

    fn grow_groups(&mut self) {
        let n = self.deficits.len();
        if self.group_held.len() < n {
            self.group_held.resize(n, ResourceVec::ZERO);
        }
    }

    /// Charges one launched task of `demand` to the agent, the framework and the deficit
    /// counters (DESIGN.md step 5). The caller has validated it against the offer; this only
    /// refuses unknown ids and invalid amounts. Returns the task's factor.
    pub fn apply_launch(
        &mut self,
        agent: &AgentId,
        framework: &FrameworkId,
        demand: ResourceVec,
    ) -> Result<f64, StateError> {
        let a = self.agent_idx(agent)?;
        let f = self.framework_idx(framework)?;
        self.apply_launch_idx(a, f, demand)
    }

    /// Releases one task of `demand` that ended (DESIGN.md step 6): the inverse of
    /// [`AllocationState::apply_launch`]. Returns the factor released.
    pub fn apply_release(
        &mut self,
        agent: &AgentId,
        framework: &FrameworkId,
        demand: ResourceVec,
    ) -> Result<f64, StateError> {
        let a = self.agent_idx(agent)?;
        let f = self.framework_idx(framework)?;
        self.apply_release_idx(a, f, demand)
    }

    pub(crate) fn apply_launch_idx(
        &mut self,
        a: AgentIdx,
        f: FrameworkIdx,
        demand: ResourceVec,
    ) -> Result<f64, StateError> {
        if !demand.is_valid() {
            return Err(StateError::InvalidResources(demand));
        }
        let factor = self.deficits.factor().of(&demand, &self.capacity);
        let Some(framework) = self.frameworks.get_mut(f.0) else {
            return Err(StateError::EmptyFrameworkSlot(f));
        };
        let group = framework.group;
        let Some(agent) = self.agents.get_mut(a.0) else {
            return Err(StateError::EmptyAgentSlot(a));
        };
        agent.used += demand;
        agent.tasks.push(RunningTask {
            framework: f,
            demand,
            factor,
        });
        self.census.add(group, &demand);
        framework.held += demand;
        framework.running_tasks += 1;
        self.group_held[group.get()] += demand;
        self.running_tasks += 1;
        self.deficits.apply_launch(group, factor);
        Ok(factor)
    }

    pub(crate) fn apply_release_idx(
        &mut self,
        a: AgentIdx,
        f: FrameworkIdx,
        demand: ResourceVec,
    ) -> Result<f64, StateError> {
        // The ids are cloned only for an error: a release is on the simulator's hot path.
        if self.agents.get(a.0).is_none() {
            return Err(StateError::EmptyAgentSlot(a));
        }
        let Some(framework) = self.frameworks.get(f.0) else {
            return Err(StateError::EmptyFrameworkSlot(f));
        };
        let Some(agent) = self.agents.get_mut(a.0) else {
            return Err(StateError::EmptyAgentSlot(a));
        };
        let position = agent
            .tasks
            .iter()
            .position(|t| t.framework == f && same_amounts(&t.demand, &demand))
            .ok_or_else(|| StateError::UnknownTask {
                agent: agent.id.clone(),
                framework: framework.id.clone(),
                demand,
            })?;
        let task = agent.tasks.swap_remove(position);
        agent.used = (agent.used - task.demand).max(&ResourceVec::ZERO);
        Ok(self.release_accounting(&task))
    }

    /// Framework and group bookkeeping of a task that ended (the agent side is done by the
    /// caller).
    fn release_accounting(&mut self, task: &RunningTask) -> f64 {
        // What it counts now (its factor at launch, unless the capacity changed since).
        let factor = self.deficits.factor().of(&task.demand, &self.capacity);
        if let Some(framework) = self.frameworks.get_mut(task.framework.0) {
            framework.held = (framework.held - task.demand).max(&ResourceVec::ZERO);
            framework.running_tasks = framework.running_tasks.saturating_sub(1);
            let group = framework.group;
            let held = &mut self.group_held[group.get()];
            *held = (*held - task.demand).max(&ResourceVec::ZERO);
            self.running_tasks = self.running_tasks.saturating_sub(1);
            self.census.remove(group, &task.demand);
            self.deficits.apply_release(group, factor);
        }
        factor
    }

    /// The cluster capacity changed, so every DRF factor did: re-base the counters on the
    /// factors of the running tasks at the new capacity, one per group and demand (see
    /// [`TaskCensus`]).
    fn capacity_changed(&mut self) {
        // Slot factors do not depend on the capacity; with nothing running there is nothing to
        // recompute (the common case while a cluster registers its agents).
        if self.deficits.factor() == FairnessFactor::Slot || self.running_tasks == 0 {
            return;
        }
        if !self.census.valid {
            self.rebuild_census();
        }
        let factor = self.deficits.factor();
        let mut held = vec![0.0; self.deficits.len()];
        for (&(group, demand), &count) in &self.census.counts {
            let demand = ResourceVec(demand.map(f64::from_bits));
            if let Some(sum) = held.get_mut(group.get()) {
                *sum += count as f64 * factor.of(&demand, &self.capacity);
            }
        }
        self.deficits.reset_held(&held);
    }

    /// Counts the running tasks again from the agents (a state restored from a snapshot
    /// carries no census).
    fn rebuild_census(&mut self) {
        let mut census = TaskCensus::empty();
        for (_, agent) in self.agents.iter() {
            for task in &agent.tasks {
                if let Some(framework) = self.frameworks.get(task.framework.0) {
                    census.add(framework.group, &task.demand);
                }
            }
        }
        self.census = census;
    }

    /// A copy of the frameworks, groups, deficit counters and totals, without the agents (and
    /// without the id maps): what the planners of a cycle snapshot read. The agents they plan
    /// for travel in the snapshot itself, with only what planning needs of them, so that a
    /// snapshot of 100,000 agents does not copy their task lists.
    pub(crate) fn without_agents(&self) -> AllocationState {
        AllocationState {
            agents: Slots::new(),
            agent_ids: HashMap::new(),
            frameworks: self.frameworks.clone(),
            framework_ids: HashMap::new(),
            next_registration: self.next_registration,
            deficits: self.deficits.clone(),
            group_held: self.group_held.clone(),
            running_tasks: self.running_tasks,
            slot_size: self.slot_size,
            capacity: self.capacity,
            slots: self.slots,
            structure: self.structure,
            census: self.census.clone(),
        }
    }

    /// The slot of a registered agent.
    pub fn agent_idx(&self, id: &AgentId) -> Result<AgentIdx, StateError> {
        self.agent_ids
            .get(id)
            .copied()
            .ok_or_else(|| StateError::UnknownAgent(id.clone()))
    }

    /// The slot of a registered framework.
    pub fn framework_idx(&self, id: &FrameworkId) -> Result<FrameworkIdx, StateError> {
        self.framework_ids
            .get(id)
            .copied()
            .ok_or_else(|| StateError::UnknownFramework(id.clone()))
    }

    /// An agent by slot.
    pub fn agent(&self, idx: AgentIdx) -> Option<&AgentRecord> {
        self.agents.get(idx.0)
    }

    /// A framework by slot.
    pub fn framework(&self, idx: FrameworkIdx) -> Option<&FrameworkRecord> {
        self.frameworks.get(idx.0)
    }

    /// An agent by id.
    pub fn agent_by_id(&self, id: &AgentId) -> Option<&AgentRecord> {
        self.agent(*self.agent_ids.get(id)?)
    }

    /// A framework by id.
    pub fn framework_by_id(&self, id: &FrameworkId) -> Option<&FrameworkRecord> {
        self.framework(*self.framework_ids.get(id)?)
    }

    /// Every registered agent with its slot, in slot order.
    pub fn agents(&self) -> impl Iterator<Item = (AgentIdx, &AgentRecord)> {
        self.agents.iter().map(|(i, a)| (AgentIdx(i), a))
    }

    /// Every registered framework with its slot, in slot order.
    pub fn frameworks(&self) -> impl Iterator<Item = (FrameworkIdx, &FrameworkRecord)> {
        self.frameworks.iter().map(|(i, f)| (FrameworkIdx(i), f))
    }

    /// Number of agent slots (registered or free): an upper bound on [`AgentIdx`] values.
    pub fn agent_slots(&self) -> usize {
        self.agents.capacity()
    }

    /// Number of framework slots (registered or free): an upper bound on [`FrameworkIdx`].
    pub fn framework_slots(&self) -> usize {
        self.frameworks.capacity()
    }

    /// Number of registered agents.
    pub fn agent_count(&self) -> usize {
        self.agent_ids.len()
    }

    /// Number of registered frameworks.
    pub fn framework_count(&self) -> usize {
        self.framework_ids.len()
    }

    /// A number that changes whenever an agent, a framework or a group is added or removed.
    pub fn structure_version(&self) -> u64 {
        self.structure
    }

    /// The deficit counters.
    pub fn deficits(&self) -> &DeficitCounters {
        &self.deficits
    }

    /// Sum of the agents' totals.
    pub fn capacity(&self) -> ResourceVec {
        self.capacity
    }

    /// The cluster capacity `C` of the κ·C bound in the deficit factor's unit (see
    /// [`FairnessFactor::capacity_units`]).
    pub fn capacity_units(&self) -> f64 {
        self.deficits.factor().capacity_units(self.slots)
    }

    /// The slot size slot fairness measures `C` in.
    pub fn slot_size(&self) -> ResourceVec {
        self.slot_size
    }

    /// Resources held by the running tasks of a group's frameworks.
    pub fn group_held(&self, group: GroupIdx) -> ResourceVec {
        self.group_held
            .get(group.get())
            .copied()
            .unwrap_or(ResourceVec::ZERO)
    }

    /// Number of running tasks in the cluster.
    pub fn running_tasks(&self) -> u64 {
        self.running_tasks
    }
}

/// Equality of two demands up to the rounding [`EPSILON`] allows.
pub(crate) fn same_amounts(a: &ResourceVec, b: &ResourceVec) -> bool {
    a.0.iter()
        .zip(b.0.iter())
        .all(|(x, y)| (x - y).abs() <= EPSILON)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    use crate::testkit::res;

    #[test]
    fn launch_and_release_charge_agent_framework_and_deficits() {
        let mut st = AllocationState::new(FairnessFactor::Drf, res("cpus=1"));
        st.add_agent("a1".into(), res("cpus=10,mem_mib=100"))
            .unwrap();
        st.add_framework("f1".into(), "g1", 0.0).unwrap();
        st.add_framework("f2".into(), "g2", 0.0).unwrap();
        let factor = st
            .apply_launch(&"a1".into(), &"f1".into(), res("cpus=2,mem_mib=50"))
            .unwrap();
        assert!((factor - 0.5).abs() < 1e-12);
        let agent = st.agent_by_id(&"a1".into()).unwrap();
        assert_eq!(agent.free(), res("cpus=8,mem_mib=50"));
        let g1 = st.deficits().find("g1").unwrap();
        assert!((st.deficits().deficit(g1) + 0.25).abs() < 1e-12);
        assert!(matches!(
            st.apply_release(&"a1".into(), &"f1".into(), res("cpus=1")),
            Err(StateError::UnknownTask { .. })
        ));
        st.apply_release(&"a1".into(), &"f1".into(), res("cpus=2,mem_mib=50"))
            .unwrap();
        assert_eq!(
            st.agent_by_id(&"a1".into()).unwrap().used,
            ResourceVec::ZERO
        );
        assert!(st.deficits().deficit(g1).abs() < 1e-12);
    }

    #[test]
    fn removing_an_agent_releases_its_tasks() {
        let mut st = AllocationState::new(FairnessFactor::Slot, res("cpus=1"));
        st.add_agent("a1".into(), res("cpus=4")).unwrap();
        st.add_agent("a2".into(), res("cpus=4")).unwrap();
        st.add_framework("f1".into(), "g1", 0.0).unwrap();
        st.add_framework("f2".into(), "g2", 0.0).unwrap();
        st.apply_launch(&"a1".into(), &"f1".into(), res("cpus=1"))
            .unwrap();
        st.apply_launch(&"a2".into(), &"f2".into(), res("cpus=1"))
            .unwrap();
        assert_eq!(st.capacity_units(), 8.0);
        let lost = st.remove_agent(&"a1".into()).unwrap();
        assert_eq!(lost.len(), 1);
        assert_eq!(st.capacity_units(), 4.0);
        assert_eq!(st.framework_by_id(&"f1".into()).unwrap().running_tasks, 0);
        // f1 now holds nothing and f2 one task: g1 is owed half of it.
        assert!((st.deficits().deficit_of("g1") - 0.5).abs() < 1e-12);
        assert!(st.remove_agent(&"a1".into()).is_err());
        let killed = st.remove_framework(&"f2".into()).unwrap();
        assert_eq!(killed.len(), 1);
        assert_eq!(
            st.agent_by_id(&"a2".into()).unwrap().used,
            ResourceVec::ZERO
        );
    }

    #[test]
    fn capacity_change_recomputes_drf_factors() {
        let mut st = AllocationState::new(FairnessFactor::Drf, res("cpus=1"));
        st.add_agent("a1".into(), res("cpus=10")).unwrap();
        st.add_framework("f1".into(), "g1", 0.0).unwrap();
        st.add_framework("f2".into(), "g2", 0.0).unwrap();
        st.apply_launch(&"a1".into(), &"f1".into(), res("cpus=5"))
            .unwrap();
        assert!((st.deficits().deficit_of("g2") - 0.25).abs() < 1e-12);
        st.add_agent("a2".into(), res("cpus=10")).unwrap();
        // The task is now a quarter of the cluster, not half.
        assert!((st.deficits().deficit_of("g2") - 0.125).abs() < 1e-12);
        st.apply_release(&"a1".into(), &"f1".into(), res("cpus=5"))
            .unwrap();
        assert!(st.deficits().deficit_of("g2").abs() < 1e-12);
        assert!(st.deficits().total_held().abs() < 1e-12);
    }

    #[test]
    fn slots_are_reused_deterministically() {
        let mut st = AllocationState::new(FairnessFactor::Slot, res("cpus=1"));
        let a = st.add_agent("a".into(), res("cpus=1")).unwrap();
        st.add_agent("b".into(), res("cpus=1")).unwrap();
        st.remove_agent(&"a".into()).unwrap();
        let c = st.add_agent("c".into(), res("cpus=1")).unwrap();
        assert_eq!(a, c);
        assert!(matches!(
            st.add_agent("b".into(), res("cpus=1")),
            Err(StateError::DuplicateAgent(_))
        ));
        let negative = ResourceVec::from_pairs(&[(crate::resources::ResourceKind::Cpus, -1.0)]);
        assert!(st.add_agent("d".into(), negative).is_err());
    }

    /// Each group's held factor as every running task's factor at the capacity now, summed
    /// task by task (what a capacity change re-based the counters on before the census).
    fn held_task_by_task(st: &AllocationState) -> Vec<f64> {
        let mut held = vec![0.0; st.deficits().len()];
        for (_, agent) in st.agents() {
            for task in &agent.tasks {
                let group = st.framework(task.framework).unwrap().group;
                held[group.get()] += st.deficits().factor().of(&task.demand, &st.capacity());
            }
        }
        held
    }

    fn assert_held(st: &AllocationState, context: &str) -> Result<(), TestCaseError> {
        for (g, expected) in held_task_by_task(st).into_iter().enumerate() {
            let held = st.deficits().group(GroupIdx(g as u32)).held;
            prop_assert!(
                (held - expected).abs() <= 1e-9 * (1.0 + expected.abs()),
                "{context}: group {g} holds {held}, its tasks count {expected}"
            );
        }
        Ok(())
    }

    proptest! {
        /// Under the DRF factor, agents coming and going change every task's factor: the
        /// counters are re-based on the running tasks counted by group and demand, which is
        /// every task's factor at the new capacity, as if each were recomputed, through any
        /// mix of registrations, losses, launches and releases. A state decoded from its
        /// serialized form (which carries no census) counts its tasks again at its first
        /// capacity change, and goes on as the state it was taken from.
        #[test]
        fn capacity_changes_rebase_on_every_running_tasks_factor(
            ops in proptest::collection::vec((0u8..4, 0usize..6, 0usize..4, 0usize..3), 1..120),
        ) {
            let totals = [res("cpus=16,mem_mib=65536"), res("cpus=8,mem_mib=131072,gpus=2")];
            let shapes = [res("cpus=0.5,mem_mib=512"), res("cpus=2,mem_mib=8192"), res("cpus=1,gpus=1")];
            let mut st = AllocationState::new(FairnessFactor::Drf, res("cpus=1"));
            for f in 0..4 {
                st.add_framework(format!("f{f}").as_str().into(), &format!("g{}", f % 3), 0.0)
                    .unwrap();
            }
            for (step, &(op, agent, framework, shape)) in ops.iter().enumerate() {
                let id = AgentId::from(format!("a{agent}").as_str());
                let framework_id = FrameworkId::from(format!("f{framework}").as_str());
                let present = st.agent_by_id(&id).is_some();
                match op {
                    0 if !present => {
                        st.add_agent(id, totals[agent % 2]).unwrap();
                    }
                    1 if present => {
                        st.remove_agent(&id).unwrap();
                    }
                    2 if present => {
                        st.apply_launch(&id, &framework_id, shapes[shape]).unwrap();
                    }
                    3 if present => {
                        let first = st.agent_by_id(&id).unwrap().tasks.first().cloned();
                        if let Some(task) = first {
                            let owner = st.framework(task.framework).unwrap().id.clone();
                            st.apply_release(&id, &owner, task.demand).unwrap();
                        }
                    }
                    _ => {}
                }
                assert_held(&st, &format!("step {step}"))?;
            }
            let config = bincode::config::standard();
            let bytes = bincode::serde::encode_to_vec(&st, config).unwrap();
            let (mut restored, _): (AllocationState, usize) =
                bincode::serde::decode_from_slice(&bytes, config).unwrap();
            prop_assert_eq!(&restored, &st);
            for state in [&mut st, &mut restored] {
                state.add_agent("late".into(), totals[0]).unwrap();
            }
            assert_held(&restored, "restored, after an agent joined")?;
            for (g, counter) in st.deficits().iter() {
                let other = restored.deficits().group(g);
                prop_assert!((counter.deficit - other.deficit).abs() <= 1e-9);
            }
        }
    }
}
