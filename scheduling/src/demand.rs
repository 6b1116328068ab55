//! What a framework still wants, as it tells the allocator (DESIGN.md step 2): task shapes with
//! counts and scores, and the remaining work. The framework SDK builds it, the wire carries it
//! (`fullerene_proto::messages` re-exports these types) and the allocator ranks frameworks by it.

use serde::{Deserialize, Serialize};

use crate::resources::Resources;

/// A summary of one kind of pending task, for the allocator (DESIGN.md step 2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct PendingDemand {
    /// Per-task demand.
    pub resources: Resources,
    /// How many tasks of this shape are runnable now.
    pub count: u32,
    /// The best preferred-order score (Graphene priScore, 0..=1) among them.
    pub pri_score: f64,
}

/// What a framework still wants, kept compact: the allocator needs shapes and scores, not tasks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct DemandSummary {
    /// Runnable tasks grouped by shape, best first; at most a few dozen entries.
    pub pending: Vec<PendingDemand>,
    /// Remaining work (sum over unfinished tasks of duration × dominant share), the key for
    /// shortest-remaining-work-first leftover redistribution (Carbyne §3.3.4), SJF and Tetris.
    pub remaining_work: f64,
    /// Graphene's `srpt_j` (tech report Fig. 8): the sum over tasks not yet launched of
    /// duration × demand normalised by the cluster's capacity and summed over resources. The
    /// allocator's perfScore and the framework's matcher use this one definition.
    pub srpt: f64,
    /// How far the framework's job is through the reservation it runs in, when the framework
    /// derived that reservation from its own DAG (`None` otherwise). The allocator only checks
    /// it is well formed: the master's plan follower owes a reservation nothing for the atoms
    /// of finished stages (Rayon §5.2, issue 17).
    pub reservation_progress: Option<ReservationProgress>,
}

/// The most atoms a job's [`ReservationProgress`] may count: at least the most a request the
/// masters accept can have without a `repeat` (`fullerene_reservation::Limits`: 256 nodes as
/// written), so that a summary's progress stays small.
pub const MAX_PROGRESS_ATOMS: u32 = 1_024;

/// A job's progress through its own reservation: of the request's `atoms` (numbered in
/// `fullerene_reservation::Expr::atoms`' pre-order), those in `finished_atoms`, the atoms of
/// the stages the job has run to the end, in increasing order. `request` names the request
/// the job counted against (`fullerene_reservation::Expr::fingerprint`): the plan follower
/// believes the progress only against that very request, not one an operator replaced it
/// with. The allocator refuses a summary whose progress names an atom twice, out of order or
/// past `atoms`, or counts more than [`MAX_PROGRESS_ATOMS`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct ReservationProgress {
    /// The atoms finished, by number.
    pub finished_atoms: Vec<u32>,
    /// The atoms of the request the job made.
    pub atoms: u32,
    /// The fingerprint of that request.
    pub request: u64,
}
