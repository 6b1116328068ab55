//! The framework driver: connects to any master, follows the leader, subscribes (and
//! re-subscribes with the same id after a lost session, within the failover timeout), reconciles
//! after every (re)connection, acknowledges status updates, and hands offers and updates to a
//! [`Scheduler`] (DESIGN.md, "a task's life", steps 2, 4 and 6).
//!
//! - [`core`]: the sans-IO decisions (subscription state, call ids, pending calls, offers held,
//!   duplicate updates, what to re-send after a reconnect); where to connect next and when
//!   (redirects, backoff with jitter) is decided by `fullerene-client`'s `Follower`, the
//!   leader-following state machine every client shares;
//! - [`shell`]: the thin tokio shell over the mutual-TLS QUIC transport, and the
//!   [`Scheduler`] trait framework authors implement.
//!
//! ```no_run
//! # async fn example(tls: fullerene_transport::TlsMaterial) -> Result<(), fullerene_sdk::driver::DriverError> {
//! use fullerene_proto::messages::{Offer, StatusUpdate};
//! use fullerene_sdk::driver::{run, DriverConfig, DriverHandle, RunOptions, Scheduler};
//!
//! struct DeclineAll;
//! impl Scheduler for DeclineAll {
//!     fn offers(&mut self, driver: &mut DriverHandle, offers: Vec<Offer>) {
//!         driver.decline(offers.iter().map(|o| o.id).collect(), 5_000);
//!     }
//!     fn status_update(&mut self, _driver: &mut DriverHandle, _update: &StatusUpdate) {}
//! }
//! let config = DriverConfig::new(vec!["127.0.0.1:5051".parse().unwrap()], "example", "default");
//! run(config, &tls, RunOptions::default(), DeclineAll).await?;
//! # Ok(())
//! # }
//! ```

pub mod core;
pub mod shell;
#[cfg(test)]
mod tests;

pub use self::core::{Action, DriverConfig, DriverCore, DriverError, DriverEvent};
pub use self::shell::{deliver, run, run_with_client, DriverHandle, RunOptions, Scheduler};
