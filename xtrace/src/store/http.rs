//! The little HTTP client the ClickHouse store needs: one POST per request over a fresh
//! connection, HTTP/1.0 so the server closes the connection at the end of its answer and never
//! chunks it. A dependency such as hyper or ureq would bring a TLS stack and an async runtime's
//! worth of code for three kinds of request on a trusted network.
use std::{
    io::{self, Read, Write},
    net::{TcpStream, ToSocketAddrs},
    time::Duration,
};

/// How long connecting may take.
const CONNECT: Duration = Duration::from_secs(5);
/// How long the server may take to answer one request.
const ANSWER: Duration = Duration::from_secs(120);
/// The most an answer may hold: far more than any query xtrace sends returns.
const MAX_ANSWER: u64 = 1 << 30;

/// A server's answer.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// POSTs `body` to `target` (path and query) at `address` (host:port), with `headers`.
pub fn post(address: &str, target: &str, headers: &[(&str, String)], body: &[u8]) -> io::Result<Response> {
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{address} resolves to no address"),
    );
    let mut stream = None;
    for addr in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut stream = stream.ok_or(last)?;
    stream.set_read_timeout(Some(ANSWER))?;
    stream.set_write_timeout(Some(ANSWER))?;
    let mut head = format!(
        "POST {target} HTTP/1.0\r\nHost: {address}\r\nContent-Length: {}\r\nContent-Type: text/plain; charset=utf-8\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut answer = Vec::new();
    stream.take(MAX_ANSWER).read_to_end(&mut answer)?;
    if answer.len() as u64 == MAX_ANSWER {
        return Err(io::Error::other(format!(
            "an answer of more than {MAX_ANSWER} bytes"
        )));
    }
    parse(&answer)
}

/// The status and body of a whole HTTP/1.x answer.
fn parse(answer: &[u8]) -> io::Result<Response> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("not an HTTP answer: {what}"));
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of its headers"))?;
    let head = std::str::from_utf8(&answer[..end]).map_err(|_| bad("headers not UTF-8"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("no status"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = &answer[end + 4..];
    let body = if chunked {
        unchunk(body).ok_or_else(|| bad("broken chunks"))?
    } else {
        body.to_vec()
    };
    Ok(Response { status, body })
}

/// A chunked body's bytes.
fn unchunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// `text` for a URL's query (RFC 3986 unreserved characters kept, the rest %-escaped).
pub fn escape_query(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Standard base64 with padding, for a Basic authorization header.
pub fn base64(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(DIGITS[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        let plain = parse(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc").unwrap();
        assert_eq!((plain.status, plain.body.as_slice()), (200, &b"abc"[..]));
        let chunked = parse(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((chunked.status, chunked.body.as_slice()), (404, &b"abcde"[..]));
        assert!(parse(b"HTTP/1.0 200 OK\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").is_err());
    }

    #[test]
    fn encodings() {
        assert_eq!(
            escape_query("INSERT INTO a.b FORMAT JSONEachRow"),
            "INSERT%20INTO%20a.b%20FORMAT%20JSONEachRow"
        );
        assert_eq!(base64(b"default:"), "ZGVmYXVsdDo=");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(base64(b""), "");
    }
}
