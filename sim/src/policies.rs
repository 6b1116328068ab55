//! How a `--compare` name maps onto the two halves of the two-level design: the inter-job policy
//! of the master's allocator and the intra-job policy every framework runs.
//!
//! | name | allocator ([`InterJobPolicy`]) | framework ([`PolicyKind`], built by [`build`](fullerene_sdk::policy::build)) |
//! | --- | --- | --- |
//! | `graphene+carbyne` | deficit counters (DRF factor, κ) + best perfScore; yields redistributed | Carbyne's altruism over Graphene's matcher |
//! | `graphene` | deficit counters (DRF factor, κ) + best perfScore | Graphene's matcher with the offline plan's priScores |
//! | `carbyne` | DRF; yields redistributed | Carbyne's altruism |
//! | `drf` | DRF | the intra-job baseline (Tez's breadth-first order) |
//! | `tetris` | Tetris | Tetris |
//! | `cp`, `bfs` | capacity scheduler | critical path, breadth-first |
//! | `fifo` | FIFO | FIFO |
//! | `sjf` | SJF | SJF |
//!
//! Leftover redistribution (Carbyne §3.3.4) needs no switch: the allocator redistributes
//! whatever a framework yields, and only the altruistic policies yield.

use fullerene_scheduling::allocator::{InterJobPolicy, DEFAULT_MAX_QUEUE_CAPACITY};
use fullerene_scheduling::fairness::FairnessFactor;
use fullerene_sdk::policy::{PolicyError, PolicyKind};

/// The allocator policy paired with `kind`, with κ = `kappa` for the deficit-counter ones.
pub fn allocator_policy(kind: PolicyKind, kappa: f64) -> InterJobPolicy {
    match kind {
        PolicyKind::GrapheneCarbyne | PolicyKind::Graphene => InterJobPolicy::DeficitCounters {
            factor: FairnessFactor::Drf,
            kappa,
        },
        PolicyKind::Carbyne | PolicyKind::Drf => InterJobPolicy::Drf,
        PolicyKind::Tetris => InterJobPolicy::Tetris,
        PolicyKind::CriticalPath | PolicyKind::Bfs => InterJobPolicy::CapacityScheduler {
            max_capacity: DEFAULT_MAX_QUEUE_CAPACITY,
        },
        PolicyKind::Fifo => InterJobPolicy::Fifo,
        PolicyKind::Sjf => InterJobPolicy::Sjf,
    }
}

/// Parses a `--compare` list (`graphene+carbyne,drf,...`), keeping its order and dropping
/// repeats and empty entries.
pub fn parse_policy_list(list: &str) -> Result<Vec<PolicyKind>, PolicyError> {
    parse_name_list(list)
}

/// A comma-separated list of names parsed as `T`, in order, without repeats or empty entries
/// (the `--compare` lists).
pub fn parse_name_list<T: std::str::FromStr + PartialEq>(list: &str) -> Result<Vec<T>, T::Err> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let item: T = name.parse()?;
        if !out.contains(&item) {
            out.push(item);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_in_order_without_repeats() {
        assert_eq!(
            parse_policy_list("graphene+carbyne, drf,drf,,bfs").unwrap(),
            vec![
                PolicyKind::GrapheneCarbyne,
                PolicyKind::Drf,
                PolicyKind::Bfs
            ]
        );
        assert!(matches!(
            parse_policy_list("drf,yarn"),
            Err(PolicyError::UnknownPolicy(name)) if name == "yarn"
        ));
        let all = parse_policy_list("graphene+carbyne,graphene,carbyne,drf,tetris,cp,bfs,fifo,sjf")
            .unwrap();
        assert_eq!(all, PolicyKind::ALL.to_vec());
    }

    #[test]
    fn graphene_kinds_use_deficit_counters_with_the_given_kappa() {
        for kind in [PolicyKind::GrapheneCarbyne, PolicyKind::Graphene] {
            assert_eq!(
                allocator_policy(kind, 0.2),
                InterJobPolicy::DeficitCounters {
                    factor: FairnessFactor::Drf,
                    kappa: 0.2
                }
            );
        }
        assert_eq!(
            allocator_policy(PolicyKind::Carbyne, 0.2),
            InterJobPolicy::Drf
        );
        assert_eq!(
            allocator_policy(PolicyKind::Bfs, 0.2),
            allocator_policy(PolicyKind::CriticalPath, 0.2)
        );
    }
}
