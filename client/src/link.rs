//! An open session to one master: connecting and opening it within a time limit.

use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::messages::SessionOpen;
use fullerene_transport::{Client, Connection, Session, TransportError};

/// A session of some kind opened on a connection to one master. The connection is held so that
/// it stays open while the session is used.
#[derive(Debug)]
pub struct Link {
    /// The master.
    pub addr: SocketAddr,
    /// The connection the session runs on.
    pub connection: Connection,
    /// The session.
    pub session: Session,
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The connection or the session was not open in time (a master that is down must not use
    /// up a caller's whole deadline while others are up).
    #[error("no connection within {0:?}")]
    TimedOut(Duration),
    /// The connection or the session open failed (unreachable, refused, TLS).
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Connects to `addr` and opens a session of `kind` on the connection, within `within`.
pub async fn open(
    client: &Client,
    addr: SocketAddr,
    kind: SessionOpen,
    within: Duration,
) -> Result<Link, OpenError> {
    let open = async {
        let connection = client.connect(addr).await?;
        let session = connection.open_session(kind).await?;
        Ok::<_, TransportError>(Link {
            addr,
            connection,
            session,
        })
    };
    Ok(tokio::time::timeout(within, open)
        .await
        .map_err(|_| OpenError::TimedOut(within))??)
}
