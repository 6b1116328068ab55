//! The history of finished tasks (issue 19, point 3): what the replicated state keeps of a
//! task once it has ended and its framework acknowledged the end (or was torn down), so that
//! `/state`, `/tasks?all=true` and `fullerene tasks --all` show what ran and how it ended.
//!
//! Bounded twice, as [`HistoryLimits`] says: the most recently recorded `tasks_per_framework`
//! per framework, and none that ended more than `window_ms` before the time of the latest
//! command that carries one. Both are pruned while commands are applied, from the commands'
//! own times, so every master keeps exactly the same history.

use std::sync::Arc;

use fullerene_proto::messages::{FinishedTaskInfo, UnixMillis};
use fullerene_proto::FrameworkId;

use super::records::HistoryLimits;
use super::StateMap;

/// The kept finished tasks, with the indexes that prune them.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct FinishedTasks {
    /// Every kept task by its ordinal (the order they were recorded in).
    by_ordinal: StateMap<u64, Arc<FinishedTaskInfo>>,
    /// Each framework's kept tasks' ordinals, oldest first: the count bound. Derived (rebuilt
    /// from the records when a snapshot is read).
    by_framework: StateMap<FrameworkId, imbl::OrdSet<u64>>,
    /// Every kept task by when it ended: the time bound. Derived.
    by_end: imbl::OrdSet<(UnixMillis, u64)>,
    /// The ordinal the next recorded task gets.
    next_ordinal: u64,
}

impl FinishedTasks {
    /// An empty history whose next task gets `next_ordinal` (from a snapshot).
    pub(super) fn starting_at(next_ordinal: u64) -> FinishedTasks {
        FinishedTasks {
            next_ordinal,
            ..FinishedTasks::default()
        }
    }

    /// The ordinal the next recorded task gets.
    pub(super) fn next_ordinal(&self) -> u64 {
        self.next_ordinal
    }

    /// How many tasks are kept.
    pub(super) fn len(&self) -> usize {
        self.by_ordinal.len()
    }

    /// Every kept task, oldest recorded first.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = &FinishedTaskInfo> + '_ {
        self.by_ordinal.values().map(|task| &**task)
    }

    /// The kept tasks recorded after ordinal `after` (from the first when `None`), oldest
    /// first, of `framework` only when given.
    pub(super) fn after<'a>(
        &'a self,
        framework: Option<&'a FrameworkId>,
        after: Option<u64>,
    ) -> Box<dyn Iterator<Item = &'a FinishedTaskInfo> + 'a> {
        let from = after.map_or(0, |after| after.saturating_add(1));
        match framework {
            None => Box::new(self.by_ordinal.range(from..).map(|(_, task)| &**task)),
            Some(framework) => match self.by_framework.get(framework) {
                None => Box::new(std::iter::empty()),
                Some(ordinals) => Box::new(
                    ordinals
                        .range(from..)
                        .filter_map(|ordinal| self.by_ordinal.get(ordinal).map(|t| &**t)),
                ),
            },
        }
    }

    /// Records a task that finished (its `ordinal` is set here), then drops its framework's
    /// oldest beyond the count bound.
    pub(super) fn record(&mut self, mut task: FinishedTaskInfo, limits: &HistoryLimits) {
        if limits.tasks_per_framework == 0 {
            return;
        }
        let ordinal = self.next_ordinal;
        self.next_ordinal += 1;
        task.ordinal = ordinal;
        let framework = task.framework_id.clone();
        self.insert(task);
        let kept = self
            .by_framework
            .get(&framework)
            .map_or(0, imbl::OrdSet::len);
        let excess = kept.saturating_sub(limits.tasks_per_framework as usize);
        for _ in 0..excess {
            let oldest = self
                .by_framework
                .get(&framework)
                .and_then(|ordinals| ordinals.get_min().copied());
            if let Some(oldest) = oldest {
                self.remove(oldest);
            }
        }
    }

    /// Adds a task read from a snapshot (its ordinal as recorded). `false` if its ordinal is
    /// already kept.
    pub(super) fn insert(&mut self, task: FinishedTaskInfo) -> bool {
        let ordinal = task.ordinal;
        if self.by_ordinal.contains_key(&ordinal) {
            return false;
        }
        self.next_ordinal = self.next_ordinal.max(ordinal.saturating_add(1));
        self.by_framework
            .entry(task.framework_id.clone())
            .or_default()
            .insert(ordinal);
        self.by_end.insert((task.ended_at_ms, ordinal));
        self.by_ordinal.insert(ordinal, Arc::new(task));
        true
    }

    /// Drops every task that ended more than the window before `now_ms` (a command's time).
    pub(super) fn prune(&mut self, now_ms: UnixMillis, limits: &HistoryLimits) {
        let cutoff = now_ms.saturating_sub(limits.window_ms);
        while let Some(&(ended, ordinal)) = self.by_end.get_min() {
            if ended >= cutoff {
                break;
            }
            self.remove(ordinal);
        }
    }

    fn remove(&mut self, ordinal: u64) {
        let Some(task) = self.by_ordinal.remove(&ordinal) else {
            return;
        };
        self.by_end.remove(&(task.ended_at_ms, ordinal));
        let emptied = match self.by_framework.get_mut(&task.framework_id) {
            Some(ordinals) => {
                ordinals.remove(&ordinal);
                ordinals.is_empty()
            }
            None => false,
        };
        if emptied {
            self.by_framework.remove(&task.framework_id);
        }
    }
}
