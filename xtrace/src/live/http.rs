//! The live view's HTTP/1.1, written by hand: one request per connection (`Connection: close`),
//! GET and POST only, a request head of at most [`MAX_HEAD`] bytes and a body of at most
//! [`MAX_BODY`], read within [`READ_TIMEOUT`]; every write done within [`WRITE_TIMEOUT`]. The
//! page asks for four paths and sends no body
//! worth reading, so this is smaller than a general server (hyper and its stack) and holds
//! nothing a client could grow.
use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The most bytes a request line and its headers may take.
pub const MAX_HEAD: usize = 8 * 1024;
/// The most bytes a request's body may take (POST /stop has none).
pub const MAX_BODY: usize = 1024;
/// How long a client has to send its whole request: short, since a connection that sends nothing
/// holds one of the few connection slots (a browser sends its request at once).
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one write may wait for a client to read: one that stops reading (its window full)
/// is let go rather than hold a connection slot for as long as the capture runs.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// One parsed request: its method, path and query (split at `?`), and headers (names lower
/// case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
}

/// Why a request was refused before it was looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Past [`MAX_HEAD`] or [`MAX_BODY`]: 413.
    TooLarge,
    /// Not an HTTP/1.x request line with headers: 400.
    Malformed,
    /// Closed or silent before the request was whole: no answer.
    Gone,
}

impl Request {
    /// The value of header `name` (lower case), the first one when it is repeated.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// How many times header `name` (lower case) is given.
    pub fn header_count(&self, name: &str) -> usize {
        self.headers.iter().filter(|(n, _)| n == name).count()
    }

    /// The value of query parameter `name`, as written (the page's values need no decoding).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

/// Parses a request head (request line and headers, without the blank line that ends them).
pub fn parse_head(head: &[u8]) -> Result<Request, Bad> {
    let text = std::str::from_utf8(head).map_err(|_| Bad::Malformed)?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next().ok_or(Bad::Malformed)?.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (first.next(), first.next(), first.next(), first.next())
    else {
        return Err(Bad::Malformed);
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") || !target.starts_with('/') {
        return Err(Bad::Malformed);
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(Bad::Malformed)?;
        if name.is_empty()
            || name
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(Bad::Malformed);
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
    })
}

/// Reads one request from `stream`: its head, then the body its Content-Length gives (read and
/// dropped), all within [`READ_TIMEOUT`].
pub async fn read_request(stream: &mut TcpStream) -> Result<Request, Bad> {
    match tokio::time::timeout(READ_TIMEOUT, read_whole(stream)).await {
        Ok(result) => result,
        Err(_) => Err(Bad::Gone),
    }
}

async fn read_whole(stream: &mut TcpStream) -> Result<Request, Bad> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > MAX_HEAD {
            return Err(Bad::TooLarge);
        }
        let n = stream.read(&mut chunk).await.map_err(|_| Bad::Gone)?;
        if n == 0 {
            return Err(Bad::Gone);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if end > MAX_HEAD {
        return Err(Bad::TooLarge);
    }
    let request = parse_head(&buf[..end])?;
    if request.header_count("content-length") > 1 || request.header("transfer-encoding").is_some() {
        return Err(Bad::Malformed);
    }
    let length: usize = match request.header("content-length") {
        Some(v) => v.parse().map_err(|_| Bad::Malformed)?,
        None => 0,
    };
    if length > MAX_BODY {
        return Err(Bad::TooLarge);
    }
    let mut have = buf.len() - (end + 4);
    while have < length {
        let n = stream.read(&mut chunk).await.map_err(|_| Bad::Gone)?;
        if n == 0 {
            return Err(Bad::Gone);
        }
        have += n;
    }
    Ok(request)
}

/// The headers every answer carries: nothing cached, nothing sniffed, no referrer (the first URL
/// holds the token), nothing loaded from elsewhere, no framing by other sites, one request per
/// connection.
const COMMON: &str = "Cache-Control: no-store\r\n\
X-Content-Type-Options: nosniff\r\n\
Referrer-Policy: no-referrer\r\n\
Content-Security-Policy: default-src 'self'; script-src 'self' 'unsafe-inline'; \
style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'self'\r\n\
X-Frame-Options: SAMEORIGIN\r\n\
Connection: close\r\n";

/// The reason phrase of the statuses answered.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// A whole answer: status line, the common headers, `extra` header lines (each ending in
/// `\r\n`), the content type and length, and the body.
pub fn response(status: u16, content_type: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\n{COMMON}{extra}Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A plain-text answer of one line.
pub fn text(status: u16, line: &str) -> Vec<u8> {
    response(
        status,
        "text/plain; charset=utf-8",
        "",
        format!("{line}\n").as_bytes(),
    )
}

/// The head of a server-sent-events stream (its body is written as events come).
pub fn event_stream_head() -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\n{COMMON}Content-Type: text/event-stream\r\n\r\n").into_bytes()
}

/// Writes `bytes` and ends the connection, giving up silently on a client gone or not reading.
pub async fn answer(stream: &mut TcpStream, bytes: &[u8]) {
    if send(stream, bytes, WRITE_TIMEOUT).await {
        let _ = stream.shutdown().await;
    }
}

/// Writes all of `bytes` within `timeout`; false when the client went away or read too slowly.
pub async fn send(stream: &mut TcpStream, bytes: &[u8], timeout: Duration) -> bool {
    matches!(
        tokio::time::timeout(timeout, stream.write_all(bytes)).await,
        Ok(Ok(()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_request_head() {
        let r = parse_head(b"GET /flamegraph.svg?seconds=10&x=1 HTTP/1.1\r\nHost: 127.0.0.1:80\r\nX-A:  b ")
            .unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/flamegraph.svg"));
        assert_eq!(r.param("seconds"), Some("10"));
        assert_eq!(r.param("x"), Some("1"));
        assert_eq!(r.param("y"), None);
        assert_eq!(r.header("host"), Some("127.0.0.1:80"));
        assert_eq!(r.header("x-a"), Some("b"));
    }

    #[test]
    fn refuses_what_is_not_http() {
        for head in [
            &b"GET / HTTP/2\r\nHost: a"[..],
            b"GET http://x/ HTTP/1.1",
            b"GET / HTTP/1.1 extra",
            b"GET / HTTP/1.1\r\nno colon",
            b"GET / HTTP/1.1\r\nbad name: v",
            b"\xff / HTTP/1.1",
        ] {
            assert_eq!(parse_head(head), Err(Bad::Malformed), "{head:?}");
        }
    }

    /// A client that reads nothing is let go once its window is full and the timeout passes.
    #[test]
    fn a_client_that_reads_nothing_is_let_go() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            let a_lot = vec![b'x'; 64 << 20];
            let started = std::time::Instant::now();
            assert!(!send(&mut server, &a_lot, Duration::from_millis(300)).await);
            assert!(started.elapsed() < Duration::from_secs(5));
            drop(client);
            // One that reads gets all of it.
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            let reader = tokio::spawn(async move {
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.map(|_| got.len())
            });
            assert!(send(&mut server, &a_lot[..4 << 20], Duration::from_secs(5)).await);
            drop(server);
            assert_eq!(reader.await.unwrap().unwrap(), 4 << 20);
        });
    }

    #[test]
    fn answers_carry_their_length_and_the_common_headers() {
        let bytes = response(200, "text/html", "X-Y: z\r\n", b"abc");
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(text.contains("Content-Length: 3\r\n"));
        assert!(text.contains("X-Y: z\r\n"));
        assert!(text.contains("Connection: close\r\n"));
        assert!(text.ends_with("\r\n\r\nabc"));
    }
}
