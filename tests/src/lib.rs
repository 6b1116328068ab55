//! Cross-crate integration tests live in `tests/tests/`; this library holds their shared helpers.
//!
//! [`MasterCluster`] runs real `fullerene master` processes on loopback through
//! [`fullerene_chaos::LocalMasters`] (OS-chosen ports, development certificates and data
//! directories in a temporary directory, every process killed on drop), with the panicking
//! conveniences tests want.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fullerene_chaos::LocalMasters;
use fullerene_master::server::OperatorClient;

/// The `fullerene` binary the tests run.
///
/// Cargo provides `CARGO_BIN_EXE_<name>` only to the tests of the crate that defines the
/// binary, so from this crate it is found in this order: `$FULLERENE_BIN`; then
/// `fullerene` in the profile directory of the running test executable (tests run from
/// `<target>/<profile>/deps/`, the binary lives in `<target>/<profile>/`). Build it first:
/// `cargo build -p fullerene` (with the same profile and `CARGO_TARGET_DIR`).
pub fn fullerene_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FULLERENE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test executable has a path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in <target>/<profile>/deps");
    let binary = profile_dir.join(format!("fullerene{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} not found: run `cargo build -p fullerene` first, or set FULLERENE_BIN",
        binary.display()
    );
    binary
}

/// Real master processes on loopback, stopped (SIGKILL) when dropped. Derefs to
/// [`LocalMasters`] for everything that cannot fail.
pub struct MasterCluster(LocalMasters);

impl MasterCluster {
    /// Certificates for `max_masters` masters and one operator, and `founders` masters
    /// started (ids 1..=founders) as a new group.
    pub fn start(founders: u64, max_masters: u64) -> MasterCluster {
        MasterCluster::start_with(founders, max_masters, 0, &[])
    }

    /// [`MasterCluster::start`] with certificates for `agents` agents (and as many
    /// frameworks), and `master_flags` added to every master's command line.
    pub fn start_with(
        founders: u64,
        max_masters: u64,
        agents: u64,
        master_flags: &[&str],
    ) -> MasterCluster {
        let mut masters =
            LocalMasters::prepare(fullerene_binary(), founders, max_masters, agents, None)
                .expect("set up a local cluster");
        masters.extra_args = master_flags.iter().map(ToString::to_string).collect();
        masters.start_founders().expect("start the founders");
        MasterCluster(masters)
    }

    /// The command line that runs master `id` (`join` for a master added later).
    pub fn master_command(&self, id: u64, join: bool) -> Command {
        self.0.master_command(id, join).expect("a known master")
    }

    /// The command line of master `id` with neither `--bootstrap` nor `--join`.
    pub fn plain_master_command(&self, id: u64, join: bool) -> Command {
        self.0
            .plain_master_command(id, join)
            .expect("a known master")
    }

    /// Starts master `id` (again, after a kill: on the same data directory).
    pub fn spawn(&mut self, id: u64, join: bool) {
        self.0.spawn(id, join).expect("start fullerene master");
    }

    /// An operator client for the masters `ids` (must be called inside a tokio runtime).
    pub fn operator_client(&self, ids: &[u64], deadline: Duration) -> OperatorClient {
        self.0
            .operator_client(ids, deadline)
            .expect("an operator client")
    }

    /// Starts agent `n` with `extra` flags.
    pub fn spawn_agent(&mut self, n: u64, extra: &[&str]) {
        self.0.spawn_agent(n, extra).expect("start fullerene agent");
    }

    /// Every master's log, for a failing test's message.
    pub fn logs(&self) -> String {
        self.0.logs(40)
    }
}

impl Deref for MasterCluster {
    type Target = LocalMasters;

    fn deref(&self) -> &LocalMasters {
        &self.0
    }
}

impl DerefMut for MasterCluster {
    fn deref_mut(&mut self) -> &mut LocalMasters {
        &mut self.0
    }
}
