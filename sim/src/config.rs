//! What a simulation runs: the cluster, the arrivals, the job selection and the seed. The fields
//! mirror the flags of `fullerene sim` one for one.

use fullerene_proto::ResourceVec;
use fullerene_scheduling::allocator::{
    AgentMatching, EtaRule, FairShareRule, LeftoverRule, DEFAULT_KAPPA,
};
use fullerene_scheduling::scoring::{NO_REMOTE_PENALTY, PAPER_REMOTE_PENALTY};
use fullerene_scheduling::DEFAULT_OVERBOOK_ALLOWANCE;
use fullerene_sdk::policy::PriScoreScope;

use crate::arrivals::ArrivalSpec;
use crate::workload::JobOrder;

/// The reference machine of the shared workloads (`workloads/FORMAT.md`).
pub const REFERENCE_MACHINE: &str = "cpus=16,mem_mib=65536,disk_mbps=1000,net_mbps=10000";

/// A simulation's inputs other than the workload and the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Number of machines (`--machines`).
    pub machines: usize,
    /// Every machine's capacity (`--machine-resources`).
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
    /// An altruistic job (Carbyne) starts a task only when its latest start is due, which may
    /// fall between two events. 0 (the default): an allocation cycle runs at each such due time
    /// the frameworks announce ([`JobPolicy::next_start_s`](fullerene_sdk::policy::JobPolicy)),
    /// so allocation is driven by events only. A positive value restores the periodic re-offer
    /// of a Mesos master (its allocation interval, 1 s by default): while frameworks yield,
    /// cycles also run this many seconds apart, and Carbyne's look-ahead is set to the same
    /// interval so that a task due before the next cycle starts now.
    pub reoffer_interval_s: f64,
    /// How the allocator divides an agent among frameworks ([`AgentMatching`]).
    pub matching: AgentMatching,
    /// Over which tasks η of Graphene's perfScore is averaged ([`EtaRule`]).
    pub eta_rule: EtaRule,
    /// How Carbyne's `A_k` is computed ([`FairShareRule`]).
    pub fair_share_rule: FairShareRule,
    /// How yielded leftovers are redistributed ([`LeftoverRule`]).
    pub leftover_rule: LeftoverRule,
    /// What demand summaries' priScores are relative to ([`PriScoreScope`]).
    pub pri_scope: PriScoreScope,
    /// Graphene's remote penalty in the matcher. 1 (none) by default: the simulator charges
    /// nothing for remote placement ([`NO_REMOTE_PENALTY`]).
    pub remote_penalty: f64,
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
            reoffer_interval_s: 0.0,
            matching: AgentMatching::default(),
            eta_rule: EtaRule::default(),
            fair_share_rule: FairShareRule::default(),
            leftover_rule: LeftoverRule::default(),
            pri_scope: PriScoreScope::default(),
            remote_penalty: NO_REMOTE_PENALTY,
            decline_filter_s: 0.0,
            overbook_allowance: DEFAULT_OVERBOOK_ALLOWANCE,
            kappa: DEFAULT_KAPPA,
            record_trace: false,
        }
    }
}

/// A variant of one of the scheduler's rules, to measure what each choice is worth (`fullerene
/// sim --variant`): the rules it followed before issue 15 brought it in line with the papers,
/// and the within-job priScore scale the issue proposed (see [`PriScoreScope`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleVariant {
    /// `pri-within-job`: priScores scaled so each job's best runnable task scores 1
    /// ([`PriScoreScope::WithinJob`]).
    PriWithinJob,
    /// `eta-chosen`: η from the chosen candidates only ([`EtaRule::ChosenCandidates`]).
    EtaChosen,
    /// `whole-agent`: one framework per agent per cycle ([`AgentMatching::WholeAgent`]).
    WholeAgent,
    /// `equal-share`: `A_k` an equal split of the group's share ([`FairShareRule::EqualSplit`]).
    EqualShare,
    /// `srtf-only`: the whole leftover to one framework ([`LeftoverRule::SrtfOnly`]).
    SrtfOnly,
    /// `reoffer-tick`: 1 s re-offer ticks while frameworks yield, instead of their due times.
    ReofferTick,
    /// `remote-penalty`: the paper's remote penalty of 0.8 although nothing charges for remote
    /// placement ([`PAPER_REMOTE_PENALTY`]).
    RemotePenalty,
}

impl RuleVariant {
    /// Every variant, in the order of issue 15's list of departures.
    pub const ALL: [RuleVariant; 7] = [
        RuleVariant::EtaChosen,
        RuleVariant::PriWithinJob,
        RuleVariant::WholeAgent,
        RuleVariant::EqualShare,
        RuleVariant::SrtfOnly,
        RuleVariant::ReofferTick,
        RuleVariant::RemotePenalty,
    ];

    /// The command-line name.
    pub const fn name(self) -> &'static str {
        match self {
            RuleVariant::PriWithinJob => "pri-within-job",
            RuleVariant::EtaChosen => "eta-chosen",
            RuleVariant::WholeAgent => "whole-agent",
            RuleVariant::EqualShare => "equal-share",
            RuleVariant::SrtfOnly => "srtf-only",
            RuleVariant::ReofferTick => "reoffer-tick",
            RuleVariant::RemotePenalty => "remote-penalty",
        }
    }

    /// Sets the variant in `config`.
    pub fn apply(self, config: &mut SimConfig) {
        match self {
            RuleVariant::PriWithinJob => config.pri_scope = PriScoreScope::WithinJob,
            RuleVariant::EtaChosen => config.eta_rule = EtaRule::ChosenCandidates,
            RuleVariant::WholeAgent => config.matching = AgentMatching::WholeAgent,
            RuleVariant::EqualShare => config.fair_share_rule = FairShareRule::EqualSplit,
            RuleVariant::SrtfOnly => config.leftover_rule = LeftoverRule::SrtfOnly,
            RuleVariant::ReofferTick => config.reoffer_interval_s = 1.0,
            RuleVariant::RemotePenalty => config.remote_penalty = PAPER_REMOTE_PENALTY,
        }
    }
}

impl std::str::FromStr for RuleVariant {
    type Err = String;

    fn from_str(name: &str) -> Result<RuleVariant, String> {
        RuleVariant::ALL
            .into_iter()
            .find(|r| r.name() == name.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = RuleVariant::ALL.iter().map(|r| r.name()).collect();
                format!(
                    "unknown rule variant `{name}` (known: {})",
                    names.join(", ")
                )
            })
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
    fn rule_variants_parse_by_name_and_change_their_setting() {
        for rule in RuleVariant::ALL {
            assert_eq!(rule.name().parse::<RuleVariant>(), Ok(rule));
            let mut config = SimConfig::default();
            rule.apply(&mut config);
            assert_ne!(config, SimConfig::default(), "{}", rule.name());
        }
        let err = "whole".parse::<RuleVariant>().unwrap_err();
        assert!(err.contains("whole-agent"), "{err}");
    }

    #[test]
    fn reference_machine_matches_its_string() {
        assert_eq!(
            REFERENCE_MACHINE.parse::<ResourceVec>().unwrap(),
            reference_machine()
        );
    }
}
