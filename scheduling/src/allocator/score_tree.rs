//! A bounding tree over the pending shapes of each candidate list of the score-based policies
//! (deficit counters, Tetris), so that the best fitting shape for a partly used agent is found
//! without looking at most frameworks.
//!
//! The lists are ordered by a bound of each framework's score valid on every agent (its score
//! on the smallest machine when idle). On an idle agent that bound is tight and the list scan
//! stops at once; on a partly used one every score is lower by roughly the used fraction, the
//! bound is loose for all, and the scan looks at most frameworks of every group (about 600 of
//! 1,000 per pick at 10,000 agents × 1,000 frameworks). A framework's envelope (the
//! component-wise maximum of its shapes) is loose too: about 50 frameworks per pick have an
//! envelope whose score would beat the winner. The tree's leaves are the shapes themselves,
//! each with `priScore · demand` (Tetris: the demand), the demand, and its framework's η·srpt
//! (Tetris: ε·work); a node holds the component-wise maximum of the first, the minimum of the
//! second and the least of the third below it, so `maximum · weights − η·srpt` (the agent's
//! packing weights) bounds every score below it on this agent, and a node whose minimum does not
//! fit holds nothing that fits. A depth-first search, better-bounded child first, skips every
//! node that cannot beat the best score found, and scores a framework (all its shapes, as the
//! list scan does) when one of its shapes can. Shapes are placed so that siblings are alike (a
//! k-d split on the largest spread, amounts scaled by the smallest machine), which keeps the
//! bounds tight.
//!
//! # Exactness
//!
//! The tree only proposes. Its winner is taken when it beat every other candidate it met (by
//! score, or by the bound of the node that dismissed it) by the memo's tie tolerance (module
//! `memo`): then the list scan, which looks at the same candidates in another order and breaks
//! ties by that order, chooses it too, whatever its order. Otherwise (a tie or near tie, or
//! nothing that fits without overbooking) the list scan decides, as before. The tree follows
//! the projection: a framework's leaves are refreshed whenever it is relisted (a shape ran out,
//! or it has no projected work left); a leaf not yet refreshed only bounds too high.

use super::memo::{clear_winner, Rivals};
use super::policies::{take_evaluation, AgentView, Choice, CycleIndex, Exclusions, FitMode};
use super::*;
use crate::scoring::PerfScore;

/// What bounds the scores of the shapes below a node.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bounds {
    /// Component-wise maximum of `priScore · demand` (Tetris: of the demands).
    envelope: ResourceVec,
    /// Component-wise minimum of the demands.
    min: ResourceVec,
    /// The least η·srpt (Tetris: ε·work) of their frameworks.
    srpt_term: f64,
}

/// No shape: fits nowhere, bounds nothing.
const EMPTY: Bounds = Bounds {
    envelope: ResourceVec::ZERO,
    min: ResourceVec([f64::INFINITY; NUM_RESOURCES]),
    srpt_term: f64::INFINITY,
};

impl Bounds {
    fn merge(a: &Bounds, b: &Bounds) -> Bounds {
        Bounds {
            envelope: a.envelope.max(&b.envelope),
            min: a.min.min(&b.min),
            srpt_term: a.srpt_term.min(b.srpt_term),
        }
    }

    /// The bound of every fitting score below, on the agent seen as `view`.
    #[inline]
    fn score(&self, view: &AgentView) -> PerfScore {
        PerfScore {
            fits: true,
            value: view.packing(&self.envelope) - self.srpt_term,
        }
    }
}

/// The tree of one candidate list.
#[derive(Clone, Debug, Default)]
pub(super) struct ScoreTree {
    /// In heap order: node 1 is the root, node `i` has children `2i` and `2i + 1`, and the
    /// leaves are nodes `leaves..2 · leaves`.
    nodes: Vec<Bounds>,
    /// Number of leaves (a power of two, at least the list's shapes).
    leaves: usize,
    /// The framework of each leaf.
    frameworks: Vec<Option<FrameworkIdx>>,
}

/// A shape to place: its framework, its index in the framework's summary, its bounds.
type Item = (FrameworkIdx, usize, Bounds);

impl ScoreTree {
    /// Builds the tree of `shapes`; `scale` divides each kind of the envelopes for the
    /// placement (the smallest machine's capacity, 0 where none has it). Returns the tree and
    /// each shape's leaf.
    fn build(mut shapes: Vec<Item>, scale: &ResourceVec) -> (ScoreTree, Vec<(Item, usize)>) {
        let leaves = shapes.len().next_power_of_two();
        let mut tree = ScoreTree {
            nodes: vec![EMPTY; 2 * leaves],
            leaves,
            frameworks: vec![None; leaves],
        };
        let mut placed = Vec::with_capacity(shapes.len());
        tree.place(1, &mut shapes, scale, &mut placed);
        for node in (1..leaves).rev() {
            tree.nodes[node] = Bounds::merge(&tree.nodes[2 * node], &tree.nodes[2 * node + 1]);
        }
        (tree, placed)
    }

