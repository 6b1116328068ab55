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
//! bounds tight. Task at a time, an agent's next pick does not start again from the roots: it
//! starts from where its last search stopped ([`TreeFrontier`]), with the frameworks that came
//! close then scored first.
//!
//! # Exactness
//!
//! The search finds exactly what the list scan ([`Allocator::best_in_list`] over the gated
//! lists, most deprived group first) chooses among the fitting shapes: the best score, and of
//! equal scores the earliest group, then the earliest entry of its list. Both dismiss a
//! candidate only when it cannot be taken: the bounds above are exact up to their rounding,
//! so they dismiss what is below the best by more than that (the memo's tie margin); a second
//! bound, `priScore_max · packing(demand_max) − η·srpt_min` with the agent's weights taken
//! no lower than 0, is the very sum of products a shape's score is, each factor no smaller,
//! and IEEE rounding is monotone, so it is at least every score below bit for bit. It
//! dismisses what is below the best, or equal to it and later in the scan's order (each node
//! knows its earliest list entry). That is what settles ties: between copies of a framework,
//! alike in every score, the search descends to the earliest copy and dismisses the others by
//! their place, where the list scan scores every copy. The trees follow the projection: a
//! framework's leaves are refreshed whenever it is relisted (a shape ran out, or it has no
//! projected work left); a leaf not yet refreshed only bounds too high and holds an entry too
//! early. A framework listed after the trees were built (or whose summary changed shape) is
//! not in them: the index then says the trees no longer cover the lists
//! ([`TreeLeaves::covers_lists`]), the search declines, and the callers scan the lists instead.

use super::memo::{tie_margin, Rivals};
use super::policies::{
    take_evaluation, AgentView, Bar, Choice, CycleIndex, Evaluation, Exclusions, FitMode,
    GroupOrder, Ranked,
};
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
    /// Component-wise maximum of the demands.
    demand_max: ResourceVec,
    /// The largest priScore (Tetris: 1).
    pri_max: f64,
    /// The earliest list entry of their frameworks (entries only move later in a cycle, so a
    /// leaf not yet refreshed holds one no later than its framework's).
    first_rank: Ranked,
}

/// No shape: fits nowhere, bounds nothing.
const EMPTY: Bounds = Bounds {
    envelope: ResourceVec::ZERO,
    min: ResourceVec([f64::INFINITY; NUM_RESOURCES]),
    srpt_term: f64::INFINITY,
    demand_max: ResourceVec::ZERO,
    pri_max: 0.0,
    first_rank: (OrdF64(f64::INFINITY), u64::MAX, FrameworkIdx(u32::MAX)),
};

impl Bounds {
    fn merge(a: &Bounds, b: &Bounds) -> Bounds {
        Bounds {
            envelope: a.envelope.max(&b.envelope),
            min: a.min.min(&b.min),
            srpt_term: a.srpt_term.min(b.srpt_term),
            demand_max: a.demand_max.max(&b.demand_max),
            pri_max: a.pri_max.max(b.pri_max),
            first_rank: a.first_rank.min(b.first_rank),
        }
    }

    /// The bound of every fitting score below, on the agent seen as `view`, up to rounding.
    #[inline]
    fn score(&self, view: &AgentView) -> f64 {
        view.packing(&self.envelope) - self.srpt_term
    }

    /// A bound of every fitting score below that holds bit for bit (see
    /// [`super::policies::exact_bound`]); looser than [`Bounds::score`] when priScores differ.
    #[inline]
    fn exact(&self, view: &AgentView) -> f64 {
        self.pri_max * view.packing_upper(&self.demand_max) - self.srpt_term
    }

