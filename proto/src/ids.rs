//! Identifier newtypes, so that an agent id can never be passed where a task id is expected.
//! They are defined in `fullerene_scheduling::ids` (the allocator keys its records by them) and
//! re-exported here because every message uses them.

pub use fullerene_scheduling::ids::*;
