//! A minimal etcd v3 client: unary gRPC over HTTP/2 (hyper's client) with mutual TLS
//! (tokio-rustls), for the two calls the Raft benchmark makes, `KV/Put` and
//! `Maintenance/Status`, their messages encoded and decoded with rust-protobuf's coded
//! streams.
//!
//! Why not the `etcd-client` crate: it generates its code at build time with tonic's build
//! step, which needs `protoc` (absent here and on a plain CI image) and brings tonic, prost and
//! tower into the build. Two unary calls over the HTTP/2 stack the workspace already compiles
//! (hyper and h2, for the masters' HTTP API and metrics) and the protobuf runtime raft-rs
//! already uses add no crate to the build and keep it offline.
//!
//! gRPC on HTTP/2: a `POST` to `/<package>.<Service>/<Method>` with `content-type:
//! application/grpc`, the message prefixed by a compression flag (0) and its length (4 bytes,
//! big endian); the answer carries the same framing and ends with the `grpc-status` trailer
//! (0 for success), or is a headers-only answer with `grpc-status` when the call failed at once.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper::header::HeaderMap;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use protobuf::wire_format::WireType;
use protobuf::{CodedInputStream, CodedOutputStream};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

/// `etcdserverpb.KV/Put`.
const PUT_PATH: &str = "/etcdserverpb.KV/Put";
/// `etcdserverpb.Maintenance/Status`.
const STATUS_PATH: &str = "/etcdserverpb.Maintenance/Status";

/// The gRPC status etcd answers with when a member knows no leader (`Unavailable`).
pub const GRPC_UNAVAILABLE: u32 = 14;

/// Why an etcd call failed.
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    /// The TCP connection could not be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The member.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS handshake failed (a certificate refused on either side, most often).
    #[error("TLS handshake with {addr} failed: {source}")]
    Tls {
        /// The member.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The HTTP/2 connection or stream failed (the member closed it, or died).
    #[error("HTTP/2 with {addr}: {source}")]
    Http {
        /// The member.
        addr: SocketAddr,
        /// The error.
        source: hyper::Error,
    },
    /// The member answered the call with a gRPC error.
    #[error("{addr} answered gRPC status {code}: {message}")]
    Status {
        /// The member.
        addr: SocketAddr,
        /// The gRPC status code (14 `Unavailable`: no leader, for instance).
        code: u32,
        /// `grpc-message`, as sent.
        message: String,
    },
    /// The answer is not a well-formed gRPC answer of the expected message.
    #[error("malformed answer from {addr}: {reason}")]
    Malformed {
        /// The member.
        addr: SocketAddr,
        /// What is wrong.
        reason: String,
    },
}

/// `etcdserverpb.ResponseHeader`: which member answered, in which term, at which revision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponseHeader {
    /// The cluster's id.
    pub cluster_id: u64,
    /// The answering member's id.
    pub member_id: u64,
    /// The key-value store's revision after the call.
    pub revision: i64,
    /// The member's Raft term.
    pub raft_term: u64,
}

/// The part of `etcdserverpb.StatusResponse` the benchmark reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberStatus {
    /// Who answered (`member_id`) and its term.
    pub header: ResponseHeader,
    /// The member id of the leader this member knows (0: none).
    pub leader: u64,
    /// The index of the member's last Raft log entry.
    pub raft_index: u64,
    /// The member's Raft term.
    pub raft_term: u64,
}

impl MemberStatus {
    /// Whether the answering member is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader != 0 && self.leader == self.header.member_id
    }
}

