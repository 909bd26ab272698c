//! The store's schema across versions, on a SQLite file and a real ClickHouse server: a store
//! written by a version 1 xtrace (made here with version 1's tables and one run) is brought to
//! version 2 when next used, keeping its run beside the new one, and both stores then tell the
//! same history; `--store-spans` stores every span of the trace; an MPI capture's calls and
//! bytes are stored per function, and each GPU's highest NVML readings (the stand-in NVML's) per
//! metric.

use std::{path::Path, process::Command};

use xtrace_tests::{
    args, captures::xtrace, clickhouse::ClickHouse, fixtures::fixtures, mpi::mpirun_ranks, require_bpf,
    run::Xtrace, TempDir,
};

/// Version 1's tables, as a version 1 xtrace made them (SQLite).
const V1_TABLES: &[&str] = &[
    "schema_versions (version INTEGER NOT NULL)",
    "runs (run_id TEXT NOT NULL, attempt TEXT NOT NULL, schema_version INTEGER NOT NULL, \
     host TEXT NOT NULL, started_ns INTEGER NOT NULL, duration_ns INTEGER NOT NULL, \
     command TEXT NOT NULL, stop_reason TEXT NOT NULL, labels TEXT NOT NULL, \
     pushed_ns INTEGER NOT NULL)",
    "functions (run_id TEXT NOT NULL, attempt TEXT NOT NULL, name TEXT NOT NULL, \
     kind TEXT NOT NULL, count INTEGER NOT NULL, total_ns INTEGER NOT NULL, \
     min_ns INTEGER NOT NULL, max_ns INTEGER NOT NULL)",
    "histograms (run_id TEXT NOT NULL, attempt TEXT NOT NULL, name TEXT NOT NULL, \
     kind TEXT NOT NULL, floor_ns INTEGER NOT NULL, calls INTEGER NOT NULL)",
    "stacks (run_id TEXT NOT NULL, attempt TEXT NOT NULL, stack TEXT NOT NULL, \
     samples INTEGER NOT NULL)",
];

/// Version 1's rows of one run of `busy`: 40 calls of 100 µs (bucket 98304 ns and up), pushed on
/// 2026-01-01 by host `old-host` with label commit=old.
const V1_ROWS: &[&str] = &[
    "schema_versions VALUES (1)",
    "runs VALUES ('00000000000000000000000000000001', 'a1', 1, 'old-host', 1767225600000000000, \
     1000000000, 'app', 'targets_exited', '{\"commit\":\"old\"}', 1767225601000000000)",
    "functions VALUES ('00000000000000000000000000000001', 'a1', 'busy', 'uprobe', 40, 4000000, \
     100000, 100000)",
    "histograms VALUES ('00000000000000000000000000000001', 'a1', 'busy', 'uprobe', 98304, 40)",
];

/// A SQLite store as a version 1 xtrace left it, made with Python's own sqlite3 module.
fn v1_sqlite(db: &Path) {
    let mut script = String::from("import sqlite3, sys\ndb = sqlite3.connect(sys.argv[1])\n");
    for table in V1_TABLES {
        script += &format!("db.execute('''CREATE TABLE {table}''')\n");
    }
    for row in V1_ROWS {
        script += &format!("db.execute('''INSERT INTO {row}''')\n");
    }
    script += "db.commit()\n";
    let made = Command::new("python3")
        .args(["-c", &script])
        .arg(db)
        .status()
        .expect("python3");
    assert!(made.success());
}

/// The same in ClickHouse database `db` (ClickHouse's own types, MergeTree as version 1 made them).
fn v1_clickhouse(server: &ClickHouse, db: &str) {
    assert!(server.query(&format!("CREATE DATABASE {db}")).is_some());
    for table in V1_TABLES {
        let (name, columns) = table.split_once(' ').unwrap();
        let columns = columns
            .replace("TEXT NOT NULL", "String")
            .replace("INTEGER NOT NULL", "UInt64");
        let first = columns
            .trim_start_matches('(')
            .split(' ')
            .next()
            .unwrap()
            .to_string();
        let ddl = format!("CREATE TABLE {db}.{name} {columns} ENGINE = MergeTree ORDER BY {first}");
        assert!(server.query(&ddl).is_some(), "{ddl}");
    }
    for row in V1_ROWS {
        assert!(
            server.query(&format!("INSERT INTO {db}.{row}")).is_some(),
            "{row}"
        );
    }
}