    /// Whether nothing below can be taken over the best found, of score `best` (fitting) and
    /// place `best_place` in the scans' order, by a list of place `group`: `Some(bound)` that
    /// dismisses them, to be noted as a rival. `approx` is [`Bounds::score`].
    #[inline]
    fn dismissed(
        &self,
        view: &AgentView,
        approx: f64,
        best: f64,
        best_place: (GroupOrder, Ranked),
        group: GroupOrder,
        index: &CycleIndex,
    ) -> Option<PerfScore> {
        let dismissing = |value| Some(PerfScore { fits: true, value });
        if approx + tie_margin(best, index) < best {
            return dismissing(approx);
        }
        let exact = self.exact(view);
        if exact < best || (exact == best && (group, self.first_rank) > best_place) {
            return dismissing(exact);
        }
        None
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
                    .then((a.2.first_rank, a.1).cmp(&(b.2.first_rank, b.1)))
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
    /// Every listed framework's shapes are in the trees: a search of the trees then finds
    /// every fitting candidate the list scans would (false without trees, or when a framework
    /// was listed after they were built).
    complete: bool,
}

impl TreeLeaves {
    /// Whether a search of the trees finds what a strict list scan of every list would.
    pub(super) fn covers_lists(&self) -> bool {
        self.complete
    }
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
            complete: true,
        };
        let mut shapes: Vec<Item> = Vec::new();
        for l in 0..index.lists.len() {
            shapes.clear();
            for &rank in &index.lists[l] {
                let f = rank.2;
                let count = self.frameworks[f.get()].demand.shapes.len();
                leaves.start[f.get()] = Some((l, leaves.leaf.len(), count));
                leaves.leaf.extend(std::iter::repeat_n(0, count));
                for shape in 0..count {
                    let bounds = self.leaf_bounds(f, shape, index.srpt_weight, with_priority, rank);
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

    /// The bounds of `f`'s `shape` from its projected work (empty when it has none), `rank`
    /// being its list entry.
    fn leaf_bounds(
        &mut self,
        f: FrameworkIdx,
        shape: usize,
        srpt_weight: f64,
        with_priority: bool,
        rank: Ranked,
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
            demand_max: pending.demand,
            pri_max: pri,
            first_rank: rank,
        }
    }

    /// Brings `f`'s leaves in step with its projected work (after it was relisted).
    pub(super) fn refresh_leaves(&mut self, index: &mut CycleIndex, f: FrameworkIdx) {
        let Some(with_priority) = self.tree_priority() else {
            return;
        };
        let rank = index.ranks.get(f.get()).copied().flatten();
        let Some((l, start, count)) = index.tree_leaves.start.get(f.get()).copied().flatten()
        else {
            if rank.is_some() {
                // Listed after the trees were built: they no longer hold every candidate.
                index.tree_leaves.complete = false;
            }
            return;
        };
        let listed = rank.filter(|_| self.frameworks[f.get()].demand.shapes.len() == count);
        if rank.is_some() && listed.is_none() {
            // Its summary changed shape within the cycle: its leaves no longer match it.
            index.tree_leaves.complete = false;
        }
        for shape in 0..count {
            let bounds = match listed {
                Some(rank) => self.leaf_bounds(f, shape, index.srpt_weight, with_priority, rank),
                None => EMPTY,
            };
            let leaf = index.tree_leaves.leaf[start + shape];
            if let Some(tree) = index.trees.get_mut(l) {
                tree.set_leaf(leaf, bounds);
            }
        }
    }

    /// The list scans' choice among the fitting candidates of the lists `lists` (each with its
    /// place in the scans' order of lists) for the agent seen as `view`, found with their
    /// trees: the best score, of equal scores the earliest list, then the earliest entry of its
    /// list, exactly as [`Allocator::best_in_list`] over the lists in that order chooses
    /// (`None`: nothing fits without overbooking, or the trees do not cover the lists and the
    /// caller must scan them). Every candidate it passed over leaves its score, or the bound it
    /// was dismissed by, in `rivals`.
    ///
    /// The search goes depth first, better-bounded child first, from the agent's `frontier`
    /// (see [`TreeFrontier`]: the roots, at the agent's first pick). A node is passed over
    /// when its envelope's score is below the best found by more than its rounding, or when
    /// its exact bound is below the best, or equal to it with every candidate below coming
    /// later in the scans' order; it then stays in the frontier for the agent's next pick.
    /// The second test is what decides ties: between copies of a framework (alike in every
    /// score) the search goes straight to the earliest copy and dismisses the others by their
    /// place, where the list scan scores them all.
    ///
    /// Before the frontier, the search scores the frameworks the agent's last search scored in
    /// full (its choice and those that came close), so that it starts with a best close to the
    /// answer: an agent's successive picks mostly go to the same few frameworks, and the last
    /// choice's own score falls most with its pick, which takes the kinds it weighs most. Scoring a candidate early changes nothing but the work, since
    /// every dismissal compares with a score a candidate has.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn best_in_trees(
        &mut self,
        index: &CycleIndex,
        lists: impl Iterator<Item = (usize, GroupOrder)>,
        view: &AgentView,
        exclusions: &Exclusions,
        with_priority: bool,
        frontier: &mut TreeFrontier,
        rivals: &mut Rivals,
    ) -> Option<Choice> {
        if !index.tree_leaves.covers_lists() {
            // Without trees, or with a framework missing from them: the lists decide.
            return None;
        }
        let mut stack = std::mem::take(&mut self.tree_scratch);
        let mut found = std::mem::take(&mut self.tree_findings);
        found.best = None;
        found.scored.clear();
        found.contenders.clear();
        let search = SearchInput {
            index,
            view,
            exclusions,
            with_priority,
        };
        // Each searched list's place in the scan's order of lists, by list.
        let mut places = std::mem::take(&mut self.tree_places);
        places.clear();
        places.resize(index.trees.len(), None);
        for (l, group) in lists {
            let Some(tree) = index.trees.get(l) else {
                continue;
            };
            places[l] = Some(group);
            frontier.open(l, tree, view);
        }
        for &f in &frontier.contenders {
            let place = index.tree_leaves.start.get(f.get()).copied().flatten();
            // Its list may not be searched in this pick (the κ·C gate).
            if let Some(group) = place.and_then(|(l, _, _)| places.get(l).copied().flatten()) {
                self.score_in_search(f, group, &search, &mut found, rivals);
            }
        }
        if found.best.is_none() {
            // The agent's first pick (its frontier the roots), or its last contenders have
            // nothing left that fits: best-bounded first, so that the best score found early prunes
            // the rest.
            frontier.nodes.sort_by(|a, b| {
                let (a_bound, b_bound) = (a.bounds.score(view), b.bounds.score(view));
                b_bound.total_cmp(&a_bound).then(a.list.cmp(&b.list))
            });
        }
        // The frontier is rewritten in place: what this pick passes over stays at the front,
        // what it reaches in place of the nodes it expands is added at the end.
        let mut added = std::mem::take(&mut frontier.added);
        added.clear();
        let mut kept = 0;
        for i in 0..frontier.nodes.len() {
            let entry = &frontier.nodes[i];
            let (l, node) = (entry.list as usize, entry.node as usize);
            let Some(group) = places[l] else {
                // A list this pick does not search keeps its frontier for a later one.
                frontier.keep(&mut kept, i);
                continue;
            };
            if let Some((choice, _)) = &found.best {
                let to_pass = choice.score.value;
                // From the node's bounds as they were when it came in, not from the tree: a
                // little looser, but without reaching a node far from the last one.
                let bound = entry.bounds.score(view);
                if bound + tie_margin(to_pass, index) < to_pass {
                    rivals.note(PerfScore {
                        fits: true,
                        value: bound,
                    });
                    frontier.keep(&mut kept, i);
                    continue;
                }
            }
            let tree = &index.trees[l];
            stack.clear();
            stack.push((node, tree.nodes[node].score(view)));
            while let Some((node, approx)) = stack.pop() {
                let bounds = &tree.nodes[node];
                if !fits(&bounds.min, &view.free) {
                    // Nothing below fits the agent now, nor after its later picks.
                    continue;
                }
                if let Some((choice, place)) = &found.best {
                    let dismissed =
                        bounds.dismissed(view, approx, choice.score.value, *place, group, index);
                    if let Some(bound) = dismissed {
                        rivals.note(bound);
                        added.push(FrontierNode::new(l, node, bounds));
                        continue;
                    }
                }
                if node < tree.leaves {
                    // The better-bounded child is searched first (pushed last), of equal
                    // bounds the one holding the earlier entry.
                    let (left, right) = (&tree.nodes[2 * node], &tree.nodes[2 * node + 1]);
                    let (left_score, right_score) = (left.score(view), right.score(view));
                    let left_first = left_score > right_score
                        || (left_score == right_score && left.first_rank <= right.first_rank);
                    if left_first {
                        stack.push((2 * node + 1, right_score));
                        stack.push((2 * node, left_score));
                    } else {
                        stack.push((2 * node, left_score));
                        stack.push((2 * node + 1, right_score));
                    }
                    continue;
                }
                added.push(FrontierNode::new(l, node, bounds));
                // A shape that could be taken: its framework is scored as the list scan scores
                // it (its best shape), once.
                let Some(f) = tree.frameworks[node - tree.leaves] else {
                    continue;
                };
                self.score_in_search(f, group, &search, &mut found, rivals);
            }
        }
        frontier.nodes.truncate(kept);
        frontier.nodes.extend_from_slice(&added);
        frontier.added = added;
        std::mem::swap(&mut frontier.contenders, &mut found.contenders);
        let best = found.best.map(|(choice, _)| choice);
        self.tree_findings = found;
        self.tree_scratch = stack;
        self.tree_places = places;
        best
    }

    /// Scores framework `f` of a list in place `group` of a tree search's order, as the list
    /// scan scores it (its best shape), unless the search scored it already or it is not
    /// listed: it becomes the best found if it passes it (of equal scores, if it comes earlier).
    fn score_in_search(
        &mut self,
        f: FrameworkIdx,
        group: GroupOrder,
        search: &SearchInput<'_>,
        found: &mut Findings,
        rivals: &mut Rivals,
    ) {
        let Some(rank) = search.index.ranks.get(f.get()).copied().flatten() else {
            return;
        };
        if found.scored.contains(&f) {
            return;
        }
        found.scored.push(f);
        let place = (group, rank);
        let bar = found.best.map(|(choice, best_place)| Bar {
            score: choice.score,
            ties_win: place < best_place,
        });
        let evaluation = self.evaluate_candidate(
            f,
            search.view,
            search.exclusions,
            search.index,
            bar,
            FitMode::Strict,
            search.with_priority,
        );
        if matches!(evaluation, Evaluation::Scored(..)) {
            found.contenders.push(f);
        }
        let mut chosen = found.best.map(|(choice, _)| choice);
        if take_evaluation(&mut chosen, bar, f, evaluation, FitMode::Strict, rivals) {
            found.best = chosen.map(|choice| (choice, place));
        }
    }
}

/// What one tree search reads besides the trees' frontier.
struct SearchInput<'a> {
    index: &'a CycleIndex,
    view: &'a AgentView,
    exclusions: &'a Exclusions,
    /// Graphene's `priScore · pScore` (else Tetris' bare alignment).
    with_priority: bool,
}

