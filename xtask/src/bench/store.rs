//! The store of runs, on a ClickHouse server started here (Debian's `clickhouse-server`, its data
//! under target/bench/tmp) and a SQLite file. A capture of 10 M spans of `emulated_site` (2 M with
//! --quick) is pushed to each: the wall time of `xtrace push` (goal: under 5 s to ClickHouse, for
//! 10 M spans). A capture of 1 M spans (200,000) is pushed with `--store-spans`: raw span rows per
//! second. Then 1,000 runs (200), copies of a small capture each labelled apart (so each is a run
//! of its own), are pushed to both stores, and `xtrace history` over them is timed (goal: under 1 s
//! on both). Every push is checked to have stored its run, and each history to list every run.
use std::{
    fs,
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{
    prep::Env,
    report::{fmt_count, median, Report, Row, Verdict},
    runs::{self, probe_count, XtraceSpec},
    throughput::SYMBOL,
    Config,
};

const SERVER: &str = "/usr/sbin/clickhouse-server";
const CONFIG: &str = "/etc/clickhouse-server/config.xml";
/// Goals, in seconds.
const PUSH_GOAL_S: f64 = 5.0;
const HISTORY_GOAL_S: f64 = 1.0;

/// A ClickHouse server of the bench's own, stopped when dropped.
struct Server {
    child: Child,
    address: String,
}

impl Server {
    fn start(dir: &Path) -> Result<Server> {
        if !Path::new(SERVER).exists() {
            bail!("{SERVER} is not installed: run `cargo xtask setup`");
        }
        let ports: Vec<u16> = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()))
            .map(|a| a.map(|a| a.port()))
            .collect::<std::io::Result<_>>()?;
        let sub = |name: &str| -> Result<String> {
            let p = dir.join(name);
            fs::create_dir_all(&p)?;
            Ok(format!("{}/", p.display()))
        };
        let child = Command::new(SERVER)
            .arg(format!("--config-file={CONFIG}"))
            .arg("--")
            .arg(format!("--http_port={}", ports[0]))
            .arg(format!("--tcp_port={}", ports[1]))
            .arg(format!("--interserver_http_port={}", ports[2]))
            .arg("--listen_host=127.0.0.1")
            .arg(format!("--path={}", sub("data")?))
            .arg(format!("--tmp_path={}", sub("tmp")?))
            .arg(format!("--user_files_path={}", sub("user_files")?))
            .arg(format!("--format_schema_path={}", sub("format_schemas")?))
            .arg(format!("--logger.log={}", dir.join("server.log").display()))
            .arg(format!(
                "--logger.errorlog={}",
                dir.join("server.err.log").display()
            ))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {SERVER}"))?;
        let mut server = Server {
            child,
            address: format!("127.0.0.1:{}", ports[0]),
        };
        let started = Instant::now();
        while server.answers().as_deref() != Some("1\n") {
            if server.child.try_wait()?.is_some() || started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "clickhouse-server did not start; see {}",
                    dir.join("server.err.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(server)
    }

    /// `SELECT 1` over HTTP.
    fn answers(&self) -> Option<String> {
        let mut stream = TcpStream::connect(&self.address).ok()?;
        let body = "SELECT 1";
        let request = format!("POST / HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    }

    fn url(&self, db: &str) -> String {
        format!("clickhouse://{}/{db}", self.address)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Records `calls` spans of the `hits` workload; returns the capture's directory (moved to `name`).
fn capture(env: &Env, calls: u64, name: &str) -> Result<PathBuf> {
    let args: Vec<String> = ["call", SYMBOL, &calls.to_string(), "1"]
        .map(str::to_owned)
        .into();
    let mut spec = XtraceSpec::new(&env.hits, &args, &[SYMBOL]);
    spec.keep_outputs = true;
    let out = runs::xtrace(env, &spec)?;
    let count = probe_count(&out.summary.unwrap_or(Value::Null), SYMBOL);
    if count != calls {
        bail!("the capture holds {count} spans of {calls}");
    }
    let dir = env.tmp.join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::rename(env.tmp.join("xtrace-out"), &dir)?;
    Ok(dir)
}

/// Runs `xtrace ARGS`; its wall time in seconds, failing unless it succeeded.
fn timed(env: &Env, args: &[&str]) -> Result<f64> {
    let started = Instant::now();
    let out = Command::new(&env.xtrace).args(args).output()?;
    let took = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "xtrace {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(took)
}

/// The store URLs measured: (label, URL).
fn stores(server: &Server, tmp: &Path, db: &str) -> [(&'static str, String); 2] {
    [
        ("clickhouse", server.url(db)),
        (
            "sqlite",
            format!("sqlite:{}", tmp.join(format!("{db}.db")).display()),
        ),
    ]
}

/// Pushes `runs` copies of `dir`, each labelled `copy=N`, to `url`.
fn push_copies(env: &Env, dir: &Path, runs: usize, url: &str) -> Result<()> {
    let path = dir.join("summary.json");
    let mut summary: Value = serde_json::from_slice(&fs::read(&path)?)?;
    for n in 0..runs {
        summary["labels"] = serde_json::json!({ "copy": n.to_string() });
        fs::write(&path, serde_json::to_vec(&summary)?)?;
        timed(env, &["push", &dir.display().to_string(), "--store", url])?;
    }
    Ok(())
}

/// A goal's verdict, judged only in a full run.
fn verdict(judged: bool, met: bool) -> Verdict {
    match judged {
        true => Verdict::from_bool(met),
        false => Verdict::NotApplicable,
    }
}

pub fn run(env: &Env, cfg: &Config, report: &mut Report) -> Result<()> {
    let server = Server::start(&env.tmp.join("clickhouse"))?;
    let (big, spans, runs) = (
        cfg.scale(10_000_000),
        cfg.scale(1_000_000),
        cfg.scale(1_000) as usize,
    );
    let judged = !cfg.quick;
    let unjudged = "; --quick stores smaller captures, so the goal is not judged";
    eprintln!("bench: store, recording {big} spans");
    let dir = capture(env, big, "store-big")?;
    for label in ["clickhouse", "sqlite"] {
        // A fresh store each run: the run is stored, not found stored already.
        let took: Vec<f64> = (0..cfg.runs)
            .map(|i| {
                let stores = stores(&server, &env.tmp, &format!("bench_stats_{i}"));
                let (_, url) = stores.iter().find(|(l, _)| *l == label).expect("both stores");
                timed(env, &["push", &dir.display().to_string(), "--store", url])
            })
            .collect::<Result<_>>()?;
        let s = median(&took);
        let what = format!("push a {}-span capture's statistics to {label}", fmt_count(big));
        let mut row = Row::new(&format!("store.push_stats_{label}"), what, format!("{s:.2} s"));
        if label == "clickhouse" {
            let note = format!("runs: {took:.2?}{}", if judged { "" } else { unjudged });
            row = row
                .goal(format!("< {PUSH_GOAL_S} s"), verdict(judged, s < PUSH_GOAL_S))
                .note(note);
        }
        report.row(row);
    }
    drop(fs::remove_dir_all(&dir));
    eprintln!("bench: store, pushing {spans} spans with --store-spans");
    let dir = capture(env, spans, "store-spans")?;
    for (label, url) in stores(&server, &env.tmp, "bench_spans") {
        let took = timed(
            env,
            &[
                "push",
                &dir.display().to_string(),
                "--store",
                &url,
                "--store-spans",
            ],
        )?;
        let what = format!("push {} raw spans (--store-spans) to {label}", fmt_count(spans));
        report.row(Row::new(
            &format!("store.push_spans_{label}"),
            what,
            format!("{:.0} rows/s", spans as f64 / took),
        ));
    }
    drop(fs::remove_dir_all(&dir));
    eprintln!("bench: store, pushing {runs} runs to each store");
    let dir = capture(env, 1_000, "store-small")?;
    for (label, url) in stores(&server, &env.tmp, "bench_history") {
        push_copies(env, &dir, runs, &url)?;
        let args = ["history", SYMBOL, "--store", &url];
        let took: Vec<f64> = (0..cfg.runs).map(|_| timed(env, &args)).collect::<Result<_>>()?;
        let listed = Command::new(&env.xtrace).args(args).output()?;
        let rows = String::from_utf8_lossy(&listed.stdout).lines().count();
        if rows < runs + 2 {
            bail!("history over {runs} runs in {label} listed {rows} lines");
        }
        let s = median(&took);
        let what = format!(
            "history of one function over {} runs in {label}",
            fmt_count(runs as u64)
        );
        let note = format!("runs: {took:.3?}{}", if judged { "" } else { unjudged });
        report.row(
            Row::new(&format!("store.history_{label}"), what, format!("{s:.3} s"))
                .goal(
                    format!("< {HISTORY_GOAL_S} s"),
                    verdict(judged, s < HISTORY_GOAL_S),
                )
                .note(note),
        );
    }
    Ok(())
}