/// An HTTP/2 connection to one etcd member, carrying any number of calls one after the other
/// (a benchmark client is one connection making one call at a time, like the masters' clients).
pub struct EtcdClient {
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
    uri_base: String,
    /// Drives the connection; aborted when the client is dropped.
    connection: JoinHandle<()>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for EtcdClient {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl EtcdClient {
    /// Connects to the member at `addr` with `tls` (which must offer ALPN `h2`), verifying
    /// its certificate for `server_name`; must be called inside a tokio runtime.
    pub async fn connect(
        addr: SocketAddr,
        tls: Arc<rustls::ClientConfig>,
        server_name: ServerName<'static>,
    ) -> Result<EtcdClient, GrpcError> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| GrpcError::Connect { addr, source })?;
        // One small call at a time: Nagle's algorithm would hold each back for an ACK.
        tcp.set_nodelay(true)
            .map_err(|source| GrpcError::Connect { addr, source })?;
        let stream = TlsConnector::from(tls)
            .connect(server_name, tcp)
            .await
            .map_err(|source| GrpcError::Tls { addr, source })?;
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|source| GrpcError::Http { addr, source })?;
        let connection = tokio::spawn(async move {
            // The connection's end shows up as an error of the next call.
            let _ = connection.await;
        });
        Ok(EtcdClient {
            addr,
            sender,
            uri_base: format!("https://{addr}"),
            connection,
        })
    }

    /// The member's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Puts `value` under `key`; answered once the put is committed and applied.
    pub async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<ResponseHeader, GrpcError> {
        let answer = self.unary(PUT_PATH, put_request(key, value)).await?;
        let addr = self.addr;
        decode_put_response(&answer).map_err(|reason| GrpcError::Malformed { addr, reason })
    }

    /// The member's status: its id, the leader it knows, its log index and term.
    pub async fn status(&mut self) -> Result<MemberStatus, GrpcError> {
        let answer = self.unary(STATUS_PATH, Vec::new()).await?;
        let addr = self.addr;
        decode_status_response(&answer).map_err(|reason| GrpcError::Malformed { addr, reason })
    }

    /// One unary call: `message` (encoded) to `path`; the answer's message bytes.
    async fn unary(&mut self, path: &str, message: Vec<u8>) -> Result<Bytes, GrpcError> {
        let addr = self.addr;
        let malformed = |reason: String| GrpcError::Malformed { addr, reason };
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}{path}", self.uri_base))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            // etcd's "require leader" metadata: a member that knows no leader answers
            // Unavailable at once instead of holding the call until its own timeout.
            .header("hasleader", "true")
            .body(Full::new(grpc_frame(&message)))
            .map_err(|e| malformed(format!("cannot build the request: {e}")))?;
        self.sender
            .ready()
            .await
            .map_err(|source| GrpcError::Http { addr, source })?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|source| GrpcError::Http { addr, source })?;
        let (parts, body) = response.into_parts();
        if parts.status != StatusCode::OK {
            return Err(malformed(format!("HTTP status {}", parts.status)));
        }
        // A call that fails at once is answered with headers only.
        check_grpc_status(addr, &parts.headers)?;
        let collected = body
            .collect()
            .await
            .map_err(|source| GrpcError::Http { addr, source })?;
        match collected.trailers() {
            Some(trailers) => check_grpc_status(addr, trailers)?,
            None => return Err(malformed("no grpc-status trailer".to_string())),
        }
        if parts.headers.get("grpc-status").is_some() {
            return Err(malformed("a headers-only answer said success".to_string()));
        }
        unframe(&collected.to_bytes()).map_err(malformed)
    }
}

/// An error unless `headers` hold no `grpc-status` or status 0.
fn check_grpc_status(addr: SocketAddr, headers: &HeaderMap) -> Result<(), GrpcError> {
    let Some(status) = headers.get("grpc-status") else {
        return Ok(());
    };
    let code = status
        .to_str()
        .ok()
        .and_then(|text| text.parse::<u32>().ok())
        .ok_or_else(|| GrpcError::Malformed {
            addr,
            reason: format!("grpc-status {status:?}"),
        })?;
    if code == 0 {
        return Ok(());
    }
    let message = headers
        .get("grpc-message")
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .unwrap_or_default();
    Err(GrpcError::Status {
        addr,
        code,
        message,
    })
}

/// `message` with gRPC's length prefix (uncompressed).
fn grpc_frame(message: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.put_u8(0);
    frame.put_u32(message.len() as u32);
    frame.put_slice(message);
    frame.freeze()
}

/// The one message of a unary answer's body.
fn unframe(body: &[u8]) -> Result<Bytes, String> {
    let [compressed, a, b, c, d, rest @ ..] = body else {
        return Err(format!("a body of {} bytes has no gRPC frame", body.len()));
    };
    if *compressed != 0 {
        return Err("a compressed answer (none was asked for)".to_string());
    }
    let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
    if rest.len() != len {
        return Err(format!(
            "the frame says {len} bytes, the body holds {}",
            rest.len()
        ));
    }
    Ok(Bytes::copy_from_slice(rest))
}

/// `etcdserverpb.PutRequest { key = 1, value = 2 }`, encoded.
pub fn put_request(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(put_request_len(key.len(), value.len()));
    let mut stream = CodedOutputStream::vec(&mut out);
    // Writing to a vector cannot fail.
    let written = stream
        .write_bytes(1, key)
        .and_then(|()| stream.write_bytes(2, value))
        .and_then(|()| stream.flush());
    debug_assert!(written.is_ok());
    drop(stream);
    out
}

/// The encoded size of a `PutRequest` with a key and a value of these sizes.
pub fn put_request_len(key: usize, value: usize) -> usize {
    let field = |len: usize| {
        protobuf::rt::tag_size(1) as usize
            + protobuf::rt::compute_raw_varint64_size(len as u64) as usize
            + len
    };
    field(key) + field(value)
}

