//! Total-order cuts of a DAG (Graphene §2.3 and §4.4; tech report §4.4 and §6).
//!
//! A cut splits the stages into a part before and a part after such that every task after the
//! cut depends, directly or not, on every task before it. Any schedule is then a concatenation
//! of per-part schedules, so the planner builds one schedule per part (each with fewer tasks),
//! and NewLB (Fig. 9, eq. 1d) sums a bound per part.
//!
//! Every cut is a prefix of *every* topological order (the part before is closed under
//! ancestors and precedes all of the part after), and two cuts are always nested, so the
//! finest split is unique and can be read off one topological order: prefix `k` is a cut when
//! every later stage has all of the first `k` stages among its ancestors.

use std::ops::Range;

/// The finest split of a DAG into totally ordered parts. `parents[s]` lists the parents of stage
/// `s`, all of which come before `s` (the stages are in a topological order). Returns the
/// parts as consecutive ranges of stage indices covering `0..parents.len()`.
pub(crate) fn total_order_cuts(parents: &[&[usize]]) -> Vec<Range<usize>> {
    let n = parents.len();
    if n == 0 {
        return Vec::new();
    }
    let words = n.div_ceil(64);
    // ancestors[s]: bitset of the strict ancestors of s.
    let mut ancestors = vec![0u64; n * words];
    // covered[s]: the largest k with {0, .., k-1} all ancestors of s.
    let mut covered = vec![0usize; n];
    for s in 0..n {
        let (before, rest) = ancestors.split_at_mut(s * words);
        let mine = &mut rest[..words];
        for &p in parents[s] {
            if p >= s {
                continue;
            }
            let theirs = &before[p * words..(p + 1) * words];
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m |= *t;
            }
            mine[p / 64] |= 1 << (p % 64);
        }
        let mut k = 0;
        for &word in mine.iter() {
            if word == u64::MAX {
                k += 64;
            } else {
                k += word.trailing_ones() as usize;
                break;
            }
        }
        covered[s] = k.min(s);
    }
    // Prefix k (0 < k < n) is a cut iff min over s >= k of covered[s] >= k.
    let mut parts = Vec::new();
    let mut suffix_min = usize::MAX;
    let mut end = n;
    for k in (1..n).rev() {
        suffix_min = suffix_min.min(covered[k]);
        if suffix_min >= k {
            parts.push(k..end);
            end = k;
        }
    }
    parts.push(0..end);
    parts.reverse();
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuts(parents: &[Vec<usize>]) -> Vec<Range<usize>> {
        let lists: Vec<&[usize]> = parents.iter().map(Vec::as_slice).collect();
        total_order_cuts(&lists)
    }

    #[test]
    fn a_chain_splits_into_single_stages() {
        assert_eq!(cuts(&[vec![], vec![0], vec![1]]), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn parallel_branches_stay_together_until_they_join() {
        // 0 and 1 are independent scans; 2 joins them; 3 follows 2; 4 follows 3 and 1.
        let parts = cuts(&[vec![], vec![], vec![0, 1], vec![2], vec![3, 1]]);
        assert_eq!(parts, vec![0..2, 2..3, 3..4, 4..5]);
        // With a third scan that only the last stage reads, the scans cannot be cut off.
        let parts = cuts(&[vec![], vec![], vec![0, 1], vec![2], vec![], vec![3, 4]]);
        assert_eq!(parts, vec![0..5, 5..6]);
    }

    #[test]
    fn a_stage_that_skips_the_join_prevents_the_cut() {
        // 0 -> 1 -> 2 and 0 -> 2: 1 and 2 both need all of {0}; {0,1} precedes 2.
        assert_eq!(cuts(&[vec![], vec![0], vec![1, 0]]), vec![0..1, 1..2, 2..3]);
        // 0 -> 2, 1 -> 2, 1 -> 3: 3 does not depend on 0 or 2, so nothing splits after {0, 1}.
        assert_eq!(cuts(&[vec![], vec![], vec![0, 1], vec![1]]), vec![0..4]);
    }

    #[test]
    fn independent_stages_never_split() {
        assert_eq!(cuts(&[vec![], vec![]]), vec![0..2]);
        assert_eq!(cuts(&[vec![]]), vec![0..1]);
        assert!(cuts(&[]).is_empty());
    }

    #[test]
    fn wide_dags_use_several_bitset_words() {
        // 100 independent roots joined by one stage, followed by a tail.
        let mut parents: Vec<Vec<usize>> = (0..100).map(|_| vec![]).collect();
        parents.push((0..100).collect());
        parents.push(vec![100]);
        assert_eq!(cuts(&parents), vec![0..100, 100..101, 101..102]);
    }
}
