//! Bounds on what one message may carry, so that every message the system sends fits the
//! codec's [`MAX_MESSAGE_BYTES`] however large the cluster grows.
//!
//! A message whose contents grow with the cluster (offers, listings, an agent's tasks) is
//! bounded by *count*, and where its items vary in size, by *bytes* as well: the sender splits
//! it into several frames or pages, and what no split can help (one task larger than a frame)
//! is refused where it enters, with an error naming the limit. A message over the codec's limit
//! is never produced: a session that tried would be closed and, on reconnecting, fail again in
//! the same way.

use crate::codec::{self, MAX_MESSAGE_BYTES};
use crate::messages::TaskSpec;

/// Offers per `MasterToFramework::Offers` frame; more are sent as several frames. An offer is
/// an agent's free resources and its attributes (at most [`MAX_ATTRIBUTES`] of at most
/// [`MAX_ATTRIBUTE_BYTES`] each), so 128 offers stay far below a frame.
pub const MAX_OFFERS_PER_FRAME: usize = 128;

/// Live tasks one agent may run at once: the master refuses launches beyond it. An agent
/// reports every task it holds when it registers, in one frame, and the master answers with
/// the tasks it must kill, in one frame: a report is a task key, a state and a sequence number
/// (`TaskReport`), at most about 270 bytes with ids of [`MAX_ID_BYTES`], so 10,000 of them
/// take under 2.7 MB of the frame's 4 MiB.
pub const MAX_TASKS_PER_AGENT: usize = 10_000;

/// Bytes of an identifier or name a client chooses: a task id, a framework or task name, a
/// group, an agent's hostname.
pub const MAX_ID_BYTES: usize = 128;

/// Attributes one agent may declare.
pub const MAX_ATTRIBUTES: usize = 64;

/// Bytes of one attribute's key or value.
pub const MAX_ATTRIBUTE_BYTES: usize = 256;

/// Encoded bytes of one task as launched (its command line and environment included): a
/// quarter of a frame, so that a task always fits a listing page, a launch and a status
/// report with room to spare.
pub const MAX_TASK_SPEC_BYTES: usize = MAX_MESSAGE_BYTES / 4;

/// Items per page of an operator listing (agents, frameworks, tasks).
pub const MAX_PAGE_ITEMS: usize = 1_000;

/// Encoded bytes of the items of one listing page: half a frame. A page ends before the item
/// that would cross it (but holds at least one item, and items are bounded well below it).
pub const MAX_PAGE_BYTES: usize = MAX_MESSAGE_BYTES / 2;

/// A value over one of these limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is {size} bytes, over the limit of {limit}")]
pub struct LimitError {
    /// What was too large (naming the item, e.g. "task `t1`'s id").
    pub what: String,
    /// Its size.
    pub size: usize,
    /// The limit.
    pub limit: usize,
}

/// Checks that `value` is at most `limit` bytes.
pub fn check_bytes(
    what: impl FnOnce() -> String,
    value: &str,
    limit: usize,
) -> Result<(), LimitError> {
    if value.len() > limit {
        return Err(LimitError {
            what: what(),
            size: value.len(),
            limit,
        });
    }
    Ok(())
}

/// Checks a task a framework asks to launch: its id and name within [`MAX_ID_BYTES`] and its
/// whole encoding within [`MAX_TASK_SPEC_BYTES`].
pub fn check_task_spec(spec: &TaskSpec) -> Result<(), LimitError> {
    check_bytes(|| "a task id".to_string(), spec.id.as_str(), MAX_ID_BYTES)?;
    check_bytes(
        || format!("the name of task `{}`", spec.id),
        &spec.name,
        MAX_ID_BYTES,
    )?;
    let size = codec::encoded_size(spec).map_err(|_| LimitError {
        what: format!("task `{}`", spec.id),
        size: usize::MAX,
        limit: MAX_TASK_SPEC_BYTES,
    })?;
    if size > MAX_TASK_SPEC_BYTES {
        return Err(LimitError {
            what: format!("task `{}` as encoded", spec.id),
            size,
            limit: MAX_TASK_SPEC_BYTES,
        });
    }
    Ok(())
}

/// Checks what an agent declares about itself: its hostname, its attributes.
pub fn check_agent_description(
    hostname: &str,
    attributes: &std::collections::BTreeMap<String, String>,
) -> Result<(), LimitError> {
    check_bytes(
        || "the agent's hostname".to_string(),
        hostname,
        MAX_ID_BYTES,
    )?;
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(LimitError {
            what: "the agent's attribute list (count)".to_string(),
            size: attributes.len(),
            limit: MAX_ATTRIBUTES,
        });
    }
    for (key, value) in attributes {
        check_bytes(
            || "an attribute's key".to_string(),
            key,
            MAX_ATTRIBUTE_BYTES,
        )?;
        check_bytes(
            || format!("attribute `{key}`'s value"),
            value,
            MAX_ATTRIBUTE_BYTES,
        )?;
    }
    Ok(())
}

/// Takes one listing page from `items` (keyed, in order, starting after the previous page):
/// at most [`MAX_PAGE_ITEMS`] items and [`MAX_PAGE_BYTES`] encoded bytes, but at least one
/// item. Returns the page and, when more items follow, the key of the page's last item (where
/// the next page starts after).
pub fn take_page<K, T: serde::Serialize>(
    items: impl IntoIterator<Item = (K, T)>,
) -> (Vec<T>, Option<K>) {
    let mut page = Vec::new();
    let mut bytes = 0usize;
    let mut last = None;
    for (key, item) in items {
        let size = codec::encoded_size(&item).unwrap_or(usize::MAX);
        if !page.is_empty()
            && (page.len() == MAX_PAGE_ITEMS || bytes.saturating_add(size) > MAX_PAGE_BYTES)
        {
            return (page, last);
        }
        bytes = bytes.saturating_add(size);
        page.push(item);
        last = Some(key);
    }
    (page, None)
}
