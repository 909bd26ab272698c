//! Who may use the live view: the holder of its random 128-bit token. The token, given once in
//! the URL, is exchanged for an HttpOnly, SameSite=Strict cookie; every request after must carry
//! it (compared in constant time). `Host` must name the address served (or `localhost` on
//! loopback) and `Origin`, when sent, the same origin: a page of another site, or a name that DNS
//! rebinding points at this address, gets 403.
use std::net::SocketAddr;

use super::http::Request;

/// What to do with a request, as far as who sent it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it.
    Allowed,
    /// The right token in the URL: set the cookie and send the browser to `path` without it.
    Exchange { path: String },
    /// 403, and why (for the debug log; the client is told no more).
    Forbidden(&'static str),
}

/// The token and the names this server answers to.
pub struct Guard {
    token: String,
    cookie: String,
    /// `Host` values accepted: `IP:PORT` as bound (`[IP]:PORT` for IPv6), and `localhost:PORT` on
    /// loopback.
    hosts: Vec<String>,
    /// Bound to every address (0.0.0.0 or ::): any IP address with the port is its own (a name
    /// is not: DNS rebinding needs one).
    any_ip: Option<u16>,
    /// The URL printed for the user, token included.
    url: String,
}

/// 16 random bytes from the kernel's generator (getrandom(2)).
fn random_token() -> std::io::Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `bytes`, which lives
        // through the call; getrandom writes at most that many bytes.
        let n = unsafe { libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        filled += n as usize;
    }
    Ok(bytes)
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    // black_box keeps the compiler from ending the fold early.
    std::hint::black_box(diff) == 0
}