/// Reads the fields of one message: `on_field(number, value)` for each varint or
/// length-delimited field (other wire types are skipped).
fn read_fields(
    bytes: &[u8],
    mut on_field: impl FnMut(u32, FieldValue<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let mut input = CodedInputStream::from_bytes(bytes);
    while !input.eof().map_err(|e| e.to_string())? {
        let (number, wire_type) = input.read_tag_unpack().map_err(|e| e.to_string())?;
        match wire_type {
            WireType::WireTypeVarint => {
                let value = input.read_uint64().map_err(|e| e.to_string())?;
                on_field(number, FieldValue::Varint(value))?;
            }
            WireType::WireTypeLengthDelimited => {
                let value = input.read_bytes().map_err(|e| e.to_string())?;
                on_field(number, FieldValue::Bytes(&value))?;
            }
            _ => input.skip_field(wire_type).map_err(|e| e.to_string())?,
        }
    }
    Ok(())
}

/// One field's value, as [`read_fields`] hands it over.
enum FieldValue<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn decode_header(bytes: &[u8]) -> Result<ResponseHeader, String> {
    let mut header = ResponseHeader::default();
    read_fields(bytes, |number, value| {
        if let FieldValue::Varint(value) = value {
            match number {
                1 => header.cluster_id = value,
                2 => header.member_id = value,
                // int64 on the wire: a varint of the two's complement.
                3 => header.revision = value as i64,
                4 => header.raft_term = value,
                _ => {}
            }
        }
        Ok(())
    })?;
    Ok(header)
}

/// `PutResponse { header = 1, prev_kv = 2 }`: the header.
fn decode_put_response(bytes: &[u8]) -> Result<ResponseHeader, String> {
    let mut header = None;
    read_fields(bytes, |number, value| {
        if let (1, FieldValue::Bytes(bytes)) = (number, value) {
            header = Some(decode_header(bytes)?);
        }
        Ok(())
    })?;
    header.ok_or_else(|| "a PutResponse without a header".to_string())
}

/// `StatusResponse { header = 1, version = 2, dbSize = 3, leader = 4, raftIndex = 5,
/// raftTerm = 6, ... }`.
fn decode_status_response(bytes: &[u8]) -> Result<MemberStatus, String> {
    let mut status = MemberStatus::default();
    let mut has_header = false;
    read_fields(bytes, |number, value| {
        match (number, value) {
            (1, FieldValue::Bytes(bytes)) => {
                status.header = decode_header(bytes)?;
                has_header = true;
            }
            (4, FieldValue::Varint(value)) => status.leader = value,
            (5, FieldValue::Varint(value)) => status.raft_index = value,
            (6, FieldValue::Varint(value)) => status.raft_term = value,
            _ => {}
        }
        Ok(())
    })?;
    if !has_header {
        return Err("a StatusResponse without a header".to_string());
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_request_is_two_length_delimited_fields_of_the_stated_size() {
        let request = put_request(b"key", &[7u8; 200]);
        assert_eq!(request.len(), put_request_len(3, 200));
        // Field 1, wire type 2, length 3; field 2, wire type 2, length 200 (two varint bytes).
        assert_eq!(&request[..5], &[0x0a, 3, b'k', b'e', b'y']);
        assert_eq!(&request[5..8], &[0x12, 0xc8, 0x01]);
        assert_eq!(request.len(), 5 + 3 + 200);
    }

    #[test]
    fn a_status_response_is_read_with_unknown_fields_skipped() {
        let mut header = Vec::new();
        let mut stream = CodedOutputStream::vec(&mut header);
        stream.write_uint64(1, 11).unwrap();
        stream.write_uint64(2, 22).unwrap();
        stream.write_int64(3, 33).unwrap();
        stream.write_uint64(4, 4).unwrap();
        stream.flush().unwrap();
        drop(stream);
        let mut message = Vec::new();
        let mut stream = CodedOutputStream::vec(&mut message);
        stream.write_bytes(1, &header).unwrap();
        stream.write_string(2, "3.4.23").unwrap();
        stream.write_fixed64(99, 5).unwrap();
        stream.write_uint64(4, 22).unwrap();
        stream.write_uint64(5, 1234).unwrap();
        stream.write_uint64(6, 4).unwrap();
        stream.flush().unwrap();
        drop(stream);
        let status = decode_status_response(&message).unwrap();
        assert_eq!(
            status,
            MemberStatus {
                header: ResponseHeader {
                    cluster_id: 11,
                    member_id: 22,
                    revision: 33,
                    raft_term: 4,
                },
                leader: 22,
                raft_index: 1234,
                raft_term: 4,
            }
        );
        assert!(status.is_leader());
        assert!(decode_put_response(&[]).is_err());
    }

    #[test]
    fn frames_carry_their_length_and_refuse_a_mismatch() {
        let frame = grpc_frame(b"abc");
        assert_eq!(&frame[..], &[0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(&unframe(&frame).unwrap()[..], b"abc");
        assert!(unframe(&frame[..7]).is_err());
        assert!(unframe(&[1, 0, 0, 0, 0]).is_err());
    }
}
