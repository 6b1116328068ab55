//! The baselines the papers compare against, as intra-job policies behind [`JobPolicy`]
//! (their inter-job halves are the master's allocator, see `PolicyKind`):
//!
//! | policy | intra-job order | source |
//! | --- | --- | --- |
//! | [`FifoPolicy`] | stage order (topological), then task index | FIFO |
//! | [`BfsPolicy`] | breadth-first: distance from the roots, then stage, then index | Tez (Graphene §2.2, §7.1) |
//! | [`drf_policy`] | Tez's breadth-first order, the DRF baseline's intra-job side | Carbyne §5.1, Graphene Table 3 |
//! | [`CriticalPathPolicy`] | longest remaining path to the job's end first | CPSched (Graphene §2.2) |
//! | [`TetrisPolicy`] | best alignment with the free resources, SRTF among equals | Tetris (Graphene §2.2) |
//! | [`SjfPolicy`] | shortest task first | SJF |
//!
//! All are work-conserving: a bundle stops only when no runnable task fits what is left of the
//! offer (Graphene §2.2: "all of the schedulers are work-conserving"), and none overbooks.
//!
//! [`JobPolicy`]: crate::policy::JobPolicy

mod bfs;
mod critical_path;
mod drf;
mod fifo;
mod sjf;
mod tetris;

pub use bfs::{breadth_first_levels, BfsPolicy};
pub use critical_path::{downstream_path_lengths, CriticalPathPolicy};
pub use drf::drf_policy;
pub use fifo::FifoPolicy;
pub use sjf::SjfPolicy;
pub use tetris::TetrisPolicy;

#[cfg(test)]
pub(crate) mod test_util {
    use fullerene_proto::messages::OfferKind;
    use fullerene_proto::ResourceVec;

    use crate::job::{Job, StageSpec};
    use crate::policy::OfferContext;

    pub(crate) fn rv(s: &str) -> ResourceVec {
        s.parse().expect("test resource vector")
    }

    pub(crate) fn offer(free: &str) -> OfferContext {
        let capacity = rv("cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000");
        OfferContext {
            machine: 0,
            free: rv(free),
            capacity,
            kind: OfferKind::Regular,
            now_s: 0.0,
            cluster_capacity: capacity,
            fair_share: capacity,
        }
    }

    /// `(id, parents, durations, demand)`
    pub(crate) fn job(stages: &[(u32, &[u32], &[f64], &str)]) -> Job {
        Job::new(
            "j",
            "g",
            None,
            stages
                .iter()
                .map(|(id, parents, durations, demand)| StageSpec {
                    id: *id,
                    name: format!("s{id}"),
                    parents: parents.to_vec(),
                    durations: durations.to_vec(),
                    demand: rv(demand),
                })
                .collect(),
        )
        .expect("valid test job")
    }
}