/// One SQL answer from the SQLite file `db`, each row's values joined by tabs.
fn sqlite_query(db: &Path, sql: &str) -> String {
    let script = "import sqlite3, sys\n\
                  for row in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]):\n    \
                  print('\\t'.join(str(v) for v in row))\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(db)
        .arg(sql)
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Records `spans busy 1 N` (N calls of busy(), 1 µs each) into `dir`.
fn record_busy(dir: &Path, calls: &str) {
    let flags = args![
        "-q",
        "-u",
        "busy",
        "--label",
        "commit=new",
        "-o",
        dir,
        "--",
        &fixtures().spans,
        "busy",
        "1",
        calls
    ];
    Xtrace::spawn(flags).wait().assert_success();
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn a_version_1_store_is_migrated_and_keeps_its_runs() {
    if !require_bpf() {
        return;
    }
    let Some(server) = ClickHouse::start() else {
        return;
    };
    let tmp = TempDir::new("store-schema");
    let run = tmp.join("run");
    record_busy(&run, "30");
    let db = tmp.join("runs.db");
    v1_sqlite(&db);
    v1_clickhouse(&server, "xtrace_v1");
    let sqlite = format!("sqlite:{}", db.display());
    let clickhouse = server.url("xtrace_v1");
    let mut told = Vec::new();
    for url in [&sqlite, &clickhouse] {
        xtrace(args!["push", &run, "--store", url]).assert_success();
        let history = xtrace(args!["history", "busy", "--by", "commit", "--store", url]);
        history.assert_success();
        told.push(history.stdout);
    }
    // The old run and the new, in the order they were recorded, from either store alike.
    assert_eq!(told[0], told[1]);
    let rows: Vec<Vec<&str>> = told[0]
        .lines()
        .skip(2)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    let groups: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[0], r[1], r[2])).collect();
    assert_eq!(groups, [("old", "1", "40"), ("new", "1", "30")], "{}", told[0]);
    // Both stores are version 2 now, and the old run kept its rows, with no spans stored.
    assert_eq!(
        sqlite_query(&db, "SELECT version FROM schema_versions ORDER BY version"),
        "1\n2\n"
    );
    let versions = server.query("SELECT version FROM xtrace_v1.schema_versions ORDER BY version");
    assert_eq!(versions.as_deref(), Some("1\n2\n"));
    let spans = "SELECT schema_version, spans FROM runs ORDER BY started_ns";
    assert_eq!(sqlite_query(&db, spans), "1\t0\n2\t0\n");
    let spans =
        server.query("SELECT schema_version, spans FROM xtrace_v1.runs ORDER BY started_ns FORMAT TSV");
    assert_eq!(spans.as_deref(), Some("1\t0\n2\t0\n"));
    // Used again: nothing to migrate, no version recorded twice.
    xtrace(args!["history", "--store", &sqlite]).assert_success();
    assert_eq!(sqlite_query(&db, "SELECT count(*) FROM schema_versions"), "2\n");
}

#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn spans_and_mpi_calls_are_stored_exactly() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("store-rows");
    let run = tmp.join("run");
    record_busy(&run, "25");
    let db = tmp.join("runs.db");
    let url = format!("sqlite:{}", db.display());
    xtrace(args!["push", &run, "--store", &url, "--store-spans"]).assert_success();
    assert_eq!(
        sqlite_query(&db, "SELECT name, count(*) FROM spans GROUP BY name"),
        "busy\t25\n"
    );
    assert_eq!(sqlite_query(&db, "SELECT spans FROM runs"), "25\n");

    // Rank 0 of an MPI job, stored as `record --store` does.
    let out = tmp.join("mpi/r{rank}");
    mpirun_ranks(&["-q", "--mpi", "--store", &url], &out, &["3", "1", "0"]);
    let stored = sqlite_query(
        &db,
        "SELECT name, class, sum(calls), sum(bytes) FROM mpi GROUP BY name, class ORDER BY name",
    );
    assert_eq!(
        stored,
        "MPI_Allreduce\tcollective\t6\t49152\n\
         MPI_Barrier\tcollective\t2\t0\n\
         MPI_Bcast\tcollective\t6\t600\n\
         MPI_Finalize\tsetup\t2\t0\n\
         MPI_Init\tsetup\t2\t0\n\
         MPI_Recv\tpoint_to_point\t5\t5120\n\
         MPI_Send\tpoint_to_point\t5\t5120\n"
    );
}

/// A capture with GPU metrics (the stand-in NVML's two GPUs): each GPU's highest readings are
/// stored, one row per metric, in thousandths, as summary.json's `gpus` has them.
#[test]
#[cfg_attr(xtrace_no_root, ignore = "needs root: run `sudo cargo xtask test`")]
fn gpu_peaks_are_stored_per_device_and_metric() {
    if !require_bpf() {
        return;
    }
    let tmp = TempDir::new("store-gpus");
    let (run, gpu_dir) = (tmp.join("run"), tmp.join("gpu"));
    std::fs::create_dir(&gpu_dir).unwrap();
    let env: Vec<(&str, String)> = fixtures().nvml_env(&gpu_dir);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let flags = args![
        "-q",
        "-u",
        "busy",
        "--gpu-metrics=20ms",
        "-o",
        &run,
        "--",
        &fixtures().spans,
        "busy",
        "1000",
        "200"
    ];
    Xtrace::spawn_with_env(flags, &env).wait().assert_success();
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    let mut want = Vec::new();
    for gpu in summary["gpus"].as_array().expect("the stand-in's GPUs") {
        for (key, value) in gpu.as_object().unwrap() {
            if let (Some(name), Some(max)) = (key.strip_prefix("max_"), value.as_f64()) {
                let milli = (max * 1000.0).round() as u64;
                want.push(format!("{}\t{name}\t{milli}", gpu["index"]));
            }
        }
    }
    want.sort();
    assert!(want.len() >= 8, "{want:?}");
    let db = tmp.join("runs.db");
    xtrace(args!["push", &run, "--store", format!("sqlite:{}", db.display())]).assert_success();
    let stored = sqlite_query(&db, "SELECT device, name, max_milli FROM counters");
    let mut stored: Vec<&str> = stored.lines().collect();
    stored.sort_unstable();
    assert_eq!(stored, want);
}
