//! QUIC endpoints: the master's [`Server`], everyone's [`Client`], and the authenticated
//! [`Connection`] between them.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::VarInt;
use rustls::pki_types::CertificateDer;
use tokio::task::JoinSet;
use tokio::time::timeout;

use crate::config::TransportConfig;
use crate::identity::{IdentityError, PeerIdentity, Role};
use crate::session::{self, FramedRecv, FramedSend, Session, StreamErrorCode};
use crate::tls::{TlsMaterial, MASTER_SERVER_NAME};
use crate::TransportError;
use fullerene_proto::messages::SessionOpen;

/// Connection close code: an orderly close (shutdown, or the application is done).
pub const CLOSE_NORMAL: u32 = 0;

/// Connection close code: the peer's certificate passed TLS verification but its identity could
/// not be read. The verifiers refuse such certificates during the handshake, so this is a
/// defence in depth that should never be seen.
pub const CLOSE_NO_IDENTITY: u32 = 1;

/// A master's listening endpoint. Only a master certificate may serve.
///
/// Handshakes run in their own tasks, so one slow or silent stranger delays nobody else's
/// connection; at most `max_pending_handshakes` run at once and further attempts are refused.
#[derive(Debug)]
pub struct Server {
    endpoint: quinn::Endpoint,
    local_addr: SocketAddr,
    identity: PeerIdentity,
    config: Arc<TransportConfig>,
    handshakes: JoinSet<Result<Connection, TransportError>>,
    /// False once the endpoint is closed and yields no more incoming connections.
    accepting: bool,
}

impl Server {
    /// Binds a UDP socket on `addr` (port 0 lets the OS choose) and serves with `tls`, which
    /// must be a master's.
    pub fn bind(
        addr: SocketAddr,
        tls: &TlsMaterial,
        config: TransportConfig,
    ) -> Result<Server, TransportError> {
        config.validate()?;
        if tls.identity().role != Role::Master {
            return Err(TransportError::NotAMaster(tls.identity().clone()));
        }
        let crypto = QuicServerConfig::try_from(tls.server_config()?)
            .map_err(|e| TransportError::InvalidConfig(e.to_string()))?;
        let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server_config.transport_config(config.quinn_transport()?);
        let endpoint = udp_socket(addr)
            .and_then(|socket| {
                quinn::Endpoint::new(
                    quinn::EndpointConfig::default(),
                    Some(server_config),
                    socket,
                    Arc::new(quinn::TokioRuntime),
                )
            })
            .map_err(|source| TransportError::Bind { addr, source })?;
        let local_addr = endpoint
            .local_addr()
            .map_err(|source| TransportError::Bind { addr, source })?;
        tracing::info!(%local_addr, identity = %tls.identity(), "serving");
        Ok(Server {
            endpoint,
            local_addr,
            identity: tls.identity().clone(),
            config: Arc::new(config),
            handshakes: JoinSet::new(),
            accepting: true,
        })
    }

    /// The address the server listens on (with the OS-chosen port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This master's identity, from its certificate.
    pub fn identity(&self) -> &PeerIdentity {
        &self.identity
    }

    /// The next connection whose handshake finished: `Some(Ok)` for an authenticated peer,
    /// `Some(Err)` for one whose handshake failed (log it and call again), `None` once the
    /// server is closed and no handshake is left.
    ///
    /// Cancel-safe: a connection whose handshake completes while the future is dropped is
    /// returned by the next call.
    pub async fn accept(&mut self) -> Option<Result<Connection, TransportError>> {
        loop {
            if !self.accepting && self.handshakes.is_empty() {
                return None;
            }
            tokio::select! {
                Some(joined) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    return Some(joined.unwrap_or_else(|e| {
                        Err(TransportError::HandshakeTask(e.to_string()))
                    }));
                }
                incoming = self.endpoint.accept(), if self.accepting => match incoming {
                    None => self.accepting = false,
                    Some(incoming) if self.handshakes.len() >= self.config.max_pending_handshakes => {
                        tracing::warn!(
                            remote = %incoming.remote_address(),
                            limit = self.config.max_pending_handshakes,
                            "refusing a connection: too many handshakes in progress"
                        );
                        incoming.refuse();
                    }
                    Some(incoming) => {
                        self.handshakes.spawn(server_handshake(
                            incoming,
                            self.identity.clone(),
                            Arc::clone(&self.config),
                        ));
                    }
                },
                else => return None,
            }
        }
    }

    /// Closes every connection (code [`CLOSE_NORMAL`]) and stops accepting; `accept` then
    /// returns what handshakes remain, then `None`.
    pub fn close(&self) {
        self.endpoint
            .close(VarInt::from_u32(CLOSE_NORMAL), b"server shutting down");
    }

    /// Waits until every connection's close has been sent to its peer (after [`Server::close`]).
    pub async fn wait_idle(&self) {
        self.endpoint.wait_idle().await;
    }
}

