//! The ClickHouse store, over its HTTP interface: statements as POST bodies, rows in and out as
//! JSONEachRow, which servers from 18.16 on read and write (64-bit integers come back quoted;
//! both forms are read). Credentials come from `XTRACE_STORE_USER` and `XTRACE_STORE_PASSWORD` or
//! `XTRACE_STORE_PASSWORD_FILE`, never from the command line.
use std::collections::HashMap;

use serde_json::{Map, Value as Json};

use super::{
    http,
    schema::{self, Table, Value},
    Backend, Error, Function, Result, Run, StoredFunction, StoredRun,
};

/// Attempts named per query (each ~35 bytes of SQL, far below the server's 256 KiB limit).
const ATTEMPTS_PER_QUERY: usize = 500;

pub struct ClickHouse {
    address: String,
    database: String,
    url: String,
    headers: Vec<(&'static str, String)>,
}

impl ClickHouse {
    pub fn new(address: &str, database: &str, url: &str) -> Result<ClickHouse> {
        let mut headers = Vec::new();
        if let Ok(user) = std::env::var("XTRACE_STORE_USER") {
            let password = match std::env::var_os("XTRACE_STORE_PASSWORD_FILE") {
                Some(file) => std::fs::read_to_string(&file)
                    .map(|p| p.trim_end_matches(['\n', '\r']).to_string())
                    .map_err(|e| Error::BadUrl {
                        url: url.to_string(),
                        reason: format!("XTRACE_STORE_PASSWORD_FILE {}: {e}", file.to_string_lossy()),
                    })?,
                None => std::env::var("XTRACE_STORE_PASSWORD").unwrap_or_default(),
            };
            let basic = http::base64(format!("{user}:{password}").as_bytes());
            headers.push(("Authorization", format!("Basic {basic}")));
        }
        Ok(ClickHouse {
            address: address.to_string(),
            database: database.to_string(),
            url: url.to_string(),
            headers,
        })
    }

    /// Runs `statement` (with `data` after it, for an INSERT); the answer's body.
    fn request(&self, statement: &str, data: &[u8]) -> Result<Vec<u8>> {
        let (target, body) = if data.is_empty() {
            ("/".to_string(), statement.as_bytes())
        } else {
            (format!("/?query={}", http::escape_query(statement)), data)
        };
        let answer =
            http::post(&self.address, &target, &self.headers, body).map_err(|e| Error::Unreachable {
                url: self.url.clone(),
                reason: e.to_string(),
            })?;
        if answer.status != 200 {
            let text = String::from_utf8_lossy(&answer.body);
            return Err(Error::Refused {
                url: self.url.clone(),
                reason: format!(
                    "HTTP {}: {}",
                    answer.status,
                    text.lines().next().unwrap_or("").trim()
                ),
            });
        }
        Ok(answer.body)
    }

    /// The rows of a SELECT, as JSON objects.
    fn select(&self, query: &str) -> Result<Vec<Map<String, Json>>> {
        let body = self.request(&format!("{query} FORMAT JSONEachRow"), &[])?;
        let text = String::from_utf8_lossy(&body);
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| match serde_json::from_str(line) {
                Ok(Json::Object(row)) => Ok(row),
                _ => Err(Error::Refused {
                    url: self.url.clone(),
                    reason: format!("an answer that is not JSONEachRow: {line}"),
                }),
            })
            .collect()
    }

    fn insert_rows(&self, table: &Table, rows: Vec<Vec<Value>>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut data = Vec::new();
        for row in rows {
            let object: Map<String, Json> = table
                .columns
                .iter()
                .zip(row)
                .map(|((name, _), value)| {
                    let value = match value {
                        Value::Text(t) => Json::String(t),
                        Value::Int(n) => Json::from(n),
                    };
                    (name.to_string(), value)
                })
                .collect();
            serde_json::to_writer(&mut data, &object).expect("a JSON object serializes");
            data.push(b'\n');
        }
        let statement = format!("INSERT INTO {}.{} FORMAT JSONEachRow", self.database, table.name);
        self.request(&statement, &data).map(|_| ())
    }
}

/// A column of a JSONEachRow row: text, or an integer written either as a number or quoted.
fn text(row: &Map<String, Json>, key: &str) -> String {
    row.get(key)
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string()
}

fn int(row: &Map<String, Json>, key: &str) -> u64 {
    match row.get(key) {
        Some(Json::String(s)) => s.parse().unwrap_or(0),
        Some(n) => n.as_u64().unwrap_or(0),
        None => 0,
    }
}

/// `'text'` as a ClickHouse string literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn list(items: &[String]) -> String {
    items.iter().map(|i| quoted(i)).collect::<Vec<_>>().join(", ")
}

