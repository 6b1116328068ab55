//! What a simulation runs: the cluster, the arrivals, the job selection and the seed. The fields
//! mirror the flags of `fullerene sim` one for one.

use fullerene_proto::ResourceVec;
use fullerene_scheduling::allocator::DEFAULT_KAPPA;
use fullerene_scheduling::DEFAULT_OVERBOOK_ALLOWANCE;

use crate::arrivals::ArrivalSpec;
use crate::workload::JobOrder;

/// The reference machine of the shared workloads (`workloads/FORMAT.md`).
pub const REFERENCE_MACHINE: &str = "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000";

/// A simulation's inputs other than the workload and the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Number of machines (`--machines`).
    pub machines: usize,
    /// Every machine's capacity (`--machine`).
    pub machine: ResourceVec,
    /// How jobs arrive (`--arrivals`).
    pub arrivals: ArrivalSpec,
    /// How many jobs to run (`--jobs`): the first N of the file in [`SimConfig::job_order`],
    /// going through it again when N is larger (see [`crate::workload::prepare_jobs`]).
    /// `None`: every job once.
    pub jobs: Option<usize>,
    /// Which jobs `--jobs N` takes (`--job-order`): the file's first N, or N of a seeded random
    /// permutation of the file.
    pub job_order: JobOrder,
    /// Spread the jobs of group `default` round-robin over `g0..g{K-1}` (`--groups`).
    pub groups: Option<usize>,
    /// Seed of every random choice (`--seed`): Poisson arrivals, the random job order and
    /// Carbyne's altruism draws.
    pub seed: u64,
    /// Virtual seconds between allocation cycles. 0 (the default) runs a cycle after every
    /// batch of same-time events, as an event-driven Mesos master does when resources free up;
    /// a positive value batches them on a fixed period, like Mesos' `--allocation_interval`.
    pub offer_interval_s: f64,
    /// While frameworks yield resources (Carbyne's altruism), allocation cycles also run this
    /// many virtual seconds apart even without events, as a Mesos master re-offers unused
    /// resources every allocation interval (1 s by default in Mesos). An altruistic job starts a
    /// task only when its latest start is due, which may fall between two events; without these
    /// cycles it would wait for the next completion. Carbyne's look-ahead is set to the same
    /// interval, so a task due before the next cycle starts now. Runs in which nobody yields are
    /// unaffected.
    pub reoffer_interval_s: f64,
    /// How long the allocator refuses to re-offer an agent to a framework that declined it
    /// (Mesos' `refuse_seconds`, the allocator's `decline_filter_s`). 0 by default: allocation
    /// cycles here are event-driven and frameworks take what they can use at each offer, so a
    /// filter would only leave machines idle until it expires (Mesos' default of 5 s makes a
    /// lone job wait 5 s after every partly used offer), an artefact of no scheduler the papers
    /// compare. Frameworks revive (clear their filters) when new tasks become runnable.
    pub decline_filter_s: f64,
    /// How far fungible resources (disk and network bandwidth) may be charged beyond a
    /// machine's capacity, as a fraction of it (Graphene §5's overbooking). The simulator checks
    /// every launch against it and slows the tasks on an overbooked resource down.
    pub overbook_allowance: f64,
    /// κ of Graphene's deficit counters (the unfairness bound κ·C) for the Graphene policies.
    pub kappa: f64,
    /// Record every task's placement and run time in [`crate::SimOutcome::trace`] (tests use
    /// it to check capacities and dependencies; reports do not need it).
    pub record_trace: bool,
}

impl Default for SimConfig {
    /// Five reference machines, Poisson arrivals with a 25 s mean gap, every job once, seed 0:
    /// the busy-cluster scenario of the project's targets.
    fn default() -> SimConfig {
        SimConfig {
            machines: 5,
            machine: reference_machine(),
            arrivals: ArrivalSpec::Poisson { mean_gap_s: 25.0 },
            jobs: None,
            job_order: JobOrder::File,
            groups: None,
            seed: 0,
            offer_interval_s: 0.0,
            reoffer_interval_s: 1.0,
            decline_filter_s: 0.0,
            overbook_allowance: DEFAULT_OVERBOOK_ALLOWANCE,
            kappa: DEFAULT_KAPPA,
            record_trace: false,
        }
    }
}

/// [`REFERENCE_MACHINE`] as a vector.
pub fn reference_machine() -> ResourceVec {
    let mut v = ResourceVec::ZERO;
    v[fullerene_proto::ResourceKind::Cpus] = 16.0;
    v[fullerene_proto::ResourceKind::MemMib] = 65536.0;
    v[fullerene_proto::ResourceKind::DiskMbps] = 1000.0;
    v[fullerene_proto::ResourceKind::NetMbps] = 10000.0;
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_machine_matches_its_string() {
        assert_eq!(
            REFERENCE_MACHINE.parse::<ResourceVec>().unwrap(),
            reference_machine()
        );
    }
}
