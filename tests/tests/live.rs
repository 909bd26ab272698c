//! The live view (`record --live`) against a real capture of the `spans spin` fixture, through a
//! plain HTTP client (std's TcpStream): requests without the token, with a wrong one, naming
//! another host or coming from another origin get 403; the token is traded for an HttpOnly,
//! SameSite=Strict cookie; /events streams JSON whose `work` count rises and ends equal to
//! summary.json's; /flamegraph.svg names the fixture's function; POST /stop ends the capture with
//! complete outputs; nothing listens on the port afterwards. Bad `--live` values (a host name, a
//! port in use) are one line, exit 2. `live_page_in_chromium` drives the page itself in Debian's
//! headless Chromium (tests/tools/live_page.py, selenium and chromedriver).

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use serde_json::Value;
use xtrace_tests::{
    args,
    fixtures::Fixture,
    live::{ask, probe_figures, read_events, View},
    output::Outputs,
    require_bpf,
    run::{error_on_spinner, Xtrace},
    TempDir,
};

/// The `work` row's whole-capture count in a snapshot (0 before the first).
fn work_count(snapshot: &Value) -> u64 {
    snapshot["probes"]
        .as_array()
        .and_then(|p| p.iter().find(|r| r["name"] == "work"))
        .map_or(0, |r| r["all"]["count"].as_u64().unwrap())
}

/// Requests without the token, with a wrong one, naming another host (DNS rebinding) or from
/// another origin: all 403.
fn check_refusals(view: &View) {
    let (addr, host) = (view.addr, format!("Host: {}", view.host()));
    let token_path = format!("/?token={}", view.token);
    let wrong = format!("/?token={}", "0".repeat(32));
    let rebound = format!("Host: rebound.example:{}", addr.port());
    for (path, headers) in [
        ("/", vec![host.clone()]),
        ("/state.json", vec![host.clone()]),
        (wrong.as_str(), vec![host.clone()]),
        (token_path.as_str(), vec![rebound.clone()]),
        ("/state.json", vec![rebound.clone(), view.cookie()]),
        (
            "/state.json",
            vec![host.clone(), view.cookie(), "Origin: http://evil.example".into()],
        ),
    ] {
        let answer = ask(addr, "GET", path, &headers);
        assert_eq!(answer.status, 403, "GET {path} with {headers:?}");
    }
    let refused = ask(
        addr,
        "POST",
        "/stop",
        &[host, "Origin: http://evil.example".into()],
    );
    assert_eq!(refused.status, 403, "POST /stop from another origin");
}

/// The token is traded for the cookie, which then opens the page (under `localhost` too).
fn check_token_trade(view: &View) {
    let (addr, host) = (view.addr, format!("Host: {}", view.host()));
    let traded = ask(
        addr,
        "GET",
        &format!("/?token={}", view.token),
        std::slice::from_ref(&host),
    );
    assert_eq!(traded.status, 303);
    assert_eq!(traded.header("Location"), Some("/"));
    let set = traded.header("Set-Cookie").expect("a cookie");
    assert_eq!(
        set,
        format!(
            "xtrace_live_{}={}; HttpOnly; SameSite=Strict; Path=/",
            addr.port(),
            view.token
        )
    );
    let page = ask(addr, "GET", "/", &[host.clone(), view.cookie()]);
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("<title>xtrace live</title>"),
        "{}",
        page.text()
    );
    let localhost = ask(
        addr,
        "GET",
        "/",
        &[format!("Host: localhost:{}", addr.port()), view.cookie()],
    );
    assert_eq!(localhost.status, 200, "localhost:PORT names a loopback view");
    assert_eq!(
        ask(addr, "DELETE", "/", &[host.clone(), view.cookie()]).status,
        405
    );
    assert_eq!(ask(addr, "GET", "/nothing", &[host, view.cookie()]).status, 404);
}

/// Waits (up to 20 s) for the flamegraph of all the stacks kept to name `work`.
fn check_flamegraph(view: &View) {
    let host = format!("Host: {}", view.host());
    let deadline = Instant::now() + Duration::from_secs(20);
    let svg = loop {
        std::thread::sleep(Duration::from_millis(500));
        let svg = ask(
            view.addr,
            "GET",
            "/flamegraph.svg?seconds=0",
            &[host.clone(), view.cookie()],
        );
        assert_eq!(svg.status, 200);
        assert_eq!(svg.header("Content-Type"), Some("image/svg+xml"));
        let text = svg.text();
        if text.contains("work (") || Instant::now() > deadline {
            break text;
        }
    };
    assert!(svg.contains("work ("), "the flamegraph names `work`:\n{svg}");
}

/// A client that reads one message of the stream and goes away: the capture goes on.
fn hang_up_mid_stream(view: &View) {
    let mut stream = TcpStream::connect(view.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        stream,
        "GET /events HTTP/1.1\r\nHost: {}\r\n{}\r\n\r\n",
        view.host(),
        view.cookie()
    )
    .unwrap();
    let mut first = [0u8; 512];
    let n = stream.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200 OK"));
    drop(stream);
}

