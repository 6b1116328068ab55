//! The web UI: one page of vanilla JavaScript, CSS and HTML under `ui/`, embedded in the binary
//! with `include_str!` (no npm, no build step, nothing fetched from the network), served at `/`
//! by every master. A follower redirects `/` to the leader's like every other route, so the
//! page and the API it reads share one origin. The page draws everything from the API's own
//! documents; the server renders nothing.
//!
//! # How a browser authenticates
//!
//! The page itself (`/`, `/ui/app.js`, `/ui/app.css`) is code everyone holding the binary has,
//! so it is served without credentials; every document it reads and every write it makes goes
//! through the API's authentication ([`super::auth`]) like `curl`'s. A browser can present:
//!
//! - **An operator client certificate**, imported into the browser: the TLS handshake carries
//!   it, as for any client; nothing more to do.
//! - **A session cookie holding a token.** Browsers cannot attach a bearer header to a page
//!   load or to `EventSource` (the events stream), so the page exchanges a token for a cookie:
//!   it posts the token (`POST /ui/session` with `Authorization: Bearer <token>`), the master
//!   verifies it as any bearer token and answers with `Set-Cookie: fullerene_session=<token>;
//!   HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=28800`. Later requests authenticate
//!   with the cookie exactly as with the header, so the token's scope (`read` or `write`) and
//!   its expiry apply, and revoking it in the token file ends the browser's session within
//!   [`RELOAD_CHECK`](super::auth::RELOAD_CHECK). The cookie holds the token itself rather than
//!   a server-side session id so that every master accepts it (they share the token file) and a
//!   failover loses no session; the price is the token in the browser's cookie store, where
//!   `HttpOnly` keeps it from every script (an injected one included), `SameSite=Strict` from
//!   every other site, `Secure` from plain HTTP (dropped only on a `--http-plaintext` master,
//!   which listens on loopback only) and `Max-Age` to a working day. `DELETE /ui/session`
//!   (the page's "Log out") clears it. Cookies are scoped by host, not port: other services on
//!   the master's host name see it, so give the UI a host of its own in production.
//! - **A one-time login link** from `fullerene dev`: `https://<leader>/#token=<token>`. The
//!   fragment is never sent to the server, nor in a `Referer`; the page posts it as above and
//!   removes it from the address bar and history at once.
//!
//! # Cross-site requests
//!
//! A write that a browser could send on another site's behalf is refused unless it carries
//! `X-Fullerene-CSRF: 1` ([`CSRF_HEADER`]): the check applies to every write authenticated by
//! the cookie and to every write that comes with an `Origin` header (browsers send one with
//! every cross-origin request and every `POST`, so this also covers a browser holding a client
//! certificate). A custom header cannot be added to a cross-site request without a CORS
//! preflight, which this API never grants; `SameSite=Strict` already keeps the cookie off such
//! requests, so this is the second of two locks. `curl`, the CLI and scripts send no `Origin`
//! and are not affected. The login itself needs the header too, so another site cannot log a
//! browser in under the site's token.
//!
//! # What the page reads
//!
//! `/state` (agents, frameworks, tasks, groups) and `/cluster` (the Raft group), and, where
//! the master serves them, `/events` (server-sent events, else polling), `/jobs` and
//! task logs (`/frameworks/{framework}/tasks/{task}/files/stdout`): a view whose endpoint
//! answers 404 says "not available on this master" instead of failing.

use bytes::Bytes;
use hyper::header::{
    HeaderValue, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, REFERRER_POLICY,
    SET_COOKIE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use hyper::{HeaderMap, Response};

use super::routes::Body;

/// The session cookie's name.
pub(crate) const SESSION_COOKIE: &str = "fullerene_session";

/// The header a browser's write must carry (see the module's "Cross-site requests").
pub(crate) const CSRF_HEADER: &str = "x-fullerene-csrf";

/// How long a session cookie lives: a working day.
const SESSION_MAX_AGE_SECS: u64 = 8 * 60 * 60;

/// One file of the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asset {
    /// The page (`/`).
    Index,
    /// Its script (`/ui/app.js`).
    Script,
    /// Its style sheet (`/ui/app.css`).
    Style,
}

impl Asset {
    fn content(self) -> (&'static str, &'static str) {
        match self {
            Asset::Index => (include_str!("ui/index.html"), "text/html; charset=utf-8"),
            Asset::Script => (include_str!("ui/app.js"), "text/javascript; charset=utf-8"),
            Asset::Style => (include_str!("ui/app.css"), "text/css; charset=utf-8"),
        }
    }
}

/// The page's content policy: its own script and style only (no inline script, so an injected
/// `<script>` does not run), its own origin for reads and writes, never framed.
const CONTENT_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// Serves `asset`, with headers that keep it from being framed, sniffed or cached stale.
pub(crate) fn asset(asset: Asset) -> Response<Body> {
    let (text, content_type) = asset.content();
    let mut response = Response::new(super::routes::full_body(Bytes::from_static(
        text.as_bytes(),
    )));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Revalidated every time: a new master binary serves a new page at once.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_POLICY),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// The token in the request's session cookie, if it has one.