    /// Places `items` in the subtree of `node`, halving them by the feature that spreads most.
    fn place(
        &mut self,
        node: usize,
        items: &mut [Item],
        scale: &ResourceVec,
        placed: &mut Vec<(Item, usize)>,
    ) {
        if node >= self.leaves {
            if let Some(&item) = items.first() {
                let leaf = node - self.leaves;
                self.nodes[node] = item.2;
                self.frameworks[leaf] = Some(item.0);
                placed.push((item, leaf));
            }
            return;
        }
        if items.is_empty() {
            return;
        }
        let feature = |bounds: &Bounds, k: usize| {
            if k < NUM_RESOURCES {
                if scale.0[k] > EPSILON {
                    bounds.envelope.0[k] / scale.0[k]
                } else {
                    0.0
                }
            } else {
                bounds.srpt_term
            }
        };
        let spread = |k: usize| {
            let (lo, hi) = items
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), i| {
                    let x = feature(&i.2, k);
                    (lo.min(x), hi.max(x))
                });
            hi - lo
        };
        let k = (0..=NUM_RESOURCES)
            .max_by(|&a, &b| spread(a).total_cmp(&spread(b)))
            .unwrap_or(0);
        let mid = items.len().div_ceil(2);
        if mid < items.len() {
            items.select_nth_unstable_by(mid, |a, b| {
                feature(&b.2, k)
                    .total_cmp(&feature(&a.2, k))
                    .then((a.0, a.1).cmp(&(b.0, b.1)))
            });
        }
        let (left, right) = items.split_at_mut(mid);
        self.place(2 * node, left, scale, placed);
        self.place(2 * node + 1, right, scale, placed);
    }

    /// Sets a leaf's bounds and the bounds above it.
    fn set_leaf(&mut self, leaf: usize, bounds: Bounds) {
        let mut node = self.leaves + leaf;
        if self.nodes[node] == bounds {
            return;
        }
        self.nodes[node] = bounds;
        while node > 1 {
            node /= 2;
            let merged = Bounds::merge(&self.nodes[2 * node], &self.nodes[2 * node + 1]);
            if merged == self.nodes[node] {
                break;
            }
            self.nodes[node] = merged;
        }
    }
}

/// Where each framework's shapes are in the trees of an index.
#[derive(Clone, Debug, Default)]
pub(super) struct TreeLeaves {
    /// Per framework slot: its list, where its shapes' leaves start in `leaf`, and how many
    /// shapes its summary had.
    start: Vec<Option<(usize, usize, usize)>>,
    /// The leaf of each shape, framework after framework, in summary order.
    leaf: Vec<usize>,
}

impl Allocator {
    /// Builds the trees of the index's lists, for the score-based policies (none otherwise).
    pub(super) fn build_score_trees(&mut self, index: &mut CycleIndex) {
        let Some(with_priority) = self.tree_priority() else {
            return;
        };
        index.trees.clear();
        let mut leaves = TreeLeaves {
            start: vec![None; self.frameworks.len()],
            leaf: Vec::new(),
        };
        let mut shapes: Vec<Item> = Vec::new();
        for l in 0..index.lists.len() {
            shapes.clear();
            for &(_, _, f) in &index.lists[l] {
                let count = self.frameworks[f.get()].demand.shapes.len();
                leaves.start[f.get()] = Some((l, leaves.leaf.len(), count));
                leaves.leaf.extend(std::iter::repeat_n(0, count));
                for shape in 0..count {
                    let bounds = self.leaf_bounds(f, shape, index.srpt_weight, with_priority);
                    shapes.push((f, shape, bounds));
                }
            }
            let (tree, placed) = ScoreTree::build(std::mem::take(&mut shapes), &index.min_capacity);
            for ((f, shape, _), leaf) in placed {
                if let Some((_, start, _)) = leaves.start[f.get()] {
                    leaves.leaf[start + shape] = leaf;
                }
            }
            index.trees.push(tree);
        }
        index.tree_leaves = leaves;
    }

    /// Whether the policy's choices go through the trees: `Some(with_priority)` (Graphene's
    /// `priScore · pScore`, or Tetris' bare alignment), or `None`.
    fn tree_priority(&self) -> Option<bool> {
        if self.plain_scan {
            return None;
        }
        match self.config.policy {
            InterJobPolicy::DeficitCounters { .. } => Some(true),
            InterJobPolicy::Tetris => Some(false),
            _ => None,
        }
    }

