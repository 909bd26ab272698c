//! The live view (`xtrace record --live`): a small HTTP server on the recording's own tokio
//! runtime that serves one page, which shows the capture while it runs. `http` reads and answers
//! requests, `guard` decides who may ask, `server` routes them, `publish` turns the pipeline's
//! state into what the page reads once a second (`gpu_charts`: its GPU charts, `threads`: its threads' activity), and `page.html` is the page itself (plain
//! HTML, CSS and JavaScript, built into the binary); `view` makes the page's state of a finished
//! capture (`xtrace view DIR`) or of two
//! captures compared (`xtrace view --diff BASE NEW`). The pipeline never waits for the page: it
//! hands its state over with a `try_lock` and a watch channel, and a slow or absent client costs
//! it nothing. The server closes with the capture: nothing listens afterwards.
mod gpu_charts;
mod guard;
mod http;
mod own_cpu;
mod publish;
mod server;
mod threads;
mod view;

use std::{
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex},
};

use tokio::sync::{watch, Notify};

use crate::error::{Error, Result};
pub use publish::{PlannedProbe, Publisher, Tick};
pub use view::DiffPage;

/// The log target of the server's lines (`RUST_LOG=xtrace::live=debug`).
const LOG: &str = "xtrace::live";

/// What `--live` serves on when given no address: loopback, a free port.
pub const DEFAULT_ADDR: &str = "127.0.0.1:0";

/// What the server and the pipeline share.
pub struct Shared {
    state: Mutex<publish::State>,
    /// Bumped at every publication: the event streams wait on it.
    version: watch::Sender<u64>,
    /// POST /stop.
    stop: Notify,
    guard: guard::Guard,
}

impl Shared {
    /// Waits for the page's Stop button.
    pub async fn stop_asked(&self) {
        self.stop.notified().await;
    }
}

/// A live view being served.
pub struct Live {
    shared: Arc<Shared>,
    server: Option<tokio::task::JoinHandle<()>>,
    shutdown: watch::Sender<bool>,
}

/// What `--live` was given, as an address to listen on: `IP:PORT`, or an IP alone (a free
/// port). A host name is refused: what it resolves to may change under the page (DNS
/// rebinding) and is not what the user sees.
pub fn parse_addr(given: &str) -> Result<SocketAddr> {
    given
        .parse::<SocketAddr>()
        .or_else(|_| given.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 0)))
        .map_err(|_| Error::LiveAddress {
            given: given.to_string(),
        })
}

/// The lines the user is told when the view starts: where it is, how to reach it from another
/// machine, and (not on loopback) who else can.
pub struct Told {
    pub notices: Vec<String>,
    pub warning: Option<String>,
}

impl Live {
    /// Listens on `given` (`--live`'s value) and serves the page from a task of the current
    /// runtime; what the user should be told comes with it.
    pub fn start(given: &str) -> Result<(Live, Told)> {
        let addr = parse_addr(given)?;
        let listener = std::net::TcpListener::bind(addr).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => Error::LivePortInUse {
                addr: addr.to_string(),
            },
            _ => Error::LiveBind {
                addr: addr.to_string(),
                source: e,
            },
        })?;
        let bound = listener
            .local_addr()
            .map_err(|e| Error::io("reading the live view's address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("setting up the live view's socket", e))?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Error::io("setting up the live view's socket", e))?;
        let guard = guard::Guard::new(bound).map_err(|e| Error::io("making the live view's token", e))?;
        let told = told(bound, guard.url());
        let shared = Arc::new(Shared {
            state: Mutex::new(publish::State::new()),
            version: watch::Sender::new(0),
            stop: Notify::new(),
            guard,
        });
        let (shutdown, closing) = watch::channel(false);
        let server = tokio::spawn(server::serve(listener, shared.clone(), closing));
        Ok((
            Live {
                shared,
                server: Some(server),
                shutdown,
            },
            told,
        ))
    }

    /// Serves the page over the finished capture `capture` (`xtrace view`) on `given`.
    pub fn view(given: &str, capture: &crate::analysis::capture::Capture) -> Result<(Live, Told)> {
        let (live, told) = Live::start(given)?;
        {
            let mut state = live.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            state.json = view::snapshot(capture).into();
            state.done = true;
            state.frequency_hz = capture.sample_hz().unwrap_or(0);
            state.stacks.add(0, |slot| {
                for (line, n) in &capture.folded {
                    slot.add(line.clone(), *n);
                }
            });
        }
        Ok((live, told))
    }

    /// Serves the page over a comparison of two captures (`xtrace view --diff`): its one
    /// snapshot, and the differential flamegraph when there is one.
    pub fn view_diff(given: &str, diff: &view::DiffPage, svg: Option<Vec<u8>>) -> Result<(Live, Told)> {
        let (live, told) = Live::start(given)?;
        {
            let mut state = live.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            state.json = view::diff_snapshot(diff).into();
            state.done = true;
            state.drawn = svg.map(Into::into);
        }
        Ok((live, told))
    }

    /// What the recording loop waits on and publishes to.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Stops serving: the event streams send their last message (within a second), the listener
    /// is closed, and every connection with it.
    pub async fn close(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // An error path: nothing is waited for.
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// The lines that say where the view is.
fn told(bound: SocketAddr, url: &str) -> Told {
    let port = bound.port();
    let local = url.replacen(&bound.to_string(), &format!("localhost:{port}"), 1);
    let mut notices = vec![format!(
        "live view at {url} (the token in it gives control of the capture: keep it to yourself)"
    )];
    let warning = if bound.ip().is_loopback() {
        notices.push(format!(
            "live view from another machine: ssh -L {port}:{bound} THIS_HOST, then open {local}"
        ));
        None
    } else {
        Some(format!(
            "--live={bound} is not loopback: anyone who can reach port {port} of {} (plain HTTP, \
             readable on the way) and holds the token can watch and stop this capture",
            match bound.ip().is_unspecified() {
                true => "any address of this host".to_string(),
                false => bound.ip().to_string(),
            }
        ))
    };
    Told { notices, warning }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_ip_addresses() {
        assert_eq!(
            parse_addr("127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(parse_addr("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert_eq!(parse_addr("0.0.0.0").unwrap(), "0.0.0.0:0".parse().unwrap());
        for bad in ["localhost:8080", "example.com", "127.0.0.1:99999", ":80", ""] {
            assert!(matches!(parse_addr(bad), Err(Error::LiveAddress { .. })), "{bad}");
        }
    }

    #[test]
    fn loopback_gets_an_ssh_line_and_others_a_warning() {
        let told_lo = told(
            "127.0.0.1:4000".parse().unwrap(),
            "http://127.0.0.1:4000/?token=ab",
        );
        assert!(told_lo.warning.is_none());
        assert!(told_lo.notices[1].contains("ssh -L 4000:127.0.0.1:4000 THIS_HOST"));
        assert!(told_lo.notices[1].ends_with("http://localhost:4000/?token=ab"));
        let told_any = told("0.0.0.0:4000".parse().unwrap(), "http://0.0.0.0:4000/?token=ab");
        assert!(told_any.warning.unwrap().contains("any address of this host"));
    }
}
