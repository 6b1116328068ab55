//! Identifier newtypes, so that an agent id can never be passed where a task id is expected.
//!
//! Agent, framework-principal and master ids of connected peers come from their verified
//! certificates (DESIGN.md, principle 4); the ids here are what messages use to *refer* to them
//! and what the allocator keys its records by (`fullerene_proto` re-exports them).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// The text is shared, not copied, by clones: the master's state names each task and
        /// framework in several indexes, and a copy per index cost about 200 bytes per task.
        /// On the wire it is a plain string.
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
        pub struct $name(
            #[cfg_attr(feature = "arbitrary", proptest(strategy = "arbitrary_text()"))]
            pub Arc<str>,
        );

        impl $name {
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(Arc::from(s))
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(Arc::from(s))
            }
        }

        impl From<&String> for $name {
            fn from(s: &String) -> Self {
                $name(Arc::from(s.as_str()))
            }
        }
    };
}

/// Any string, for property tests of types that embed ids.
#[cfg(feature = "arbitrary")]
fn arbitrary_text() -> impl proptest::strategy::Strategy<Value = Arc<str>> {
    use proptest::strategy::Strategy;
    proptest::arbitrary::any::<String>().prop_map(Arc::from)
}

macro_rules! numeric_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

string_id!(
    /// An agent, named by the id in its certificate (e.g. `agent-3`).
    AgentId
);
string_id!(
    /// A registered framework. Assigned by the master at first subscription and kept across
    /// framework failovers.
    FrameworkId
);
string_id!(
    /// A task, named by its framework; unique within that framework.
    TaskId
);
numeric_id!(
    /// A master, which is also its Raft node id (non-zero).
    MasterId
);
numeric_id!(
    /// An offer, unique for the lifetime of the cluster (the leader's term is folded in).
    OfferId
);

/// A task's identity across the cluster: task ids are unique within their framework only, so
/// the master's task table, an agent's task table and its executors all key tasks by this pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct TaskKey {
    /// The task's framework.
    pub framework_id: FrameworkId,
    /// The task's id within it.
    pub task_id: TaskId,
}

impl TaskKey {
    /// The key of `task_id` of `framework_id`.
    pub fn new(framework_id: FrameworkId, task_id: TaskId) -> TaskKey {
        TaskKey {
            framework_id,
            task_id,
        }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.framework_id, self.task_id)
    }
}

/// FNV-1a over `parts`, each followed by a separator byte: a stable digest, the same in every
/// process, on every machine and in every version (unlike `std`'s randomly keyed hasher), for
/// what two processes compare (a framework's request and the masters' copy of it) or a run
/// records (the chaos checker's histories).
pub fn stable_digest(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
