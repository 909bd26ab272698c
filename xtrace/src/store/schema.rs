//! The store's tables, the same in SQLite and ClickHouse, and the schema version a store records.
//! Every data row carries its run id and the attempt of the push that wrote it; `runs` is
//! written last. Columns are text and unsigned 64-bit integers only, which ClickHouse servers old
//! and new accept over HTTP as JSONEachRow (no DateTime64, no Map: labels are a JSON text).
/// The schema this xtrace writes. A store with a newer one is refused, never written; an older
/// one is brought up to it by [`MIGRATIONS`], keeping its runs.
pub const VERSION: u32 = 2;

/// A column's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    /// An unsigned 64-bit integer (INTEGER in SQLite, which holds it as i64: every value stored
    /// is a count or nanoseconds, far below 2^63).
    Int,
}

pub struct Table {
    pub name: &'static str,
    pub columns: &'static [(&'static str, Kind)],
    /// ClickHouse's MergeTree sort key, and SQLite's index.
    pub order_by: &'static [&'static str],
}

use Kind::{Int, Text};

/// One row per run stored whole: the commit mark of its other rows.
pub const RUNS: Table = Table {
    name: "runs",
    columns: &[
        ("run_id", Text),
        ("attempt", Text),
        ("schema_version", Int),
        ("host", Text),
        ("started_ns", Int),
        ("duration_ns", Int),
        ("command", Text),
        ("stop_reason", Text),
        ("labels", Text),
        ("pushed_ns", Int),
        // Since version 2: the rows stored in `spans` (0 without --store-spans, and for the runs
        // of a version 1 store).
        ("spans", Int),
    ],
    order_by: &["run_id"],
};

/// Per run and function: its exact count, total, minimum and maximum.
pub const FUNCTIONS: Table = Table {
    name: "functions",
    columns: &[
        ("run_id", Text),
        ("attempt", Text),
        ("name", Text),
        ("kind", Text),
        ("count", Int),
        ("total_ns", Int),
        ("min_ns", Int),
        ("max_ns", Int),
    ],
    order_by: &["name", "attempt"],
};

/// Per run, function and histogram bucket: the calls in it.
pub const HISTOGRAMS: Table = Table {
    name: "histograms",
    columns: &[
        ("run_id", Text),
        ("attempt", Text),
        ("name", Text),
        ("kind", Text),
        ("floor_ns", Int),
        ("calls", Int),
    ],
    order_by: &["name", "attempt", "floor_ns"],
};

/// Per run and sampled stack (stacks.folded's frames): its samples.
pub const STACKS: Table = Table {
    name: "stacks",
    columns: &[
        ("run_id", Text),
        ("attempt", Text),
        ("stack", Text),
        ("samples", Int),
    ],
    order_by: &["attempt", "stack"],
};

/// Per run and CUDA kernel: its launches (the CUDA API calls) and, with the GPU device timeline,
/// its runs on the device and their device time (the 20 kernels of most device time).
pub const KERNELS: Table = Table {
    name: "kernels",
    columns: &[
        ("run_id", Text),
        ("attempt", Text),
        ("name", Text),
        ("launches", Int),
        ("device_count", Int),
        ("device_total_ns", Int),
    ],
    order_by: &["name", "attempt"],
};

/// Per run and MPI function called (`--mpi`): calls, time and bytes.
pub const MPI: Table = Table {
    name: "mpi",
    columns: &[
        ("run_id", Text),
        ("attempt", Text),
        ("name", Text),
        ("class", Text),
        ("calls", Int),
        ("total_ns", Int),
        ("bytes", Int),
    ],
    order_by: &["name", "attempt"],
};

/// Per run, GPU and NVML metric: its highest reading, in thousandths of its unit (`%`, bytes,
/// W).
pub const COUNTERS: Table = Table {
    name: "counters",
    columns: &[
        ("run_id", Text),
        ("attempt", Text),
        ("device", Int),
        ("name", Text),
        ("max_milli", Int),
    ],
    order_by: &["name", "attempt", "device"],
};