/// The stream's counts rise, never fall, and its one last message holds summary.json's count.
fn check_stream(messages: &[Value], summary_count: u64) {
    let counts: Vec<u64> = messages.iter().map(work_count).collect();
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]),
        "counts never go down: {counts:?}"
    );
    let distinct: std::collections::BTreeSet<u64> = counts.iter().copied().filter(|&c| c > 0).collect();
    assert!(distinct.len() >= 3, "the count rises while recording: {counts:?}");
    let last = messages.last().expect("a last message");
    assert_eq!(last["done"], true, "{last}");
    assert_eq!(last["stop_reason"], "stopped_from_page");
    assert_eq!(
        work_count(last),
        summary_count,
        "the page ends with summary.json's count"
    );
    assert_eq!(messages.iter().filter(|m| m["done"] == true).count(), 1);
    // xtrace's own CPU time, in percent of one CPU: in every snapshot; over the capture, some.
    for m in messages.iter().filter(|m| m.get("elapsed_s").is_some()) {
        for key in ["last_pct", "all_pct"] {
            let pct = m["xtrace_cpu"][key].as_f64().unwrap_or(-1.0);
            assert!((0.0..=100.0 * 1024.0).contains(&pct), "{key}: {m}");
        }
    }
    assert!(last["xtrace_cpu"]["all_pct"].as_f64() > Some(0.0), "{last}");
    // The --warn-over lines, as stderr had them: the page keeps the newest 50.
    assert_eq!(last["alerts_total"], 101, "{last}");
    let alerts = last["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 50);
    assert!(
        alerts[..49]
            .iter()
            .all(|a| a.as_str().unwrap().starts_with("work took ")),
        "{alerts:?}"
    );
    assert_eq!(
        alerts[49],
        "more than 100 spans over their --warn-over limits; the rest are only counted in summary.json"
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn live_view_guards_streams_and_stops() {
    if !require_bpf() {
        return;
    }
    let fixture = Fixture::spin();
    let tmp = TempDir::new("live");
    let out = tmp.join("out");
    // Every span is over 1 ns: 100 warnings, then one line saying the rest are only counted.
    let flags = args!["-F", "99", "--live", "--warn-over", "work=1ns"];
    let mut xtrace = Xtrace::record_work(fixture.pid(), flags, &out);
    let view = View::from_line(&xtrace.wait_stderr("xtrace: live view at "));
    assert!(view.addr.ip().is_loopback(), "{}", view.addr);
    assert_eq!(view.token.len(), 32, "128 bits in hex: {}", view.token);
    let ssh = xtrace.wait_stderr("xtrace: live view from another machine: ");
    assert!(
        ssh.contains(&format!("ssh -L {0}:{1} ", view.addr.port(), view.addr)),
        "{ssh}"
    );
    xtrace.wait_attached();
    check_refusals(&view);
    check_token_trade(&view);
    let events = read_events(&view);
    hang_up_mid_stream(&view);
    check_flamegraph(&view);
    std::thread::sleep(Duration::from_secs(2));

    let stop = ask(
        view.addr,
        "POST",
        "/stop",
        &[
            format!("Host: {}", view.host()),
            view.cookie(),
            format!("Origin: http://{}", view.host()),
            "Content-Length: 0".into(),
        ],
    );
    assert_eq!(stop.status, 200, "POST /stop: {}", stop.text());
    let finished = xtrace.wait();
    finished.assert_success();
    let outputs = Outputs::read(&out);
    assert_eq!(outputs.stop_reason(), "stopped_from_page");
    let summary_count = outputs.probe_count("work");
    assert!(summary_count > 0);
    check_stream(&events.join().expect("the event stream's reader"), summary_count);

    // Closed with the capture.
    let refused = TcpStream::connect_timeout(&view.addr, Duration::from_secs(2));
    assert_eq!(
        refused.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionRefused),
        "nothing listens on {} after the capture",
        view.addr
    );
    // The refused requests were not shown on stderr (403 as a word: the token and the
    // warnings' timestamps may hold the digits).
    let says_403 = |l: &String| l.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == "403");
    assert!(
        !finished
            .stderr
            .iter()
            .any(|l| says_403(l) || l.to_lowercase().contains("forbidden")),
        "{:?}",
        finished.stderr
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn live_refuses_host_names_and_ports_in_use() {
    if !require_bpf() {
        return;
    }
    let line = error_on_spinner(args!["-u", "work", "--live=localhost:8080"]);
    assert_eq!(
        line,
        "xtrace: error: --live=localhost:8080: not an IP address with a port; give one such as \
         --live=127.0.0.1:8080 (a host name is refused: what it resolves to could change under the \
         page), or --live alone for loopback and a free port"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let line = error_on_spinner(args!["-u", "work", format!("--live=127.0.0.1:{port}")]);
    assert_eq!(
        line,
        format!(
            "xtrace: error: --live=127.0.0.1:{port}: the port is in use by another program; \
             choose another port, or give --live alone for a free one"
        )
    );
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn live_page_in_chromium() {
    if !require_bpf() {
        return;
    }
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            std::path::Path::new(tool).is_file(),
            "{tool} not found: `cargo xtask setup` installs Debian's chromium and chromium-driver"
        );
    }
    let fixture = Fixture::spin();
    let tmp = TempDir::new("live-chromium");
    let out = tmp.join("out");
    let mut xtrace = Xtrace::record_work(fixture.pid(), args!["-F", "99", "--live"], &out);
    let line = xtrace.wait_stderr("xtrace: live view at ");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL")
        .to_string();
    xtrace.wait_attached();
    // XTRACE_LIVE_SCREENSHOT=docs/images/live.png keeps the page's picture for the guide.
    let screenshot = std::env::var("XTRACE_LIVE_SCREENSHOT")
        .unwrap_or_else(|_| tmp.join("live.png").to_string_lossy().into_owned());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/live_page.py");
    let run = std::process::Command::new(xtrace_tests::fixtures::python())
        .arg(&script)
        .args([url.as_str(), "work", screenshot.as_str()])
        .output()
        .expect("running tests/tools/live_page.py");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "live_page.py failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim()).expect("live_page.py's JSON");
    let finished = xtrace.wait();
    finished.assert_success();
    let outputs = Outputs::read(&out);
    assert_eq!(outputs.stop_reason(), "stopped_from_page", "{seen}");
    let counts: Vec<u64> = seen["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert!(
        counts.windows(2).all(|w| w[0] < w[1]),
        "the row's count rises: {counts:?}"
    );
    assert_eq!(
        seen["final_count"],
        outputs.probe_count("work"),
        "the page ends with summary.json's count"
    );
    assert_eq!(seen["state"], "stopped: stopped from page");
    // The fixture's one thread made every call.
    assert_eq!(
        seen["threads"],
        serde_json::json!([[fixture.pid(), "spans", outputs.probe_count("work")]]),
        "{seen}"
    );
    assert!(
        std::fs::metadata(&screenshot).is_ok_and(|m| m.len() > 10_000),
        "a screenshot in {screenshot}"
    );
}

/// `xtrace view DIR` of a stored capture (no root needed): the same guard, the summary's figures,
/// the flamegraph of stacks.folded, and Close ends it with nothing left listening.
#[test]
fn view_serves_a_stored_capture() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/workload-1");
    let mut xtrace = Xtrace::spawn(args!["view", &dir]);
    let view = View::from_line(&xtrace.wait_stderr("xtrace: live view at "));
    let (addr, host) = (view.addr, format!("Host: {}", view.host()));
    assert_eq!(
        ask(addr, "GET", "/state.json", std::slice::from_ref(&host)).status,
        403
    );
    let rebound = format!("Host: rebound.example:{}", addr.port());
    assert_eq!(
        ask(addr, "GET", "/state.json", &[rebound, view.cookie()]).status,
        403
    );
    let state = ask(addr, "GET", "/state.json", &[host.clone(), view.cookie()]);
    assert_eq!(state.status, 200);
    let state: Value = serde_json::from_slice(&state.body).expect("JSON");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        probe_figures(state["probes"].as_array().unwrap(), true),
        probe_figures(summary["probes"].as_array().unwrap(), false)
    );
    assert_eq!(state["stop_reason"], summary["stop_reason"]);
    let svg = ask(
        addr,
        "GET",
        "/flamegraph.svg?seconds=0",
        &[host.clone(), view.cookie()],
    );
    assert!(svg.text().contains("matmul ("), "{}", svg.text());
    let events = read_events(&view).join().expect("the stream");
    assert_eq!(events.len(), 1, "one message, then the stream ends: {events:?}");
    let close = ask(addr, "POST", "/stop", &[host, view.cookie()]);
    assert_eq!(close.status, 200);
    let finished = xtrace.wait();
    finished.assert_success();
    assert!(
        finished
            .stderr
            .last()
            .is_some_and(|l| l.starts_with("xtrace: closed the view of ")),
        "{:?}",
        finished.stderr
    );
    let after = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
    assert_eq!(
        after.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionRefused)
    );
}

#[test]
fn view_of_no_capture_is_one_line() {
    let tmp = TempDir::new("view-none");
    let line = xtrace_tests::run::run_error(args!["view", tmp.join("missing")]);
    assert!(
        line.ends_with(
            "missing: not an xtrace capture (no such directory); give a directory written by `xtrace -o DIR`"
        ),
        "{line}"
    );
    let line = xtrace_tests::run::run_error(args!["view", tmp.path(), "--listen=localhost:1"]);
    assert!(
        line.contains("not an xtrace capture"),
        "the directory is read first: {line}"
    );
}
