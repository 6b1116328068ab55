//! A discrete-event simulator that drives the master's allocator and the SDK's scheduling
//! policies, unchanged, in virtual time over workload files (`shared/workloads/FORMAT.md`).