/// Per run and span, with `--store-spans`: every span of the trace.
pub const SPANS: Table = Table {
    name: "spans",
    columns: &[
        ("run_id", Text),
        ("attempt", Text),
        ("name", Text),
        ("pid", Int),
        ("tid", Int),
        ("start_ns", Int),
        ("dur_ns", Int),
    ],
    order_by: &["attempt", "name", "start_ns"],
};

/// The schema versions the store was written with, one row each.
pub const VERSIONS: Table = Table {
    name: "schema_versions",
    columns: &[("version", Int)],
    order_by: &["version"],
};

pub const TABLES: &[&Table] = &[
    &VERSIONS,
    &RUNS,
    &FUNCTIONS,
    &HISTOGRAMS,
    &STACKS,
    &KERNELS,
    &MPI,
    &COUNTERS,
    &SPANS,
];

/// What brings a store of version `to - 1` to version `to`, beside making the tables it lacks
/// (`CREATE TABLE IF NOT EXISTS`, run after): statements on an existing table for each store
/// (`{db}`: ClickHouse's database). A store without that table gets it made as it is now.
pub struct Migration {
    pub to: u32,
    pub table: &'static str,
    pub sqlite: &'static [&'static str],
    pub clickhouse: &'static [&'static str],
}

/// Every migration, oldest first: a store of version N runs those with `to` above N, then
/// records version [`VERSION`].
pub const MIGRATIONS: &[Migration] = &[Migration {
    to: 2,
    table: "runs",
    sqlite: &["ALTER TABLE runs ADD COLUMN spans INTEGER NOT NULL DEFAULT 0"],
    clickhouse: &["ALTER TABLE {db}.runs ADD COLUMN spans UInt64 DEFAULT 0"],
}];

/// The migrations a store of version `found` needs, oldest first.
pub fn migrations_from(found: u32) -> impl Iterator<Item = &'static Migration> {
    MIGRATIONS.iter().filter(move |m| m.to > found)
}

/// `CREATE TABLE IF NOT EXISTS` for SQLite, with its index.
pub fn sqlite_ddl(table: &Table) -> String {
    let columns: Vec<String> = table
        .columns
        .iter()
        .map(|(name, kind)| match kind {
            Text => format!("{name} TEXT NOT NULL"),
            Int => format!("{name} INTEGER NOT NULL"),
        })
        .collect();
    format!(
        "CREATE TABLE IF NOT EXISTS {0} ({1});\nCREATE INDEX IF NOT EXISTS {0}_order ON {0} ({2});",
        table.name,
        columns.join(", "),
        table.order_by.join(", ")
    )
}

/// `CREATE TABLE IF NOT EXISTS` for ClickHouse in `database`.
pub fn clickhouse_ddl(database: &str, table: &Table) -> String {
    let columns: Vec<String> = table
        .columns
        .iter()
        .map(|(name, kind)| match kind {
            Text => format!("{name} String"),
            Int => format!("{name} UInt64"),
        })
        .collect();
    format!(
        "CREATE TABLE IF NOT EXISTS {database}.{} ({}) ENGINE = MergeTree ORDER BY ({})",
        table.name,
        columns.join(", "),
        table.order_by.join(", ")
    )
}

/// One value of a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Text(String),
    Int(u64),
}

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

