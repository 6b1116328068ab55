//! The harnesses' one client of the masters' HTTP API: blocking HTTP/1.1 over TLS (rustls,
//! the ring provider, the cluster CA), one connection per request, each step within a timeout.
//! The chaos run's observer, the integration tests and `fullerene dev`'s checks use it.
//!
//! It authenticates as the masters require ([`fullerene_master::server::http::auth`]): with a
//! client certificate ([`ApiClient::with_certificate`], an operator's for the API to accept
//! it) or with a bearer token ([`ApiClient::with_token`]). It verifies the master as every
//! Fullerene client does: the certificate must chain to the cluster CA, name
//! [`MASTER_SERVER_NAME`](fullerene_transport::MASTER_SERVER_NAME) and have the master role.
//! Redirects are not followed: a follower's 307 is an answer the caller may want to see
//! ([`ApiClient::get_following`] follows one).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use fullerene_transport::{TlsMaterial, TransportError, MASTER_SERVER_NAME};
use rustls::pki_types::ServerName;

/// A client of the masters' HTTP API.
#[derive(Clone, Debug)]
pub struct ApiClient {
    /// `None`: plain HTTP (a master run with `--http-plaintext`).
    tls: Option<Arc<rustls::ClientConfig>>,
    token: Option<String>,
    timeout: Duration,
}

/// An answer: the status code, the response head (status line and headers) and the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiAnswer {
    /// The status code (0 if the status line did not parse).
    pub code: u16,
    /// The status line and the headers.
    pub head: String,
    /// The body.
    pub body: String,
}

impl ApiAnswer {
    /// The value of the first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }

    /// The body decoded as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.body)
    }
}

impl ApiClient {
    /// A client presenting `tls`'s certificate (an operator's, for the API to accept it).
    pub fn with_certificate(
        tls: &TlsMaterial,
        timeout: Duration,
    ) -> Result<ApiClient, TransportError> {
        Ok(ApiClient {
            tls: Some(Arc::new(tls.https_client_config(true)?)),
            token: None,
            timeout,
        })
    }

    /// A client presenting no certificate and `token` as a bearer token; `tls` supplies the
    /// cluster CA only.
    pub fn with_token(
        tls: &TlsMaterial,
        token: &str,
        timeout: Duration,
    ) -> Result<ApiClient, TransportError> {
        Ok(ApiClient {
            tls: Some(Arc::new(tls.https_client_config(false)?)),
            token: Some(token.to_string()),
            timeout,
        })
    }

    /// A client presenting no credentials at all (`tls` supplies the cluster CA only).
    pub fn anonymous(tls: &TlsMaterial, timeout: Duration) -> Result<ApiClient, TransportError> {
        Ok(ApiClient {
            tls: Some(Arc::new(tls.https_client_config(false)?)),
            token: None,
            timeout,
        })
    }

    /// A plain-HTTP client with an optional bearer token.
    pub fn plaintext(token: Option<&str>, timeout: Duration) -> ApiClient {
        ApiClient {
            tls: None,
            token: token.map(str::to_string),
            timeout,
        }
    }

    /// The same client with `timeout` for each step of a request.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> ApiClient {
        self.timeout = timeout;
        self
    }

    /// The same client with `token` as its bearer token.
    #[must_use]
    pub fn bearer(mut self, token: &str) -> ApiClient {
        self.token = Some(token.to_string());
        self
    }

    /// `GET path` from the master at `addr`.
    pub fn get(&self, addr: SocketAddr, path: &str) -> std::io::Result<ApiAnswer> {
        self.request("GET", addr, path, None)
    }

    /// `GET path`, following one redirect (a follower's to the leader).
    pub fn get_following(&self, addr: SocketAddr, path: &str) -> std::io::Result<ApiAnswer> {
        let answer = self.get(addr, path)?;
        if answer.code != 307 {
            return Ok(answer);
        }
        let location = answer.header("location").unwrap_or_default();
        let Some((leader, target)) = location
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('/'))
            .and_then(|(host, target)| Some((host.parse::<SocketAddr>().ok()?, target)))
        else {
            return Ok(answer);
        };
        self.get(leader, &format!("/{target}"))
    }

    /// `method path` to the master at `addr`, with `body` as JSON if given.
    pub fn request(
        &self,
        method: &str,
        addr: SocketAddr,
        path: &str,
        body: Option<&str>,
    ) -> std::io::Result<ApiAnswer> {
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        if let Some(token) = &self.token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        let body = body.unwrap_or("");
        if !body.is_empty() || method != "GET" {
            request.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        request.push_str(body);
        let raw = self.exchange(addr, request.as_bytes())?;
        Ok(parse_answer(&raw))
    }

    /// `method path` to the master at `addr` with `headers` (`Name: value` lines, without this
    /// client's token): for what [`ApiClient::request`] does not send, such as a browser's
    /// cookie, `Origin` and custom headers.
    pub fn request_with_headers(
        &self,
        method: &str,
        addr: SocketAddr,
        path: &str,
        headers: &[&str],
    ) -> std::io::Result<ApiAnswer> {
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for header in headers {
            request.push_str(header);
            request.push_str("\r\n");
        }
        if method != "GET" {
            request.push_str("Content-Length: 0\r\n");
        }
        request.push_str("\r\n");
        let raw = self.exchange(addr, request.as_bytes())?;
        Ok(parse_answer(&raw))
    }

    /// Sends `request` raw and reads until the server closes the connection.
    fn exchange(&self, addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
        let stream = TcpStream::connect_timeout(&addr, self.timeout)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        let mut response = Vec::new();
        match &self.tls {
            None => {
                let mut stream = stream;
                stream.write_all(request)?;
                read_until_closed(&mut stream, &mut response)?;
            }
            Some(config) => {
                let name = ServerName::try_from(MASTER_SERVER_NAME)
                    .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
                let connection = rustls::ClientConnection::new(Arc::clone(config), name)
                    .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
                let mut tls = rustls::StreamOwned::new(connection, stream);
                tls.write_all(request)?;
                tls.flush()?;
                read_until_closed(&mut tls, &mut response)?;
            }
        }
        Ok(response)
    }
}

/// Reads until the end of the stream; a peer that closes without TLS's close_notify after
/// sending something still ends the read (what it sent is kept).
fn read_until_closed(stream: &mut impl Read, into: &mut Vec<u8>) -> std::io::Result<()> {
    match stream.read_to_end(into) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == ErrorKind::UnexpectedEof && !into.is_empty() => Ok(()),
        Err(error) => Err(error),
    }
}

fn parse_answer(raw: &[u8]) -> ApiAnswer {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    ApiAnswer {
        code,
        head: head.to_string(),
        body: body.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_split_into_code_head_and_body() {
        let answer = parse_answer(
            b"HTTP/1.1 307 Temporary Redirect\r\nlocation: https://127.0.0.1:9/state\r\n\
              Content-Type: application/json\r\n\r\n{\"error\": \"x\"}",
        );
        assert_eq!(answer.code, 307);
        assert_eq!(answer.header("Location"), Some("https://127.0.0.1:9/state"));
        assert_eq!(answer.header("content-type"), Some("application/json"));
        assert_eq!(answer.header("allow"), None);
        assert_eq!(answer.body, "{\"error\": \"x\"}");
        assert_eq!(parse_answer(b"garbage").code, 0);
    }
}