impl Guard {
    /// A guard with a new token for the server bound at `addr`.
    pub fn new(addr: SocketAddr) -> std::io::Result<Guard> {
        let token: String = random_token()?.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Guard::with_token(addr, token))
    }

    fn with_token(addr: SocketAddr, token: String) -> Guard {
        let port = addr.port();
        let mut hosts = vec![addr.to_string()];
        if addr.ip().is_loopback() {
            hosts.push(format!("localhost:{port}"));
        }
        Guard {
            url: format!("http://{addr}/?token={token}"),
            // Cookies are kept per host, not per port: two captures on one host keep their own.
            cookie: format!("xtrace_live_{port}"),
            token,
            hosts,
            any_ip: addr.ip().is_unspecified().then_some(port),
        }
    }

    /// The URL to open, token included.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `Set-Cookie` header line that holds the token.
    pub fn set_cookie(&self) -> String {
        format!(
            "Set-Cookie: {}={}; HttpOnly; SameSite=Strict; Path=/\r\n",
            self.cookie, self.token
        )
    }

    /// Whether `host` (`Host`'s value, or an origin without its scheme) names this server.
    fn ours(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h == host)
            || self
                .any_ip
                .is_some_and(|port| host.parse::<SocketAddr>().is_ok_and(|a| a.port() == port))
    }

    /// Whether `request` may be served: its `Host`, its `Origin`, then its token (in the URL) or
    /// cookie.
    pub fn check(&self, request: &Request) -> Verdict {
        if request.header_count("host") != 1 {
            return Verdict::Forbidden("no Host, or more than one");
        }
        let host = request.header("host").unwrap_or_default().to_ascii_lowercase();
        if !self.ours(&host) {
            return Verdict::Forbidden("foreign Host");
        }
        if let Some(origin) = request.header("origin") {
            let origin = origin.to_ascii_lowercase();
            let same_origin = origin.strip_prefix("http://").is_some_and(|o| self.ours(o));
            if !same_origin {
                return Verdict::Forbidden("foreign Origin");
            }
        }
        if let Some(token) = request.param("token") {
            return match same(token.as_bytes(), self.token.as_bytes()) {
                true => Verdict::Exchange {
                    path: request.path.clone(),
                },
                false => Verdict::Forbidden("wrong token"),
            };
        }
        let cookies = request
            .headers
            .iter()
            .filter(|(n, _)| n == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|c| c.trim().split_once('='));
        let mut found = false;
        for (name, value) in cookies {
            // Every cookie of the name is compared, so the time does not say which one matched.
            if name == self.cookie {
                found |= same(value.as_bytes(), self.token.as_bytes());
            }
        }
        match found {
            true => Verdict::Allowed,
            false => Verdict::Forbidden("no token"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::http::parse_head;

    fn guard() -> Guard {
        Guard::with_token("127.0.0.1:8080".parse().unwrap(), "00ff".repeat(8))
    }

    fn check(head: &str) -> Verdict {
        guard().check(&parse_head(head.as_bytes()).unwrap())
    }

    #[test]
    fn the_token_is_exchanged_for_a_cookie() {
        let token = "00ff".repeat(8);
        assert_eq!(
            check(&format!("GET /x?token={token} HTTP/1.1\r\nHost: 127.0.0.1:8080")),
            Verdict::Exchange { path: "/x".into() }
        );
        assert_eq!(
            check(&format!(
                "GET / HTTP/1.1\r\nHost: localhost:8080\r\nCookie: a=b; xtrace_live_8080={token}"
            )),
            Verdict::Allowed
        );
        assert!(guard().set_cookie().contains("; HttpOnly; SameSite=Strict"));
    }

    #[test]
    fn refuses_without_the_token_or_from_elsewhere() {
        let token = "00ff".repeat(8);
        let cookie = format!("Cookie: xtrace_live_8080={token}");
        for (head, why) in [
            ("GET / HTTP/1.1\r\nHost: 127.0.0.1:8080".to_string(), "no token"),
            (
                format!(
                    "GET /?token={} HTTP/1.1\r\nHost: 127.0.0.1:8080",
                    "00fe".repeat(8)
                ),
                "wrong token",
            ),
            (
                "GET /?token=00 HTTP/1.1\r\nHost: 127.0.0.1:8080".to_string(),
                "wrong token",
            ),
            (
                format!("GET / HTTP/1.1\r\nHost: evil.example:8080\r\n{cookie}"),
                "foreign Host",
            ),
            (
                format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:8081\r\n{cookie}"),
                "foreign Host",
            ),
            (format!("GET / HTTP/1.1\r\n{cookie}"), "no Host, or more than one"),
            (
                format!(
                    "POST /stop HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nOrigin: http://evil.example\r\n{cookie}"
                ),
                "foreign Origin",
            ),
            (
                format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nCookie: xtrace_live_8081={token}"),
                "no token",
            ),
        ] {
            assert_eq!(check(&head), Verdict::Forbidden(why), "{head}");
        }
        let same_origin = format!(
            "POST /stop HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nOrigin: http://127.0.0.1:8080\r\n{cookie}"
        );
        assert_eq!(check(&same_origin), Verdict::Allowed);
    }

    #[test]
    fn every_address_takes_ip_hosts_only() {
        let guard = Guard::with_token("0.0.0.0:8080".parse().unwrap(), "ab".into());
        let ask = |host: &str| {
            let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\nCookie: xtrace_live_8080=ab");
            guard.check(&parse_head(head.as_bytes()).unwrap())
        };
        assert_eq!(ask("192.168.1.5:8080"), Verdict::Allowed);
        assert_eq!(ask("[fe80::1]:8080"), Verdict::Allowed);
        assert_eq!(ask("rebound.example:8080"), Verdict::Forbidden("foreign Host"));
        assert_eq!(ask("192.168.1.5:8081"), Verdict::Forbidden("foreign Host"));
    }

    #[test]
    fn tokens_are_random_and_compared_whole() {
        let addr = "127.0.0.1:1".parse().unwrap();
        let (a, b) = (Guard::new(addr).unwrap(), Guard::new(addr).unwrap());
        assert_ne!(a.token, b.token);
        assert_eq!(a.token.len(), 32);
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
