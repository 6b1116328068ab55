//! A minimal W3C WebDriver client for the web UI's browser tests: starts `chromedriver` on a
//! free loopback port with headless Chromium, and offers the few commands the tests use
//! (navigate, find by CSS selector, read text, click, screenshot).
//!
//! Why not the `fantoccini` crate: its dependency tree (`webdriver`, `url`, `cookie`, ICU)
//! turns on more features of `syn`, which rebuilds every procedural macro and from there the
//! whole workspace, RocksDB's C++ included, whenever the tests are built beside the binary: a
//! second full build in CI for a client of a dozen JSON calls. This one is plain HTTP/1.1 over
//! a `TcpStream` (chromedriver listens on loopback only) and `serde_json`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one WebDriver command may take (a navigation waits for the page's load).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The key of an element reference in W3C WebDriver answers.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Headless Chromium driven through a `chromedriver` process this value owns: the session is
/// deleted and chromedriver killed when it is dropped.
pub struct Chromium {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

/// Where `name` is found on the `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

impl Chromium {
    /// Starts chromedriver (its output in `log`) and a headless Chromium session that accepts
    /// the cluster's self-signed certificates; `Err` says why it cannot run here (no
    /// `chromedriver` or `chromium` on the `PATH`, or no session).
    pub fn start(log: &Path) -> Result<Chromium, String> {
        let driver_path = on_path("chromedriver").ok_or(
            "chromedriver is not on the PATH (run scripts/install-browser as root: Debian's \
             chromium and chromium-driver)",
        )?;
        let browser = ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .find_map(on_path)
            .ok_or("no chromium on the PATH (run scripts/install-browser as root)")?;
        let addr = fullerene_chaos::free_loopback_tcp_addr()
            .map_err(|e| format!("no free port for chromedriver: {e}"))?;
        let output = std::fs::File::create(log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let errors = output.try_clone().map_err(|e| e.to_string())?;
        let driver = Command::new(&driver_path)
            .arg(format!("--port={}", addr.port()))
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", driver_path.display()))?;
        let mut chromium = Chromium {
            driver,
            addr,
            session: String::new(),
        };
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {
                "binary": browser,
                // Root in a container: no sandbox, and /dev/shm may be tiny.
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=1280,900"],
            },
        }}});
        let started = Instant::now();
        let session = loop {
            match chromium.command("POST", "/session", Some(&capabilities)) {
                Ok(value) => break value,
                Err(error) if started.elapsed() > COMMAND_TIMEOUT => {
                    return Err(format!("chromedriver started no session: {error}"));
                }
                // chromedriver takes a moment to listen.
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        chromium.session = session["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session id in {session}"))?
            .to_string();
        Ok(chromium)
    }

    /// Sends one command; its `value`, or the error WebDriver answered with.
    fn command(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect_timeout(&self.addr, COMMAND_TIMEOUT)
            .map_err(|e| format!("chromedriver: {e}"))?;
        stream
            .set_read_timeout(Some(COMMAND_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: \
             application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| format!("chromedriver: {e}"))?;
        // chromedriver keeps the connection open after its answer: read by Content-Length.
        let mut reader = BufReader::new(stream);
        let mut length = 0;
        let mut status = String::new();
        reader
            .read_line(&mut status)
            .map_err(|e| format!("chromedriver: {e}"))?;
        loop {
            let mut line = String::new();
            reader
                .read_line(&mut line)
                .map_err(|e| format!("chromedriver: {e}"))?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.trim().eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().map_err(|_| format!("bad {line}"))?;
                }
            }
        }
        let mut answer = vec![0; length];
        reader
            .read_exact(&mut answer)
            .map_err(|e| format!("chromedriver: {e}"))?;
        let answer: Value = serde_json::from_slice(&answer)
            .map_err(|e| format!("chromedriver answered {status}: {e}"))?;
        let value = answer["value"].clone();
        if status.split_whitespace().nth(1) == Some("200") {
            Ok(value)
        } else {
            Err(format!(
                "{}: {}",
                value["error"].as_str().unwrap_or(status.trim()),
                value["message"].as_str().unwrap_or("")
            ))
        }
    }

    fn session_command(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        self.command(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Opens `url` (and waits for the page to load).
    pub fn goto(&self, url: &str) -> Result<(), String> {
        self.session_command("POST", "/url", Some(&json!({ "url": url })))
            .map(drop)
    }

    /// The address bar's URL.
    pub fn url(&self) -> Result<String, String> {
        let url = self.session_command("GET", "/url", None)?;
        url.as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("not a URL: {url}"))
    }

    fn element(&self, css: &str) -> Result<String, String> {
        let found = self.session_command(
            "POST",
            "/element",
            Some(&json!({"using": "css selector", "value": css})),
        )?;
        found[ELEMENT_KEY]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("no element reference in {found}"))
    }

    /// The rendered text of the first element matching `css`.
    pub fn text(&self, css: &str) -> Result<String, String> {
        let element = self.element(css)?;
        let text = self.session_command("GET", &format!("/element/{element}/text"), None)?;
        Ok(text.as_str().unwrap_or_default().to_string())
    }

    /// Clicks the first element matching `css`.
    pub fn click(&self, css: &str) -> Result<(), String> {
        let element = self.element(css)?;
        self.session_command(
            "POST",
            &format!("/element/{element}/click"),
            Some(&json!({})),
        )
        .map(drop)
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Result<Vec<u8>, String> {
        let encoded = self.session_command("GET", "/screenshot", None)?;
        decode_base64(encoded.as_str().unwrap_or_default())
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            // Closes the browser; chromedriver is killed below whether or not it answers.
            let _ = self.command("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Decodes standard base64 (with padding), as WebDriver sends screenshots.
fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    fn sextet(byte: u8) -> Option<u32> {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        Some(u32::from(value))
    }
    let bytes: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().take_while(|&b| b != b'=').collect();
        let mut word = 0u32;
        for &byte in &data {
            word = (word << 6) | sextet(byte).ok_or_else(|| format!("not base64: {byte}"))?;
        }
        word <<= 6 * (4 - data.len() as u32);
        let produced = (data.len() * 6) / 8;
        out.extend_from_slice(&word.to_be_bytes()[1..=produced]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::decode_base64;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(decode_base64("aGVsbG8=").as_deref(), Ok(&b"hello"[..]));
        assert_eq!(decode_base64("aGk=").as_deref(), Ok(&b"hi"[..]));
        assert_eq!(decode_base64("YWJj").as_deref(), Ok(&b"abc"[..]));
        assert_eq!(
            decode_base64("iVBO\nRw0K").as_deref(),
            Ok(&b"\x89PNG\r\n"[..])
        );
        assert!(decode_base64("a$==").is_err());
    }
}
