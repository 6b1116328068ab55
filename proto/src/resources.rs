//! Multi-resource amounts: [`ResourceVec`] inside the schedulers, [`Resources`] on the wire.
//! They are defined in `fullerene_scheduling::resources`, with the fit rule that compares them,
//! and re-exported here because the wire types carry them.

pub use fullerene_scheduling::resources::*;