impl Backend for ClickHouse {
    fn prepare(&mut self) -> Result<()> {
        self.request(&format!("CREATE DATABASE IF NOT EXISTS {}", self.database), &[])?;
        // The version first: a store of a newer schema is refused before anything is written.
        self.request(&schema::clickhouse_ddl(&self.database, &schema::VERSIONS), &[])?;
        let rows = self.select(&format!(
            "SELECT max(version) AS v FROM {}.schema_versions",
            self.database
        ))?;
        // max() of no rows is 0 in ClickHouse: no version recorded yet, a new store whose tables
        // are made as this version's; an older store's are migrated.
        let found = rows.first().map(|r| int(r, "v")).unwrap_or(0);
        let found = u32::try_from(found).unwrap_or(u32::MAX);
        let migrations: Vec<_> = match found {
            0 => Vec::new(),
            found => super::migrations(&self.url, found)?.collect(),
        };
        for migration in &migrations {
            let exists = self.select(&format!(
                "SELECT count() AS n FROM system.tables WHERE database = {} AND name = {}",
                quoted(&self.database),
                quoted(migration.table)
            ))?;
            if exists.first().is_some_and(|r| int(r, "n") > 0) {
                for statement in migration.clickhouse {
                    self.request(&statement.replace("{db}", &self.database), &[])?;
                }
            }
        }
        for table in schema::TABLES {
            self.request(&schema::clickhouse_ddl(&self.database, table), &[])?;
        }
        if found == 0 || !migrations.is_empty() {
            let version = vec![vec![Value::Int(u64::from(schema::VERSION))]];
            self.insert_rows(&schema::VERSIONS, version)?;
        }
        Ok(())
    }

    fn has_run(&mut self, id: &str) -> Result<bool> {
        let query = format!(
            "SELECT count() AS n FROM {}.runs WHERE run_id = {}",
            self.database,
            quoted(id)
        );
        Ok(self.select(&query)?.first().is_some_and(|r| int(r, "n") > 0))
    }

    fn write(&mut self, tables: Vec<(&'static Table, Vec<Vec<Value>>)>) -> Result<()> {
        for (table, table_rows) in tables {
            self.insert_rows(table, table_rows)?;
        }
        Ok(())
    }

    fn runs(&mut self) -> Result<Vec<StoredRun>> {
        let query = format!(
            "SELECT run_id, attempt, host, started_ns, duration_ns, command, stop_reason, labels FROM {}.runs",
            self.database
        );
        let rows = self.select(&query)?;
        Ok(rows
            .iter()
            .map(|r| StoredRun {
                attempt: text(r, "attempt"),
                run: Run {
                    id: text(r, "run_id"),
                    host: text(r, "host"),
                    started_ns: int(r, "started_ns"),
                    duration_ns: int(r, "duration_ns"),
                    command: text(r, "command"),
                    stop_reason: text(r, "stop_reason"),
                    labels: serde_json::from_str(&text(r, "labels")).unwrap_or_default(),
                },
            })
            .collect())
    }

    fn functions(&mut self, attempts: &[String], names: &[String]) -> Result<Vec<StoredFunction>> {
        let named = if names.is_empty() {
            String::new()
        } else {
            format!(" AND name IN ({})", list(names))
        };
        let mut out = Vec::new();
        for some in attempts.chunks(ATTEMPTS_PER_QUERY) {
            let within = format!("WHERE attempt IN ({}){named}", list(some));
            let functions = self.select(&format!(
                "SELECT attempt, name, kind, count, total_ns, min_ns, max_ns FROM {}.functions {within} ORDER BY attempt, name, kind",
                self.database
            ))?;
            let buckets = self.select(&format!(
                "SELECT attempt, name, kind, floor_ns, calls FROM {}.histograms {within} ORDER BY attempt, name, kind, floor_ns",
                self.database
            ))?;
            let mut histograms: HashMap<(String, String, String), Vec<[u64; 2]>> = HashMap::new();
            for b in &buckets {
                let key = (text(b, "attempt"), text(b, "name"), text(b, "kind"));
                histograms
                    .entry(key)
                    .or_default()
                    .push([int(b, "floor_ns"), int(b, "calls")]);
            }
            for f in &functions {
                let key = (text(f, "attempt"), text(f, "name"), text(f, "kind"));
                out.push(StoredFunction {
                    attempt: key.0.clone(),
                    function: Function {
                        histogram: histograms.remove(&key).unwrap_or_default(),
                        name: key.1,
                        kind: key.2,
                        count: int(f, "count"),
                        total_ns: int(f, "total_ns"),
                        min_ns: int(f, "min_ns"),
                        max_ns: int(f, "max_ns"),
                    },
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_columns() {
        assert_eq!(quoted(r"it's a\b"), r"'it\'s a\\b'");
        let row: Map<String, Json> =
            serde_json::from_str(r#"{"a":"18446744073709551615","b":7,"c":"x"}"#).unwrap();
        assert_eq!(
            (int(&row, "a"), int(&row, "b"), text(&row, "c")),
            (u64::MAX, 7, "x".to_string())
        );
        assert_eq!(int(&row, "missing"), 0);
    }
}
