//! `GET /events` as a stream of server-sent events (`Accept: text/event-stream` or
//! `?follow=true`): each event is sent as `id:` its number, `event:` its kind and `data:` its
//! JSON ([`EventRecord`]); a client that reconnects with `Last-Event-ID` (browsers'
//! `EventSource` do it by themselves) or `?since=` resumes right after it, on whichever
//! master leads by then, since every master numbers events alike.
//!
//! The stream is fed from the master's ring of events ([`EventHub`]) by a task of its own,
//! through a small channel: a client that does not read stalls only that task, never the node
//! loop, and when it reads again and its place has fallen out of the ring it is sent an
//! `event: lagged` ([`EventsLagged`]) before the stream goes on from what the ring holds.
//!
//! A stream is bounded like every connection, deliberately differently: it sends a comment
//! line every [`HEARTBEAT`] so that proxies keep it open, and it ends by itself after
//! [`HttpLimits::stream_lifetime`](super::HttpLimits::stream_lifetime) (ten minutes by
//! default; the client reconnects and resumes), so it can outlive the ordinary connection
//! lifetime but never run forever. It also ends when this master stops leading, so that the
//! client's reconnection finds the new leader (a follower redirects `/events` as every read).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use fullerene_proto::http::{EventRecord, EventsLagged};
use hyper::body::Frame;
use tokio::sync::{mpsc, watch};

use crate::server::event_hub::EventHub;
use crate::server::LeaderView;

/// How often a quiet stream sends a comment line (proxies commonly close connections idle
/// for 30 to 60 seconds).
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(15);

/// Events copied out of the ring at a time.
const PAGE: usize = 256;

/// Chunks queued for the client before the feeding task waits for it.
const QUEUED_CHUNKS: usize = 16;

/// The body of an event stream: the chunks its feeding task sends, until the task ends.
#[derive(Debug)]
pub(crate) struct EventStreamBody {
    chunks: mpsc::Receiver<Bytes>,
}

impl hyper::body::Body for EventStreamBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.chunks
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// Starts feeding an event stream from `hub`: the events after `since`, or, without it, the
/// last `recent` and everything after. Returns the body to answer with.
pub(crate) fn start(
    hub: Arc<EventHub>,
    leader: watch::Receiver<LeaderView>,
    since: Option<u64>,
    recent: usize,
    lifetime: Duration,
) -> EventStreamBody {
    let (chunks, receiver) = mpsc::channel(QUEUED_CHUNKS);
    tokio::spawn(feed(hub, leader, since, recent, lifetime, chunks));
    EventStreamBody { chunks: receiver }
}

/// One event as a server-sent event.
pub(crate) fn event_chunk(record: &EventRecord) -> Bytes {
    let data = serde_json::to_string(record).unwrap_or_else(|_| "{}".to_string());
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        record.seq,
        record.event.kind()
    ))
}

async fn feed(
    hub: Arc<EventHub>,
    mut leader: watch::Receiver<LeaderView>,
    since: Option<u64>,
    recent: usize,
    lifetime: Duration,
    chunks: mpsc::Sender<Bytes>,
) {
    let end = tokio::time::Instant::now() + lifetime;
    // Tells `EventSource` to reconnect after a second when the stream ends.
    if chunks
        .send(Bytes::from_static(b"retry: 1000\n\n"))
        .await
        .is_err()
    {
        return;
    }
    let mut since = match since {
        Some(since) => since,
        None => {
            let latest = hub.read(None, recent);
            for record in &latest.events {
                if chunks.send(event_chunk(record)).await.is_err() {
                    return;
                }
            }
            latest
                .events
                .last()
                .map_or(latest.last, |record| record.seq)
        }
    };
    loop {
        let page = hub.read(Some(since), PAGE);
        if page.missed {
            let lagged = EventsLagged {
                since,
                floor: page.floor,
            };
            let data = serde_json::to_string(&lagged).unwrap_or_else(|_| "{}".to_string());
            let chunk = Bytes::from(format!("event: lagged\ndata: {data}\n\n"));
            if chunks.send(chunk).await.is_err() {
                return;
            }
            since = page.floor;
        }
        for record in &page.events {
            if chunks.send(event_chunk(record)).await.is_err() {
                return;
            }
            since = record.seq;
        }
        if page.more || page.missed {
            continue;
        }
        if !leader.borrow_and_update().is_self {
            return;
        }
        let now = tokio::time::Instant::now();
        if now >= end {
            return;
        }
        let patience = HEARTBEAT.min(end - now);
        tokio::select! {
            arrived = hub.wait_after(since, patience) => {
                if !arrived
                    && tokio::time::Instant::now() < end
                    && chunks.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err()
                {
                    return;
                }
            }
            changed = leader.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}