async fn server_handshake(
    incoming: quinn::Incoming,
    local: PeerIdentity,
    config: Arc<TransportConfig>,
) -> Result<Connection, TransportError> {
    let addr = incoming.remote_address();
    let connecting = incoming
        .accept()
        .map_err(|source| TransportError::Handshake { addr, source })?;
    // Dropping `connecting` on timeout abandons the connection.
    let connection = timeout(config.handshake_timeout, connecting)
        .await
        .map_err(|_| TransportError::HandshakeTimeout {
            addr,
            timeout: config.handshake_timeout,
        })?
        .map_err(|source| TransportError::Handshake { addr, source })?;
    let connection = Connection::established(connection, local, config)?;
    tracing::debug!(%addr, peer = %connection.peer(), "connection accepted");
    Ok(connection)
}

/// A client endpoint: agents, frameworks, operators, and masters talking to other masters.
#[derive(Debug)]
pub struct Client {
    endpoint: quinn::Endpoint,
    client_config: quinn::ClientConfig,
    local_addr: SocketAddr,
    identity: PeerIdentity,
    config: Arc<TransportConfig>,
}

impl Client {
    /// A client on an OS-chosen port: dual-stack `[::]:0` where the host has IPv6, else
    /// `0.0.0.0:0`, so that both IPv4 and IPv6 masters are reachable where possible.
    pub fn new(tls: &TlsMaterial, config: TransportConfig) -> Result<Client, TransportError> {
        Client::bind((Ipv6Addr::UNSPECIFIED, 0).into(), tls, config.clone()).or_else(|error| {
            tracing::debug!(%error, "no IPv6 client socket; falling back to IPv4");
            Client::bind((Ipv4Addr::UNSPECIFIED, 0).into(), tls, config)
        })
    }

    /// A client on the given local address.
    pub fn bind(
        local: SocketAddr,
        tls: &TlsMaterial,
        config: TransportConfig,
    ) -> Result<Client, TransportError> {
        config.validate()?;
        let crypto = QuicClientConfig::try_from(tls.client_config()?)
            .map_err(|e| TransportError::InvalidConfig(e.to_string()))?;
        let mut client_config = quinn::ClientConfig::new(Arc::new(crypto));
        client_config.transport_config(config.quinn_transport()?);
        let endpoint = udp_socket(local)
            .and_then(|socket| {
                quinn::Endpoint::new(
                    quinn::EndpointConfig::default(),
                    None,
                    socket,
                    Arc::new(quinn::TokioRuntime),
                )
            })
            .map_err(|source| TransportError::Bind {
                addr: local,
                source,
            })?;
        let local_addr = endpoint
            .local_addr()
            .map_err(|source| TransportError::Bind {
                addr: local,
                source,
            })?;
        Ok(Client {
            endpoint,
            client_config,
            local_addr,
            identity: tls.identity().clone(),
            config: Arc::new(config),
        })
    }

