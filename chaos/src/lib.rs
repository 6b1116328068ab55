//! Fault injection for Fullerene: a deterministic simulation of the whole protocol under a seed,
//! a runner of real processes that kills, pauses and partitions them, and the invariant checker
//! of DESIGN.md ("Failure model and invariants").
