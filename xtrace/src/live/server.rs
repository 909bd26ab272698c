//! The live view's routes: the page (`/`), its event stream (`/events`, one JSON snapshot each
//! time the recording publishes one), the current snapshot (`/state.json`), the flamegraph of
//! the last seconds (`/flamegraph.svg?seconds=N`, drawn by inferno off the runtime's thread, or
//! the one drawn beforehand: `xtrace view --diff`'s differential flamegraph) and
//! the Stop button (`POST /stop`). Every request passes the [`Guard`](super::guard::Guard) first.
//! At most [`MAX_CONNECTIONS`] are served at once; others are closed at once.
use std::{sync::Arc, time::Duration};

use inferno::flamegraph::color::{BasicPalette, Palette};
use tokio::{
    io::AsyncWriteExt,
    net::{TcpListener, TcpStream},
    sync::{watch, Semaphore},
    task::JoinSet,
};

use super::{
    guard::Verdict,
    http::{self, Bad, Request},
    Shared, LOG,
};
use crate::export::flamegraph;

/// Connections served at once.
const MAX_CONNECTIONS: usize = 16;
/// How long the event streams have to send their last message when the capture ends.
const LAST_MESSAGE: Duration = Duration::from_secs(1);
/// The flamegraph's window when the page names none, in seconds.
const DEFAULT_SECONDS: u64 = 60;

/// The page, built into the binary.
const PAGE: &str = include_str!("page.html");

/// Accepts connections until `closing` turns true, then closes the listener and, after the
/// streams' last messages, every connection.
pub(super) async fn serve(listener: TcpListener, shared: Arc<Shared>, mut closing: watch::Receiver<bool>) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors, most likely: let some close.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    log::debug!(target: LOG, "too many connections: one closed unanswered");
                    continue;
                };
                let (shared, closing) = (shared.clone(), closing.clone());
                connections.spawn(async move {
                    connection(stream, &shared, closing).await;
                    drop(permit);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = closing.changed() => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(LAST_MESSAGE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

/// One connection: one request, checked, then answered.
async fn connection(mut stream: TcpStream, shared: &Shared, closing: watch::Receiver<bool>) {
    let request = match http::read_request(&mut stream).await {
        Ok(request) => request,
        Err(Bad::TooLarge) => return http::answer(&mut stream, &http::text(413, "request too large")).await,
        Err(Bad::Malformed) => return http::answer(&mut stream, &http::text(400, "bad request")).await,
        Err(Bad::Gone) => return,
    };
    match shared.guard.check(&request) {
        Verdict::Forbidden(why) => {
            log::debug!(target: LOG, "403 for {} {}: {why}", request.method, request.path);
            http::answer(
                &mut stream,
                &http::text(403, "forbidden: open the URL xtrace printed"),
            )
            .await;
        }
        Verdict::Exchange { .. } => {
            // To the page, whatever path held the token: a path of the request's own choosing
            // (`//elsewhere`) could send the browser off site.
            let headers = format!("Location: /\r\n{}", shared.guard.set_cookie());
            http::answer(&mut stream, &http::response(303, "text/plain", &headers, b"")).await;
        }
        Verdict::Allowed => route(stream, &request, shared, closing).await,
    }
}

async fn route(mut stream: TcpStream, request: &Request, shared: &Shared, closing: watch::Receiver<bool>) {
    let answer = match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/") => http::response(200, "text/html; charset=utf-8", "", PAGE.as_bytes()),
        ("GET", "/events") => return events(stream, shared, closing).await,
        ("GET", "/state.json") => {
            let json = shared
                .state
                .lock()
                .map(|s| s.json.clone())
                .unwrap_or_else(|e| e.into_inner().json.clone());
            http::response(200, "application/json", "", json.as_bytes())
        }
        ("GET", "/flamegraph.svg") => {
            let drawn = shared.state.lock().ok().and_then(|s| s.drawn.clone());
            if let Some(svg) = drawn {
                return http::answer(&mut stream, &http::response(200, "image/svg+xml", "", &svg)).await;
            }
            let seconds = request
                .param("seconds")
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(DEFAULT_SECONDS);
            match flamegraph_svg(shared, seconds).await {
                Some(svg) => http::response(200, "image/svg+xml", "", &svg),
                None => http::text(500, "the flamegraph could not be drawn"),
            }
        }
        ("POST", "/stop") => {
            log::debug!(target: LOG, "Stop pressed on the page");
            shared.stop.notify_one();
            http::text(200, "stopping")
        }
        (_, "/" | "/events" | "/state.json" | "/flamegraph.svg" | "/stop") => http::text(
            405,
            "method not allowed: the live view is read-only but for POST /stop",
        ),
        _ => http::text(404, "not found"),
    };
    http::answer(&mut stream, &answer).await;
}

/// The server-sent events: the current snapshot, then each new one, until the last.
async fn events(mut stream: TcpStream, shared: &Shared, mut closing: watch::Receiver<bool>) {
    if !http::send(&mut stream, &http::event_stream_head(), http::WRITE_TIMEOUT).await {
        return;
    }
    let mut version = shared.version.subscribe();
    let mut last = false;
    loop {
        let (json, done) = match shared.state.lock() {
            Ok(state) => (state.json.clone(), state.done),
            Err(_) => return,
        };
        let message = format!("data: {json}\n\n");
        if !http::send(&mut stream, message.as_bytes(), http::WRITE_TIMEOUT).await {
            log::debug!(target: LOG, "an event stream's client went away or stopped reading");
            return;
        }
        if done || last {
            let _ = stream.shutdown().await;
            return;
        }
        tokio::select! {
            changed = version.changed() => if changed.is_err() { last = true },
            _ = closing.changed() => last = true,
        }
    }
}

/// The flamegraph of the last `seconds` (0: all kept), drawn on the blocking pool.
async fn flamegraph_svg(shared: &Shared, seconds: u64) -> Option<Vec<u8>> {
    let (lines, samples, hz) = {
        let state = shared.state.lock().ok()?;
        let (lines, samples) = state.folded_lines(seconds);
        (lines, samples, state.frequency_hz)
    };
    let chart = flamegraph::Chart {
        title: match seconds {
            0 => format!("xtrace live: {samples} samples at {hz} Hz, all kept"),
            s => format!("xtrace live: {samples} samples at {hz} Hz, last {s} s"),
        },
        subtitle: None,
        count_name: "samples",
        palette: Palette::Basic(BasicPalette::Hot),
        empty: "no samples yet",
        icicle: false,
    };
    tokio::task::spawn_blocking(move || flamegraph::svg(&lines, &chart).ok())
        .await
        .ok()
        .flatten()
}