    /// Connects to the master at `addr`, verifying that it holds a master certificate of the
    /// cluster CA valid for [`MASTER_SERVER_NAME`]. Which master it is: `connection.peer()`.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Connection, TransportError> {
        let connecting = self
            .endpoint
            .connect_with(self.client_config.clone(), addr, MASTER_SERVER_NAME)
            .map_err(|source| TransportError::Connect { addr, source })?;
        let connection = timeout(self.config.handshake_timeout, connecting)
            .await
            .map_err(|_| TransportError::HandshakeTimeout {
                addr,
                timeout: self.config.handshake_timeout,
            })?
            .map_err(|source| TransportError::Handshake { addr, source })?;
        Connection::established(connection, self.identity.clone(), Arc::clone(&self.config))
    }

    /// The local address of the client's socket.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This process's identity, from its certificate.
    pub fn identity(&self) -> &PeerIdentity {
        &self.identity
    }

    /// Closes every connection of this client (code [`CLOSE_NORMAL`]).
    pub fn close(&self) {
        self.endpoint
            .close(VarInt::from_u32(CLOSE_NORMAL), b"client shutting down");
    }

    /// Waits until every connection's close has been sent to its peer (after [`Client::close`]).
    pub async fn wait_idle(&self) {
        self.endpoint.wait_idle().await;
    }
}

/// An authenticated connection. Cheap to clone; the connection closes when the last clone is
/// dropped or [`Connection::close`] is called.
#[derive(Clone, Debug)]
pub struct Connection {
    inner: quinn::Connection,
    peer: PeerIdentity,
    local: PeerIdentity,
    config: Arc<TransportConfig>,
}

impl Connection {
    /// Wraps a connection whose handshake succeeded, reading the peer's identity from its
    /// verified certificate.
    fn established(
        inner: quinn::Connection,
        local: PeerIdentity,
        config: Arc<TransportConfig>,
    ) -> Result<Connection, TransportError> {
        let peer = peer_identity(&inner).inspect_err(|error| {
            let reason = format!("no usable identity: {error}");
            inner.close(VarInt::from_u32(CLOSE_NO_IDENTITY), reason.as_bytes());
        })?;
        Ok(Connection {
            inner,
            peer,
            local,
            config,
        })
    }

    /// The peer, as its verified certificate names it.
    pub fn peer(&self) -> &PeerIdentity {
        &self.peer
    }

    /// This side's identity, from its own certificate.
    pub fn local_identity(&self) -> &PeerIdentity {
        &self.local
    }

    /// The peer's address.
    pub fn remote_address(&self) -> SocketAddr {
        self.inner.remote_address()
    }

    /// Opens a session of `kind` (client side): a new stream, the `SessionOpen` frame, and the
    /// master's answer, within `handshake_timeout`.
    ///
    /// A refusal is [`TransportError::SessionRefused`] carrying the master's `WireError`.
    pub async fn open_session(&self, kind: SessionOpen) -> Result<Session, TransportError> {
        let (send, recv) = self.inner.open_bi().await?;
        let mut tx = FramedSend::new(send, self.config.max_frame_bytes);
        let mut rx = FramedRecv::new(recv, self.config.max_frame_bytes);
        match timeout(
            self.config.handshake_timeout,
            session::client_open(&kind, &mut tx, &mut rx),
        )
        .await
        {
            Ok(Ok(())) => Ok(Session {
                kind,
                peer: self.peer.clone(),
                tx,
                rx,
            }),
            Ok(Err(error)) => Err(error),
            Err(_) => {
                tx.reset(StreamErrorCode::SessionOpenTimeout);
                rx.stop(StreamErrorCode::SessionOpenTimeout);
                Err(TransportError::SessionOpenTimeout(
                    self.config.handshake_timeout,
                ))
            }
        }
    }

    /// The next session the peer opens that its role allows (server side).
    ///
    /// Streams whose `SessionOpen` is refused, malformed or late (over `handshake_timeout`) are
    /// answered and closed here, logged, and skipped; an error means the connection is gone.
    /// Opens are handled one at a time: a peer that stalls its own open delays only its own
    /// next sessions, by at most `handshake_timeout`.
    pub async fn accept_session(&self) -> Result<Session, TransportError> {
        loop {
            let (send, recv) = self.inner.accept_bi().await?;
            let mut tx = FramedSend::new(send, self.config.max_frame_bytes);
            let mut rx = FramedRecv::new(recv, self.config.max_frame_bytes);
            match timeout(
                self.config.handshake_timeout,
                session::server_open(&self.peer, &mut tx, &mut rx),
            )
            .await
            {
                Ok(Ok(kind)) => {
                    return Ok(Session {
                        kind,
                        peer: self.peer.clone(),
                        tx,
                        rx,
                    })
                }
                Ok(Err(TransportError::ConnectionLost(error))) => {
                    return Err(TransportError::ConnectionLost(error))
                }
                Ok(Err(error)) => {
                    tracing::warn!(peer = %self.peer, %error, "session not opened");
                }
                Err(_) => {
                    tx.reset(StreamErrorCode::SessionOpenTimeout);
                    rx.stop(StreamErrorCode::SessionOpenTimeout);
                    tracing::warn!(
                        peer = %self.peer,
                        timeout = ?self.config.handshake_timeout,
                        "session not opened: no SessionOpen in time"
                    );
                }
            }
        }
    }