/// What a tree search has found so far: the best candidate with its place in the scans'
/// order, the frameworks it scored, and those it scored in full (not dismissed by a bound).
#[derive(Debug, Default)]
pub(super) struct Findings {
    best: Option<(Choice, (GroupOrder, Ranked))>,
    scored: Vec<FrameworkIdx>,
    contenders: Vec<FrameworkIdx>,
}

/// One agent's place in the bounding trees, kept from each of its picks to the next (task at a
/// time): nodes that together hold every shape of the searched lists that may still fit the
/// agent, each with what bounded its score when it came in, and the frameworks the last search
/// scored in full ([`Allocator::best_in_trees`] searches from them).
///
/// A bound computed at an earlier pick of the agent still bounds its node: the agent only
/// fills (its free resources fall, so do its packing weights, and a score is a sum of demands
/// times weights, none negative), and the trees only lose shapes within a cycle (a node's
/// envelope only falls, its least η·srpt and its smallest demand only rise). So a pick need
/// not search again from the roots what the picks before it ruled out: on the allocator
/// bench's cluster (`scheduling/benches/allocator.rs`) nine searches in ten are an agent's
/// second or later pick, and a search from the roots went through about 500 nodes, most of
/// them near the roots, whose bounds are loose. A frontier belongs to one agent and one
/// candidate index: every agent starts a new one.
#[derive(Clone, Debug, Default)]
pub(super) struct TreeFrontier {
    nodes: Vec<FrontierNode>,
    /// The nodes a search reaches in place of those it expands, reused from search to search.
    added: Vec<FrontierNode>,
    /// Per list, whether its root was put in.
    opened: Vec<bool>,
    /// The frameworks the last search scored in full (not dismissed by a bound).
    contenders: Vec<FrameworkIdx>,
}

