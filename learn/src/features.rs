//! What the model sees at a decision (Decima §5.1): every live job's DAG with a feature
//! vector per stage, and which stages may be chosen with which parallelism limits.
//!
//! The features follow Decima's `translate_state`, in seconds where it used milliseconds: per
//! job, the executors working on it, whether free executors are local to it, and how many are
//! free; per stage, besides its job's three, the remaining work and the remaining tasks, and
//! the mean task duration (in the paper's list, not in its code's five). Scales keep each about
//! unit size on TPC-H. Departures: Decima's decision serves the executors one source (a job,
//! or none) freed, so one job is "local" and "free" counts that source's executors; a session's
//! offers come from many machines at once, so every job some free executor last worked for is
//! local and "free" counts every executor free: an offer with room for `n` tasks of a
//! candidate is `n` executors (capped at the executor count), so that a model trained on
//! Decima's one-task executors reads a multi-resource machine's free room in the same unit. A
//! job's executors are its running tasks (Decima also counts idle executors it holds, which a
//! session does not keep).

use fullerene_scheduling::fit::max_copies;
use fullerene_sdk::session::{SessionView, StageCandidate};

/// Features per stage: the job's [`JOB_FEATURES`], then the stage's own.
pub const NODE_FEATURES: usize = 6;
/// Features per job.
pub const JOB_FEATURES: usize = 3;

/// Executors are counted in twenties (Decima: `/ 20.0`).
const EXECUTOR_SCALE: f32 = 20.0;
/// Whether free executors are local to the job: `±2` (Decima's values).
const LOCAL: f32 = 2.0;
/// Remaining work in hundreds of seconds (Decima: `/ 100000.0` milliseconds).
const WORK_SCALE_S: f32 = 100.0;
/// Remaining tasks in two hundreds (Decima: `/ 200.0`).
const TASK_SCALE: f32 = 200.0;
/// Mean task duration in tens of seconds.
const DURATION_SCALE_S: f32 = 10.0;

/// One decision's input: the live jobs' stages (nodes) in job order, their DAG edges, and the
/// candidates.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// Each node's features.
    pub nodes: Vec<[f32; NODE_FEATURES]>,
    /// Each node's job (index into `jobs`).
    pub node_job: Vec<usize>,
    /// Whether the node's stage still has unfinished tasks (summaries count only these, as
    /// Decima's `get_unfinished_nodes_summ_mat`).
    pub unfinished: Vec<bool>,
    /// Edges `(parent, child)` between nodes: messages flow from children to parents.
    pub edges: Vec<(usize, usize)>,
    /// Each node's height: 0 for a stage without children, else one more than its highest
    /// child (the message passing step at which its embedding is final).
    pub heights: Vec<usize>,
    /// Each job's features.
    pub jobs: Vec<[f32; JOB_FEATURES]>,
    /// The node of each candidate, in the candidates' order.
    pub candidates: Vec<usize>,
    /// Each job's smallest valid limit (`usize::MAX` where the job has no candidate).
    pub min_limit: Vec<usize>,
    /// The largest limit.
    pub max_limit: usize,
}

impl Observation {
    /// The tallest node's height: the message passing steps the embedding needs.
    pub fn depth(&self) -> usize {
        self.heights.iter().copied().max().unwrap_or(0)
    }
}