    /// The bounds of `f`'s `shape` from its projected work (empty when it has none).
    fn leaf_bounds(
        &mut self,
        f: FrameworkIdx,
        shape: usize,
        srpt_weight: f64,
        with_priority: bool,
    ) -> Bounds {
        let soft = self.cycle_counts(f);
        if soft.cycle_pending == 0 || !soft.counted || soft.cycle_counts[shape] == 0 {
            return EMPTY;
        }
        let work = if with_priority {
            soft.demand.srpt
        } else {
            soft.demand.remaining_work
        };
        let pending = &soft.demand.shapes[shape];
        let pri = if with_priority {
            pending.pri_score
        } else {
            1.0
        };
        Bounds {
            envelope: pending.demand.scale(pri),
            min: pending.demand,
            srpt_term: srpt_weight * work,
        }
    }

    /// Brings `f`'s leaves in step with its projected work (after it was relisted).
    pub(super) fn refresh_leaves(&mut self, index: &mut CycleIndex, f: FrameworkIdx) {
        let Some(with_priority) = self.tree_priority() else {
            return;
        };
        let Some((l, start, count)) = index.tree_leaves.start.get(f.get()).copied().flatten()
        else {
            return;
        };
        let listed = index.keys.get(f.get()).copied().flatten().is_some()
            && self.frameworks[f.get()].demand.shapes.len() == count;
        for shape in 0..count {
            let bounds = if listed {
                self.leaf_bounds(f, shape, index.srpt_weight, with_priority)
            } else {
                EMPTY
            };
            let leaf = index.tree_leaves.leaf[start + shape];
            if let Some(tree) = index.trees.get_mut(l) {
                tree.set_leaf(leaf, bounds);
            }
        }
    }

    /// The best fitting candidate of the lists `lists` for the agent seen as `view`, found with
    /// their trees, when it beat every other candidate by the tie tolerance (so that the list
    /// scan chooses it too); its rivals are then noted in `rivals`. `None` when nothing fits
    /// without overbooking or the winner is not clear: the caller scans the lists.
    pub(super) fn clear_best_in_trees(
        &mut self,
        index: &CycleIndex,
        lists: impl Iterator<Item = usize>,
        view: &AgentView,
        exclusions: &Exclusions,
        with_priority: bool,
        rivals: &mut Rivals,
    ) -> Option<Choice> {
        let mut stack = std::mem::take(&mut self.tree_scratch);
        let mut scored = std::mem::take(&mut self.tree_scored);
        scored.clear();
        let mut best: Option<Choice> = None;
        let mut met = Rivals::default();
        // The trees whose roots can hold a fitting shape, best-bounded first, so that the best
        // score found early prunes the others.
        let mut roots = std::mem::take(&mut self.tree_roots);
        roots.clear();
        for l in lists {
            if let Some(root) = index.trees.get(l).and_then(|tree| tree.nodes.get(1)) {
                if fits(&root.min, &view.free) {
                    roots.push((l, root.score(view)));
                }
            }
        }
        roots.sort_by(|a, b| b.1.value.total_cmp(&a.1.value));
        for &(l, root) in &roots {
            let tree = &index.trees[l];
            stack.clear();
            stack.push((1, root));
            while let Some((node, bound)) = stack.pop() {
                let bar = best.map(|c| c.score);
                if bar.is_some_and(|bar| !bound.beats(&bar)) {
                    met.note(bound);
                    continue;
                }
                if node < tree.leaves {
                    // The better-bounded child is searched first (pushed last); a child whose
                    // smallest shape does not fit holds no candidate, one that cannot beat the
                    // best found is a rival at its bound.
                    let (left, right) = (2 * node, 2 * node + 1);
                    let left_fits = fits(&tree.nodes[left].min, &view.free);
                    let right_fits = fits(&tree.nodes[right].min, &view.free);
                    let left_bound = tree.nodes[left].score(view);
                    let right_bound = tree.nodes[right].score(view);
                    let mut push = |child: usize, fits: bool, bound: PerfScore| {
                        if !fits {
                            return;
                        }
                        if bar.is_some_and(|bar| !bound.beats(&bar)) {
                            met.note(bound);
                        } else {
                            stack.push((child, bound));
                        }
                    };
                    if left_bound.value >= right_bound.value {
                        push(right, right_fits, right_bound);
                        push(left, left_fits, left_bound);
                    } else {
                        push(left, left_fits, left_bound);
                        push(right, right_fits, right_bound);
                    }
                    continue;
                }
                // A shape that could win: its framework is scored as the list scan scores it
                // (its best shape), once.
                let Some(f) = tree.frameworks[node - tree.leaves] else {
                    continue;
                };
                if scored.contains(&f) {
                    continue;
                }
                scored.push(f);
                let evaluation = self.evaluate_candidate(
                    f,
                    view,
                    exclusions,
                    index.srpt_weight,
                    bar,
                    FitMode::Strict,
                    with_priority,
                );
                take_evaluation(&mut best, bar, f, evaluation, FitMode::Strict, &mut met);
            }
        }
        self.tree_roots = roots;
        self.tree_scratch = stack;
        self.tree_scored = scored;
        let best = best.filter(|choice| clear_winner(choice, &met, index))?;
        if let Some(met) = met.best() {
            rivals.note(met);
        }
        Some(best)
    }
}