/// A node of a [`TreeFrontier`].
#[derive(Clone, Copy, Debug)]
struct FrontierNode {
    list: u32,
    node: u32,
    /// What bounds its score, as it was when the node came in: the node's envelope and least
    /// η·srpt then (they only fall and rise), which give a bound at least its score now.
    bounds: ScoreBounds,
}

/// The part of a node's [`Bounds`] that [`Bounds::score`] reads.
#[derive(Clone, Copy, Debug)]
struct ScoreBounds {
    envelope: ResourceVec,
    srpt_term: f64,
}

impl ScoreBounds {
    #[inline]
    fn score(&self, view: &AgentView) -> f64 {
        view.packing(&self.envelope) - self.srpt_term
    }
}

impl TreeFrontier {
    /// Puts list `l`'s root in, unless a search for this agent already did (a root whose
    /// smallest shape does not fit holds nothing for it).
    fn open(&mut self, l: usize, tree: &ScoreTree, view: &AgentView) {
        if self.opened.len() <= l {
            self.opened.resize(l + 1, false);
        }
        if std::mem::replace(&mut self.opened[l], true) {
            return;
        }
        if let Some(root) = tree.nodes.get(1) {
            if fits(&root.min, &view.free) {
                self.push(l, 1, root);
            }
        }
    }

    fn push(&mut self, list: usize, node: usize, bounds: &Bounds) {
        self.nodes.push(FrontierNode::new(list, node, bounds));
    }

    /// Keeps node `i` of the nodes a search goes through, as the `kept`-th (`kept ≤ i`).
    #[inline]
    fn keep(&mut self, kept: &mut usize, i: usize) {
        if *kept != i {
            self.nodes[*kept] = self.nodes[i];
        }
        *kept += 1;
    }
}

impl FrontierNode {
    fn new(list: usize, node: usize, bounds: &Bounds) -> FrontierNode {
        // Lists are groups and nodes twice a list's shapes: both far below 2³².
        FrontierNode {
            list: list as u32,
            node: node as u32,
            bounds: ScoreBounds {
                envelope: bounds.envelope,
                srpt_term: bounds.srpt_term,
            },
        }
    }
}
