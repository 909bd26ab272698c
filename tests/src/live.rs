//! A plain HTTP client (std's TcpStream) for the live view's tests: the view's address and token
//! from the line xtrace printed, one request and its whole answer, and the snapshots of the event
//! stream.
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use serde_json::Value;

/// A served live view: its address and token, from the line xtrace printed.
pub struct View {
    pub addr: SocketAddr,
    pub token: String,
}

impl View {
    pub fn from_line(line: &str) -> View {
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"));
        let rest = url.strip_prefix("http://").unwrap();
        let (host, query) = rest
            .split_once("/?token=")
            .unwrap_or_else(|| panic!("no token in {url}"));
        View {
            addr: host.parse().unwrap_or_else(|_| panic!("not IP:PORT: {host}")),
            token: query.to_string(),
        }
    }

    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    pub fn cookie(&self) -> String {
        format!("Cookie: xtrace_live_{}={}", self.addr.port(), self.token)
    }
}

/// An answer: status, head lines, body.
pub struct Answer {
    pub status: u16,
    pub head: Vec<String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        let prefix = format!("{}: ", name.to_ascii_lowercase());
        self.head
            .iter()
            .find(|l| l.to_ascii_lowercase().starts_with(&prefix))
            .map(|l| &l[prefix.len()..])
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `method path` with `headers` (lines without CRLF) and reads the whole answer (the server
/// closes every connection after one).
pub fn ask(addr: SocketAddr, method: &str, path: &str, headers: &[String]) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connecting to the live view");
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    for h in headers {
        request += h;
        request += "\r\n";
    }
    request += "\r\n";
    stream.write_all(request.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).expect("reading the answer");
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&bytes)));
    let head: Vec<String> = String::from_utf8_lossy(&bytes[..split])
        .split("\r\n")
        .map(str::to_string)
        .collect();
    let status = head[0]
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    Answer {
        status,
        head,
        body: bytes[split + 4..].to_vec(),
    }
}

/// The snapshots of an event stream, read on a thread until the stream ends.
pub fn read_events(view: &View) -> std::thread::JoinHandle<Vec<Value>> {
    let (addr, host, cookie) = (view.addr, view.host(), view.cookie());
    std::thread::spawn(move || {
        let mut stream = TcpStream::connect(addr).expect("connecting for /events");
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(stream, "GET /events HTTP/1.1\r\nHost: {host}\r\n{cookie}\r\n\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "/events: {status}");
        let mut messages = Vec::new();
        for line in reader.lines() {
            let Ok(line) = line else { break };
            if let Some(json) = line.strip_prefix("data: ") {
                messages.push(serde_json::from_str(json).expect("an event's JSON"));
            }
        }
        messages
    })
}

impl View {
    /// `GET path` with the view's Host and cookie.
    pub fn get(&self, path: &str) -> Answer {
        ask(
            self.addr,
            "GET",
            path,
            &[format!("Host: {}", self.host()), self.cookie()],
        )
    }

    /// Presses Stop (or Close): `POST /stop` from the page's own origin.
    pub fn stop(&self) -> Answer {
        ask(
            self.addr,
            "POST",
            "/stop",
            &[
                format!("Host: {}", self.host()),
                self.cookie(),
                format!("Origin: http://{}", self.host()),
                "Content-Length: 0".into(),
            ],
        )
    }
}

/// The probe rows `xtrace view` serves of capture `dir` (its state.json's `probes`), after which
/// the view is closed.
pub fn served_probe_rows(dir: &std::path::Path) -> Vec<Value> {
    let mut xtrace = crate::run::Xtrace::spawn(crate::args!["view", dir]);
    let view = View::from_line(&xtrace.wait_stderr("xtrace: live view at "));
    let state = view.get("/state.json");
    assert_eq!(state.status, 200, "{}", state.text());
    let state: Value = serde_json::from_slice(&state.body).expect("JSON");
    assert_eq!(view.stop().status, 200);
    xtrace.wait().assert_success();
    state["probes"].as_array().expect("probe rows").clone()
}

/// Probe rows as `name count p50_ns p99_ns` lines, in their order: a served row's figures over the
/// whole capture (`all`, as `xtrace view` and the live view serve them) or summary.json's own.
pub fn probe_figures(rows: &[Value], all: bool) -> Vec<String> {
    rows.iter()
        .map(|row| {
            let of = if all { &row["all"] } else { row };
            format!(
                "{} {} {} {}",
                row["name"], of["count"], of["p50_ns"], of["p99_ns"]
            )
        })
        .collect()
}

/// Checks that `xtrace view` of capture `dir` shows summary.json's probes, with their counts,
/// p50 and p99 (in any order).
pub fn view_shows_the_summary(dir: &std::path::Path) {
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).expect("the capture's summary.json"))
            .expect("JSON");
    let sorted = |mut rows: Vec<String>| {
        rows.sort();
        rows
    };
    let shown = sorted(probe_figures(&served_probe_rows(dir), true));
    assert!(
        !shown.is_empty(),
        "no probe rows in the view of {}",
        dir.display()
    );
    let listed = summary["probes"].as_array().expect("summary.json's probes");
    assert_eq!(shown, sorted(probe_figures(listed, false)), "{}", dir.display());
}
