//! Tetris within a job (Grandl et al., SIGCOMM'14, as Graphene §2.2 and Carbyne §3.3.4 use it):
//! multi-resource packing by alignment, combined with shortest-remaining-time-first, with no
//! regard for the DAG beyond which tasks are runnable now.

use fullerene_proto::ResourceVec;

use crate::job::{Job, TaskRef};
use crate::policy::baselines::{Baseline, BaselineOrder};
use crate::policy::bundle::{StageCandidates, StageOrder};
use crate::policy::scoring::srpt_term;
use crate::policy::OfferContext;

/// Alignment scores closer than this count as equal, so that SRTF decides between them.
const ALIGNMENT_TIE: f64 = 1e-9;

/// Tetris' intra-job choice: repeatedly take the runnable task whose demand is best aligned
/// with the machine's remaining free resources (their dot product, both normalised by the
/// machine's capacity: Graphene §2.2, "Tetris greedily picks the task with the highest value of
/// the dot product between task's demand vector and the available resource vector"), until no
/// runnable task fits. No overbooking; the DAG matters only through what is runnable.
///
/// Tetris adds to the alignment an SRTF term ε · (remaining work of the task's *job*). Across
/// jobs that is the allocator's part; within one job it is the same for every candidate and
/// cannot change the order, so here it reduces to its tie-breaking role: among equally aligned
/// tasks, the one with less work (duration × normalised demand) goes first, then stage order.
pub type TetrisPolicy = Baseline<Tetris>;

/// The order of [`TetrisPolicy`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Tetris;

impl TetrisPolicy {
    /// The policy for `job`.
    pub fn new(job: &Job) -> TetrisPolicy {
        // Within a stage (same demand, same alignment) the shortest task has the least work.
        Baseline::with(job, Tetris, StageOrder::by_key(job, |t| job.duration(t)))
    }
}

impl BaselineOrder for Tetris {
    fn name(&self) -> &'static str {
        "tetris"
    }

    fn fill(
        &self,
        job: &Job,
        offer: &OfferContext,
        mut cands: Vec<StageCandidates>,
    ) -> Vec<TaskRef> {
        let capacity = offer.capacity;
        let mut available: ResourceVec = offer.free;
        let mut bundle = Vec::new();
        loop {
            cands.retain(|c| !c.tasks.is_empty() && c.demand.fits_in(&available));
            let free_share = available.normalized_by(&capacity);
            let best = cands
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let head = *c.tasks.front()?;
                    let alignment = free_share.dot(&c.demand.normalized_by(&capacity));
                    let work = srpt_term(job.duration(head), &c.demand, &capacity);
                    Some((i, alignment, work, c.stage))
                })
                .min_by(|a, b| {
                    if (a.1 - b.1).abs() > ALIGNMENT_TIE {
                        b.1.total_cmp(&a.1)
                    } else {
                        a.2.total_cmp(&b.2).then(a.3.cmp(&b.3))
                    }
                });
            let Some((i, _, _, _)) = best else {
                return bundle;
            };
            let c = &mut cands[i];
            if let Some(t) = c.tasks.pop_front() {
                available -= c.demand;
                bundle.push(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::baselines::test_util::{job, offer};
    use crate::policy::{JobPolicy, JobState};

    #[test]
    fn best_aligned_first_and_shorter_work_among_equals() {
        // Free resources are memory-rich: the memory-heavy stage aligns best.
        let j = job(&[
            (0, &[], &[1.0], "cpus=4,mem_mib=4096"),
            (1, &[], &[1.0], "cpus=1,mem_mib=32768"),
            (2, &[], &[1.0], "cpus=8"),
        ]);
        let state = JobState::new(&j);
        let mut p = TetrisPolicy::new(&j);
        let d = p.on_offer(&j, &state, &offer("cpus=8,mem_mib=65536"));
        assert_eq!(d.launch[0], TaskRef::new(1, 0));

        // Two stages with the same demand (same alignment): the shorter work goes first, and
        // within a stage the shorter task; a better-aligned task wins whatever its length.
        let j = job(&[
            (0, &[], &[9.0, 8.0], "cpus=4"),
            (1, &[], &[3.0, 7.0], "cpus=4"),
        ]);
        let state = JobState::new(&j);
        let mut p = TetrisPolicy::new(&j);
        let d = p.on_offer(&j, &state, &offer("cpus=8"));
        assert_eq!(d.launch, vec![TaskRef::new(1, 0), TaskRef::new(1, 1)]);

        let j = job(&[(0, &[], &[1.0], "cpus=4"), (1, &[], &[50.0], "cpus=8")]);
        let state = JobState::new(&j);
        let mut p = TetrisPolicy::new(&j);
        let d = p.on_offer(&j, &state, &offer("cpus=8"));
        assert_eq!(d.launch, vec![TaskRef::new(1, 0)]);
    }

    #[test]
    fn tetris_ignores_the_dag_beyond_runnability() {
        // A long chain behind stage 0 does not matter to Tetris: stage 1 aligns better.
        let j = job(&[
            (0, &[], &[1.0], "cpus=1"),
            (1, &[], &[1.0], "cpus=8"),
            (2, &[0], &[100.0], "cpus=1"),
        ]);
        let state = JobState::new(&j);
        let mut p = TetrisPolicy::new(&j);
        let d = p.on_offer(&j, &state, &offer("cpus=8"));
        assert_eq!(d.launch, vec![TaskRef::new(1, 0)]);
    }
}