/// The rows of a push, table by table in the order they are written: `runs` last.
pub fn rows<'a>(rows: &'a super::RunRows, attempt: &'a str) -> Vec<(&'static Table, Vec<Vec<Value>>)> {
    let id = rows.run.id.as_str();
    let keyed = |mut row: Vec<Value>| {
        let mut full = vec![text(id), text(attempt)];
        full.append(&mut row);
        full
    };
    let functions = rows.functions.iter().map(|f| {
        keyed(vec![
            text(&f.name),
            text(&f.kind),
            Value::Int(f.count),
            Value::Int(f.total_ns),
            Value::Int(f.min_ns),
            Value::Int(f.max_ns),
        ])
    });
    let buckets = rows.functions.iter().flat_map(|f| {
        let bucket = move |&[floor, calls]: &[u64; 2]| {
            keyed(vec![
                text(&f.name),
                text(&f.kind),
                Value::Int(floor),
                Value::Int(calls),
            ])
        };
        f.histogram.iter().map(bucket)
    });
    let stacks = rows
        .stacks
        .iter()
        .map(|(stack, n)| keyed(vec![text(stack), Value::Int(*n)]));
    let kernels = rows.kernels.iter().map(|k| {
        keyed(vec![
            text(&k.name),
            Value::Int(k.launches),
            Value::Int(k.device_count),
            Value::Int(k.device_total_ns),
        ])
    });
    let mpi = rows.mpi.iter().map(|m| {
        keyed(vec![
            text(&m.name),
            text(&m.class),
            Value::Int(m.calls),
            Value::Int(m.total_ns),
            Value::Int(m.bytes),
        ])
    });
    let counters = rows
        .counters
        .iter()
        .map(|c| keyed(vec![Value::Int(c.device), text(&c.name), Value::Int(c.max_milli)]));
    let spans = rows.spans.iter().flatten().map(|s| {
        keyed(vec![
            text(&s.name),
            Value::Int(u64::from(s.pid)),
            Value::Int(u64::from(s.tid)),
            Value::Int(s.start_ns),
            Value::Int(s.dur_ns),
        ])
    });
    let run = &rows.run;
    let pushed_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let run_row = keyed(vec![
        Value::Int(u64::from(VERSION)),
        text(&run.host),
        Value::Int(run.started_ns),
        Value::Int(run.duration_ns),
        text(&run.command),
        text(&run.stop_reason),
        Value::Text(serde_json::to_string(&run.labels).unwrap_or_default()),
        Value::Int(pushed_ns),
        Value::Int(rows.spans.as_ref().map_or(0, |s| s.len() as u64)),
    ]);
    vec![
        (&FUNCTIONS, functions.collect()),
        (&HISTOGRAMS, buckets.collect()),
        (&STACKS, stacks.collect()),
        (&KERNELS, kernels.collect()),
        (&MPI, mpi.collect()),
        (&COUNTERS, counters.collect()),
        (&SPANS, spans.collect()),
        (&RUNS, vec![run_row]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_the_columns() {
        let run_rows = super::super::RunRows {
            run: super::super::Run {
                id: "r".into(),
                host: "h".into(),
                started_ns: 1,
                duration_ns: 2,
                command: "c".into(),
                stop_reason: "duration".into(),
                labels: [("k".to_string(), "v".to_string())].into(),
            },
            functions: vec![super::super::Function {
                name: "f".into(),
                kind: "uprobe".into(),
                count: 3,
                total_ns: 4,
                min_ns: 1,
                max_ns: 2,
                histogram: vec![[1, 2], [2, 1]],
            }],
            stacks: vec![("a;b".into(), 5)],
            ..Default::default()
        };
        let tables = rows(&run_rows, "at");
        let names: Vec<&str> = tables.iter().map(|(t, _)| t.name).collect();
        assert_eq!(
            names,
            [
                "functions",
                "histograms",
                "stacks",
                "kernels",
                "mpi",
                "counters",
                "spans",
                "runs"
            ]
        );
        for (table, rows) in &tables {
            for row in rows {
                assert_eq!(row.len(), table.columns.len(), "{}", table.name);
            }
        }
        assert_eq!(tables[1].1.len(), 2);
        let run = &tables[7].1[0];
        assert_eq!(run[8], Value::Text(r#"{"k":"v"}"#.into()));
        // Without --store-spans: none stored, and the run says so.
        assert_eq!((tables[6].1.len(), &run[10]), (0, &Value::Int(0)));
    }

    #[test]
    fn ddl() {
        assert_eq!(
            sqlite_ddl(&VERSIONS),
            "CREATE TABLE IF NOT EXISTS schema_versions (version INTEGER NOT NULL);\n\
             CREATE INDEX IF NOT EXISTS schema_versions_order ON schema_versions (version);"
        );
        assert_eq!(
            clickhouse_ddl("xt", &STACKS),
            "CREATE TABLE IF NOT EXISTS xt.stacks (run_id String, attempt String, stack String, \
             samples UInt64) ENGINE = MergeTree ORDER BY (attempt, stack)"
        );
    }
}