pub(crate) fn session_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
}

/// Whether a write may proceed as far as cross-site requests go: it carries [`CSRF_HEADER`],
/// or it is neither cookie-authenticated nor sent by a browser (no `Origin`).
pub(crate) fn cross_site_safe(headers: &HeaderMap, by_cookie: bool) -> bool {
    let from_browser = by_cookie || headers.contains_key(hyper::header::ORIGIN);
    !from_browser || headers.get(CSRF_HEADER).is_some_and(|value| value == "1")
}

/// The `Set-Cookie` value that stores `token` (checked by the caller) as the session; without
/// `Secure` only for a plain-HTTP (loopback) master, where a browser would drop a secure one.
pub(crate) fn session_cookie(token: &str, secure: bool) -> Option<HeaderValue> {
    // A token is printable ASCII without `;`, `,` or spaces (generated ones are hex); anything
    // else would break the cookie's syntax, so it is refused rather than escaped.
    if !token
        .bytes()
        .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'))
    {
        return None;
    }
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={token}; HttpOnly{secure}; SameSite=Strict; Path=/; Max-Age={SESSION_MAX_AGE_SECS}"
    ))
    .ok()
}

/// The `Set-Cookie` value that ends the session.
pub(crate) fn cleared_cookie(secure: bool) -> HeaderValue {
    if secure {
        HeaderValue::from_static(
            "fullerene_session=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0",
        )
    } else {
        HeaderValue::from_static("fullerene_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
    }
}

/// Adds `cookie` to `response`.
pub(crate) fn with_cookie(mut response: Response<Body>, cookie: HeaderValue) -> Response<Body> {
    response.headers_mut().append(SET_COOKIE, cookie);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).expect("a header value"));
        }
        headers
    }

    #[test]
    fn the_session_token_is_found_among_other_cookies() {
        let found = headers(&[
            ("cookie", "theme=dark; fullerene_session=fullerene_ab12"),
            ("cookie", "other=1"),
        ]);
        assert_eq!(session_token(&found), Some("fullerene_ab12"));
        for missing in [
            headers(&[]),
            headers(&[("cookie", "fullerene_session=")]),
            headers(&[("cookie", "xfullerene_session=fullerene_ab12")]),
        ] {
            assert_eq!(session_token(&missing), None, "{missing:?}");
        }
    }

    #[test]
    fn browser_writes_need_the_custom_header_and_scripts_do_not() {
        assert!(cross_site_safe(&headers(&[]), false), "curl and the CLI");
        assert!(!cross_site_safe(&headers(&[]), true), "a cookie alone");
        assert!(!cross_site_safe(
            &headers(&[("origin", "https://evil.example")]),
            false
        ));
        assert!(!cross_site_safe(&headers(&[(CSRF_HEADER, "yes")]), true));
        assert!(cross_site_safe(&headers(&[(CSRF_HEADER, "1")]), true));
        assert!(cross_site_safe(
            &headers(&[("origin", "https://m1:8080"), (CSRF_HEADER, "1")]),
            false
        ));
    }

    #[test]
    fn the_session_cookie_is_locked_down_and_refuses_tokens_that_would_break_it() {
        let cookie = session_cookie("fullerene_0a1b", true).expect("a cookie");
        let cookie = cookie.to_str().expect("text");
        for attribute in [
            "fullerene_session=fullerene_0a1b;",
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Path=/",
        ] {
            assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
        }
        let plain = session_cookie("fullerene_0a1b", false).expect("a cookie");
        assert!(!plain.to_str().expect("text").contains("Secure"));
        for bad in ["a;b", "a b", "a,b", "a\"b", "é"] {
            assert!(session_cookie(bad, true).is_none(), "{bad}");
        }
        assert!(cleared_cookie(true)
            .to_str()
            .expect("text")
            .contains("Max-Age=0"));
    }

    #[test]
    fn every_asset_is_embedded_with_its_type_and_policy() {
        for (asset_kind, content_type) in [
            (Asset::Index, "text/html"),
            (Asset::Script, "text/javascript"),
            (Asset::Style, "text/css"),
        ] {
            let response = asset(asset_kind);
            let headers = response.headers();
            assert!(headers[CONTENT_TYPE]
                .to_str()
                .expect("text")
                .starts_with(content_type));
            assert!(headers[CONTENT_SECURITY_POLICY]
                .to_str()
                .expect("text")
                .contains("frame-ancestors 'none'"));
        }
        let (index, _) = Asset::Index.content();
        assert!(index.contains("/ui/app.js") && index.contains("/ui/app.css"));
        assert!(
            !index.contains("<script>"),
            "no inline script: the policy forbids it"
        );
    }
}