/// The observation of `view` with `candidates` (as [`SessionPolicy::choose`] gets them).
///
/// [`SessionPolicy::choose`]: fullerene_sdk::session::SessionPolicy::choose
pub fn observe(view: &SessionView<'_>, candidates: &[StageCandidate]) -> Observation {
    // The free executors: the tasks each offer still holds of the candidate it holds most of
    // (in Decima's environment an offer is one executor that holds one task, so this counts
    // the usable offers; a multi-resource machine counts as the executors it could host).
    let room: Vec<usize> = view
        .offers
        .iter()
        .map(|o| {
            candidates
                .iter()
                .map(|c| max_copies(&view.jobs[c.job].job.stages[c.stage].demand, &o.free))
                .max()
                .unwrap_or(0)
                .min(view.max_limit)
        })
        .collect();
    let usable: Vec<bool> = room.iter().map(|&r| r > 0).collect();
    let free = room.iter().sum::<usize>().min(view.max_limit) as f32;
    let total_nodes: usize = view.jobs.iter().map(|j| j.job.stages.len()).sum();
    let mut obs = Observation {
        nodes: Vec::with_capacity(total_nodes),
        node_job: Vec::with_capacity(total_nodes),
        unfinished: Vec::with_capacity(total_nodes),
        edges: Vec::new(),
        heights: Vec::with_capacity(total_nodes),
        jobs: Vec::with_capacity(view.jobs.len()),
        candidates: Vec::with_capacity(candidates.len()),
        min_limit: vec![usize::MAX; view.jobs.len()],
        max_limit: view.max_limit,
    };
    let mut offsets = Vec::with_capacity(view.jobs.len());
    for (j, entry) in view.jobs.iter().enumerate() {
        let offset = obs.nodes.len();
        offsets.push(offset);
        let local = view
            .offer_jobs
            .iter()
            .zip(&usable)
            .any(|(job, &u)| u && *job == Some(entry.key));
        let job = [
            entry.state.num_running() as f32 / EXECUTOR_SCALE,
            if local { LOCAL } else { -LOCAL },
            free / EXECUTOR_SCALE,
        ];
        obs.jobs.push(job);
        let stages = &entry.job.stages;
        // Stages are in topological order: children come after their parents, so heights
        // fill from the last stage back.
        let mut heights = vec![0; stages.len()];
        for s in (0..stages.len()).rev() {
            heights[s] = stages[s]
                .children
                .iter()
                .map(|&c| heights[c] + 1)
                .max()
                .unwrap_or(0);
        }
        for (s, stage) in stages.iter().enumerate() {
            let left = entry.state.unlaunched_in_stage(s) as f32;
            let mean = stage.mean_duration() as f32;
            obs.nodes.push([
                job[0],
                job[1],
                job[2],
                left * mean / WORK_SCALE_S,
                left / TASK_SCALE,
                mean / DURATION_SCALE_S,
            ]);
            obs.node_job.push(j);
            obs.unfinished.push(entry.state.unfinished_in_stage(s) > 0);
            obs.heights.push(heights[s]);
            obs.edges
                .extend(stage.children.iter().map(|&c| (offset + s, offset + c)));
        }
    }
    for c in candidates {
        obs.candidates.push(offsets[c.job] + c.stage);
        obs.min_limit[c.job] = c.min_limit;
    }
    obs
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fullerene_scheduling::testkit::res;
    use fullerene_sdk::session::{Session, SessionAction, SessionOffer, SessionPolicy};
    use fullerene_sdk::testkit::{job, stage};

    use super::*;

    /// Records the observation of every decision and takes the first candidate.
    struct Observer(Arc<std::sync::Mutex<Vec<Observation>>>);

    impl SessionPolicy for Observer {
        fn name(&self) -> &str {
            "observer"
        }

        fn choose(
            &mut self,
            view: &SessionView<'_>,
            candidates: &[StageCandidate],
        ) -> SessionAction {
            self.0.lock().unwrap().push(observe(view, candidates));
            SessionAction {
                candidate: 0,
                limit: 2,
            }
        }
    }

    #[test]
    fn nodes_edges_heights_and_candidates_follow_the_dags() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut session = Session::new(Box::new(Observer(seen.clone())), 4, res("cpus=4"));
        let one = res("cpus=1");
        // 0 -> 1 -> 2 and 0 -> 2: heights 2, 1, 0.
        let chain = job(
            "chain",
            "default",
            None,
            vec![
                stage(0, &[], &[2.0, 4.0], one),
                stage(1, &[0], &[1.0], one),
                stage(2, &[0, 1], &[1.0], one),
            ],
        );
        let single = job("single", "default", None, vec![stage(0, &[], &[10.0], one)]);
        session.add_job(Arc::new(chain), 0.0, None);
        session.add_job(Arc::new(single), 0.0, None);
        let offers: Vec<SessionOffer> = (0..4)
            .map(|machine| SessionOffer {
                machine,
                free: one,
                capacity: one,
            })
            .collect();
        session.schedule(&offers, 0.0);
        let seen = seen.lock().unwrap();
        let first = &seen[0];
        assert_eq!(first.nodes.len(), 4);
        assert_eq!(first.node_job, vec![0, 0, 0, 1]);
        assert_eq!(first.heights, vec![2, 1, 0, 0]);
        assert_eq!(first.depth(), 2);
        let mut edges = first.edges.clone();
        edges.sort_unstable();
        assert_eq!(edges, vec![(0, 1), (0, 2), (1, 2)]);
        // The two roots are candidates; nothing runs yet, 4 executors free, none local.
        assert_eq!(first.candidates, vec![0, 3]);
        assert_eq!(first.min_limit, vec![1, 1]);
        assert_eq!(first.jobs[0], [0.0, -2.0, 0.2]);
        // The chain's root: 2 tasks of 3 s mean left.
        assert_eq!(first.nodes[0][3..], [6.0 / 100.0, 2.0 / 200.0, 3.0 / 10.0]);
        // The second decision sees the chain's 2 running tasks and 2 free executors.
        let second = &seen[1];
        assert_eq!(second.jobs[0][0], 2.0 / 20.0);
        assert_eq!(second.jobs[0][2], 2.0 / 20.0);
        assert_eq!(second.candidates, vec![3]);
        assert_eq!(second.min_limit, vec![usize::MAX, 1]);
    }

    #[test]
    fn a_machine_counts_as_the_executors_it_can_host() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut session = Session::new(Box::new(Observer(seen.clone())), 8, res("cpus=8"));
        let one = res("cpus=1");
        let two = res("cpus=2");
        let wide = job("wide", "default", None, vec![stage(0, &[], &[1.0; 5], one)]);
        let fat = job("fat", "default", None, vec![stage(0, &[], &[1.0; 2], two)]);
        session.add_job(Arc::new(wide), 0.0, None);
        session.add_job(Arc::new(fat), 0.0, None);
        // One machine with room for three one-cpu tasks, one with room for none.
        let offers = [
            SessionOffer {
                machine: 0,
                free: res("cpus=3"),
                capacity: res("cpus=4"),
            },
            SessionOffer {
                machine: 1,
                free: res("cpus=0.5"),
                capacity: res("cpus=4"),
            },
        ];
        session.schedule(&offers, 0.0);
        let seen = seen.lock().unwrap();
        // Three executors free: the one-cpu stage fits three times on machine 0, the two-cpu
        // stage once; machine 1 hosts nothing.
        assert_eq!(seen[0].jobs[0][2], 3.0 / 20.0);
        assert_eq!(seen[0].jobs[1][2], 3.0 / 20.0);
    }
}