    /// Closes the connection with [`CLOSE_NORMAL`] and `reason`; every session fails.
    pub fn close(&self, reason: &str) {
        self.inner
            .close(VarInt::from_u32(CLOSE_NORMAL), reason.as_bytes());
    }

    /// Waits until the connection closes and says why: [`quinn::ConnectionError::TimedOut`]
    /// when the peer went silent for `idle_timeout`.
    pub async fn closed(&self) -> quinn::ConnectionError {
        self.inner.closed().await
    }

    /// Why the connection closed, or `None` while it is open.
    pub fn close_reason(&self) -> Option<quinn::ConnectionError> {
        self.inner.close_reason()
    }
}

/// The kernel buffer asked for on each side of an endpoint's UDP socket. A master's one socket
/// carries every agent, framework, operator and peer: with Linux's default 208 KiB receive
/// buffer, `fullerene bench raft` at 256 clients overflowed it about 90 times a second (the
/// kernel's `RcvbufErrors`), each drop a QUIC retransmission a probe timeout later. The kernel
/// caps the request at `net.core.rmem_max` / `wmem_max`.
pub(crate) const SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// A UDP socket bound on `addr` with [`SOCKET_BUFFER_BYTES`] of buffer each way (as far as the
/// kernel allows: a smaller buffer is not an error), dual-stack when `addr` is IPv6, as
/// `quinn::Endpoint::client` makes it.
fn udp_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        if let Err(error) = socket.set_only_v6(false) {
            tracing::debug!(%error, "the socket stays IPv6 only");
        }
    }
    if let Err(error) = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES) {
        tracing::warn!(%error, "the UDP socket keeps the kernel's default receive buffer");
    }
    if let Err(error) = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES) {
        tracing::warn!(%error, "the UDP socket keeps the kernel's default send buffer");
    }
    // Linux reports twice what it granted (the other half is its bookkeeping).
    if let Ok(granted) = socket.recv_buffer_size() {
        if granted / 2 < SOCKET_BUFFER_BYTES {
            tracing::info!(
                granted_kib = granted / 2 / 1024,
                asked_kib = SOCKET_BUFFER_BYTES / 1024,
                "the kernel capped the UDP receive buffer (net.core.rmem_max): a busy master \
                 may drop datagrams; raise it for large clusters"
            );
        }
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

fn peer_identity(connection: &quinn::Connection) -> Result<PeerIdentity, TransportError> {
    let chain = connection
        .peer_identity()
        .and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or(IdentityError::NoIdentity)?;
    let leaf = chain.first().ok_or(IdentityError::NoIdentity)?;
    Ok(PeerIdentity::from_certificate(leaf)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The socket gets the buffer asked for, as far as `net.core.rmem_max` lets it (where the
    /// cap is the kernel's default, this cannot tell; CI's machines allow 4 MiB).
    #[cfg(target_os = "linux")]
    #[test]
    fn an_endpoint_socket_asks_the_kernel_for_a_large_receive_buffer() {
        let cap: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .expect("rmem_max")
            .trim()
            .parse()
            .expect("a number");
        let socket = socket2::Socket::from(udp_socket("127.0.0.1:0".parse().unwrap()).unwrap());
        let granted = socket.recv_buffer_size().expect("its buffer") / 2;
        assert_eq!(granted, SOCKET_BUFFER_BYTES.min(cap));
        // IPv6 sockets get the same (where the machine has IPv6 at all).
        if let Ok(v6) = udp_socket("[::1]:0".parse().unwrap()) {
            let v6 = socket2::Socket::from(v6);
            assert_eq!(v6.recv_buffer_size().expect("its buffer") / 2, granted);
        }
    }
}
